"""The gRPC reranking server (grpc.aio): Rerank, ScorePairs, ModelInfo, health and reflection.

Scoring runs in a worker thread through :func:`r3edge.scoring.score_pairs` (the one formatter and
batcher), so the event loop keeps answering health checks and shedding load while a top-100
request is being scored. Admission is bounded: at most ``max_concurrent_requests`` score at once
and ``max_queued_requests`` wait; anything beyond is refused at once with RESOURCE_EXHAUSTED, so
memory never grows with the offered load. A cancelled or expired request stops between
micro-batches instead of burning the slot. Importing this module never imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from r3edge.errors import R3EdgeError
from r3edge.scoring import score_pairs
from serve.config import ServeConfig
from serve.proto import SERVICE_NAME, pb2, pb2_grpc

log = logging.getLogger("r3edge.serve")


class _Stopped(Exception):
    """Raised inside the scoring thread when the request was cancelled or ran out of time."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Scored:
    probs: np.ndarray      # [n, n_labels]
    scores: np.ndarray     # [n]
    truncated_docs: int
    queue_ms: float
    tokenize_ms: float
    inference_ms: float
    total_ms: float

    def timing(self) -> "pb2.Timing":
        return pb2.Timing(queue_ms=self.queue_ms, tokenize_ms=self.tokenize_ms,
                          inference_ms=self.inference_ms, total_ms=self.total_ms)


def load_runtime_for(cfg: ServeConfig):
    """The runtime named by the config (torch is imported only for ``backend='torch'``)."""
    from serve.runtimes import load_runtime

    return load_runtime(cfg.artifact, variant=cfg.variant, threads=cfg.threads, backend=cfg.backend)


class RerankerService(pb2_grpc.RerankerServicer):
    def __init__(self, cfg: ServeConfig, executor: ThreadPoolExecutor):
        self.cfg = cfg
        self.runtime = None
        self.model_name = ""
        self._executor = executor
        self._slots = asyncio.Semaphore(cfg.max_concurrent_requests)
        self._admitted = 0  # in flight + queued; only touched on the event loop thread
        self._limit = cfg.max_concurrent_requests + cfg.max_queued_requests

    def set_runtime(self, runtime) -> None:
        self.runtime = runtime
        info = runtime.info()
        self.variant = str(info.get("variant", ""))
        self.model_name = f"{Path(self.cfg.artifact).name}:{self.variant}" if self.variant else Path(self.cfg.artifact).name

    # -- validation ---------------------------------------------------------------------------
    def _check_texts(self, query: str, texts: Sequence[str], field: str, text_field: str) -> str | None:
        if not query.strip():
            return "query is empty"
        if not texts:
            return f"{field} is empty: send at least one"
        if len(texts) > self.cfg.max_candidates:
            return f"{field} has {len(texts)} entries, over max_candidates={self.cfg.max_candidates}"
        for i, t in enumerate(texts):
            if not t.strip():
                return f"{field}[{i}]{text_field} is empty"
        return None

    def _check_rerank(self, req) -> str | None:
        if req.top_k < 0:
            return f"top_k is {req.top_k}: use 0 for all candidates or a positive number"
        bad = self._check_texts(req.query, [c.text for c in req.candidates], "candidates", ".text")
        if bad:
            return bad
        seen: dict[str, int] = {}
        for i, c in enumerate(req.candidates):
            if not c.id:
                return f"candidates[{i}].id is empty"
            if c.id in seen:
                return f"candidates[{i}].id {c.id!r} duplicates candidates[{seen[c.id]}].id"
            seen[c.id] = i
        return None

    # -- scoring ------------------------------------------------------------------------------
    def _score_sync(self, query: str, docs: list[str], cancel: threading.Event, deadline: float | None) -> Scored:
        runtime = self.runtime
        infer = 0.0

        def run_batch(ids, mask):
            nonlocal infer
            if cancel.is_set():
                raise _Stopped(grpc.StatusCode.CANCELLED, "request cancelled")
            if deadline is not None and time.monotonic() > deadline:
                raise _Stopped(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded while scoring")
            t = time.perf_counter()
            out = runtime.label_logits(ids, mask)
            infer += time.perf_counter() - t
            return out

        stats: dict = {}
        t0 = time.perf_counter()
        logits = score_pairs(runtime.scorer, run_batch, [query] * len(docs), docs,
                             max_batch_tokens=self.cfg.max_batch_tokens, max_batch_size=self.cfg.max_batch_size,
                             stats=stats)
        probs, scores = runtime.scorer.relevance(logits)
        total = time.perf_counter() - t0
        return Scored(probs, scores, int(stats.get("truncated_docs", 0)), 0.0,
                      (total - infer) * 1e3, infer * 1e3, total * 1e3)

    async def _score(self, context, query: str, docs: list[str]) -> Scored:
        if self.runtime is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "model is still loading; retry after health is SERVING")
        if self._admitted >= self._limit:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"server busy: {self._admitted} requests in flight or queued (max_concurrent_requests="
                f"{self.cfg.max_concurrent_requests} + max_queued_requests={self.cfg.max_queued_requests}); retry later",
            )
        self._admitted += 1
        t_arrive = time.perf_counter()
        try:
            async with self._slots:
                queue_ms = (time.perf_counter() - t_arrive) * 1e3
                remaining = context.time_remaining()
                if remaining is not None and remaining <= 0:
                    await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded while queued")
                deadline = time.monotonic() + remaining if remaining is not None else None
                cancel = threading.Event()
                fut = asyncio.get_running_loop().run_in_executor(
                    self._executor, self._score_sync, query, docs, cancel, deadline)
                try:
                    scored = await asyncio.shield(fut)
                except asyncio.CancelledError:
                    # Client went away: stop at the next micro-batch, but keep the slot until the
                    # thread is really free so the concurrency bound stays true.
                    cancel.set()
                    with contextlib.suppress(BaseException):
                        await fut
                    raise
                except _Stopped as exc:
                    await context.abort(exc.code, exc.message)
                except R3EdgeError as exc:
                    msg = exc.what if exc.what.startswith("query") else f"request: {exc.what}"
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, msg)
        finally:
            self._admitted -= 1
        scored.queue_ms = queue_ms
        return scored

    # -- RPCs ---------------------------------------------------------------------------------
    async def Rerank(self, request, context):
        bad = self._check_rerank(request)
        if bad:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, bad)
        cands = request.candidates
        s = await self._score(context, request.query, [c.text for c in cands])
        order = sorted(range(len(cands)), key=lambda i: (-s.scores[i], i))
        if request.top_k:
            order = order[: request.top_k]
        results = [pb2.Result(id=cands[i].id, index=i, score=float(s.scores[i]), label_probs=s.probs[i].tolist())
                   for i in order]
        return pb2.RerankResponse(results=results, model=self.model_name, timing=s.timing(),
                                  truncated_docs=s.truncated_docs)

    async def ScorePairs(self, request, context):
        bad = self._check_texts(request.query, list(request.documents), "documents", "")
        if bad:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, bad)
        s = await self._score(context, request.query, list(request.documents))
        scores = [pb2.PairScore(score=float(s.scores[i]), label_probs=s.probs[i].tolist()) for i in range(len(s.scores))]
        return pb2.ScorePairsResponse(scores=scores, model=self.model_name, timing=s.timing(),
                                      truncated_docs=s.truncated_docs)

    async def ModelInfo(self, request, context):
        if self.runtime is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "model is still loading")
        spec = self.runtime.scorer.spec
        info = self.runtime.info()
        cfg = self.cfg
        return pb2.ModelInfoResponse(
            artifact=str(cfg.artifact), variant=self.variant, runtime=self.runtime.name,
            label_tokens=list(spec.label_tokens), label_values=list(spec.label_values),
            max_query_tokens=spec.max_query_tokens, max_doc_tokens=spec.max_doc_tokens,
            max_total_tokens=spec.max_total_tokens, scorer_fingerprint=spec.fingerprint(),
            limits=pb2.Limits(max_candidates=cfg.max_candidates, max_batch_tokens=cfg.max_batch_tokens,
                              max_batch_size=cfg.max_batch_size, max_concurrent_requests=cfg.max_concurrent_requests,
                              max_queued_requests=cfg.max_queued_requests),
            torch_loaded="torch" in sys.modules,
            runtime_info_json=json.dumps(info, default=str),
        )


class RerankServer:
    """One server: bind, report NOT_SERVING while the model loads, then SERVING; graceful stop."""

    def __init__(self, cfg: ServeConfig, runtime=None):
        self.cfg = cfg
        self._runtime = runtime
        self.port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._executor = ThreadPoolExecutor(cfg.max_concurrent_requests, thread_name_prefix="r3edge-score")

    @property
    def runtime(self):
        return self.service.runtime

    async def start(self) -> int:
        mib = self.cfg.max_message_mb * 1024 * 1024
        self._server = grpc.aio.server(options=[("grpc.max_receive_message_length", mib),
                                                ("grpc.max_send_message_length", mib)])
        self.service = RerankerService(self.cfg, self._executor)
        pb2_grpc.add_RerankerServicer_to_server(self.service, self._server)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self._server)
        address = f"{self.cfg.host}:{self.cfg.port}"
        self.port = self._server.add_insecure_port(address)
        if not self.port:
            raise R3EdgeError(f"cannot bind {address}", "pick a free --port (or 0 for any)")
        for svc in ("", SERVICE_NAME):
            await self.health.set(svc, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self._server.start()
        runtime = self._runtime
        if runtime is None:
            try:
                runtime = await asyncio.get_running_loop().run_in_executor(self._executor, load_runtime_for, self.cfg)
            except BaseException:
                await self._server.stop(0)  # never leave a bound port that can only say NOT_SERVING
                self._server = None
                raise
        self.service.set_runtime(runtime)
        for svc in ("", SERVICE_NAME):
            await self.health.set(svc, health_pb2.HealthCheckResponse.SERVING)
        log.info("serving %s %s on %s:%s", self.cfg.artifact, self.service.variant or "-", self.cfg.host, self.port)
        return self.port

    async def stop(self, grace: float | None = None) -> None:
        """NOT_SERVING first (load balancers stop sending), then let in-flight requests finish."""
        if self._server is None:
            return
        await self.health.enter_graceful_shutdown()
        await self._server.stop(self.cfg.grace_period_s if grace is None else grace)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._server = None

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()


async def serve_until_signal(cfg: ServeConfig) -> None:
    """Run until SIGINT/SIGTERM, then stop gracefully (the `r3edge serve` entry point)."""
    import signal

    server = RerankServer(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    print(f"serving {cfg.artifact} {server.service.variant or '-'} on {cfg.host}:{server.port}", flush=True)
    await stop.wait()
    log.info("stopping: draining for up to %.1f s", cfg.grace_period_s)
    await server.stop()


class BackgroundServer:
    """A server on its own event-loop thread, for tests, benchmarks and notebooks."""

    def __init__(self, cfg: ServeConfig, runtime=None):
        self.cfg = cfg
        self._runtime = runtime
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="r3edge-server", daemon=True)
        self.server: RerankServer | None = None

    def start(self, timeout: float = 300) -> "BackgroundServer":
        self._thread.start()

        async def _start():
            self.server = RerankServer(self.cfg, self._runtime)
            return await self.server.start()

        asyncio.run_coroutine_threadsafe(_start(), self._loop).result(timeout)
        return self

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def target(self) -> str:
        return f"{self.cfg.host}:{self.port}"

    @property
    def runtime(self):
        return self.server.runtime

    def stop(self, grace: float = 1.0) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.stop(grace), self._loop).result(grace + 30)
            self.server = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
