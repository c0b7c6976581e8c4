"""Timing on a shared machine, one implementation for every benchmark and for `r3edge export`'s choice of the
fastest variant: interleaved rounds, percentiles, the load average under one key, and top-k overlap.

Why interleaved rounds: these boxes are shared and their load moves during a run. Timing system A for a
minute and then system B would charge a burst of someone else's work to one of them. Each round here runs
every system once, in an order shuffled per round (seeded), after a short pause of quiet, so load hits all
systems alike and a ratio measured side by side stays honest. The load average is recorded beside the
timings (:data:`LOAD_KEY`) so a reader can tell a quiet run from a contended one.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

#: the one key under which every benchmark records the 1/5/15-minute load average
LOAD_KEY = "loadavg_1_5_15"


def load_average() -> list[float]:
    """The 1, 5 and 15-minute load averages, rounded to 0.01 (what every results file records under :data:`LOAD_KEY`)."""
    return [round(x, 2) for x in os.getloadavg()]


def percentiles(values_ms: Sequence[float]) -> dict:
    """p50 / p95 / p99 / mean / max of a list of milliseconds (all None when it is empty)."""
    if not values_ms:
        return {"p50": None, "p95": None, "p99": None, "mean": None, "max": None}
    a = np.asarray(values_ms, dtype=np.float64)
    return {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)),
            "p99": float(np.percentile(a, 99)), "mean": float(a.mean()), "max": float(a.max())}


def top_k_overlap(ref_scores: Sequence[float], scores: Sequence[float], k: int = 10) -> float:
    """Share of the reference's top k (by score, ties by position) that the other scores also put in their top k."""
    top = lambda s: set(np.argsort(-np.asarray(s, dtype=np.float64), kind="stable")[:k].tolist())
    k = min(k, len(ref_scores))
    return len(top(ref_scores) & top(scores)) / k if k else 1.0


def interleaved_rounds(systems: Mapping[str, Callable[[int], object]], rounds: int, *, pause_s: float = 0.25,
                       seed: int = 0, progress: Callable[[int, dict[str, float]], None] | None = None,
                       rounds_of: Mapping[str, int] | None = None) -> dict:
    """Time ``systems[name](round_index)`` for every system in every round, in a seeded shuffled order per round.

    ``rounds_of`` times a system only in its first N rounds (a slow one, sampled less; it still runs between the
    others in those rounds). Returns ``{"ms": {name: [ms per round it ran]}, LOAD_KEY: [[1, 5, 15] after each
    round], "order": "shuffled per round", "pause_s": pause_s, "rounds": rounds}``; ``progress(round, {name:
    ms})`` is called after each round with the systems that ran in it.
    """
    rng = random.Random(seed)
    names = list(systems)
    limit = dict(rounds_of or {})
    times: dict[str, list[float]] = {n: [] for n in names}
    loads: list[list[float]] = []
    for r in range(rounds):
        order = names[:]
        rng.shuffle(order)
        ran: dict[str, float] = {}
        for name in order:
            if r >= limit.get(name, rounds):
                continue
            if pause_s:
                time.sleep(pause_s)
            t = time.perf_counter()
            systems[name](r)
            ran[name] = (time.perf_counter() - t) * 1e3
            times[name].append(ran[name])
        loads.append(load_average())
        if progress is not None:
            progress(r, {n: ran[n] for n in names if n in ran})
    return {"ms": times, LOAD_KEY: loads, "order": "shuffled per round", "pause_s": pause_s, "rounds": rounds}
