"""Where an exported variant spends its time: ONNX Runtime's own profiler, summed per operator type.

Each variant scores the same top-N requests through ``score_pairs`` (the server's micro-batching at the
scorer's default token budget) in the session the server opens (:class:`OnnxRuntime`, single graph,
:func:`open_session`'s options) with the profiler on. The profiler times every node's kernel; summing
those per op type says which operators a variant pays for (e.g. an int8 graph whose Softmax runs in
float64), which wall-clock timing alone cannot. The kernels' sum is set beside the session's own run
time (``model_run`` events) and the wall time of ``score_pairs``, so the share spent outside kernels
(tokenisation, padding, scheduling) is visible rather than assumed.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from r3edge.core.artifact import read_manifest, variant_runtime
from r3edge.core.errors import InvalidInput
from r3edge.core.pairs import QueryCandidates
from r3edge.core.timing import LOAD_KEY, load_average


def onnx_variants(artifact: str | Path) -> list[str]:
    """The artifact's variants that ONNX Runtime scores (OpenVINO variants have no ORT profile)."""
    manifest = read_manifest(artifact)
    return [v for v in manifest["variants"] if variant_runtime(manifest, v) == "onnxruntime"]


def kernel_times(events: Sequence[dict]) -> dict:
    """Sum an ORT profile's events: kernel ms, calls and distinct nodes per op type, and the session run ms."""
    ms, calls, nodes = Counter(), Counter(), {}
    run_ms = 0.0
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            op = e["args"]["op_name"]
            ms[op] += e["dur"] / 1e3
            calls[op] += 1
            nodes.setdefault(op, set()).add(e["name"][: -len("_kernel_time")])
        elif e.get("cat") == "Session" and e.get("name") == "model_run":
            run_ms += e["dur"] / 1e3
    return {"kernel_ms": dict(ms.most_common()), "calls": dict(calls), "nodes": {op: len(n) for op, n in nodes.items()},
            "model_run_ms": run_ms}


def profile_variant(artifact: str | Path, variant: str, queries: Sequence[QueryCandidates], out_dir: str | Path,
                    threads: int | None = None) -> dict:
    """Score ``queries`` with ``variant`` under ORT's profiler; times per request (one query's candidates)."""
    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.scoring import score_pairs

    if not queries:
        raise InvalidInput("no request to profile", "pass a --pairs file with at least one query", field="pairs")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runtime = OnnxRuntime(artifact, variant=variant, threads=threads, prefix_reuse=False,
                          profile_prefix=str(out_dir / f"ort-profile-{variant}"))
    t0 = time.perf_counter()
    for q in queries:
        score_pairs(runtime.scorer, runtime.label_logits, [q.query] * len(q.candidates), [c.text for c in q.candidates])
    wall_ms = (time.perf_counter() - t0) * 1e3
    path = runtime.session.end_profiling()
    with open(path, encoding="utf-8") as fh:
        summed = kernel_times(json.load(fh))
    n = len(queries)
    per = lambda ms: ms / n  # noqa: E731
    kernels = sum(summed["kernel_ms"].values())
    return {
        "variant": variant, "runtime": runtime.name, "threads": threads, "requests": n,
        "candidates_per_request": sum(len(q.candidates) for q in queries) / n,
        "ms_per_request": {op: per(ms) for op, ms in summed["kernel_ms"].items()},
        "calls_per_request": {op: c / n for op, c in summed["calls"].items()},
        "nodes": summed["nodes"],
        "kernel_ms_per_request": per(kernels),
        "model_run_ms_per_request": per(summed["model_run_ms"]),
        "wall_ms_per_request": per(wall_ms),
        "profile": str(path), LOAD_KEY: load_average(),
    }


def markdown(results: dict, top: int | None = None) -> str:
    """The report: per variant, every op type (or the ``top`` slowest) by kernel ms per request."""
    lines = ["# ONNX Runtime profile per operator type", ""]
    s = results["settings"]
    lines += [f"Artifact `{s['artifact']}`; {s['requests']} requests from `{s['pairs']}`; "
              f"intra-op threads {s['threads'] or 'ONNX Runtime default'}; machine {results['machine']['cpu']}.", ""]
    for v in results["variants"]:
        total = v["kernel_ms_per_request"]
        lines += [f"## {v['variant']} ({v['runtime']})", "",
                  f"{total:.1f} ms of kernels per request of {v['candidates_per_request']:g} candidates; the session's runs "
                  f"took {v['model_run_ms_per_request']:.1f} ms and `score_pairs` {v['wall_ms_per_request']:.1f} ms wall "
                  f"(kernels {total / v['wall_ms_per_request']:.0%} of the wall time). Load average "
                  f"{v[LOAD_KEY]} after the run; profile `{v['profile']}`.", "",
                  "| op type | ms / request | share of kernels | calls / request | nodes |", "|---|---|---|---|---|"]
        ops = list(v["ms_per_request"].items())
        for op, ms in ops[:top] if top else ops:
            lines.append(f"| {op} | {ms:.2f} | {ms / total:.1%} | {v['calls_per_request'][op]:g} | {v['nodes'][op]} |")
        if top and len(ops) > top:
            rest = sum(ms for _, ms in ops[top:])
            lines.append(f"| {len(ops) - top} other op types | {rest:.2f} | {rest / total:.1%} | | |")
        lines.append("")
    return "\n".join(lines)


def profile_artifact(artifact: str | Path, pairs: str | Path, out: str | Path, *, variants: Sequence[str] | None = None,
                     requests: int = 4, threads: int | None = None, top: int | None = None) -> dict[str, Path]:
    """Profile each variant on the first ``requests`` queries of ``pairs``; write OUT/results.json and OUT/report.md."""
    from r3edge.benchmarks.machine import machine_info
    from r3edge.benchmarks.results_files import write_results
    from r3edge.core.pairs import read_queries

    if requests < 1:
        raise InvalidInput(f"--requests {requests}", "profile at least one request", field="requests")
    known = onnx_variants(artifact)
    variants = list(variants or known)
    unknown = [v for v in variants if v not in known]
    if unknown:
        raise InvalidInput(f"variant(s) {unknown} are not ONNX Runtime variants of {artifact}",
                           f"pick from {', '.join(known)}", field="variants")
    queries = read_queries(pairs)[:requests]
    out = Path(out)
    results = {"settings": {"artifact": str(artifact), "pairs": str(pairs), "requests": len(queries), "threads": threads},
               "machine": machine_info(),
               "variants": [profile_variant(artifact, v, queries, out, threads) for v in variants]}
    return write_results(out, results, markdown(results, top) + "\n")
