"""OpenVINO IR variants of the scoring graph (``ov-fp32``, ``ov-int8``), built from the exported fp32 ONNX graph.

``openvino.convert_model`` reads ``model.fp32.onnx`` (the fused encoder graph's ONNX Runtime contrib
ops included) and ``openvino.save_model`` writes ``model.<variant>.xml`` + ``.bin`` with fp32 weights
(its default would halve them to fp16). ``ov-int8`` is NNCF's post-training static quantization
(``nncf.quantize``, model type TRANSFORMER: SmoothQuant on the MatMuls, then fast bias correction) on
the export's calibration pairs, each fed alone so padding never enters the activation ranges; the
label head stays in float (:attr:`NncfSettings.keep_head_float`).
optimum-intel is not used: it pins transformers 4.57, which reads this project's 5.x configs wrongly.

Each IR variant then goes through the same parity gate as the ONNX variants (export/parity.py), run
by :func:`r3edge.core.openvino_runtime.compile_ir` with the inference precision recorded for it in
the manifest.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from r3edge.core.errors import InvalidInput, require

#: What an IR variant stores: fp32 weights, or int8 weights and activations quantized by NNCF.
OvWeights = Literal["fp32", "int8"]
NncfPresetName = Literal["performance", "mixed"]


@dataclass(frozen=True)
class NncfSettings:
    """``nncf.quantize`` arguments (post-training static quantization of the IR)."""

    #: ``transformer`` turns on SmoothQuant for MatMuls and keeps LayerNorm/Softmax/GELU in float
    model_type: Literal["transformer"] = "transformer"
    #: ``performance``: symmetric activations and weights; ``mixed``: asymmetric activations. Measured on a
    #: trained MiniLM cross-encoder (200 calibration pairs, 10 held-out top-100 lists, AVX2 box): ``mixed``
    #: kept more of fp32's top 10 (0.94 vs 0.90) at the same speed, but a pair's score moved by 0.002
    #: between scoring it alone and in a batch, over the parity gate's 0.001, so the export rejected it
    preset: NncfPresetName = "performance"
    #: calibration pairs used at most (NNCF's own default is 300)
    subset_size: int = 300
    fast_bias_correction: bool = True
    #: SmoothQuant strength on MatMuls; None keeps NNCF's default for the model type (0.95 in nncf 3.4)
    smooth_quant_alpha: float | None = None
    #: leave the label head (the MatMul nearest ``label_logits``) in float. A cosine student's head
    #: reads one scalar per pair, and int8 steps of that cosine, times the head's slope, moved the demo
    #: student's logits by up to 4.05 on the export's validation pairs (argmax agreement 0.64; top-10
    #: overlap with fp32 0.68 on 10 SemEval C dev lists); with the head in float: 0.21, 1.00 and 0.95.
    #: It is one small MatMul per pair.
    keep_head_float: bool = True

    def __post_init__(self):
        if self.model_type not in ("transformer",):
            raise InvalidInput(f"NNCF model_type {self.model_type!r}", "use 'transformer'", field="model_type")
        if self.preset not in get_args(NncfPresetName):
            raise InvalidInput(f"NNCF preset {self.preset!r}", f"use one of {', '.join(get_args(NncfPresetName))}",
                               field="preset")
        if self.subset_size < 1:
            raise InvalidInput(f"NNCF subset_size {self.subset_size}", "use at least 1 calibration pair", field="subset_size")
        if self.smooth_quant_alpha is not None and not 0.0 <= self.smooth_quant_alpha <= 1.0:
            raise InvalidInput(f"SmoothQuant alpha {self.smooth_quant_alpha}", "use a value in [0, 1], or None for NNCF's "
                               "default", field="smooth_quant_alpha")


@dataclass(frozen=True)
class OpenVinoPreset:
    """One OpenVINO IR variant: what its weights are, and the precision the runtime compiles it with."""

    name: str
    weights: OvWeights
    #: OpenVINO's INFERENCE_PRECISION_HINT for the float parts (recorded in the manifest; the runtime uses it)
    inference_precision: Literal["f32", "bf16"] = "f32"
    nncf: NncfSettings | None = None
    batch_invariant: bool = True
    description: str = ""

    def __post_init__(self):
        if self.weights not in get_args(OvWeights):
            raise InvalidInput(f"OpenVINO preset {self.name!r}: weights {self.weights!r}",
                               f"use one of {', '.join(get_args(OvWeights))}", field="weights")
        if (self.weights == "int8") != (self.nncf is not None):
            raise InvalidInput(f"OpenVINO preset {self.name!r}: int8 weights need NNCF settings, fp32 weights take none",
                               "set nncf=NncfSettings() exactly when weights='int8'", field="nncf")
        if self.inference_precision not in ("f32", "bf16"):
            raise InvalidInput(f"OpenVINO preset {self.name!r}: inference_precision {self.inference_precision!r}",
                               "use f32 or bf16", field="inference_precision")

    @property
    def calibrate(self) -> bool:
        return self.nncf is not None

    @property
    def exact(self) -> bool:
        """fp32 weights run in f32: held to the fp32 ``atol`` against PyTorch, like ``fp32`` itself."""
        return self.weights == "fp32" and self.inference_precision == "f32"

    def to_json(self) -> dict:
        return asdict(self)


OV_PRESETS: dict[str, OpenVinoPreset] = {
    "ov-fp32": OpenVinoPreset(
        "ov-fp32", "fp32",
        description="OpenVINO IR of the fp32 ONNX graph (openvino.convert_model), fp32 weights, f32 inference"),
    "ov-int8": OpenVinoPreset(
        "ov-int8", "int8", nncf=NncfSettings(),
        description="OpenVINO IR quantized by NNCF (static int8 weights and activations, model type TRANSFORMER: "
        "SmoothQuant + fast bias correction) on the calibration pairs, the label head left in float; f32 for what "
        "stays float"),
}


def ir_file(variant: str) -> str:
    """The IR's ``.xml`` name in an artifact (its weights are the ``.bin`` of the same stem)."""
    return f"model.{variant}.xml"


def head_matmul(model) -> str:
    """The friendly name of the MatMul nearest the model's output (``label_logits``): the label head,
    found by walking up from the output through every non-constant input, nearest first."""
    from collections import deque

    queue = deque(i.get_node() for i in model.get_results()[0].input_values())
    seen = set()
    while queue:
        node = queue.popleft()
        if node.get_type_name() == "MatMul":
            return node.get_friendly_name()
        if node.get_friendly_name() in seen:
            continue
        seen.add(node.get_friendly_name())
        queue.extend(i.get_node() for i in node.input_values() if i.get_node().get_type_name() != "Constant")
    raise InvalidInput("the scoring graph has no MatMul before label_logits", "export the label scorer with `r3edge export`")


def build_ir(preset: OpenVinoPreset, fp32_onnx: Path, out_xml: Path, calib_feeds: list[dict[str, np.ndarray]] | None,
             log=print) -> dict:
    """Write ``out_xml`` (+ ``.bin``) from an fp32 ONNX graph (the single scoring graph, or a
    prefix-reuse candidate graph); returns what was done, for the export report.

    ``calib_feeds`` (``ov-int8``): the graph's inputs for one pair each, formatted by the Scorer.
    """
    ov = require("openvino", "export")
    t0 = time.perf_counter()
    info: dict = {"preset": preset.to_json(), "openvino_version": ov.get_version()}
    model = ov.convert_model(str(fp32_onnx))
    if preset.nncf is not None:
        nncf = require("nncf", "export")
        # NNCF's graph builder fails on some converted graphs (the prefix-reuse candidate graph: "Could
        # not find a node Gather_..."); the same model saved as IR and read back quantizes
        # (read into memory, not mapped: the quantized model is written over the same files below)
        ov.save_model(model, str(out_xml), compress_to_fp16=False)
        core = ov.Core()
        core.set_property({"ENABLE_MMAP": False})
        model = core.read_model(str(out_xml))
        from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters

        feeds = list(calib_feeds or [])
        if not feeds:
            raise InvalidInput(f"variant {preset.name} needs calibration pairs", "pass --calib PAIRS.jsonl (or use the built-in set)")
        settings = preset.nncf
        advanced = None
        if settings.smooth_quant_alpha is not None:
            advanced = AdvancedQuantizationParameters(
                smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=settings.smooth_quant_alpha))
        ignored = [head_matmul(model)] if settings.keep_head_float else []
        model = nncf.quantize(
            model, nncf.Dataset(feeds),
            preset=nncf.QuantizationPreset(settings.preset),
            model_type=nncf.ModelType(settings.model_type),
            subset_size=min(settings.subset_size, len(feeds)),
            fast_bias_correction=settings.fast_bias_correction,
            advanced_parameters=advanced,
            ignored_scope=nncf.IgnoredScope(names=ignored),
        )
        info["calibration_pairs"] = min(settings.subset_size, len(feeds))
        info["kept_float"] = ignored
        info["nncf_version"] = nncf.__version__
    ov.save_model(model, str(out_xml), compress_to_fp16=False)
    info["seconds"] = round(time.perf_counter() - t0, 2)
    log(f"[export] {preset.name}: {preset.description} ({info['seconds']} s)")
    return info
