"""Open any scorer of the artifact contract by backend name: the ONNX artifact or the torch student.

Lives in the model layer because the torch backend needs the model code; the ONNX backend is the
torch-free :class:`r3edge.core.onnx_runtime.OnnxRuntime` (what the server loads directly), and torch
is imported only when ``backend="torch"`` is asked for.
"""

from __future__ import annotations

from pathlib import Path

from r3edge.core.artifact import Runtime
from r3edge.core.errors import InvalidInput

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
        from r3edge.core.onnx_runtime import OnnxRuntime

        return OnnxRuntime(artifact_dir, variant=variant, threads=threads)
    if backend == "torch":
        from r3edge.model.torch_runtime import TorchRuntime  # torch only on request

        return TorchRuntime(artifact_dir, variant=variant, threads=threads)
    raise InvalidInput(f"unknown runtime backend {backend!r}", f"use one of {', '.join(BACKENDS)}")


__all__ = ["Runtime", "load_runtime", "BACKENDS"]
