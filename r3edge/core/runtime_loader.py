"""Open any variant of an artifact with the torch-free runtime its manifest names.

The one place that maps a variant to its runtime (``runtimes`` in the manifest, contract 4):
ONNX graphs to :class:`r3edge.core.onnx_runtime.OnnxRuntime`, OpenVINO IR to
:class:`r3edge.core.openvino_runtime.OpenVinoRuntime`. Each runtime's module is imported only when
a variant needs it, so an ONNX-only server never loads OpenVINO.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r3edge.core.artifact import Runtime, read_manifest, variant_runtime
from r3edge.core.errors import InvalidInput

#: Keyword options each runtime takes beyond ``variant`` and ``threads``.
OPTIONS: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("device", "prefix_reuse", "profile_prefix"),
    "openvino": ("device", "prefix_reuse", "inference_precision"),
}


def open_runtime(artifact_dir: str | Path, variant: str | None = None, threads: int | None = None,
                 **options: Any) -> Runtime:
    """The runtime of ``variant`` (``None``: the manifest's default) of an ``r3edge export`` artifact.

    ``threads`` caps the runtime's intra-op threads (its library's default when None). ``options``
    go to the runtime: ``device`` and ``prefix_reuse`` to either; ``profile_prefix`` to ONNX Runtime
    only, ``inference_precision`` to OpenVINO only. An option the variant's runtime does not take is
    an :class:`InvalidInput` naming it.
    """
    manifest = read_manifest(artifact_dir)
    name = variant or manifest["default"]
    runtime = variant_runtime(manifest, name)
    unknown = sorted(set(options) - set(OPTIONS[runtime]))
    if unknown:
        raise InvalidInput(f"variant {name!r} runs on {runtime}, which takes no option {', '.join(unknown)}",
                           f"pass only {', '.join(OPTIONS[runtime])}", field=unknown[0])
    if runtime == "openvino":
        from r3edge.core.openvino_runtime import OpenVinoRuntime

        return OpenVinoRuntime(artifact_dir, variant=variant, threads=threads, **options)
    from r3edge.core.onnx_runtime import OnnxRuntime

    return OnnxRuntime(artifact_dir, variant=variant, threads=threads, **options)


__all__ = ["open_runtime", "OPTIONS"]
