"""A TensorRT engine from the artifact's ONNX scoring graph: FP16, or INT8 calibrated on the calibration pairs.

**Written against the documented ``tensorrt`` (10.x) Python API, not run on r3edge's machines** (no
GPU, no TensorRT): ``tests/test_tensorrt.py`` runs the build where ``tensorrt`` imports and a GPU is
present, and skips with the reason otherwise. Nothing here is verified until it ran.

The optimisation profile comes from the scoring contract's serving budget: sequences of 1 to
``max_total_tokens`` tokens, batches of 1 to :data:`GPU_MAX_BATCH_SIZE` pairs, optimised for the
batch that fills :data:`GPU_MAX_BATCH_TOKENS` padded tokens at the typical length. INT8 uses
TensorRT's entropy calibrator on the ``--calib`` pairs, formatted by :class:`Scorer` exactly as the
server formats them and padded to the profile's calibration shape. The engine file is specific to
the GPU model and TensorRT version that built it.

An alternative that needs no engine file: ONNX Runtime's TensorRT execution provider, which builds
and caches engines itself (``trt_cache/`` in the artifact): ``r3edge serve ARTIFACT --device tensorrt``,
or ``open_runtime(artifact, device="tensorrt")`` from Python (r3edge.core.devices holds the rules). It
opens only where TensorRT's libraries are on the library path, and was not run on r3edge's machines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from r3edge.core.artifact import INPUT_NAMES
from r3edge.core.errors import InvalidInput, R3EdgeError, require
from r3edge.core.scoring import GPU_MAX_BATCH_SIZE, GPU_MAX_BATCH_TOKENS, Scorer

PRECISIONS = ("fp16", "int8")
#: TensorRT's builder workspace (bytes)
WORKSPACE_BYTES = 4 << 30


@dataclass(frozen=True)
class Profile:
    """One TensorRT optimisation profile: ``(batch, sequence)`` min / opt / max for both inputs."""

    min: tuple[int, int]
    opt: tuple[int, int]
    max: tuple[int, int]


def serving_profile(scorer: Scorer, typical_tokens: int | None = None) -> Profile:
    """The profile of the serving budget: up to :data:`GPU_MAX_BATCH_SIZE` pairs of up to
    ``max_total_tokens``, optimised for ``typical_tokens`` (default: half the budget) at the batch
    that fills :data:`GPU_MAX_BATCH_TOKENS`."""
    longest = scorer.spec.max_total_tokens
    typical = min(longest, typical_tokens or max(1, longest // 2))
    batch = max(1, min(GPU_MAX_BATCH_SIZE, GPU_MAX_BATCH_TOKENS // typical))
    return Profile(min=(1, 1), opt=(batch, typical), max=(GPU_MAX_BATCH_SIZE, longest))


def calibration_batches(scorer: Scorer, queries: Sequence[str], documents: Sequence[str], batch: int) -> list[dict]:
    """The calibration pairs as ``{input_ids, attention_mask}`` of exactly ``[batch, max_total_tokens]``
    (TensorRT calibrates at one shape); the last partial batch is dropped."""
    enc = scorer.encode_batch(list(queries), list(documents))  # cut where the server cuts by default
    if len(enc) < batch:
        raise InvalidInput(f"{len(enc)} calibration pairs are fewer than one calibration batch of {batch}",
                           "pass more --calib pairs", field="calib_pairs")
    out = []
    for i in range(0, len(enc) - batch + 1, batch):
        ids, mask = scorer.collate(enc[i:i + batch], width=scorer.spec.max_total_tokens)
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


def build_engine(onnx_path: str | Path, engine_path: str | Path, scorer: Scorer, *, precision: str = "fp16",
                 profile: Profile | None = None, calibration: Sequence[dict] | None = None,
                 cache_path: str | Path | None = None, log=print) -> Path:
    """Build and serialise a TensorRT engine of ``onnx_path`` (a fp32 scoring graph; its external data
    beside it) to ``engine_path``. ``int8`` needs ``calibration`` (:func:`calibration_batches`);
    ``cache_path`` keeps its calibration table for the next build."""
    trt = require("tensorrt", "tensorrt")
    if precision not in PRECISIONS:
        raise InvalidInput(f"precision={precision!r}", f"use one of {', '.join(PRECISIONS)}", field="precision")
    if precision == "int8" and not calibration:
        raise InvalidInput("an int8 engine needs calibration batches", "pass calibration=calibration_batches(...)",
                           field="calibration")
    profile = profile or serving_profile(scorer)
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise R3EdgeError(f"TensorRT could not parse {onnx_path}: {errors}",
                          "build from the fp32 graph of an r3edge artifact (model.fp32.onnx)")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    trt_profile = builder.create_optimization_profile()
    for name in INPUT_NAMES:
        trt_profile.set_shape(name, profile.min, profile.opt, profile.max)
    config.add_optimization_profile(trt_profile)
    config.set_flag(trt.BuilderFlag.FP16)  # int8 engines keep fp16 for what stays unquantized
    if precision == "int8":
        config.set_flag(trt.BuilderFlag.INT8)
        batch, width = calibration[0]["input_ids"].shape
        calib_profile = builder.create_optimization_profile()
        for name in INPUT_NAMES:
            calib_profile.set_shape(name, (batch, width), (batch, width), (batch, width))
        config.set_calibration_profile(calib_profile)
        config.int8_calibrator = _calibrator(trt, list(calibration), cache_path)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise R3EdgeError(f"TensorRT could not build a {precision} engine from {onnx_path} (see its log above)",
                          "check the GPU and TensorRT version, or run the graph on ONNX Runtime's TensorRT provider "
                          "(open_runtime(artifact, device='tensorrt'))")
    engine_path = Path(engine_path)
    engine_path.write_bytes(bytes(serialized))
    log(f"[export] TensorRT {precision} engine {engine_path} ({engine_path.stat().st_size / 2**20:.1f} MiB), "
        f"profile min {profile.min} opt {profile.opt} max {profile.max}")
    return engine_path


def _calibrator(trt, batches: list[dict], cache_path: str | Path | None):
    """TensorRT's entropy calibrator over ``batches``; device buffers through torch (the export extra)."""
    torch = require("torch", "export")

    class Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self):
            super().__init__()
            self.batches = iter(batches)
            self.held: list = []  # the current batch's device tensors, alive while TensorRT reads them

        def get_batch_size(self) -> int:
            return int(batches[0]["input_ids"].shape[0])

        def get_batch(self, names):
            feed = next(self.batches, None)
            if feed is None:
                return None
            self.held = [torch.from_numpy(np.ascontiguousarray(feed[n])).cuda() for n in names]
            return [int(t.data_ptr()) for t in self.held]

        def read_calibration_cache(self):
            path = Path(cache_path) if cache_path else None
            return path.read_bytes() if path and path.is_file() else None

        def write_calibration_cache(self, cache):
            if cache_path:
                Path(cache_path).write_bytes(bytes(cache))

    return Calibrator()


def run_engine(engine_path: str | Path):
    """``run_batch(input_ids, attention_mask) -> label_logits`` on a built engine (TensorRT 10
    ``execute_async_v3`` with named tensors; torch CUDA tensors as buffers), for parity checks."""
    trt = require("tensorrt", "tensorrt")
    torch = require("torch", "export")
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    engine = runtime.deserialize_cuda_engine(Path(engine_path).read_bytes())
    context = engine.create_execution_context()
    stream = torch.cuda.Stream()

    def run_batch(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": torch.from_numpy(ids).cuda(), "attention_mask": torch.from_numpy(mask).cuda()}
        for name, t in feeds.items():
            context.set_input_shape(name, tuple(t.shape))
            context.set_tensor_address(name, int(t.data_ptr()))
        out_name = next(engine.get_tensor_name(i) for i in range(engine.num_io_tensors)
                        if engine.get_tensor_mode(engine.get_tensor_name(i)) == trt.TensorIOMode.OUTPUT)
        out = torch.empty(tuple(context.get_tensor_shape(out_name)), dtype=torch.float32, device="cuda")
        context.set_tensor_address(out_name, int(out.data_ptr()))
        if not context.execute_async_v3(stream.cuda_stream):
            raise R3EdgeError("TensorRT execution failed", "see TensorRT's log")
        stream.synchronize()
        return out.cpu().numpy()

    return run_batch
