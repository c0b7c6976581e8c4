"""From a :class:`ServeConfig` to a warmed-up :class:`Engine`: the one place the server and the
in-process :class:`r3edge.serve.reranker.Reranker` build theirs, so both score with the same runtime,
device, variant choice, batch budget and workers."""

from __future__ import annotations

from r3edge.core.artifact import Runtime
from r3edge.core.hardware import usable_cores
from r3edge.core.runtime_loader import open_runtime
from r3edge.serve.config import ServeConfig
from r3edge.serve.engine import Engine
from r3edge.serve.metrics import ServeMetrics

#: Batcher threads when ``--workers`` is unset. On 2 CPU cores two single-threaded workers served 16
#: clients' top-10s at 1.56-1.72x the pairs/s of the per-request server and a lone top-100 in 0.70-0.72x
#: its time, where one two-threaded worker gave 1.25-1.35x: small micro-batches split badly over two
#: threads (benchmarks/results/serving-cpu-2core, run3 and run4).
DEFAULT_WORKERS = 2


def workers_for(cfg: ServeConfig) -> int:
    """The configured workers, or :data:`DEFAULT_WORKERS` (never more than the CPUs this process may use)."""
    return cfg.workers or max(1, min(DEFAULT_WORKERS, usable_cores()))


def load_runtime_for(cfg: ServeConfig) -> Runtime:
    """The artifact's runtime for the configured variant and device, ONNX Runtime or OpenVINO as its
    manifest says (the server never runs torch); its threads default to the machine's CPUs shared
    among the engine's workers."""
    return open_runtime(cfg.artifact, variant=cfg.variant, threads=cfg.threads or max(1, usable_cores() // workers_for(cfg)),
                        device=cfg.device, prefix_reuse=cfg.prefix_reuse)


def engine_for(cfg: ServeConfig, runtime: Runtime, metrics: ServeMetrics) -> Engine:
    """The engine of ``cfg`` around ``runtime`` (not started: :meth:`Engine.start` warms it up)."""
    return Engine(runtime, metrics, max_batch_tokens=cfg.max_batch_tokens, max_batch_size=cfg.max_batch_size,
                  max_batch_wait_s=cfg.max_batch_wait_s, max_queue_delay_s=cfg.max_queue_delay_s,
                  max_concurrent_requests=cfg.max_concurrent_requests, max_candidates=cfg.max_candidates,
                  overflow=cfg.overflow, prefix_reuse=cfg.prefix_reuse, workers=workers_for(cfg))
