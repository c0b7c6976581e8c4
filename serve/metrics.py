"""The server's Prometheus metrics: one registry per server, shared by the engine and every front door.

Names follow Prometheus conventions (``_total`` counters, ``_seconds`` histograms) and are listed
in the README's serving section. A registry per server (not prometheus-client's global one) lets
several servers live in one process (tests, benchmarks) without mixing their counts.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

#: Request phases timed by ``r3edge_request_duration_seconds``: waiting in the engine's queue before
#: its first micro-batch, text to ids, the runtime calls that held its pairs, arrival to answer.
PHASES = ("queue", "tokenize", "infer", "total")

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BATCH_PAIRS = (1, 2, 4, 8, 16, 32, 64, 128)
_BATCH_TOKENS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


class ServeMetrics:
    """Every metric the server exports, on its own registry."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("r3edge_requests", "Requests answered, by method and status code",
                                ("method", "code"), registry=r)
        self.pairs = Counter("r3edge_request_pairs", "Query-document pairs in answered requests, by method and status code",
                             ("method", "code"), registry=r)
        self.queue_requests = Gauge("r3edge_queue_requests", "Admitted requests not answered yet", registry=r)
        self.queue_pairs = Gauge("r3edge_queue_pairs", "Pairs waiting in the engine's queue", registry=r)
        self.queue_tokens = Gauge("r3edge_queue_tokens", "Tokens of the pairs waiting in the engine's queue", registry=r)
        self.token_rate = Gauge("r3edge_token_rate", "Measured scoring rate (tokens per second) that admission plans with",
                                registry=r)
        self.batch_pairs = Histogram("r3edge_batch_pairs", "Pairs per micro-batch", buckets=_BATCH_PAIRS, registry=r)
        self.batch_padded_tokens = Histogram("r3edge_batch_padded_tokens", "Padded tokens (pairs x longest) per micro-batch",
                                             buckets=_BATCH_TOKENS, registry=r)
        self.batch_requests = Histogram("r3edge_batch_requests", "Distinct requests sharing one micro-batch",
                                        buckets=_BATCH_PAIRS, registry=r)
        self.duration = Histogram("r3edge_request_duration_seconds", "Request latency by phase (queue, tokenize, infer, total)",
                                  ("phase",), buckets=_LATENCY_BUCKETS, registry=r)
        self.shed = Counter("r3edge_shed_requests", "Requests refused on arrival (RESOURCE_EXHAUSTED / 429), by reason",
                            ("reason",), registry=r)
        self.dropped_requests = Counter("r3edge_dropped_requests", "Admitted requests dropped before all their pairs ran, "
                                        "by reason (cancelled, deadline)", ("reason",), registry=r)
        self.dropped_pairs = Counter("r3edge_dropped_pairs", "Pairs removed from the queue without running, by reason",
                                     ("reason",), registry=r)
        self.truncated = Counter("r3edge_truncated", "Inputs cut to the scoring contract's budget, by part (query, document)",
                                 ("part",), registry=r)
        self.model = Info("r3edge_model", "What is served: variant, device, the execution provider leading its session "
                          "and why the variant runs", registry=r)
        self._children: dict[tuple, object] = {}

    def describe_model(self, runtime) -> None:
        """``r3edge_model_info{variant, device, provider, variant_reason}`` for the runtime being served."""
        info = runtime.info()
        self.model.info({"variant": str(info.get("variant", "")), "device": str(getattr(runtime, "device", "")),
                         "provider": str((info.get("providers") or [""])[0]),
                         "variant_reason": str(getattr(runtime, "variant_reason", ""))})

    def _child(self, metric, *labels):
        # each labelled child is looked up once: ``labels()`` takes a lock and validates its
        # arguments, which every refusal of an overload burst would pay again
        child = self._children.get((metric, labels))
        if child is None:
            child = self._children[metric, labels] = metric.labels(*labels)
        return child

    def observe_request(self, method: str, code: str, pairs: int) -> None:
        self._child(self.requests, method, code).inc()
        self._child(self.pairs, method, code).inc(pairs)

    def observe_shed(self, reason: str) -> None:
        self._child(self.shed, reason).inc()

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition format and its content type (what ``/metrics`` answers)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
