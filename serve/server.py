"""The gRPC reranking server (grpc.aio): Rerank, ScorePairs, ModelInfo, health and reflection.

Scoring runs in a worker thread through :func:`r3edge.core.scoring.score_pairs` (the one formatter and
batcher), so the event loop keeps answering health checks and shedding load while a top-100
request is being scored. Admission is bounded: at most ``max_concurrent_requests`` score at once
and ``max_queued_requests`` wait; anything beyond is refused at once with RESOURCE_EXHAUSTED, so
memory never grows with the offered load. A cancelled or expired request stops between
micro-batches instead of burning the slot, and a request whose deadline passes while it waits for a
slot is never scored; :class:`DropCounters` counts what was dropped. Importing this module never
imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from r3edge.api import SERVICE_NAME, pb2, pb2_grpc
from r3edge.core.errors import (
    Cancelled,
    DeadlineExceeded,
    ErrorKind,
    InvalidInput,
    Overloaded,
    R3EdgeError,
    Unavailable,
)
from r3edge.core.onnx_runtime import OnnxRuntime
from r3edge.core.scoring import default_max_batch_tokens, score_pairs
from r3edge.serve.config import ServeConfig

log = logging.getLogger("r3edge.serve")

#: The one place an error becomes a gRPC status: by its kind, never by its message.
STATUS_OF: dict[ErrorKind, grpc.StatusCode] = {
    ErrorKind.INVALID_INPUT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.FORMAT: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.MISSING_DEPENDENCY: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.OVERLOADED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.CANCELLED: grpc.StatusCode.CANCELLED,
    ErrorKind.DEADLINE: grpc.StatusCode.DEADLINE_EXCEEDED,
    ErrorKind.CONFLICT: grpc.StatusCode.ABORTED,
    ErrorKind.QUALITY: grpc.StatusCode.INTERNAL,
    ErrorKind.INTERNAL: grpc.StatusCode.INTERNAL,
}


def status_of(exc: R3EdgeError) -> tuple[grpc.StatusCode, str]:
    """The status code and the client-facing message of an error."""
    return STATUS_OF[exc.kind], exc.what + (f"; fix: {exc.fix}" if exc.fix else "")


#: Why admitted work was dropped: the client cancelled it, or its deadline passed.
DropReason = Literal["cancelled", "deadline"]
DROP_REASONS: tuple[DropReason, ...] = ("cancelled", "deadline")


#: A client's own deadline timer cancels the call when its deadline passes, which reaches the server
#: up to the request's transit time before the server's copy of that deadline does; the server cannot
#: tell that from a cancel, so a cancel this close to the deadline counts as ``deadline``.
CANCEL_COUNTS_AS_DEADLINE_S = 0.5


def _per_reason() -> dict[DropReason, int]:
    return dict.fromkeys(DROP_REASONS, 0)


def drop_reason(deadline: float | None) -> DropReason:
    """Why a cancelled or expired request is dropped now, given its ``time.monotonic()`` deadline."""
    if deadline is not None and time.monotonic() >= deadline - CANCEL_COUNTS_AS_DEADLINE_S:
        return "deadline"
    return "cancelled"


@dataclass
class DropCounters:
    """Admitted requests the server dropped instead of scoring, by :data:`DropReason`.

    Each field is one counter labelled by ``reason``: ``requests`` (r3edge_dropped_requests_total),
    ``queued_requests`` (r3edge_dropped_queued_requests_total: those of ``requests`` dropped while
    waiting for a slot, before any micro-batch ran), ``pairs`` (r3edge_dropped_pairs_total: pairs
    never run through the model) and ``micro_batches`` (r3edge_dropped_micro_batches_total: planned
    micro-batches never run; a queued request was never planned). Scoring threads and the event loop
    both write them, under one lock.
    """

    requests: dict[DropReason, int] = field(default_factory=_per_reason)
    queued_requests: dict[DropReason, int] = field(default_factory=_per_reason)
    pairs: dict[DropReason, int] = field(default_factory=_per_reason)
    micro_batches: dict[DropReason, int] = field(default_factory=_per_reason)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, reason: DropReason, *, pairs: int, micro_batches: int = 0, queued: bool = False) -> None:
        with self._lock:
            self.requests[reason] += 1
            self.queued_requests[reason] += int(queued)
            self.pairs[reason] += pairs
            self.micro_batches[reason] += micro_batches

    def snapshot(self) -> dict[str, dict[DropReason, int]]:
        """A consistent copy of every counter: ``{field: {reason: count}}``."""
        with self._lock:
            return {name: dict(getattr(self, name)) for name in ("requests", "queued_requests", "pairs", "micro_batches")}


@dataclass
class Scored:
    """One request's scores and where its time went (all in milliseconds).

    ``tokenize_ms`` is text to ids only (score_pairs' own measure); ``inference_ms`` the runtime's
    calls; ``total_ms`` the whole scoring: tokenizing, batching, collation, inference and read-out
    (the queue not included; that is ``queue_ms``).
    """

    probs: np.ndarray      # [n, n_labels]
    scores: np.ndarray     # [n]
    truncated_docs: int
    queue_ms: float
    tokenize_ms: float
    inference_ms: float
    total_ms: float

    def timing(self) -> pb2.Timing:
        return pb2.Timing(queue_ms=self.queue_ms, tokenize_ms=self.tokenize_ms,
                          inference_ms=self.inference_ms, total_ms=self.total_ms)


def load_runtime_for(cfg: ServeConfig) -> OnnxRuntime:
    """The artifact's ONNX Runtime session named by the config (the server never runs torch)."""
    return OnnxRuntime(cfg.artifact, variant=cfg.variant, threads=cfg.threads, prefix_reuse=cfg.prefix_reuse)


class RerankerService(pb2_grpc.RerankerServicer):
    def __init__(self, cfg: ServeConfig, executor: ThreadPoolExecutor):
        self.cfg = cfg
        self.runtime = None
        self.model_name = ""
        self.max_batch_tokens = cfg.max_batch_tokens  # resolved for the device in set_runtime
        self._executor = executor
        self._slots = asyncio.Semaphore(cfg.max_concurrent_requests)
        self.drops = DropCounters()
        self._admitted = 0  # in flight + queued; only touched on the event loop thread
        self._limit = cfg.max_concurrent_requests + cfg.max_queued_requests

    def set_runtime(self, runtime) -> None:
        self.runtime = runtime
        # unset in the config: the budget measured for the device the session runs on
        self.max_batch_tokens = self.cfg.max_batch_tokens or default_max_batch_tokens(getattr(runtime, "providers", ()))
        info = runtime.info()
        self.variant = str(info.get("variant", ""))
        self.model_name = f"{Path(self.cfg.artifact).name}:{self.variant}" if self.variant else Path(self.cfg.artifact).name

    # -- validation ---------------------------------------------------------------------------
    def _check_texts(self, query: str, texts: Sequence[str], field: str, text_field: str) -> None:
        if not query.strip():
            raise InvalidInput("query is empty", "send the user's query text", field="query")
        if not texts:
            raise InvalidInput(f"{field} is empty: send at least one", field=field)
        if len(texts) > self.cfg.max_candidates:
            raise InvalidInput(f"{field} has {len(texts)} entries, over max_candidates={self.cfg.max_candidates}",
                               "split the request, or start the server with a larger --max-candidates", field=field)
        for i, t in enumerate(texts):
            if not t.strip():
                raise InvalidInput(f"{field}[{i}]{text_field} is empty", "drop empty candidates before sending",
                                   field=f"{field}[{i}]{text_field}")

    def _check_rerank(self, req) -> None:
        if req.top_k < 0:
            raise InvalidInput(f"top_k is {req.top_k}: use 0 for all candidates or a positive number", field="top_k")
        self._check_texts(req.query, [c.text for c in req.candidates], "candidates", ".text")
        seen: dict[str, int] = {}
        for i, c in enumerate(req.candidates):
            if not c.id:
                raise InvalidInput(f"candidates[{i}].id is empty", "give every candidate a unique id",
                                   field=f"candidates[{i}].id")
            if c.id in seen:
                raise InvalidInput(f"candidates[{i}].id {c.id!r} duplicates candidates[{seen[c.id]}].id",
                                   "give every candidate a unique id", field=f"candidates[{i}].id")
            seen[c.id] = i

    # -- scoring ------------------------------------------------------------------------------
    def _score_sync(self, query: str, docs: list[str], cancel: threading.Event, deadline: float | None) -> Scored:
        """Score in a worker thread; before each runtime call, stop if the request was cancelled or its
        ``deadline`` (``time.monotonic()``) passed, counting the pairs and micro-batches never run."""
        runtime = self.runtime
        infer = 0.0
        stats: dict = {}
        pairs_run = batches_run = 0

        def guarded(fn, micro_batch: bool):
            def run(*args):
                nonlocal infer, pairs_run, batches_run
                if cancel.is_set() or (deadline is not None and time.monotonic() >= deadline):
                    reason = drop_reason(deadline)
                    self.drops.record(reason, pairs=len(docs) - pairs_run,
                                      micro_batches=stats.get("n_batches", 0) - batches_run)
                    if reason == "deadline":
                        raise DeadlineExceeded("deadline exceeded while scoring", "send a longer deadline or fewer candidates")
                    raise Cancelled("request cancelled")
                t = time.perf_counter()
                out = fn(*args)
                infer += time.perf_counter() - t
                if micro_batch:  # (..., input_ids, attention_mask): one row per pair
                    pairs_run += len(args[-1])
                    batches_run += 1
                return out
            return run

        # The artifact's prefix-reuse graphs, when it has them: the template head + query run once.
        runner = getattr(runtime, "prefix", None) if self.cfg.prefix_reuse else None
        prefix = None if runner is None else SimpleNamespace(prefix=guarded(runner.prefix, False),
                                                             candidates=guarded(runner.candidates, True))
        t0 = time.perf_counter()
        logits = score_pairs(runtime.scorer, guarded(runtime.label_logits, True), [query] * len(docs), docs,
                             max_batch_tokens=self.max_batch_tokens, max_batch_size=self.cfg.max_batch_size,
                             stats=stats, prefix=prefix)
        probs, scores = runtime.scorer.relevance(logits)
        total = time.perf_counter() - t0
        return Scored(probs, scores, int(stats.get("truncated_docs", 0)), 0.0,
                      float(stats["tokenize_ms"]), infer * 1e3, total * 1e3)

    async def _score(self, context, query: str, docs: list[str]) -> Scored:
        self._check_ready()
        if self._admitted >= self._limit:
            raise Overloaded(
                f"server busy: {self._admitted} requests in flight or queued (max_concurrent_requests="
                f"{self.cfg.max_concurrent_requests} + max_queued_requests={self.cfg.max_queued_requests})",
                "retry later with backoff",
            )
        # The clock first, then the time left: this deadline is never later than gRPC's own.
        now = time.monotonic()
        remaining = context.time_remaining()
        deadline = now + remaining if remaining is not None else None
        self._admitted += 1
        t_arrive = time.perf_counter()
        try:
            try:
                await self._slots.acquire()
            except asyncio.CancelledError:
                # gRPC cancels the handler when the client goes away or the deadline passes.
                self.drops.record(drop_reason(deadline), pairs=len(docs), queued=True)
                raise
            try:
                queue_ms = (time.perf_counter() - t_arrive) * 1e3
                if deadline is not None and time.monotonic() >= deadline:
                    self.drops.record("deadline", pairs=len(docs), queued=True)
                    raise DeadlineExceeded("deadline exceeded while queued", "retry later or with a longer deadline")
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
            finally:
                self._slots.release()
        finally:
            self._admitted -= 1
        scored.queue_ms = queue_ms
        return scored

    def _check_ready(self) -> None:
        if self.runtime is None:
            raise Unavailable("model is still loading", "retry after health reports SERVING")

    # -- RPCs: each raises typed errors; _rpc turns them into a status via STATUS_OF -------------
    async def Rerank(self, request, context):
        return await _rpc(context, self._rerank(request, context))

    async def ScorePairs(self, request, context):
        return await _rpc(context, self._score_pairs(request, context))

    async def ModelInfo(self, request, context):
        return await _rpc(context, self._model_info())

    async def _rerank(self, request, context):
        self._check_rerank(request)
        cands = request.candidates
        s = await self._score(context, request.query, [c.text for c in cands])
        order = sorted(range(len(cands)), key=lambda i: (-s.scores[i], i))
        if request.top_k:
            order = order[: request.top_k]
        results = [pb2.Result(id=cands[i].id, index=i, score=float(s.scores[i]), label_probs=s.probs[i].tolist())
                   for i in order]
        return pb2.RerankResponse(results=results, model=self.model_name, timing=s.timing(),
                                  truncated_docs=s.truncated_docs)

    async def _score_pairs(self, request, context):
        self._check_texts(request.query, list(request.documents), "documents", "")
        s = await self._score(context, request.query, list(request.documents))
        scores = [pb2.PairScore(score=float(s.scores[i]), label_probs=s.probs[i].tolist()) for i in range(len(s.scores))]
        return pb2.ScorePairsResponse(scores=scores, model=self.model_name, timing=s.timing(),
                                      truncated_docs=s.truncated_docs)

    async def _model_info(self):
        self._check_ready()
        spec = self.runtime.scorer.spec
        info = self.runtime.info()
        cfg = self.cfg
        return pb2.ModelInfoResponse(
            artifact=str(cfg.artifact), variant=self.variant, runtime=self.runtime.name,
            label_tokens=list(spec.label_tokens), label_values=list(spec.label_values),
            max_query_tokens=spec.max_query_tokens, max_doc_tokens=spec.max_doc_tokens,
            max_total_tokens=spec.max_total_tokens, scorer_fingerprint=spec.fingerprint(),
            limits=pb2.Limits(max_candidates=cfg.max_candidates, max_batch_tokens=self.max_batch_tokens,
                              max_batch_size=cfg.max_batch_size, max_concurrent_requests=cfg.max_concurrent_requests,
                              max_queued_requests=cfg.max_queued_requests),
            torch_loaded="torch" in sys.modules,
            runtime_info_json=json.dumps(info, default=str),
        )


async def _rpc(context, call):
    """Await an RPC body; a typed error aborts with its status (the only place RPCs abort)."""
    try:
        return await call
    except R3EdgeError as exc:
        code, message = status_of(exc)
        await context.abort(code, message)


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
            raise Unavailable(f"cannot bind {address}", "pick a free --port (or 0 for any)", field="port")
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

    def start(self, timeout: float = 300) -> BackgroundServer:
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

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
