"""Which device an artifact is served on, and which of its variants a device may run.

The one home of the device names (``r3edge serve --device``, ``Reranker(device=...)``,
``open_runtime(device=...)``) and of the rules that tie a variant to a device. A requested GPU
device that cannot open is an error naming the missing piece; only ``auto`` chooses, and it says
what it chose. Torch-free: ONNX Runtime is asked which providers its build has.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Literal, get_args

from r3edge.core.artifact import variant_runtime
from r3edge.core.errors import InvalidInput, MissingDependency, require

Device = Literal["auto", "cpu", "cuda", "tensorrt"]
DEVICES: tuple[str, ...] = get_args(Device)
#: Devices whose sessions run on a GPU provider of ONNX Runtime.
GPU_DEVICES = ("cuda", "tensorrt")
#: Variants a GPU serves when none is asked for, best first. The manifest's default is the fastest
#: variant on the exporting CPU, usually an int8 one, which is not what a GPU should run. fp16-packed
#: leads because it computes only real tokens (docs/serving.md); it is built only when asked for, on a
#: machine with the CUDA provider, and its speed against fp16 is not measured yet (benchmarks/gpu/).
GPU_VARIANT_PREFERENCE = ("fp16-packed", "fp16", "fp32")
#: Quantization kinds that run on the CPU provider only. ONNX Runtime's CUDA provider fails on the
#: per-row variants' QuantizeLinear at run time ("Unsupported quantization type"; measured on an H200
#: with the demo student's int8-smooth graph, issue 46), so a GPU session refuses them at start.
CPU_ONLY_KINDS = ("dynamic_per_row",)


def gpu_visible() -> bool:
    """Whether this machine shows an NVIDIA GPU to this process (a device node, and not hidden by
    ``CUDA_VISIBLE_DEVICES``). ONNX Runtime's GPU build lists the CUDA provider whether or not a
    GPU is there, so ``auto`` asks the machine as well."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def check_device(device: str, field: str = "device") -> str:
    if device not in DEVICES:
        raise InvalidInput(f"unknown device {device!r}", f"use one of {', '.join(DEVICES)}", field=field)
    return device


def resolve_device(device: str) -> tuple[str, str]:
    """``(device, why)``: ``auto`` becomes ``cuda`` when onnxruntime has the CUDA provider and a GPU
    is visible, else ``cpu``; a named GPU device must have its provider in this onnxruntime build
    (:class:`MissingDependency` naming the fix otherwise)."""
    check_device(device)
    ort = require("onnxruntime", "serve")
    available = ort.get_available_providers()
    if device == "auto":
        if "CUDAExecutionProvider" in available and gpu_visible():
            return "cuda", "auto: onnxruntime has the CUDA provider and a GPU is visible"
        reason = ("no GPU is visible" if "CUDAExecutionProvider" in available
                  else f"this onnxruntime build has no CUDA provider ({', '.join(available)})")
        return "cpu", f"auto: {reason}"
    if device == "cpu":
        return "cpu", "asked for"
    if "CUDAExecutionProvider" not in available:
        raise MissingDependency(
            f"device={device} needs onnxruntime's CUDAExecutionProvider; this onnxruntime build has "
            f"{', '.join(available)}",
            'install the GPU build on a CUDA machine: pip uninstall -y onnxruntime && pip install "r3edge[serve-gpu]"; '
            "or serve with --device cpu")
    if device == "tensorrt" and "TensorrtExecutionProvider" not in available:
        raise MissingDependency("device=tensorrt needs onnxruntime's TensorrtExecutionProvider",
                                "install onnxruntime-gpu with TensorRT's libraries on the library path, or use --device cuda")
    return device, "asked for"


def choose_variant(manifest: dict[str, Any], variant: str | None, device: str) -> tuple[str, str]:
    """``(variant, why)`` for a resolved ``device``: the one asked for; on a GPU the first of
    :data:`GPU_VARIANT_PREFERENCE` the artifact has; else the manifest's default, with the reason the
    export recorded for it (``default_reason``)."""
    variants = manifest["variants"]
    if variant:
        name, why = variant, "asked for"
    elif device in GPU_DEVICES:
        name = next((v for v in GPU_VARIANT_PREFERENCE if v in variants), manifest["default"])
        why = (f"the GPU default ({' > '.join(GPU_VARIANT_PREFERENCE)}, the first the artifact has); "
               f"the manifest's default {manifest['default']} was chosen for the CPU")
    else:
        name = manifest["default"]
        why = "the manifest's default" + (f": {manifest['default_reason']}" if manifest.get("default_reason") else "")
    if device not in GPU_DEVICES and name in variants and _gpu_only(manifest, name):
        cpu_ok = [v for v in variants if not _gpu_only(manifest, v)]
        raise InvalidInput(f"variant {name!r} is in ONNX Runtime's packing mode, whose kernels (RemovePadding, "
                           f"PackedMultiHeadAttention) exist on the CUDA provider only: it cannot be served on "
                           f"device={device}", f"serve it with --device cuda, or pick one of {', '.join(cpu_ok)} "
                           "with --variant", field="variant")
    if device in GPU_DEVICES and name in variants and not _gpu_can_run(manifest, name):
        what = ("an OpenVINO IR (OpenVINO serves on the CPU here)" if variant_runtime(manifest, name) != "onnxruntime"
                else f"per-row dynamic int8 ({_kind(manifest, name)}), which ONNX Runtime's CUDA provider cannot run")
        gpu_ok = [v for v in variants if _gpu_can_run(manifest, v)]
        raise InvalidInput(f"variant {name!r} is {what}: it cannot be served on device={device}",
                           f"pick one of {', '.join(gpu_ok) or 'fp32, fp16 (re-export)'} with --variant, "
                           "or serve with --device cpu", field="variant")
    return name, why


def _kind(manifest: dict[str, Any], variant: str) -> str | None:
    """The quantization kind the export recorded for ``variant`` (None for fp32 and OpenVINO's f32 IR)."""
    return ((manifest.get("quantization") or {}).get(variant) or {}).get("kind")


def _gpu_only(manifest: dict[str, Any], variant: str) -> bool:
    """A packed variant (``fp16-packed``): its graph runs on the CUDA provider only."""
    return bool(((manifest.get("quantization") or {}).get(variant) or {}).get("packed"))


def _gpu_can_run(manifest: dict[str, Any], variant: str) -> bool:
    return variant_runtime(manifest, variant) == "onnxruntime" and _kind(manifest, variant) not in CPU_ONLY_KINDS


__all__ = ["Device", "DEVICES", "GPU_DEVICES", "GPU_VARIANT_PREFERENCE", "CPU_ONLY_KINDS",
           "gpu_visible", "check_device", "resolve_device", "choose_variant"]
