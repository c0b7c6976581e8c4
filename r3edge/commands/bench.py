"""Benchmark rerankers on the same requests: teacher judges, served students and floors; write
results.json, report.md and the Pareto plot (`r3edge bench report DIR` rewrites the last two).

Systems, each measured end to end per top-N request, on the same queries:

* judges (--judges, teacher configs; the first is the teacher the others are compared with): the
  query's intent round once (R³A), then all its pairs in flight together on one engine: a vLLM
  server started per model from --vllm, a running OpenAI-compatible server (--base-url), or
  in-process transformers; latency = wall time to the last verdict (r3edge.distill.label.rerank);
* students: every variant of each --artifact, each served by its own `r3edge serve` child process
  (or one running server, --target), over gRPC; and, with --torch-student, the naive PyTorch forward
  of a student directory in this process (the peer a user has without r3edge);
* floors: the first-stage order, BM25 (bm25s) over each request's candidates, the majority class and,
  with --base-student, the student's pretrained encoder by plain cosine (no training).

Latency at the first --concurrency, throughput at each. Accuracy against gold labels (nDCG@10,
accuracy, macro-F1, AUCs) and agreement with the teacher (the first judge, else --labels).
Requests come from --pairs (a held-back split) or from SemEval-2016 CQA subtask C dev (--semeval).
"""

from __future__ import annotations

import argparse


#: ``r3edge bench TOOL``: the benchmark tools beside the comparison above, each a module of r3edge.commands
#: with ``configure(parser)`` and ``run(args)`` (as the stages are in r3edge.cli), imported only when parsed.
TOOLS = {
    "report": ("r3edge.commands.bench", "rewrite DIR/report.md and the plot from DIR/results.json of an earlier run"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    import importlib

    tools = parser.add_subparsers(dest="tool", metavar="[TOOL]", required=False,
                                  help="without a TOOL: the comparison below; with one: " + ", ".join(TOOLS))
    for name, (module_name, help_text) in TOOLS.items():
        module = importlib.import_module(module_name)
        p = tools.add_parser(name, help=help_text, formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                             description=help_text if module_name == __name__ else (module.__doc__ or help_text).strip())
        getattr(module, "configure_report" if name == "report" else "configure")(p)
        p.set_defaults(_module=module)
    src = parser.add_argument_group("requests")
    src.add_argument("--pairs", default=None, help="held-back pairs JSONL (labels give accuracy vs gold)")
    src.add_argument("--semeval", default=None, metavar="DIR",
                     help="SemEval-2016 CQA folder: requests are subtask C dev questions (instead of --pairs)")
    src.add_argument("--questions", type=int, default=None, help="with --semeval: a seeded sample of N questions")
    src.add_argument("--comments", type=int, default=None,
                     help="with --semeval: each question's first M comments by forum rank (default all 100)")
    src.add_argument("--seed", type=int, default=0, help="seed of the --questions sample")
    src.add_argument("--max-queries", type=int, default=None, help="use only the first N queries")
    stu = parser.add_argument_group("students")
    stu.add_argument("--artifact", action="append", default=None,
                     help="artifact directory to serve (a child `r3edge serve` per variant); repeat for several")
    stu.add_argument("--torch-student", action="append", default=None, metavar="STUDENT_DIR",
                     help="a student directory (`r3edge train`) timed by its naive PyTorch forward in this process: fp32, "
                          "each request's pairs in one padded batch, concurrency 1 (the peer without r3edge); repeatable")
    stu.add_argument("--target", default=None, help="a running server host:port (instead of --artifact)")
    stu.add_argument("--variants", default=None, help="comma-separated variants (default: all in each manifest)")
    stu.add_argument("--threads", type=int, default=None, help="runtime intra-op threads")
    stu.add_argument("--requests", type=int, default=20, help="Rerank requests per concurrency")
    stu.add_argument("--top-k", type=int, default=10, help="top_k of each Rerank request")
    stu.add_argument("--pad-to", type=int, default=None,
                     help="cycle each query's candidates up to this many (off by default: real lists only)")
    stu.add_argument("--max-concurrent-requests", type=int, default=None, help="server setting for --artifact")
    stu.add_argument("--max-batch-tokens", type=int, default=None, help="server setting for --artifact")
    stu.add_argument("--max-batch-size", type=int, default=None, help="server setting for --artifact")
    jud = parser.add_argument_group("judges")
    jud.add_argument("--judges", default=None, metavar="CONFIG[@K][=WEIGHTS],...",
                     help="teacher configs to serve as rerankers (e.g. r3a-smollm2,umbrela-smollm2,retro-smollm2@1,"
                          "r3a-qwen-coder-1.5b=config); @K: K sampled trajectories (Retro*'s mean@K); =DIR: these weights, "
                          "=config: the config's own model; the first judge is the teacher for agreement")
    jud.add_argument("--teacher-model", default=None, metavar="DIR",
                     help="weights of every judge entry without =WEIGHTS (e.g. the cold-started teacher `r3edge teacher sft` wrote)")
    jud.add_argument("--vllm", default=None, metavar="PYTHON",
                     help="serve the judges with a vLLM server run by this interpreter (e.g. .venv-vllm/bin/python), "
                          "one server per model")
    jud.add_argument("--base-url", default=None, help="serve the judges with this running OpenAI-compatible server")
    jud.add_argument("--vllm-kv-cache-gib", type=int, default=2, metavar="GIB",
                     help="KV cache of each vLLM server --vllm starts (VLLM_CPU_KVCACHE_SPACE)")
    jud.add_argument("--judge-requests", type=int, default=5,
                     help="at least this many top-N requests per judge and concurrency (every query is served once); "
                          "answered requests are kept in OUT/judges/ and a rerun with the same settings serves only "
                          "the missing ones (delete that folder to measure again)")
    jud.add_argument("--judge-batch-size", type=int, default=None, metavar="N",
                     help="in-process transformers judges: sequences per generation batch, overriding each config's "
                          "(sized for a 2-core CPU); e.g. 100 on a GPU, one top-100 request per batch")
    parser.add_argument("--concurrency", default="1,4",
                        help="closed-loop callers, comma-separated: latency at the first, throughput at each")
    parser.add_argument("--labels", default=None, help="teacher labels directory (agreement when no judge is measured)")
    parser.add_argument("--base-student", default=None, metavar="CONFIG",
                        help="student config whose pretrained encoder by cosine is a floor (torch, in-process, not timed)")
    parser.add_argument("--no-bm25", action="store_true", help="leave out the BM25 floor")
    parser.add_argument("--out", default="runs/bench", help="output directory")


def configure_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report_dir", metavar="DIR", help="an earlier --out directory of `r3edge bench`")


def run(args: argparse.Namespace) -> int:
    if args.tool == "report":
        from r3edge.benchmarks.report import rewrite_report

        paths = rewrite_report(args.report_dir)
        print(paths["report"].read_text())
        print(f"wrote {paths['report']}, {paths['plot']}")
        return 0
    results = bench(args)
    from r3edge.benchmarks.report import write_report

    paths = write_report(results, args.out)
    print(paths["report"].read_text())
    print(f"wrote {paths['results']}, {paths['report']}, {paths['plot']}")
    return 0


def concurrency_levels(text: str) -> list[int]:
    from r3edge.core.errors import InvalidInput

    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise InvalidInput(f"--concurrency {text!r} is not a list of positive integers", "write e.g. --concurrency 1,4",
                           field="--concurrency")
    return levels


def read_requests(args) -> tuple[list, str]:
    """The queries every system is measured on, and where they came from."""
    from r3edge.core.errors import InvalidInput

    if (args.pairs is None) == (args.semeval is None):
        raise InvalidInput("give exactly one of --pairs or --semeval", "e.g. --pairs heldout.jsonl")
    if args.pairs:
        from r3edge.core.pairs import read_queries

        return read_queries(args.pairs)[: args.max_queries], str(args.pairs)
    from r3edge.distill.data.datasets import sample_queries, semeval_queries

    queries = sample_queries(semeval_queries(args.semeval, "C", "dev"), args.questions, args.seed)[: args.max_queries]
    if args.comments is not None:
        for q in queries:
            q.candidates = sorted(q.candidates, key=lambda c: (c.rank is None, c.rank or 0))[: args.comments]
    where = (f"SemEval-2016 CQA subtask C dev, {len(queries)} questions (seed {args.seed})"
             + (f", first {args.comments} comments each by forum rank" if args.comments is not None else ""))
    return queries, where


def bench(args) -> dict:
    """Judges, then students (the judges' engine is stopped first), then floors; one results dict.
    Engine logs (one per vLLM server started) go to OUT/logs/, the judges' answered requests to
    OUT/judges/ (a rerun resumes from them: a full CPU comparison takes longer than one sitting)."""
    import sys
    from pathlib import Path

    from r3edge.benchmarks.systems import bench_systems, hardware_axis, judge_row, teacher_probs
    from r3edge.core.errors import InvalidInput
    from r3edge.core.scoring import SPEC_DEFAULTS

    levels = concurrency_levels(args.concurrency)
    if args.requests < 1 or args.judge_requests < 1 or args.top_k < 0:
        raise InvalidInput("--requests and --judge-requests must be >= 1 and --top-k >= 0", "fix the numbers")
    if not (args.artifact or args.target or args.torch_student or args.judges):
        raise InvalidInput("nothing to benchmark", "give --artifact DIR (or --target HOST:PORT), --torch-student DIR "
                           "and/or --judges CONFIGS")
    queries, where = read_requests(args)
    gold = any(c.label is not None for q in queries for c in q.candidates)
    # the base encoder's floor first: a config that cannot score these queries fails before the long runs
    base = base_cosine_floor(queries, args.base_student, SPEC_DEFAULTS["label_values"]) if gold and args.base_student else None
    measured = []
    if args.judges:
        from r3edge.distill.label.rerank import JudgeSpec, measure_judges

        specs = [JudgeSpec.parse(x) for x in args.judges.split(",") if x.strip()]
        measured = measure_judges(specs, queries, teacher_model=args.teacher_model, vllm_python=args.vllm,
                                  base_url=args.base_url, work_dir=Path(args.out) / "logs", requests=args.judge_requests,
                                  concurrency=levels, kv_cache_gib=args.vllm_kv_cache_gib,
                                  journal_dir=Path(args.out) / "judges", stream=sys.stderr,
                                  batch_size=args.judge_batch_size)
    teacher = measured[0]["probs"] if measured else (teacher_probs(args.labels)[0] if args.labels else None)
    limits = {k: getattr(args, k) for k in ("max_concurrent_requests", "max_batch_tokens", "max_batch_size")
              if getattr(args, k) is not None}
    results = bench_systems(
        queries, artifact=args.artifact, target=args.target,
        variants=[v for v in args.variants.split(",") if v] if args.variants else None,
        threads=args.threads, labels_dir=args.labels, requests=args.requests,
        concurrency=levels, top_k=args.top_k, pad_to=args.pad_to, serve_limits=limits, teacher=teacher,
        allow_none=True, in_process=[naive_forward(d, args.threads) for d in args.torch_student or ()])
    values = results["settings"]["label_values"]
    machine = results["machine"]
    local = hardware_axis(machine)
    for k, m in enumerate(measured):
        remote = m["base_url"] and not _loopback_url(m["base_url"])
        row = judge_row(m, queries, values, None if k == 0 else teacher,
                        f"server at {m['base_url']}" if remote else local)
        results["systems"].insert(k, row)
    if gold and not args.no_bm25:
        results["systems"].append(bm25_row(queries, values, local))
    if base is not None and results.get("baselines") is not None:
        if list(values) != list(SPEC_DEFAULTS["label_values"]):  # the students grade on another scale
            base = base_cosine_floor(queries, args.base_student, values)
        results["baselines"]["base_cosine"] = base
    results["settings"].update(data=where, judges=args.judges, teacher_model=args.teacher_model,
                               judge_engine=("vllm" if args.vllm else "openai" if args.base_url else "transformers")
                               if args.judges else None,
                               judge_requests=args.judge_requests if args.judges else None,
                               judge_batch_size=args.judge_batch_size if args.judges else None,
                               teacher=measured[0]["name"] if measured else ("labels" if args.labels else None))
    if args.vllm:
        machine["vllm"] = vllm_version(args.vllm)
    return results


def naive_forward(student_dir: str, threads: int | None):
    """``(system, open)``: a student directory's own PyTorch forward, fp32, opened when called."""
    from pathlib import Path

    def open_torch():
        from r3edge.model.runtimes import load_runtime

        return load_runtime(student_dir, "fp32", threads=threads, backend="torch")

    return f"naive transformers forward {Path(student_dir).name}", open_torch


def _loopback_url(url: str) -> bool:
    from urllib.parse import urlparse

    from r3edge.core.net import is_loopback

    return is_loopback(urlparse(url).hostname or "")


def vllm_version(python: str) -> str | None:
    """The vLLM distribution's version in that interpreter's environment (vllm-cpu on CPUs)."""
    import subprocess

    code = ("from importlib import metadata\nfor d in ('vllm-cpu', 'vllm'):\n    try:\n        print(d, metadata.version(d)); break\n"
            "    except metadata.PackageNotFoundError:\n        pass")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return out.stdout.strip() or None


def bm25_row(queries, label_values, axis: str) -> dict:
    """BM25 as a reranker: per request, bm25s indexes its candidates and scores the query (the pairs
    stage's index: Lucene BM25, English stopwords, Snowball stemming), timed in-process here."""
    import io
    import time

    from r3edge.benchmarks.systems import ranking_row
    from r3edge.distill.data.pooling import BM25Index, Doc

    scores, latencies = {}, []
    for q in queries:
        t0 = time.perf_counter()
        index = BM25Index([Doc(c.docid, c.text) for c in q.candidates], progress_stream=io.StringIO())
        hits = dict(index.search(q.query, len(q.candidates)))
        latencies.append((time.perf_counter() - t0) * 1e3)
        for i, c in enumerate(q.candidates):
            scores[(q.qid, c.docid)] = hits.get(i, 0.0)
    return ranking_row("BM25", queries, scores, label_values, latencies_ms=latencies, axis=axis, variant="bm25s",
                       latency_source="measured in-process: index the request's candidates, score the query")


def base_cosine_floor(queries, config: str, label_values) -> dict:
    from r3edge.benchmarks.systems import scored_floor
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.core.errors import InvalidInput
    from r3edge.model.student import base_cosine_scoring

    scoring = base_cosine_scoring(load_yaml(config, StudentConfig))
    if scoring is None:
        raise InvalidInput(f"student config {config!r} has no pretrained encoder to rank by cosine",
                           "pass an encoder or bi-encoder config with 'pretrained' weights", field="--base-student")
    return scored_floor(queries, scoring, label_values)
