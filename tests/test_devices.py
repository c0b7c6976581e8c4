"""Device selection (``r3edge serve --device``, ``open_runtime(device=...)``) on a machine without a GPU.

What runs on a GPU is measured by benchmarks/gpu/ on a lent GPU machine; here the rules are tested:
``auto`` says what it chose, a named GPU device that cannot open stops the start naming the fix, a
variant a GPU cannot run is refused, and the server reports the device and provider it really uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest

from r3edge.core.devices import CPU_ONLY_KINDS, check_device, choose_variant, resolve_device
from r3edge.core.errors import InvalidInput, MissingDependency, Unavailable

ort = pytest.importorskip("onnxruntime")
CUDA_BUILD = "CUDAExecutionProvider" in ort.get_available_providers()
needs_cpu_build = pytest.mark.skipif(CUDA_BUILD, reason="this onnxruntime build has the CUDA provider")


def manifest(**extra):
    return {"variants": {"fp32": "model.fp32.onnx", "int8-smooth": "model.int8-smooth.onnx", "fp16": "model.fp16.onnx",
                         "ov-int8": "model.ov-int8.xml"},
            "default": "int8-smooth", "default_reason": "fastest passing variant at export",
            "runtimes": {"ov-int8": "openvino"},
            "quantization": {"int8-smooth": {"kind": CPU_ONLY_KINDS[0]}, "fp16": {"kind": "fp16"}}, **extra}


def test_cpu_gets_the_manifest_default_with_the_exports_reason():
    assert choose_variant(manifest(), None, "cpu") == ("int8-smooth", "the manifest's default: fastest passing variant at export")
    assert choose_variant(manifest(), "ov-int8", "cpu") == ("ov-int8", "asked for")


def test_a_gpu_gets_fp16_then_fp32_and_refuses_cpu_only_variants():
    name, why = choose_variant(manifest(), None, "cuda")
    assert name == "fp16" and "GPU default" in why and "int8-smooth" in why
    m = manifest()
    del m["variants"]["fp16"]
    assert choose_variant(m, None, "tensorrt")[0] == "fp32"
    for cpu_only in ("int8-smooth", "ov-int8"):
        with pytest.raises(InvalidInput) as exc:
            choose_variant(manifest(), cpu_only, "cuda")
        assert exc.value.field == "variant" and "fp32" in exc.value.fix and "--device cpu" in exc.value.fix


def test_a_gpu_prefers_fp16_packed_and_the_cpu_refuses_it():
    """fp16-packed (packing mode: CUDA kernels only) is a GPU's first choice when the artifact has it; the
    CPU keeps the manifest's default, and asked for it by name, refuses it naming the variants it can run."""
    m = manifest()
    m["variants"]["fp16-packed"] = "model.fp16-packed.onnx"
    m["quantization"]["fp16-packed"] = {"kind": "fp16", "packed": True}
    assert choose_variant(m, None, "cuda")[0] == "fp16-packed"
    assert choose_variant(m, None, "cpu")[0] == "int8-smooth"
    with pytest.raises(InvalidInput) as exc:
        choose_variant(m, "fp16-packed", "cpu")
    assert exc.value.field == "variant" and "--device cuda" in exc.value.fix
    assert exc.value.fix.split("pick one of ")[1].startswith("fp32, int8-smooth, fp16, ov-int8")


@needs_cpu_build
def test_auto_is_the_cpu_here_and_says_why():
    assert resolve_device("auto") == ("cpu", f"auto: this onnxruntime build has no CUDA provider "
                                             f"({', '.join(ort.get_available_providers())})")
    assert resolve_device("cpu") == ("cpu", "asked for")


@needs_cpu_build
@pytest.mark.parametrize("device", ["cuda", "tensorrt"])
def test_a_named_gpu_device_without_its_provider_names_the_fix(device):
    with pytest.raises(MissingDependency) as exc:
        resolve_device(device)
    assert "CUDAExecutionProvider" in exc.value.what and "r3edge[serve-gpu]" in exc.value.fix


def test_unknown_device_names_the_choices():
    with pytest.raises(InvalidInput) as exc:
        check_device("gpu")
    assert exc.value.field == "device" and "cuda" in exc.value.fix


def test_a_session_that_fell_back_to_the_cpu_is_refused():
    from r3edge.core.onnx_runtime import check_leading_provider

    check_leading_provider([("CUDAExecutionProvider", {}), "CPUExecutionProvider"],
                           ["CUDAExecutionProvider", "CPUExecutionProvider"], "m.onnx")
    with pytest.raises(Unavailable) as exc:
        check_leading_provider([("CUDAExecutionProvider", {}), "CPUExecutionProvider"], ["CPUExecutionProvider"], "m.onnx")
    assert exc.value.field == "device" and "CPUExecutionProvider" in exc.value.what


def test_serve_config_takes_device_from_flag_env_and_yaml(tmp_path):
    from r3edge.serve.config import ServeConfig

    assert ServeConfig.resolve({"artifact": "a"}, env={}).device == "auto"
    assert ServeConfig.resolve({"artifact": "a"}, env={"R3EDGE_DEVICE": "cuda"}).device == "cuda"
    (tmp_path / "s.yaml").write_text("device: tensorrt\n")
    assert ServeConfig.resolve({"artifact": "a", "device": "cpu"}, env={}, config_file=tmp_path / "s.yaml").device == "cpu"
    with pytest.raises(InvalidInput) as exc:
        ServeConfig.resolve({"artifact": "a"}, env={"R3EDGE_DEVICE": "gpu"})
    assert exc.value.field == "device"


@needs_cpu_build
def test_serve_device_cuda_stops_at_start_with_the_fix(tiny_artifact):
    """The real CLI: exit 2 before binding anything, the missing provider and the install line on stderr."""
    from conftest import free_port

    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "r3edge", "serve", str(tiny_artifact), "--device", "cuda",
                           "--port", str(port)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "R3EDGE_DEVICE": "cpu"})  # the flag wins over the environment
    assert proc.returncode == 2, proc.stderr
    assert "device=cuda needs onnxruntime's CUDAExecutionProvider" in proc.stderr
    assert 'pip install "r3edge[serve-gpu]"' in proc.stderr


def test_served_model_says_device_provider_and_why(tiny_artifact):
    from r3edge.api import pb2, pb2_grpc
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    cfg = ServeConfig(artifact=str(tiny_artifact), port=0, metrics_port=0, device="cpu", workers=1, threads=1)
    with BackgroundServer(cfg) as bg, grpc.insecure_channel(bg.target) as ch:
        info = pb2_grpc.RerankerStub(ch).ModelInfo(pb2.ModelInfoRequest(), timeout=30)
        manifest = json.loads(Path(tiny_artifact, "manifest.json").read_text())
        assert (info.device, info.provider, info.variant) == ("cpu", "CPUExecutionProvider", manifest["default"])
        assert info.variant_reason == f"the manifest's default: {manifest['default_reason']}"
        assert json.loads(info.runtime_info_json)["variant_reason"] == info.variant_reason
        body = urllib.request.urlopen(f"http://127.0.0.1:{bg.server.metrics_port}/metrics", timeout=10).read().decode()
        line = next(x for x in body.splitlines() if x.startswith("r3edge_model_info{"))
        assert 'device="cpu"' in line and 'provider="CPUExecutionProvider"' in line
        assert f'variant="{manifest["default"]}"' in line
