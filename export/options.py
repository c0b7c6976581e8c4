"""The settings of one export (``r3edge export`` flags, :func:`r3edge.export.onnx.export_artifact` keywords).

One pydantic model holds every default, its validation and its help text; the CLI derives its
flags from the fields, so a default is stated once. Importing it is cheap: the
CLI's ``--help`` never loads the exporter, torch or OpenVINO (numpy and the quantization presets only).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, field_validator, model_validator

from r3edge.core.errors import InvalidInput
from r3edge.core.fidelity import DEFAULT_ATOL
from r3edge.export.openvino import OV_PRESETS
from r3edge.export.quantize import VARIANTS as ONNX_VARIANTS

#: Every variant ``r3edge export`` can build: the ONNX graphs, then the OpenVINO IR (``ov-*``).
VARIANTS = (*ONNX_VARIANTS, *OV_PRESETS)

#: What ``r3edge export`` writes: the ONNX (+ OpenVINO) artifact ``r3edge serve`` loads, an HF
#: sequence-classification checkpoint for vLLM / TEI (r3edge.export.seq_cls), or a Triton model
#: repository around the artifact (r3edge.export.triton).
Format = Literal["onnx", "hf-seq-cls", "triton"]
FORMATS: tuple[str, ...] = get_args(Format)


def parse_variants(variants: Sequence[str] | str) -> list[str]:
    """Validate variant names early (before minutes of export); fp32 is always built first."""
    if isinstance(variants, str):
        variants = [v.strip() for v in variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise InvalidInput(f"unknown export variant(s) {', '.join(bad)}", f"choose from {', '.join(VARIANTS)}",
                           field="variants")
    return ["fp32"] + [v for v in dict.fromkeys(variants) if v != "fp32"]


def cpu_variants() -> tuple[str, ...]:
    """The variants worth building for a CPU server: fp32, the batch-invariant int8-smooth, and OpenVINO's
    ov-int8 where OpenVINO and NNCF are installed (on the demo student, with prefix reuse, the fastest of
    the three: issue 48's table). The export times them and makes the fastest that passed the default."""
    from importlib.util import find_spec

    return ("fp32", "int8-smooth") + (("ov-int8",) if find_spec("openvino") and find_spec("nncf") else ())


class ExportOptions(BaseModel):
    """What to build and how to check it. ``flag`` in a field's extra names its CLI flag where the
    field's own name would read badly on a command line."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Format = Field(
        "onnx", description="what to write: onnx (the artifact `r3edge serve` loads), hf-seq-cls (an HF "
        "*ForSequenceClassification checkpoint + the scoring contract, for vLLM's pooling runner or TEI; causal and "
        "encoder students), triton (a Triton model repository: the artifact's ONNX/OpenVINO model, a Python-backend "
        "tokenizer and an ensemble taking text)")
    variants: tuple[str, ...] = Field(
        ("fp32", "int8"),
        description="comma-separated variants: fp32, int8 (static QDQ), int8-row (per-row dynamic), int8-smooth "
        "(int8-row + SmoothQuant + GPTQ), int8-weight (weight-only), int8-dynamic, fp16, fp16-packed (encoder and cosine "
        "students, padding removed; built and validated only where ONNX Runtime's CUDA provider and a GPU are), and "
        "OpenVINO IR: ov-fp32, "
        "ov-int8 (NNCF static int8); fp32 is always built; a quantized variant that fails its checks is left out and "
        "reported")
    default: str | None = Field(None, description="variant the server loads on the CPU when none is named (unset: the "
                                "fastest variant that passed, timed on the calibration pairs on this machine)",
                                json_schema_extra={"flag": "--default-variant"})
    calib_pairs: str | None = Field(
        None, description="pairs file for int8 calibration and parity validation (unset: a small built-in set; use "
        "pairs like those you will serve: candidate lists of more than 10 per query, so that the default variant is "
        "held to fp32's top 10, with --max-calib covering several queries)", json_schema_extra={"flag": "--calib"})
    max_calib: PositiveInt = Field(64, description="use at most N pairs from --calib for calibration and validation")
    atol: PositiveFloat = Field(DEFAULT_ATOL, description="max |Δ label logit| allowed between ONNX fp32 and PyTorch")
    opset: PositiveInt | None = Field(None, description="ONNX opset (unset: the exporter's)")
    threads: PositiveInt | None = Field(None, description="ONNX Runtime threads for the parity checks")
    prefix_reuse: bool = Field(
        False, description="causal and cosine students: also export a prefix graph (template head + query -> "
        "key/value cache, or the query's embedding) and a candidate graph (that state + document + tail -> "
        "label_logits) for fp32 and each quantized ONNX variant, so the server computes a request's shared prefix "
        "once instead of once per candidate")

    @field_validator("variants", mode="before")
    @classmethod
    def _variants(cls, v):
        return tuple(parse_variants(v))

    @field_validator("calib_pairs", mode="before")
    @classmethod
    def _path(cls, v):
        # callers pass a pathlib.Path (`r3edge demo`, `r3edge fidelity`); pydantic takes no Path for a str
        return os.fspath(v) if isinstance(v, os.PathLike) else v

    @model_validator(mode="after")
    def _default_is_built(self):
        if self.default is not None and self.default not in self.variants:
            raise InvalidInput(f"default variant {self.default!r} is not among the exported {list(self.variants)}",
                               "add it to --variants", field="default")
        return self

    @staticmethod
    def flag(name: str) -> str:
        extra = ExportOptions.model_fields[name].json_schema_extra or {}
        return extra.get("flag", f"--{name.replace('_', '-')}")  # type: ignore[union-attr]
