"""The HTTP front door: Cohere-compatible ``/v1/rerank`` and ``/v2/rerank``, ``/health`` and ``/metrics``.

Translation only, on the same :class:`~r3edge.serve.engine.Engine` as gRPC (nothing is scored here).
Built on Starlette and run by uvicorn inside the server's own event loop
(:meth:`r3edge.serve.server.RerankServer._start_http`), so HTTP and gRPC requests share one pair queue.

Requests (``POST``, JSON; also the shape of vLLM's ``/v1/rerank``)::

    {"model"?, "query": str, "documents": [str | {"text": str}, ...], "top_n"?, "return_documents"?,
     "max_tokens_per_doc"? (v2)}

``/v1`` takes documents as strings or ``{"text": ...}`` objects; ``/v2`` takes strings, as Cohere's
API v2 does. ``top_n`` omitted, null or 0 returns every document (0 as in vLLM). Fields this server
does not use (``rank_fields``, ``max_chunks_per_doc``, ``priority``, ``relevant_spans``, anything
unknown) are ignored and named in ``meta.warnings``, so a client built for Cohere works unchanged.

Responses::

    {"id", "model", "results": [{"index", "relevance_score", "truncated", "document"?: {"text"}}],
     "meta": {"api_version": {"version": "1"|"2"}, "billed_units": {"search_units": 1},
              "truncated_documents": [index, ...], "query_truncated": bool, "warnings"?: [str, ...]}}

Results are sorted by relevance, highest first (ties keep the input order); ``document`` is there
when the request says ``return_documents: true``. ``model`` and ``truncated`` are extra fields that
Cohere's SDK keeps (its response models allow extra fields).

Decisions:

* **relevance_score.** The student's score is the expected label value, Σ p·label_value, in the
  range of the scorer's label values (0..2). Cohere's ``relevance_score`` is in [0, 1], so it is
  rescaled: ``(score - min(label_values)) / (max(label_values) - min(label_values))``. The rescale is
  monotone: the order is the gRPC ``Rerank`` order and the ranking is the artifact's exactly.
* **model.** One server serves one model: a request naming another model is still scored by the
  served one (re-rank stages send a default model name such as ``rerank-english-v3.0``; refusing it
  would break them), with a warning in ``meta.warnings``; the response's ``model`` says what scored.
* **Truncation.** Over-long queries and documents follow the server's ``--overflow`` policy (the
  scoring contract's budget: ``max_query_tokens``, ``max_doc_tokens``, ``max_total_tokens`` of
  ``scorer.json``): cut (``truncated`` per result, ``meta.truncated_documents``,
  ``meta.query_truncated`` and a warning say which) or refused with 400. ``max_tokens_per_doc`` is
  accepted but does not change that budget (the student was trained with it); a warning says so.
* **Auth.** With tokens configured, every endpoint but ``/health`` needs ``Authorization: Bearer``;
  ``/metrics`` included, because this port is the one exposed to clients (Prometheus sends a bearer
  token with ``authorization`` in its scrape config). ``--metrics-port`` stays the open, internal
  metrics endpoint.
* **Errors.** ``{"message": "<what>; fix: <fix>", "field", "code"}`` with the status of
  :data:`HTTP_STATUS_OF` by the error's kind; bad JSON, wrong types and missing fields are 400 (as
  Cohere answers), naming the field. A body over ``--max-message-mb`` is 413 before it is parsed;
  no or a wrong token is 401 (code ``unauthenticated``). Overload is 429 with ``Retry-After`` (whole
  seconds, rounded up) and ``retry-after-ms`` (which Cohere's SDK honours). While the model loads
  the port is already up: a rerank is 503 (code ``unavailable``) and ``/health`` 503 NOT_SERVING.
  Text that is not Unicode (a JSON ``\\u`` escape of an unpaired surrogate) is 400 naming its field.
  Unknown paths and methods answer 404/405 in the same JSON shape.
* **Cancellation.** A client that disconnects before its answer cancels its request: its pairs
  leave the engine's queue (``r3edge_dropped_requests_total{reason="cancelled"}``), status 499.

Every answered rerank request is counted (``r3edge_requests_total{method="http_v1_rerank"|
"http_v2_rerank", code}`` with the HTTP status as the code, 401 and 413 included) and logged once
with its ``x-request-id``, which the response echoes.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from r3edge.core.errors import Cancelled, ErrorKind, InvalidInput, Overloaded, R3EdgeError, Unavailable
from r3edge.serve.access_log import REQUEST_ID, log_request, request_id
from r3edge.serve.config import ServeConfig
from r3edge.serve.engine import Engine, Scored
from r3edge.serve.metrics import ServeMetrics
from r3edge.serve.security import token_ok

#: The one place an error becomes an HTTP status: by its kind, never by its message. FORMAT and
#: MISSING_DEPENDENCY can only come from the server's own artifact or installation, hence 500.
HTTP_STATUS_OF: dict[ErrorKind, int] = {
    ErrorKind.INVALID_INPUT: 400,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.FORMAT: 500,
    ErrorKind.MISSING_DEPENDENCY: 500,
    ErrorKind.OVERLOADED: 429,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.CANCELLED: 499,  # client closed the request (nginx's code): nobody reads the answer
    ErrorKind.DEADLINE: 504,
    ErrorKind.CONFLICT: 409,
    ErrorKind.QUALITY: 500,
    ErrorKind.INTERNAL: 500,
}
#: Metric and log names of the two rerank endpoints.
METHODS = {"1": "http_v1_rerank", "2": "http_v2_rerank"}


class _Service(Protocol):
    model_name: str


class Server(Protocol):
    """What the HTTP door needs of :class:`r3edge.serve.server.RerankServer` (not imported: a cycle)."""

    engine: Engine | None
    serving: bool
    metrics: ServeMetrics
    tokens: tuple[str, ...]
    cfg: ServeConfig
    service: _Service


# -- request bodies --------------------------------------------------------------------------------
class _Rerank(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    query: str
    documents: list[str]
    top_n: int | None = Field(None, ge=0)
    return_documents: bool = False


class V1RerankRequest(_Rerank):
    """Cohere's API v1 (and vLLM's /v1/rerank): documents as strings or ``{"text": ...}`` objects."""

    @field_validator("documents", mode="before")
    @classmethod
    def _texts(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [d["text"] if isinstance(d, dict) and isinstance(d.get("text"), str) else d for d in value]
        return value


class V2RerankRequest(_Rerank):
    """Cohere's API v2: documents as strings; ``max_tokens_per_doc`` accepted (see the module docstring)."""

    max_tokens_per_doc: int | None = Field(None, ge=1)


#: How to repair each request field (the ``fix`` of a validation error).
FIXES = {
    "body": 'send a JSON object, e.g. {"query": "...", "documents": ["...", "..."]}',
    "query": "send the query as a non-empty JSON string",
    "documents": 'send documents as a JSON array of strings (or of {"text": "..."} objects on /v1/rerank)',
    "top_n": "send a whole number >= 1, or leave top_n out (or 0) for every document",
    "return_documents": "send true or false",
    "max_tokens_per_doc": "send a whole number >= 1, or leave it out",
    "model": "send the model name as a string, or leave it out",
}


def _field_name(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _invalid(exc: ValidationError) -> InvalidInput:
    """The first error of a pydantic validation as an :class:`InvalidInput` naming its field."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    field = _field_name(first["loc"])
    more = f" (and {len(errors) - 1} more error{'s' * (len(errors) > 2)})" if len(errors) > 1 else ""
    what = f"{field}: missing" if first["type"] == "missing" else f"{field}: {first['msg']}"
    if first["type"] != "missing" and "input" in first and not isinstance(first["input"], dict | list):
        what += f" (got {json.dumps(first['input'])[:60]})"
    return InvalidInput(what + more, FIXES.get(str(first["loc"][0]) if first["loc"] else "body", FIXES["body"]),
                        field=field)


# -- the application -------------------------------------------------------------------------------
class _Answer(Exception):
    """A response decided before the request reached the engine (401, 413)."""

    def __init__(self, status: int, body: dict, headers: dict | None = None):
        self.status, self.body, self.headers = status, body, headers or {}


def error_body(exc: R3EdgeError) -> dict:
    return {"message": exc.what + (f"; fix: {exc.fix}" if exc.fix else ""), "field": exc.field, "code": str(exc.kind)}


def relevance_01(scores: np.ndarray, label_values) -> np.ndarray:
    """Scores in the label values' range rescaled to Cohere's [0, 1] (monotone)."""
    lo, hi = float(min(label_values)), float(max(label_values))
    return np.clip((np.asarray(scores, dtype=np.float64) - lo) / max(hi - lo, 1e-12), 0.0, 1.0)


def build_app(server: Server) -> Starlette:
    """The Starlette app of ``server``'s HTTP door (read at request time: the engine loads later)."""
    door = _HttpDoor(server)

    async def not_found(request: Request, exc: HTTPException) -> Response:
        return JSONResponse({"message": f"{request.method} {request.url.path}: {exc.detail}; fix: use POST /v1/rerank, "
                             "POST /v2/rerank, GET /health or GET /metrics", "field": None, "code": "not_found"},
                            status_code=exc.status_code, headers=exc.headers)

    return Starlette(routes=[
        Route("/v1/rerank", door.v1_rerank, methods=["POST"]),
        Route("/v2/rerank", door.v2_rerank, methods=["POST"]),
        Route("/health", door.health, methods=["GET"]),
        Route("/metrics", door.metrics, methods=["GET"]),
    ], exception_handlers={HTTPException: not_found})


class _HttpDoor:
    def __init__(self, server: Server):
        self.server = server

    # -- open and admin endpoints --------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        ok = self.server.serving and self.server.engine is not None
        return JSONResponse({"status": "SERVING" if ok else "NOT_SERVING"}, status_code=200 if ok else 503,
                            headers={REQUEST_ID: request_id(request.headers.get(REQUEST_ID))})

    async def metrics(self, request: Request) -> Response:
        rid = request_id(request.headers.get(REQUEST_ID))
        try:
            self._authorize(request)
        except _Answer as ans:
            return JSONResponse(ans.body, status_code=ans.status, headers={**ans.headers, REQUEST_ID: rid})
        body, content_type = self.server.metrics.exposition()
        return Response(body, headers={"content-type": content_type, REQUEST_ID: rid})

    # -- rerank ----------------------------------------------------------------------------------
    async def v1_rerank(self, request: Request) -> Response:
        return await self._rerank(request, "1", V1RerankRequest)

    async def v2_rerank(self, request: Request) -> Response:
        return await self._rerank(request, "2", V2RerankRequest)

    async def _rerank(self, request: Request, version: str, model: type[_Rerank]) -> Response:
        t0 = time.perf_counter()
        rid = request_id(request.headers.get(REQUEST_ID))
        method = METHODS[version]
        pairs, detail, headers, response = 0, "", {REQUEST_ID: rid}, None
        try:
            self._authorize(request)
            payload = await self._json(request)
            pairs = len(payload["documents"]) if isinstance(payload.get("documents"), list) else 0
            try:
                req = model.model_validate(payload)
            except ValidationError as exc:
                raise _invalid(exc) from None
            body = await self._score(request, req, version, payload)
            response = JSONResponse(body, headers=headers)  # rendered here: a failure (NaN) is ours, a 500
            status = 200
        except _Answer as ans:
            status, body, detail = ans.status, ans.body, ans.body["message"]
            headers.update(ans.headers)
        except R3EdgeError as exc:
            status, body, detail = HTTP_STATUS_OF[exc.kind], error_body(exc), error_body(exc)["message"]
            if isinstance(exc, Overloaded):
                wait = exc.retry_after_s if exc.retry_after_s is not None else 1.0
                headers |= {"retry-after": str(max(1, math.ceil(wait))), "retry-after-ms": str(max(1, math.ceil(wait * 1e3)))}
        except Exception as exc:  # r3edge's own bug: one line, never a traceback to the client
            status, detail = 500, f"{type(exc).__name__}: {exc}"
            body = {"message": f"internal error ({type(exc).__name__}); request id {rid}", "field": None,
                    "code": str(ErrorKind.INTERNAL)}
        self.server.metrics.observe_request(method, str(status), pairs)
        log_request(rid, method, str(status), pairs, (time.perf_counter() - t0) * 1e3, detail)
        return response if response is not None else JSONResponse(body, status_code=status, headers=headers)

    def _authorize(self, request: Request) -> None:
        tokens = self.server.tokens
        if tokens and not token_ok(request.headers.get("authorization"), tokens):
            missing = "missing" if not request.headers.get("authorization") else "invalid"
            raise _Answer(401, {"message": f"authorization: {missing} bearer token; fix: send the header "
                                "'Authorization: Bearer <token>'", "field": "authorization", "code": "unauthenticated"},
                          {"www-authenticate": "Bearer"})

    async def _json(self, request: Request) -> dict:
        """The body as a JSON object, refused with 413 past ``max_message_mb`` before it is parsed."""
        limit = self.server.cfg.max_message_mb * 1024 * 1024
        too_big = _Answer(413, {"message": f"the request body is over max_message_mb={self.server.cfg.max_message_mb} "
                                "MiB; fix: send fewer or shorter documents per request, or start the server with a "
                                "larger --max-message-mb", "field": "body", "code": str(ErrorKind.INVALID_INPUT)})
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_big
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_big
            chunks.append(chunk)
        try:
            payload = json.loads(b"".join(chunks))
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"the request body is not JSON: {exc}", FIXES["body"], field="body") from None
        except RecursionError:
            raise InvalidInput("the request body is JSON nested too deeply", FIXES["body"], field="body") from None
        if not isinstance(payload, dict):
            raise InvalidInput(f"the request body is a JSON {type(payload).__name__}, not an object", FIXES["body"],
                               field="body")
        return payload

    @staticmethod
    def _check(req: _Rerank) -> None:
        """What only JSON can carry: text that is not Unicode (Engine.check does the query and the count)."""
        for field, text in (("query", req.query), *((f"documents[{i}]", d) for i, d in enumerate(req.documents))):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:  # JSON's \u escapes can spell an unpaired UTF-16 surrogate
                raise InvalidInput(f"{field} is not valid Unicode: {exc.reason} at character {exc.start}",
                                   "send UTF-8 text; a \\u escape of a surrogate must be followed by its pair "
                                   "(e.g. \\ud83d\\ude00)", field=field) from None

    async def _score(self, request: Request, req: _Rerank, version: str, payload: dict) -> dict:
        engine = self.server.engine
        if engine is None:
            raise Unavailable("model is still loading", "retry after GET /health answers SERVING")
        self._check(req)
        s = await self._until_disconnect(request, engine.score(req.query, req.documents))
        spec = engine.scorer.spec
        rel = relevance_01(s.scores, spec.label_values)
        results = []
        for i in s.ranking(req.top_n):
            r: dict[str, Any] = {"index": i, "relevance_score": float(rel[i]), "truncated": bool(s.truncated[i])}
            if req.return_documents:
                r["document"] = {"text": req.documents[i]}
            results.append(r)
        served = self.server.service.model_name
        meta: dict[str, Any] = {"api_version": {"version": version}, "billed_units": {"search_units": 1},
                                "truncated_documents": [int(i) for i in np.flatnonzero(s.truncated)],
                                "query_truncated": s.query_truncated}
        warnings = self._warnings(req, s, payload, served, spec)
        if warnings:
            meta["warnings"] = warnings
        return {"id": str(uuid.uuid4()), "model": served, "results": results, "meta": meta}

    @staticmethod
    def _warnings(req: _Rerank, s: Scored, payload: dict, served: str, spec) -> list[str]:
        out = []
        if req.model and req.model != served:
            out.append(f"model {req.model!r} is not served here: scored by {served!r} (this server serves one model)")
        if s.query_truncated:
            out.append(f"the query was cut to max_query_tokens={spec.max_query_tokens}")
        if s.truncated_docs:
            out.append(f"{s.truncated_docs} document(s) were cut to the scoring contract's budget "
                       f"(max_doc_tokens={spec.max_doc_tokens}, max_total_tokens={spec.max_total_tokens}): "
                       "see meta.truncated_documents")
        if getattr(req, "max_tokens_per_doc", None) is not None:
            out.append(f"max_tokens_per_doc={req.max_tokens_per_doc} is not applied: documents are cut to the "
                       f"scoring contract's max_doc_tokens={spec.max_doc_tokens} (at most max_total_tokens="
                       f"{spec.max_total_tokens} with the query)")
        ignored = sorted(k for k in payload if k not in type(req).model_fields)
        if ignored:
            out.append(f"ignored request fields: {', '.join(ignored)} (this server does not use them)")
        return out

    @staticmethod
    async def _until_disconnect(request: Request, scoring) -> Scored:
        """Await ``scoring``; cancel it (its pairs leave the queue) when the client disconnects first."""
        task = asyncio.ensure_future(scoring)

        async def disconnected() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        watch = asyncio.ensure_future(disconnected())
        try:
            await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            if not task.done():  # the client went away (or the server is stopping): drop its pairs
                task.cancel()
        if task.cancelled() or not task.done():
            await asyncio.wait({task})
            raise Cancelled("the client disconnected before the answer", "nothing to fix: its pairs were dropped")
        return task.result()
