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
from r3edge.core.devices import choose_variant, resolve_device
from r3edge.core.errors import InvalidInput

#: Keyword options each runtime takes beyond ``variant``, ``threads`` and ``device``.
OPTIONS: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("prefix_reuse", "profile_prefix"),
    "openvino": ("prefix_reuse", "inference_precision"),
}


def open_runtime(artifact_dir: str | Path, variant: str | None = None, threads: int | None = None,
                 device: str = "auto", **options: Any) -> Runtime:
    """The runtime of ``variant`` of an ``r3edge export`` artifact on ``device``.

    ``device`` (:data:`r3edge.core.devices.DEVICES`) is resolved first (``auto``: CUDA when
    onnxruntime has it and a GPU is visible, else the CPU); ``variant=None`` then picks the device's
    default (:func:`r3edge.core.devices.choose_variant`: the manifest's default on the CPU, fp16 or
    fp32 on a GPU), and a variant the device cannot run is an :class:`InvalidInput` at once. The
    runtime's ``variant_reason`` says why its variant runs. ``threads`` caps the runtime's intra-op
    threads (its library's default when None). ``options`` go to the runtime: ``prefix_reuse`` to
    either; ``profile_prefix`` to ONNX Runtime only, ``inference_precision`` to OpenVINO only. An
    option the variant's runtime does not take is an :class:`InvalidInput` naming it.
    """
    manifest = read_manifest(artifact_dir)
    resolved, device_why = resolve_device(device)
    name, why = choose_variant(manifest, variant, resolved)
    runtime = variant_runtime(manifest, name)
    unknown = sorted(set(options) - set(OPTIONS[runtime]))
    if unknown:
        raise InvalidInput(f"variant {name!r} runs on {runtime}, which takes no option {', '.join(unknown)}",
                           f"pass only {', '.join(OPTIONS[runtime])}", field=unknown[0])
    if runtime == "openvino":
        from r3edge.core.openvino_runtime import OpenVinoRuntime

        opened: Runtime = OpenVinoRuntime(artifact_dir, variant=name, threads=threads, device=resolved, **options)
    else:
        from r3edge.core.onnx_runtime import OnnxRuntime

        opened = OnnxRuntime(artifact_dir, variant=name, threads=threads, device=resolved, **options)
    opened.variant_reason = why + ("" if device_why == "asked for" else f" (device {device_why})")
    return opened


__all__ = ["open_runtime", "OPTIONS"]
