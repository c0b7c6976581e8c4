"""A small synchronous client for the reranking API (what `r3edge rerank` and users call)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from r3edge.api import SERVICE_NAME, pb2, pb2_grpc
from r3edge.core.errors import InvalidInput


@dataclass(frozen=True)
class Result:
    id: str
    index: int
    score: float
    label_probs: tuple[float, ...]


class RerankerClient:
    """``RerankerClient("127.0.0.1:50051").rerank(query, [(id, text), ...], top_k=10)``."""

    def __init__(self, target: str, timeout: float | None = 60.0, max_message_mb: int = 32):
        mib = max_message_mb * 1024 * 1024
        self.target = target
        self.timeout = timeout
        self.channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", mib),
                                                             ("grpc.max_send_message_length", mib)])
        self.stub = pb2_grpc.RerankerStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def rerank_raw(self, query: str, candidates: Sequence[tuple[str, str]], top_k: int = 10,
                   timeout: float | None = None) -> pb2.RerankResponse:
        req = pb2.RerankRequest(query=query, top_k=top_k,
                                candidates=[pb2.Candidate(id=str(i), text=t) for i, t in candidates])
        return self.stub.Rerank(req, timeout=timeout or self.timeout)

    def rerank(self, query: str, candidates: Sequence[tuple[str, str]], top_k: int = 10,
               timeout: float | None = None) -> list[Result]:
        resp = self.rerank_raw(query, candidates, top_k, timeout)
        return [Result(r.id, r.index, r.score, tuple(r.label_probs)) for r in resp.results]

    def score_pairs(self, query: str, documents: Sequence[str], timeout: float | None = None) -> pb2.ScorePairsResponse:
        return self.stub.ScorePairs(pb2.ScorePairsRequest(query=query, documents=list(documents)),
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
        raise InvalidInput(f"no SERVING reranker at {self.target} after {timeout:.0f} s",
                          "start one with `r3edge serve ARTIFACT --port ...` and check the address")

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> RerankerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
