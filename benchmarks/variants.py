"""Which variant of an artifact to serve on this machine: every ONNX Runtime and OpenVINO variant timed side
by side in one process on the same requests, each beside its fidelity to ONNX Runtime fp32
(``r3edge bench variants``).

Every variant is opened by :func:`r3edge.core.runtime_loader.open_runtime` (what the server opens) and scored
through :func:`r3edge.core.scoring.score_pairs` with the server's defaults (length-sorted micro-batches of at most
``DEFAULT_MAX_BATCH_TOKENS`` padded tokens, the variant's prefix-reuse graphs where the artifact has them), so a
time is the model time of one request, tokenisation included and gRPC excluded. A variant spelt
``VARIANT@PRECISION`` (``ov-fp32@bf16``) is an OpenVINO variant compiled with another inference precision than
its manifest's.

Timing: :func:`r3edge.core.timing.interleaved_rounds`, each round scores the next request once with every
variant. Fidelity over every request against fp32: max |Δlogit|, argmax agreement, mean top-10 overlap (by
expected relevance), and batch invariance on the first request (each pair alone vs all in one batch). The
recommended default is :func:`r3edge.core.fidelity.recommend_variant`'s choice: the fastest variant (p50) whose
top-10 overlap and batch invariance pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from r3edge.benchmarks.machine import machine_info
from r3edge.benchmarks.results_files import write_results
from r3edge.core.artifact import read_manifest, variant_runtime
from r3edge.core.errors import InvalidInput
from r3edge.core.fidelity import (
    MIN_TOP10_OVERLAP,
    Tolerances,
    batch_invariance,
    fidelity_failures,
    recommend_variant,
)
from r3edge.core.pairs import QueryCandidates
from r3edge.core.runtime_loader import open_runtime
from r3edge.core.scoring import DEFAULT_MAX_BATCH_TOKENS, score_pairs
from r3edge.core.timing import LOAD_KEY, interleaved_rounds, percentiles, top_k_overlap

#: the variant every other is compared with
REFERENCE = "fp32"


def fidelity_row(scorer, ref: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> dict:
    """How far one variant's label logits (one array per request) are from the reference's."""
    a, b = np.concatenate(ref), np.concatenate(got)
    return {
        "max_abs_logit_diff": float(np.abs(a - b).max()),
        "mean_abs_logit_diff": float(np.abs(a - b).mean()),
        "argmax_agreement": float((a.argmax(-1) == b.argmax(-1)).mean()),
        "top10_overlap": float(np.mean([top_k_overlap(scorer.relevance(r)[1], scorer.relevance(g)[1], 10)
                                        for r, g in zip(ref, got)])),
    }


def measure_variants(artifact: str | Path, queries: Sequence[QueryCandidates], *, variants: Sequence[str] | None = None,
                     threads: int | None = 2, reps: int = 10, pause_s: float = 0.25, prefix_reuse: bool = True,
                     min_overlap: float = MIN_TOP10_OVERLAP, student: str | None = None,
                     log: Callable[[str], None] = print) -> dict:
    """Time and compare ``variants`` (default: every variant in the manifest; fp32 is always added) of
    ``artifact`` on ``queries``; the results dict :func:`write_report` writes."""
    if not queries:
        raise InvalidInput("no requests to time", "pass a candidate-list JSONL with at least one query", field="--pairs")
    if reps < 1:
        raise InvalidInput(f"--reps {reps} times nothing", "pass --reps 1 or more", field="--reps")
    manifest = read_manifest(artifact)
    names = list(dict.fromkeys([REFERENCE, *(variants or manifest["variants"])]))
    runtimes = {}
    try:
        for v in names:
            t = time.perf_counter()
            name, _, precision = v.partition("@")
            runtimes[v] = open_runtime(artifact, name, threads=threads, prefix_reuse=prefix_reuse,
                                       **({"inference_precision": precision} if precision else {}))
            log(f"{v}: {runtimes[v].name} opened in {time.perf_counter() - t:.2f} s")
        return _measure(manifest, runtimes, queries, reps=reps, pause_s=pause_s, min_overlap=min_overlap,
                        artifact=Path(artifact).name, threads=threads, student=student, log=log)
    finally:
        for rt in runtimes.values():
            rt.close()


def _measure(manifest: dict, runtimes: dict, queries: Sequence[QueryCandidates], *, reps: int, pause_s: float,
             min_overlap: float, artifact: str, threads: int | None, student: str | None, log) -> dict:
    def score(v: str, q: QueryCandidates) -> np.ndarray:
        rt = runtimes[v]
        return score_pairs(rt.scorer, rt, [q.query] * len(q.candidates), [c.text for c in q.candidates], prefix=rt.prefix)

    # fidelity (and warm-up): every request, every variant
    logits = {v: [score(v, q) for q in queries] for v in runtimes}
    scorer = runtimes[REFERENCE].scorer
    first = queries[0]
    fidelity = {v: {**fidelity_row(scorer, logits[REFERENCE], logits[v]),
                    "batch_invariance_max_abs_score_diff": batch_invariance(
                        rt.scorer, rt, [first.query] * len(first.candidates), [c.text for c in first.candidates], rt.prefix)}
                for v, rt in runtimes.items()}
    timed = interleaved_rounds({v: (lambda r, v=v: score(v, queries[r % len(queries)])) for v in runtimes}, reps,
                               pause_s=pause_s,
                               progress=lambda r, ms: log(f"round {r + 1}/{reps}: " + ", ".join(f"{v} {x:.0f}" for v, x in ms.items())))
    batch_tol = Tolerances().quant_batch_tol
    rows = {}
    for v, rt in runtimes.items():
        p = percentiles(timed["ms"][v])
        rows[v] = {
            "runtime": variant_runtime(manifest, v.partition("@")[0]),
            "name": rt.name,
            "path": "prefix reuse" if rt.prefix is not None else "single graph",
            "p50_ms": round(p["p50"], 1),
            "p95_ms": round(p["p95"], 1),
            "min_ms": round(min(timed["ms"][v]), 1),
            **{k: round(x, 6) for k, x in fidelity[v].items()},
        }
        rows[v]["fidelity_failures"] = fidelity_failures(rows[v], min_overlap=min_overlap, batch_tol=batch_tol)
    tokens = [sum(len(e.input_ids) for e in scorer.encode_batch([q.query] * len(q.candidates), [c.text for c in q.candidates]))
              for q in queries]
    return {
        "machine": machine_info(),
        "artifact": artifact,
        "student": student or manifest.get("student"),
        "threads": threads,
        "max_batch_tokens": DEFAULT_MAX_BATCH_TOKENS,
        "requests": len(queries),
        "candidates_per_request": [len(q.candidates) for q in queries],
        "tokens_per_request_mean": round(float(np.mean(tokens)), 1),
        "reps": reps,
        "pause_s": pause_s,
        LOAD_KEY: timed[LOAD_KEY],
        "variants": rows,
        "reference": REFERENCE,
        "min_overlap": min_overlap,
        "batch_tol": batch_tol,
        "recommended_default": recommend_variant(rows, min_overlap=min_overlap, batch_tol=batch_tol),
        "fastest": min(rows, key=lambda v: rows[v]["p50_ms"]),
        "quantization": {v: manifest.get("quantization", {}).get(v.partition("@")[0]) for v in rows},
    }


def report_lines(results: dict) -> list[str]:
    """``report.md`` of :func:`measure_variants`' results: every number is read from them."""
    m, rows = results["machine"], results["variants"]
    loads = [x[0] for x in results[LOAD_KEY]]
    default = results["recommended_default"]
    rule = (f"fastest with top-10 overlap >= {results['min_overlap']:g} and batch invariance <= {results['batch_tol']:g}")
    lines = [
        "# Which variant to serve: one artifact, every variant, the same requests",
        "",
        f"Machine: {m['cpu']} ({', '.join(m['cpu_flags'])}), {m['cores_usable']} usable cores, {results['threads']} threads; "
        f"onnxruntime {m['versions'].get('onnxruntime')}; openvino {m['versions'].get('openvino')}; {m['timestamp']}.",
        f"Student: {results['student']}. {results['requests']} requests of {np.mean(results['candidates_per_request']):.0f} "
        f"candidates (~{results['tokens_per_request_mean']:.0f} tokens each), {results['reps']} timed rounds; each round "
        f"scores the next request with every variant in a shuffled order (`score_pairs`, micro-batches of <= "
        f"{results['max_batch_tokens']} tokens). 1-min load average per round: {min(loads):.2f}-{max(loads):.2f}.",
        "",
        f"| variant | runtime | graphs | p50 ms per request | p95 ms | top-10 vs {results['reference']} | max abs Δlogit "
        "| argmax agreement | batch invariance | fails |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in sorted(rows, key=lambda v: rows[v]["p50_ms"]):
        r = rows[v]
        lines.append(f"| {v} | {r['runtime']} | {r['path']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['top10_overlap']:.3f} | "
                     f"{r['max_abs_logit_diff']:.3g} | {r['argmax_agreement']:.3f} | "
                     f"{r['batch_invariance_max_abs_score_diff']:.2g} | {'; '.join(r['fidelity_failures']) or '–'} |")
    lines += ["", f"Fastest: **{results['fastest']}**. "
              + (f"Recommended default here ({rule}): **{default}**." if default else f"No variant passes ({rule})."), ""]
    return lines


def write_report(results: dict, out: str | Path) -> dict[str, Path]:
    """Write OUT/results.json and OUT/report.md."""
    return write_results(out, results, "\n".join(report_lines(results)))
