"""Open any scorer of the artifact contract by backend name: an exported artifact or the torch student.

Lives in the model layer because the torch backend needs the model code; an artifact's variants are
opened by the torch-free :func:`r3edge.core.runtime_loader.open_runtime` (ONNX Runtime or OpenVINO,
as the manifest says), and torch is imported only when ``backend="torch"`` is asked for.
"""

from __future__ import annotations

from pathlib import Path

from r3edge.core.artifact import Runtime
from r3edge.core.errors import InvalidInput

BACKENDS = ("artifact", "torch")


def load_runtime(
    artifact_dir: str | Path,
    variant: str | None = None,
    threads: int | None = None,
    backend: str = "artifact",
) -> Runtime:
    """Open an artifact (or, for ``backend="torch"``, a student directory) for scoring.

    ``variant`` picks one of the artifact's variants (``fp32``, ``int8-smooth``, ``ov-int8``, ...;
    default: the manifest's default) or, for torch, ``fp32``/``bf16``; ``threads`` caps intra-op
    threads (default: the library's choice).
    """
    if backend == "artifact":
        from r3edge.core.runtime_loader import open_runtime

        return open_runtime(artifact_dir, variant=variant, threads=threads)
    if backend == "torch":
        from r3edge.model.torch_runtime import TorchRuntime  # torch only on request

        return TorchRuntime(artifact_dir, variant=variant, threads=threads)
    raise InvalidInput(f"unknown runtime backend {backend!r}", f"use one of {', '.join(BACKENDS)}", field="backend")


__all__ = ["Runtime", "load_runtime", "BACKENDS"]
