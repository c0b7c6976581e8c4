"""The gRPC front door: translate r3edge.v1 requests to engine calls and typed errors to status codes.

Nothing is scored here (that is :mod:`r3edge.serve.engine`). Request bodies are parsed by a lenient
deserializer, so a corrupt body becomes INVALID_ARGUMENT with one log line instead of gRPC's
UNKNOWN and a traceback; an unexpected exception becomes INTERNAL, also in one line. A refusal for
load carries ``grpc-retry-pushback-ms``, which gRPC's own retry policy (the client's) honours.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf.message import DecodeError

from r3edge.api import SERVICE_NAME, pb2
from r3edge.core.errors import ErrorKind, InvalidInput, Overloaded, R3EdgeError, Unavailable
from r3edge.core.fileio import file_sha256
from r3edge.serve.access_log import REQUEST_ID, log_request, request_id
from r3edge.serve.config import ServeConfig
from r3edge.serve.engine import Engine

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
#: gRPC's retry push-back trailer (the client's retry policy waits this long before retrying).
PUSHBACK = "grpc-retry-pushback-ms"


def status_of(exc: R3EdgeError) -> tuple[grpc.StatusCode, str]:
    """The status code and the client-facing message of an error."""
    return STATUS_OF[exc.kind], exc.what + (f"; fix: {exc.fix}" if exc.fix else "")


@dataclass(frozen=True)
class Malformed:
    """What the lenient deserializer hands the handler when the body is not the expected message."""

    message: str
    size: int
    reason: str


def _lenient(cls):
    def parse(data: bytes):
        try:
            return cls.FromString(data)
        except (DecodeError, ValueError) as exc:
            return Malformed(cls.DESCRIPTOR.full_name, len(data), str(exc) or type(exc).__name__)
    return parse


def model_id(artifact_dir: str | Path, model_file: str | None) -> str:
    """``name@sha256-prefix`` of the served model file: names the artifact without a local path."""
    name = Path(artifact_dir).name
    if not model_file or not (Path(artifact_dir) / model_file).is_file():
        return name
    return f"{name}@{file_sha256(Path(artifact_dir) / model_file)[:16]}"


class RerankerService:
    """Rerank, ScorePairs and ModelInfo over one :class:`Engine` (set once the runtime has loaded)."""

    def __init__(self, cfg: ServeConfig, metrics):
        self.cfg = cfg
        self.metrics = metrics
        self.engine: Engine | None = None
        self.model_name = ""
        self.artifact_id = Path(cfg.artifact).name

    def set_engine(self, engine: Engine) -> None:
        info = engine.runtime.info()
        self.variant = str(info.get("variant", ""))
        self.artifact_id = model_id(self.cfg.artifact, (info.get("files") or {}).get("model"))
        self.model_name = f"{Path(self.cfg.artifact).name}:{self.variant}" if self.variant else Path(self.cfg.artifact).name
        self.engine = engine

    def handlers(self) -> grpc.GenericRpcHandler:
        """The service's method handlers, parsing bodies with the lenient deserializer."""
        methods = {"Rerank": (self._rerank, pb2.RerankRequest), "ScorePairs": (self._score_pairs, pb2.ScorePairsRequest),
                   "ModelInfo": (self._model_info, pb2.ModelInfoRequest)}
        return grpc.method_handlers_generic_handler(SERVICE_NAME, {
            name: grpc.unary_unary_rpc_method_handler(self._rpc(name, body), request_deserializer=_lenient(cls),
                                                      response_serializer=lambda m: m.SerializeToString())
            for name, (body, cls) in methods.items()})

    def _rpc(self, name: str, body):
        """One RPC: typed errors abort with their status (the only place RPCs abort), counted and logged once."""
        async def handle(request, context):
            t0 = time.perf_counter()
            rid = request_id(dict(context.invocation_metadata() or ()).get(REQUEST_ID))
            context.set_trailing_metadata(((REQUEST_ID, rid),))
            pairs = _pairs_in(request)
            try:
                if isinstance(request, Malformed):
                    raise InvalidInput(f"the request body ({request.size} bytes) is not a valid {request.message}: "
                                       f"{request.reason}", "serialize the request with r3edge/api/reranker.proto "
                                       "(or discover it by gRPC reflection)", field="body")
                response = await body(request, context)
            except asyncio.CancelledError:  # the client went away or its deadline passed: nobody to answer
                self._done(rid, name, "CANCELLED", pairs, t0)
                raise
            except R3EdgeError as exc:
                code, message = status_of(exc)
                trailers = [(REQUEST_ID, rid)]
                if isinstance(exc, Overloaded) and exc.retry_after_s is not None:
                    trailers.append((PUSHBACK, str(int(exc.retry_after_s * 1e3))))
                self._done(rid, name, code.name, pairs, t0, message)
                await context.abort(code, message, trailing_metadata=tuple(trailers))
            except Exception as exc:  # not an r3edge error: r3edge's own bug, reported in one line
                self._done(rid, name, "INTERNAL", pairs, t0, f"{type(exc).__name__}: {exc}")
                await context.abort(grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); request id {rid}")
            else:
                self._done(rid, name, "OK", pairs, t0)
                return response
        return handle

    def _done(self, rid: str, method: str, code: str, pairs: int, t0: float, detail: str = "") -> None:
        self.metrics.observe_request(method, code, pairs)
        log_request(rid, method, code, pairs, (time.perf_counter() - t0) * 1e3, detail)

    def _ready(self) -> Engine:
        if self.engine is None:
            raise Unavailable("model is still loading", "retry after health reports SERVING")
        return self.engine

    # -- request checks (what the engine cannot know: ids, top_k; Engine.check does the rest) ---
    @staticmethod
    def _check_top_k(req) -> None:
        if req.top_k < 0:
            raise InvalidInput(f"top_k is {req.top_k}: use 0 for all candidates or a positive number", field="top_k")

    @staticmethod
    def _check_ids(cands) -> None:
        """Every candidate has an id, and no two the same (run by the engine after admission)."""
        ids = [c.id for c in cands]
        if all(ids) and len(set(ids)) == len(ids):
            return
        seen: dict[str, int] = {}
        for i, cid in enumerate(ids):
            if not cid:
                raise InvalidInput(f"candidates[{i}].id is empty", "give every candidate a unique id",
                                   field=f"candidates[{i}].id")
            if cid in seen:
                raise InvalidInput(f"candidates[{i}].id {cid!r} duplicates candidates[{seen[cid]}].id",
                                   "give every candidate a unique id", field=f"candidates[{i}].id")
            seen[cid] = i

    @staticmethod
    def _deadline(context) -> float | None:
        # the clock first, then the time left: this deadline is never later than gRPC's own
        now = time.monotonic()
        remaining = context.time_remaining()
        return now + remaining if remaining is not None else None

    @staticmethod
    def _timing(s) -> pb2.Timing:
        return pb2.Timing(queue_ms=s.queue_ms, tokenize_ms=s.tokenize_ms, inference_ms=s.inference_ms, total_ms=s.total_ms)

    # -- the RPC bodies ------------------------------------------------------------------------
    async def _rerank(self, request, context):
        engine = self._ready()
        self._check_top_k(request)
        cands = request.candidates
        s = await engine.score(request.query, _CandidateTexts(cands), deadline=self._deadline(context),
                               docs_field="candidates", text_field=".text", validate=lambda: self._check_ids(cands))
        order = s.ranking(request.top_k)
        results = [pb2.Result(id=cands[i].id, index=i, score=float(s.scores[i]), label_probs=s.probs[i].tolist(),
                              truncated=bool(s.truncated[i])) for i in order]
        return pb2.RerankResponse(results=results, model=self.model_name, timing=self._timing(s),
                                  truncated_docs=s.truncated_docs, query_truncated=s.query_truncated)

    async def _score_pairs(self, request, context):
        engine = self._ready()
        s = await engine.score(request.query, request.documents, deadline=self._deadline(context))
        scores = [pb2.PairScore(score=float(s.scores[i]), label_probs=s.probs[i].tolist(), truncated=bool(s.truncated[i]))
                  for i in range(len(s.scores))]
        return pb2.ScorePairsResponse(scores=scores, model=self.model_name, timing=self._timing(s),
                                      truncated_docs=s.truncated_docs, query_truncated=s.query_truncated)

    async def _model_info(self, request, context):
        engine = self._ready()
        runtime = engine.runtime
        spec = runtime.scorer.spec
        info = {k: v for k, v in runtime.info().items() if k != "artifact_dir"}  # no local paths leave the server
        cfg = self.cfg
        return pb2.ModelInfoResponse(
            artifact=self.artifact_id, variant=self.variant, runtime=runtime.name,
            label_tokens=list(spec.label_tokens), label_values=list(spec.label_values),
            max_query_tokens=spec.max_query_tokens, max_doc_tokens=spec.max_doc_tokens,
            max_total_tokens=spec.max_total_tokens, scorer_fingerprint=spec.fingerprint(),
            limits=pb2.Limits(max_candidates=cfg.max_candidates, max_batch_tokens=engine.max_batch_tokens,
                              max_batch_size=engine.max_batch_size, max_concurrent_requests=cfg.max_concurrent_requests,
                              max_queue_delay_ms=cfg.max_queue_delay_s * 1e3, max_batch_wait_ms=cfg.max_batch_wait_s * 1e3,
                              overflow=cfg.overflow, workers=engine.workers),
            torch_loaded="torch" in sys.modules,
            runtime_info_json=json.dumps(info, default=str),
            device=str(runtime.device), provider=str((info.get("providers") or [""])[0]),
            variant_reason=str(runtime.variant_reason),
        )


class _CandidateTexts(Sequence[str]):
    """A Rerank request's candidate texts, read only when the engine tokenises them (see Engine.score)."""

    def __init__(self, candidates):
        self._candidates = candidates

    def __len__(self) -> int:
        return len(self._candidates)

    def __getitem__(self, i):
        return self._candidates[i].text

    def __iter__(self):
        return (c.text for c in self._candidates)


def _pairs_in(request) -> int:
    if isinstance(request, pb2.RerankRequest):
        return len(request.candidates)
    if isinstance(request, pb2.ScorePairsRequest):
        return len(request.documents)
    return 0
