"""Clients for the reranking API: :class:`RerankerClient` (blocking) and :class:`AsyncRerankerClient`
(asyncio), with TLS, mutual TLS, a bearer token and retries.

Retries are gRPC's own (a channel service config): UNAVAILABLE and RESOURCE_EXHAUSTED are retried
with exponential back-off, and a server refusal that carries ``grpc-retry-pushback-ms`` is retried
after exactly that delay (or not at all when the push-back is negative), which is how the r3edge
server tells a client when its queue will have room. Only calls that never reached the model are
retried, so a retry never scores a request twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from r3edge.api import SERVICE_NAME, pb2, pb2_grpc
from r3edge.core.errors import InvalidInput, expect_pair, expect_text
from r3edge.core.net import is_loopback

#: Statuses a call is retried on: the server was not ready or refused it for load before scoring.
RETRYABLE = ("UNAVAILABLE", "RESOURCE_EXHAUSTED")


@dataclass(frozen=True)
class Result:
    id: str
    index: int
    score: float
    label_probs: tuple[float, ...]
    truncated: bool = False


@dataclass(frozen=True)
class Retry:
    """gRPC retry policy of the channel (``max_attempts`` 1 turns retries off)."""

    max_attempts: int = 4
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    multiplier: float = 2.0

    def service_config(self) -> str:
        if self.max_attempts <= 1:
            return json.dumps({"methodConfig": [{"name": [{"service": SERVICE_NAME}]}]})
        return json.dumps({"methodConfig": [{
            "name": [{"service": SERVICE_NAME}],
            "retryPolicy": {"maxAttempts": min(self.max_attempts, 5),  # gRPC caps attempts at 5
                            "initialBackoff": f"{self.initial_backoff_s}s", "maxBackoff": f"{self.max_backoff_s}s",
                            "backoffMultiplier": self.multiplier, "retryableStatusCodes": list(RETRYABLE)},
        }]})


def _read(path: str | Path | None) -> bytes | None:
    return None if path is None else Path(path).read_bytes()


def channel_args(target: str, *, max_message_mb: int = 32, retry: Retry | None = None, tls_ca: str | Path | None = None,
                 tls_cert: str | Path | None = None, tls_key: str | Path | None = None, tls: bool = False,
                 token: str | None = None):
    """``(target, credentials or None, options)`` for ``grpc[.aio].secure_channel`` / ``insecure_channel``.

    TLS is on when any ``tls_*`` file is given or ``tls`` is set (system roots); ``tls_cert``/``tls_key``
    present a client certificate (mutual TLS); ``token`` is sent as ``authorization: Bearer`` on every
    call, which this client does only over TLS or to a loopback address (a token in clear is no secret).
    """
    mib = max_message_mb * 1024 * 1024
    options = [("grpc.max_receive_message_length", mib), ("grpc.max_send_message_length", mib),
               ("grpc.enable_retries", 1), ("grpc.service_config", (retry or Retry()).service_config())]
    creds = None
    if tls or tls_ca or tls_cert or tls_key:
        if bool(tls_cert) != bool(tls_key):
            raise InvalidInput("a client certificate needs both tls_cert and tls_key", "pass both, or neither",
                               field="tls_cert" if not tls_cert else "tls_key")
        creds = grpc.ssl_channel_credentials(_read(tls_ca), _read(tls_key), _read(tls_cert))
    if token:
        call = grpc.access_token_call_credentials(token)
        if creds is None and not _loopback(target):
            raise InvalidInput(f"a bearer token to {target} over plain text would cross the network unencrypted",
                               "connect with TLS (tls_ca=..., or tls=True for the system roots)", field="token")
        if creds is None:
            creds = grpc.composite_channel_credentials(grpc.local_channel_credentials(), call)
        else:
            creds = grpc.composite_channel_credentials(creds, call)
    return target, creds, options


def _loopback(target: str) -> bool:
    """Whether a gRPC target (``host:port``, ``ipv4:``/``ipv6:``/``dns:`` schemes allowed) is on this machine."""
    host = target.rsplit(":", 1)[0] if ":" in target else target
    return is_loopback(host.removeprefix("ipv4:").removeprefix("ipv6:").removeprefix("dns:").lstrip("/"))


def _rerank_request(query: str, candidates: Sequence[tuple[str, str]], top_k: int) -> pb2.RerankRequest:
    """The request, its texts checked here: protobuf would send a ``None`` text as an empty one."""
    expect_text(query, "query", "pass the user's query text as a str")
    items = []
    for k, c in enumerate(candidates):
        doc_id, text = expect_pair(c, f"candidates[{k}]", "(id, text)")
        items.append(pb2.Candidate(id=str(doc_id), text=expect_text(text, f"candidates[{k}].text",
                                                                   "pass each candidate's text as a str")))
    return pb2.RerankRequest(query=query, top_k=top_k, candidates=items)


def _score_pairs_request(query: str, documents: Sequence[str]) -> pb2.ScorePairsRequest:
    """The request, its texts checked here (see :func:`_rerank_request`)."""
    expect_text(query, "query", "pass the user's query text as a str")
    documents = list(documents)
    for k, d in enumerate(documents):
        expect_text(d, f"documents[{k}]", "pass each document's text as a str")
    return pb2.ScorePairsRequest(query=query, documents=documents)


def _results(resp: pb2.RerankResponse) -> list[Result]:
    return [Result(r.id, r.index, r.score, tuple(r.label_probs), r.truncated) for r in resp.results]


class RerankerClient:
    """``RerankerClient("127.0.0.1:50051").rerank(query, [(id, text), ...], top_k=10)``.

    Keyword arguments beyond ``timeout`` are :func:`channel_args`' (TLS files, ``token``, ``retry``).
    """

    def __init__(self, target: str, timeout: float | None = 60.0, max_message_mb: int = 32, **channel):
        self.target = target
        self.timeout = timeout
        target, creds, options = channel_args(target, max_message_mb=max_message_mb, **channel)
        self.channel = (grpc.secure_channel(target, creds, options=options) if creds
                        else grpc.insecure_channel(target, options=options))
        self.stub = pb2_grpc.RerankerStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def rerank_raw(self, query: str, candidates: Sequence[tuple[str, str]], top_k: int = 10,
                   timeout: float | None = None) -> pb2.RerankResponse:
        return self.stub.Rerank(_rerank_request(query, candidates, top_k), timeout=timeout or self.timeout)

    def rerank(self, query: str, candidates: Sequence[tuple[str, str]], top_k: int = 10,
               timeout: float | None = None) -> list[Result]:
        return _results(self.rerank_raw(query, candidates, top_k, timeout))

    def score_pairs(self, query: str, documents: Sequence[str], timeout: float | None = None) -> pb2.ScorePairsResponse:
        return self.stub.ScorePairs(_score_pairs_request(query, documents),
                                    timeout=timeout or self.timeout)

    def model_info(self, timeout: float | None = None) -> pb2.ModelInfoResponse:
        return self.stub.ModelInfo(pb2.ModelInfoRequest(), timeout=timeout or self.timeout)

    def is_serving(self, timeout: float = 2.0) -> bool:
        try:
            resp = self.health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=timeout)
        except grpc.RpcError:
            return False
        return resp.status == health_pb2.HealthCheckResponse.SERVING

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until the health service says SERVING (the model is loaded) or raise."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.is_serving(timeout=min(2.0, max(0.1, end - time.monotonic()))):
                return
            time.sleep(0.2)
        raise _not_ready(self.target, timeout)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> RerankerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncRerankerClient:
    """The asyncio client (grpc.aio): ``async with AsyncRerankerClient(target) as c: await c.rerank(...)``.

    Same arguments and retries as :class:`RerankerClient`; create it inside the running event loop.
    """

    def __init__(self, target: str, timeout: float | None = 60.0, max_message_mb: int = 32, **channel):
        self.target = target
        self.timeout = timeout
        target, creds, options = channel_args(target, max_message_mb=max_message_mb, **channel)
        self.channel = (grpc.aio.secure_channel(target, creds, options=options) if creds
                        else grpc.aio.insecure_channel(target, options=options))
        self.stub = pb2_grpc.RerankerStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    async def rerank_raw(self, query: str, candidates: Sequence[tuple[str, str]], top_k: int = 10,
                         timeout: float | None = None) -> pb2.RerankResponse:
        return await self.stub.Rerank(_rerank_request(query, candidates, top_k), timeout=timeout or self.timeout)

    async def rerank(self, query: str, candidates: Sequence[tuple[str, str]], top_k: int = 10,
                     timeout: float | None = None) -> list[Result]:
        return _results(await self.rerank_raw(query, candidates, top_k, timeout))

    async def score_pairs(self, query: str, documents: Sequence[str], timeout: float | None = None) -> pb2.ScorePairsResponse:
        return await self.stub.ScorePairs(_score_pairs_request(query, documents),
                                          timeout=timeout or self.timeout)

    async def model_info(self, timeout: float | None = None) -> pb2.ModelInfoResponse:
        return await self.stub.ModelInfo(pb2.ModelInfoRequest(), timeout=timeout or self.timeout)

    async def is_serving(self, timeout: float = 2.0) -> bool:
        try:
            resp = await self.health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=timeout)
        except grpc.RpcError:
            return False
        return resp.status == health_pb2.HealthCheckResponse.SERVING

    async def wait_ready(self, timeout: float = 120.0) -> None:
        import asyncio

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if await self.is_serving(timeout=min(2.0, max(0.1, end - time.monotonic()))):
                return
            await asyncio.sleep(0.2)
        raise _not_ready(self.target, timeout)

    async def close(self) -> None:
        await self.channel.close()

    async def __aenter__(self) -> AsyncRerankerClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def _not_ready(target: str, timeout: float) -> InvalidInput:
    return InvalidInput(f"no SERVING reranker at {target} after {timeout:.0f} s",
                        "start one with `r3edge serve ARTIFACT --port ...` and check the address")
