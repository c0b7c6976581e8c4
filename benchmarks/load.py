"""Closed-loop load over gRPC: N Rerank requests from C concurrent callers, latency percentiles.

A request is one query with all its candidates (top-100 on SemEval), which is what a reranker
is paid for; pairs/s counts candidates scored. Requests that fail are counted by status code,
never dropped from the tally, so an overloaded system cannot look fast by failing.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from r3edge.core.pairs import QueryCandidates
from r3edge.core.timing import percentiles


def request_candidates(q: QueryCandidates, pad_to: int | None = None) -> list[tuple[str, str]]:
    """The query's candidates as (id, text); cycled to ``pad_to`` only when asked (ids get ``#k``)."""
    cands = [(c.docid, c.text) for c in q.candidates]
    if pad_to and len(cands) < pad_to:
        base = list(cands)
        k = 1
        while len(cands) < pad_to:
            cands.extend((f"{i}#{k}", t) for i, t in base[: pad_to - len(cands)])
            k += 1
    return cands


def collect_probs(target: str, queries: Sequence[QueryCandidates], timeout: float = 600.0) -> dict[tuple[str, str], list[float]]:
    """Every candidate's label probabilities, one top_k=0 Rerank per query (also warms the server)."""
    from r3edge.api.client import RerankerClient

    out: dict[tuple[str, str], list[float]] = {}
    with RerankerClient(target, timeout=timeout) as client:
        for q in queries:
            for r in client.rerank(q.query, request_candidates(q), top_k=0):
                out[(q.qid, r.id)] = list(r.label_probs)
    return out


def run_load(target: str, queries: Sequence[QueryCandidates], requests: int, concurrency: int, top_k: int = 10,
             pad_to: int | None = None, timeout: float = 600.0, progress: bool = True) -> dict:
    """Send ``requests`` Rerank calls (cycling through ``queries``) from ``concurrency`` threads."""
    import grpc

    from r3edge.api.client import RerankerClient, Retry
    from r3edge.core.progress import Progress

    payloads = [(q.query, request_candidates(q, pad_to)) for q in queries]
    latencies: list[float] = []
    server_ms: list[tuple[float, float, float, float]] = []
    errors: Counter = Counter()
    pairs_ok = 0
    lock = threading.Lock()
    bar = Progress(requests, f"load {target}") if progress else None
    # no client retries: the load measures what the server answers, refusals included
    client = RerankerClient(target, timeout=timeout, retry=Retry(max_attempts=1))

    def one(i: int) -> None:
        nonlocal pairs_ok
        query, cands = payloads[i % len(payloads)]
        t = time.perf_counter()
        try:
            resp = client.rerank_raw(query, cands, top_k=top_k)
        except grpc.RpcError as exc:
            with lock:
                errors[exc.code().name] += 1
        else:
            ms = (time.perf_counter() - t) * 1e3
            with lock:
                latencies.append(ms)
                pairs_ok += len(cands)
                server_ms.append((resp.timing.queue_ms, resp.timing.tokenize_ms, resp.timing.inference_ms,
                                  resp.timing.total_ms))
        if bar:
            bar.update()

    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(max(1, concurrency)) as pool:
            list(pool.map(one, range(requests)))
    finally:
        wall = time.perf_counter() - t0
        client.close()
        if bar:
            bar.close()
    phases = ("queue", "tokenize", "inference", "total")
    srv = np.asarray(server_ms) if server_ms else np.zeros((0, len(phases)))
    return {
        "target": target,
        "requests": requests,
        "ok": len(latencies),
        "errors": dict(errors),
        "concurrency": concurrency,
        "top_k": top_k,
        "candidates_per_request": float(np.mean([len(c) for _, c in payloads])),
        "latency_ms": percentiles(latencies),
        # where a request's time went inside the server (the response's Timing), against latency_ms at the client
        "server_ms_mean": {k: (float(srv[:, j].mean()) if len(srv) else None) for j, k in enumerate(phases)},
        "server_ms_p50": {k: (float(np.median(srv[:, j])) if len(srv) else None) for j, k in enumerate(phases)},
        "pairs_per_s": pairs_ok / wall if wall > 0 else None,
        "requests_per_s": len(latencies) / wall if wall > 0 else None,
        "wall_s": wall,
    }
