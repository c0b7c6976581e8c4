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

from r3edge.commands import HelpFormatter

#: ``r3edge bench TOOL``: the benchmark tools beside the comparison above, each a module of r3edge.commands
#: with ``configure(parser)`` and ``run(args)`` (as the stages are in r3edge.cli), imported only when parsed.
TOOLS = {
    "report": ("r3edge.commands.bench", "rewrite DIR/report.md and the plot from DIR/results.json of an earlier run"),
    "load": ("r3edge.commands.bench_load", "load a served artifact: overload, batching, one at a time, sweep, soak"),
    "profile": ("r3edge.commands.bench_profile", "ONNX Runtime's profile of each variant, kernel ms summed per op type"),
    "variants": ("r3edge.commands.bench_variants", "which variant to serve here: every variant timed beside its fidelity to fp32"),
    "peers": ("r3edge.commands.bench_peers", "a cosine student served by r3edge vs sentence-transformers on the same weights"),
    "chain": ("r3edge.commands.bench_chain", "the distillation chain in one report: teachers, students and floors, "
                                             "quality with calibrated ECE, latency per hardware"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    import importlib

    tools = parser.add_subparsers(dest="tool", metavar="[TOOL]", required=False,
                                  help="without a TOOL: the comparison below; with one: " + ", ".join(TOOLS))
    for name, (module_name, help_text) in TOOLS.items():
        module = importlib.import_module(module_name)
        p = tools.add_parser(name, help=help_text, formatter_class=HelpFormatter,
                             description=help_text if module_name == __name__ else (module.__doc__ or help_text).strip())
        getattr(module, "configure_report" if name == "report" else "configure")(p)
        p.set_defaults(_module=module)
    src = parser.add_argument_group("requests")
    src.add_argument("--pairs", default=None, help="held-back pairs JSONL (labels give accuracy vs gold)")
    src.add_argument("--semeval", default=None, metavar="DIR",
                     help="SemEval-2016 CQA folder: requests are subtask C dev questions (instead of --pairs)")
    src.add_argument("--questions", type=int, default=None, help="with --semeval: a seeded sample of N questions")
    src.add_argument("--comments", type=int, default=None,
                     help="with --semeval: each question's first M comments by forum rank (default: all of them)")
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


def read_requests(args) -> tuple[list, str]:
    """The queries every system is measured on, and where they came from."""
    from r3edge.core.errors import InvalidInput

    if (args.pairs is None) == (args.semeval is None):
        raise InvalidInput("give exactly one of --pairs or --semeval", "e.g. --pairs heldout.jsonl")
    if args.pairs:
        from r3edge.core.pairs import read_queries

        return read_queries(args.pairs)[: args.max_queries], str(args.pairs)
    from r3edge.benchmarks.compare import first_by_rank
    from r3edge.distill.data.datasets import sample_queries, semeval_queries

    queries = sample_queries(semeval_queries(args.semeval, "C", "dev"), args.questions, args.seed)[: args.max_queries]
    where = (f"SemEval-2016 CQA subtask C dev, {len(queries)} questions (seed {args.seed})"
             + (f", first {args.comments} comments each by forum rank" if args.comments is not None else ""))
    return first_by_rank(queries, args.comments), where


def bench(args) -> dict:
    """:func:`r3edge.benchmarks.compare.compare` on the requests, with the pieces it may not import itself:
    the judges (measured by r3edge.distill.label.rerank; engine logs in OUT/logs/, answered requests in
    OUT/judges/, from which a rerun resumes), BM25 (the pairs stage's index), the base encoder and the
    naive PyTorch forward (the model layer)."""
    import sys
    from functools import partial
    from pathlib import Path

    from r3edge.benchmarks.compare import compare, concurrency_levels, naive_forward_systems
    from r3edge.core.errors import InvalidInput

    levels = concurrency_levels(args.concurrency)
    if args.judge_requests < 1:
        raise InvalidInput("--judge-requests must be >= 1", "fix the number", field="--judge-requests")
    queries, where = read_requests(args)
    judges = None
    if args.judges:
        from r3edge.distill.label.rerank import JudgeSpec, measure_judges

        judges = partial(measure_judges, [JudgeSpec.parse(x) for x in args.judges.split(",") if x.strip()], queries,
                         teacher_model=args.teacher_model, vllm_python=args.vllm, base_url=args.base_url,
                         work_dir=Path(args.out) / "logs", requests=args.judge_requests, concurrency=levels,
                         kv_cache_gib=args.vllm_kv_cache_gib, journal_dir=Path(args.out) / "judges", stream=sys.stderr,
                         batch_size=args.judge_batch_size)
    base = None
    if args.base_student:
        from r3edge.core.config import StudentConfig, load_yaml
        from r3edge.model.student import base_cosine_scoring

        base = partial(base_cosine_scoring, load_yaml(args.base_student, StudentConfig))
    from r3edge.distill.data.pooling import bm25_scores
    from r3edge.model.runtimes import load_runtime

    results = compare(
        queries, concurrency=levels, requests=args.requests, top_k=args.top_k, artifacts=args.artifact,
        target=args.target, variants=[v for v in args.variants.split(",") if v] if args.variants else None,
        threads=args.threads, pad_to=args.pad_to, labels_dir=args.labels, judges=judges,
        serve_limits={k: getattr(args, k) for k in ("max_concurrent_requests", "max_batch_tokens", "max_batch_size")
                      if getattr(args, k) is not None},
        in_process=naive_forward_systems(args.torch_student or (),
                                         partial(load_runtime, variant="fp32", threads=args.threads, backend="torch")),
        bm25=None if args.no_bm25 else bm25_scores,
        base=base)
    results["settings"].update(data=where, judges=args.judges, teacher_model=args.teacher_model,
                               judge_engine=("vllm" if args.vllm else "openai" if args.base_url else "transformers")
                               if args.judges else None,
                               judge_requests=args.judge_requests if args.judges else None,
                               judge_batch_size=args.judge_batch_size if args.judges else None)
    if args.vllm:
        from r3edge.benchmarks.machine import vllm_version

        results["machine"]["vllm"] = vllm_version(args.vllm)
    return results

