"""Runtimes that execute the scoring graph. Torch-free except ``torch_runtime`` (imported lazily)."""

from __future__ import annotations

from pathlib import Path

from r3edge.errors import R3EdgeError
from serve.runtimes.base import Runtime

BACKENDS = ("onnxruntime", "torch")


def load_runtime(
    artifact_dir: str | Path,
    variant: str | None = None,
    threads: int | None = None,
    backend: str = "onnxruntime",
) -> Runtime:
    """Open an artifact (or, for ``backend="torch"``, a student directory) for scoring.

    ``variant`` picks ``fp32``/``int8``/``fp16`` (default: the manifest's default); ``threads``
    caps intra-op threads (default: the library's choice).
    """
    if backend == "onnxruntime":
        from serve.runtimes.onnxruntime import OnnxRuntime

        return OnnxRuntime(artifact_dir, variant=variant, threads=threads)
    if backend == "torch":
        from serve.runtimes.torch_runtime import TorchRuntime  # torch only on request

        return TorchRuntime(artifact_dir, variant=variant, threads=threads)
    raise R3EdgeError(f"unknown runtime backend {backend!r}", f"use one of {', '.join(BACKENDS)}")


__all__ = ["Runtime", "load_runtime", "BACKENDS"]
