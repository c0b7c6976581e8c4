"""The variant an artifact serves by default: the fastest that passed its checks, timed on the
exporting machine.

A newcomer who runs ``r3edge serve ARTIFACT`` should get the artifact's best variant, not fp32
(on the demo student fp32 took 368 ms per top-100 where int8-smooth took 220 ms and ov-int8 177 ms:
issue 48). So after every variant has passed (or failed) its parity gate, each one in the artifact
is opened the way ``r3edge serve`` opens it on the CPU (its runtime, its prefix-reuse graphs) and
timed on the calibration pairs, grouped by query into requests, in interleaved rounds
(:func:`r3edge.core.timing.interleaved_rounds`). The choice is
:func:`r3edge.core.fidelity.recommend_variant`'s, the rule ``r3edge bench variants`` applies: the
lowest p50 among variants that keep fp32's top 10 and are batch invariant. A top-10 overlap needs
requests of more than 10 candidates; calibration pairs usually come 10 or fewer per query (the demo's
do), and then only the export's own gates (parity with torch, batch invariance) hold a variant back,
which the reason says: ``r3edge bench variants`` on real top-100s is where the overlap is measured.
The manifest records the choice and why (``default_reason``); the export report keeps every timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from r3edge.core.fidelity import BATCH_INVARIANCE_KEY, OVERLAP_KEY, P50_KEY, fidelity_failures, recommend_variant
from r3edge.core.hardware import cpu_model
from r3edge.core.runtime_loader import open_runtime
from r3edge.core.scoring import score_pairs
from r3edge.core.timing import interleaved_rounds, load_average, percentiles, top_k_overlap

#: Interleaved timing rounds per variant: enough for a stable p50 of a few hundred milliseconds of
#: work each, few enough that the export takes seconds longer, not minutes.
TIMING_ROUNDS = 7
REFERENCE = "fp32"
TOP_K = 10


def requests_of(queries: Sequence[str], docs: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The calibration pairs as requests: consecutive pairs that share a query form one."""
    out: list[tuple[str, list[str]]] = []
    for q, d in zip(queries, docs):
        if out and out[-1][0] == q:
            out[-1][1].append(d)
        else:
            out.append((q, [d]))
    return out


def time_variants(artifact_dir: str | Path, names: Sequence[str], requests: Sequence[tuple[str, list[str]]],
                  batch_invariance: dict[str, float], *, threads: int | None = None, rounds: int = TIMING_ROUNDS,
                  log: Callable[[str], None] = print) -> dict[str, dict]:
    """``{variant: row}`` with ``p50_ms`` per pass over ``requests`` (:func:`requests_of`) on this machine's CPU,
    top-10 overlap with fp32 and the batch invariance the parity gate measured (``batch_invariance``)."""
    runtimes = {}
    try:
        for name in names:
            runtimes[name] = open_runtime(artifact_dir, name, threads=threads, device="cpu", prefix_reuse=True)

        def run(name: str) -> list[np.ndarray]:
            rt = runtimes[name]
            return [rt.scorer.relevance(score_pairs(rt.scorer, rt, [q] * len(ds), ds, prefix=rt.prefix))[1]
                    for q, ds in requests]

        scores = {name: run(name) for name in names}  # warm-up, and the scores the overlap compares
        timed = interleaved_rounds({name: (lambda _r, n=name: run(n)) for name in names}, rounds, pause_s=0.05)
    finally:
        for rt in runtimes.values():
            rt.close()
    rows = {}
    ref = scores.get(REFERENCE)
    # a top-10 overlap says something only on requests of more than 10 candidates
    ranked = [i for i, (_, ds) in enumerate(requests) if len(ds) > TOP_K]
    for name in names:
        overlap = (None if ref is None or not ranked else
                   round(float(np.mean([top_k_overlap(ref[i], scores[name][i], TOP_K) for i in ranked])), 4))
        rows[name] = {P50_KEY: round(percentiles(timed["ms"][name])["p50"], 2), OVERLAP_KEY: overlap,
                      BATCH_INVARIANCE_KEY: batch_invariance.get(name), "path": "prefix reuse"
                      if runtimes[name].prefix is not None else "single graph"}
        rows[name]["fidelity_failures"] = fidelity_failures(rows[name], overlap_measured=bool(ranked))
    log("[export] default-variant timing (ms per pass over the calibration requests, p50 of "
        f"{rounds}): " + ", ".join(f"{n} {r[P50_KEY]:.1f}" for n, r in rows.items()))
    return rows


def choose_default(artifact_dir: str | Path, names: Sequence[str], queries: Sequence[str], docs: Sequence[str],
                   batch_invariance: dict[str, float], *, threads: int | None = None,
                   log: Callable[[str], None] = print) -> tuple[str, str, dict]:
    """``(default, reason, timing report)``: :func:`recommend_variant` over :func:`time_variants`'
    rows (fp32 when no variant passes, which cannot happen while fp32 itself is built)."""
    t0 = time.perf_counter()
    requests = requests_of(queries, docs)
    rows = time_variants(artifact_dir, names, requests, batch_invariance, threads=threads, log=log)
    measured = any(r[OVERLAP_KEY] is not None for r in rows.values())
    best = recommend_variant(rows, overlap_measured=measured) or REFERENCE
    n_req = len(requests)
    others = ", ".join(f"{n} {r[P50_KEY]:.1f}" for n, r in rows.items() if n != best)
    kept = ("kept fp32's top 10 on the calibration requests and batch invariance" if measured else
            "passed the export's parity gates and batch invariance (the calibration requests have 10 candidates or "
            "fewer: no top-10 overlap to hold it to; `r3edge bench variants` measures it on top-100s)")
    reason = (f"fastest variant that {kept}, timed at export on {cpu_model()} ({threads or 'default'} threads): "
              f"{best} {rows[best][P50_KEY]:.1f} ms per pass over {len(queries)} calibration pairs in {n_req} requests"
              + (f" (others: {others})" if others else ""))
    report = {"rows": rows, "rounds": TIMING_ROUNDS, "pairs": len(queries), "requests": n_req, "threads": threads,
              "cpu": cpu_model(), "loadavg_1_5_15": load_average(), "seconds": round(time.perf_counter() - t0, 2),
              "chosen": best}
    return best, reason, report


__all__ = ["choose_default", "time_variants", "requests_of", "TIMING_ROUNDS"]
