"""``r3edge export --format triton``: a Triton Inference Server model repository around the artifact.

Layout (``<out>/``)::

    r3edge/config.pbtxt                    ensemble: QUERY, DOCUMENT (strings) -> label_logits
    r3edge_tokenizer/config.pbtxt          Python backend: the scoring contract (r3edge.export.triton_model)
    r3edge_tokenizer/1/model.py            + scorer.json, tokenizer.json, manifest.json, export_report.json
    r3edge_scorer/config.pbtxt             onnxruntime backend: the artifact's ONNX graph
    r3edge_scorer/1/model.<variant>.onnx   (+ its external data)
    [r3edge_openvino/..., r3edge_scorer_openvino/...]   the same for an OpenVINO IR variant (CPU)
    README.md

The scorer's dynamic batcher is derived from the serving budget of the scoring contract
(r3edge.core.scoring): at most :data:`GPU_MAX_BATCH_SIZE` pairs a batch, and preferred sizes
that fill :data:`GPU_MAX_BATCH_TOKENS` padded tokens at the contract's ``max_total_tokens`` (the
tokenizer pads every pair to it, so requests share one shape and can be merged). Inputs and output
are the manifest's. No Triton server runs on r3edge's machines: each ``config.pbtxt`` is checked by
parsing it with Triton's own ``model_config`` protobuf (tests/test_triton.py), not by loading it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from r3edge.core.artifact import read_manifest
from r3edge.core.errors import InvalidInput
from r3edge.core.fileio import partial_dir, publish_dir
from r3edge.core.scoring import (
    DEFAULT_OVERFLOW,
    GPU_MAX_BATCH_SIZE,
    GPU_MAX_BATCH_TOKENS,
    OVERFLOW,
    SCORER_FILE,
    TOKENIZER_FILE,
    Overflow,
    Scorer,
)
from r3edge.export.options import ExportOptions

ENSEMBLE = "r3edge"
TOKENIZER = "r3edge_tokenizer"
SCORER = "r3edge_scorer"
#: r3edge serve's ``max_batch_wait_s`` default (serve/config.py; tests/test_triton.py checks they agree):
#: how long a micro-batch may wait for more pairs
MAX_QUEUE_DELAY_US = 2000
#: Python-backend tokenizer instances (CPU); the scorer gets one instance on a GPU where there is one
TOKENIZER_INSTANCES = 2
MODEL_PY = Path(__file__).with_name("triton_model.py")


def export_triton(student_dir: str | Path, out_dir: str | Path, options: ExportOptions | None = None, *,
                  log=print) -> Path:
    """Export the ONNX artifact of ``student_dir`` (validated as ``--format onnx`` does) and write the
    Triton repository around it at ``out_dir``."""
    from r3edge.export.onnx import export_artifact

    with tempfile.TemporaryDirectory(prefix="r3edge-triton-") as tmp:
        artifact = export_artifact(student_dir, Path(tmp) / "artifact", options, log=log)
        return build_triton_repository(artifact, out_dir, log=log)


def serving_budget(max_total_tokens: int) -> dict:
    """``max_batch_size``, ``preferred_batch_size`` and ``max_queue_delay_microseconds`` of the scorer
    model: pairs padded to ``max_total_tokens`` that fill the GPU token budget, capped by the contract's
    pairs-per-batch."""
    full = max(1, min(GPU_MAX_BATCH_SIZE, GPU_MAX_BATCH_TOKENS // max_total_tokens))
    return {"max_batch_size": GPU_MAX_BATCH_SIZE, "preferred_batch_size": sorted({max(1, full // 2), full}),
            "max_queue_delay_microseconds": MAX_QUEUE_DELAY_US}


def build_triton_repository(artifact_dir: str | Path, out_dir: str | Path, *, variant: str | None = None,
                            overflow: Overflow = DEFAULT_OVERFLOW, log=print) -> Path:
    """Write the repository for ``variant`` (an ONNX variant of the artifact; default: the manifest's
    default when it is an ONNX one, else fp32) plus the first OpenVINO IR variant, if any."""
    artifact, out = Path(artifact_dir), Path(out_dir)
    manifest = read_manifest(artifact)
    scorer = Scorer.load(artifact)
    runtimes = manifest.get("runtimes") or {}
    onnx_variants = [v for v in manifest["variants"] if runtimes.get(v, "onnxruntime") == "onnxruntime"]
    variant = variant or (manifest["default"] if manifest["default"] in onnx_variants else "fp32")
    if variant not in onnx_variants:
        raise InvalidInput(f"variant {variant!r} is not an ONNX variant of {artifact} ({', '.join(onnx_variants)})",
                           "pick one of those", field="variant")
    if overflow not in OVERFLOW:
        raise InvalidInput(f"overflow={overflow!r}", f"use one of {', '.join(OVERFLOW)}", field="overflow")
    spec = scorer.spec
    budget = serving_budget(spec.max_total_tokens)
    tmp = partial_dir(out)

    tok_dir = tmp / TOKENIZER / "1"
    tok_dir.mkdir(parents=True)
    shutil.copyfile(MODEL_PY, tok_dir / "model.py")
    for name in (SCORER_FILE, TOKENIZER_FILE, "manifest.json", "export_report.json"):
        if (artifact / name).is_file():
            shutil.copyfile(artifact / name, tok_dir / name)
    _write(tmp / TOKENIZER, tokenizer_config(budget, spec.max_total_tokens, overflow))

    models = {SCORER: (variant, "onnxruntime")}
    ov = [v for v in manifest["variants"] if runtimes.get(v) == "openvino"]
    if ov:
        models[f"{SCORER}_openvino"] = (ov[0], "openvino")
    for name, (v, runtime) in models.items():
        (tmp / name / "1").mkdir(parents=True)
        main = manifest["variants"][v]
        if runtime == "openvino":  # Triton's OpenVINO backend reads model.xml + model.bin
            for src, dst in ((main, "model.xml"), (Path(main).with_suffix(".bin").name, "model.bin")):
                shutil.copyfile(artifact / src, tmp / name / "1" / dst)
            main = "model.xml"
        else:  # the graph and its external data, under their own names (the graph refers to the data by name)
            for p in artifact.iterdir():
                if p.name.startswith(main):
                    shutil.copyfile(p, tmp / name / "1" / p.name)
        _write(tmp / name, scorer_config(name, runtime, main, manifest, budget))
        ensemble = ENSEMBLE if runtime == "onnxruntime" else f"{ENSEMBLE}_openvino"
        _write(tmp / ensemble, ensemble_config(ensemble, name, manifest, budget))
    (tmp / "README.md").write_text(_readme(models, spec, budget, overflow))
    publish_dir(tmp, out)
    log(f"[export] triton repository {out}: {', '.join(sorted(p.name for p in out.iterdir() if p.is_dir()))}")
    return out


def _write(model_dir: Path, text: str) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(text)


def _dims(values) -> str:
    return "[ " + ", ".join(str(v) for v in values) + " ]"


def _batching(budget: dict) -> str:
    return (f"dynamic_batching {{\n  preferred_batch_size: {_dims(budget['preferred_batch_size'])}\n"
            f"  max_queue_delay_microseconds: {budget['max_queue_delay_microseconds']}\n}}\n")


def tokenizer_config(budget: dict, width: int, overflow: Overflow) -> str:
    return f"""name: "{TOKENIZER}"
backend: "python"
max_batch_size: {budget['max_batch_size']}
input [
  {{ name: "QUERY" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "DOCUMENT" data_type: TYPE_STRING dims: [ 1 ] }}
]
output [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ {width} ] }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ {width} ] }}
]
{_batching(budget)}instance_group [ {{ kind: KIND_CPU count: {TOKENIZER_INSTANCES} }} ]
parameters {{ key: "overflow" value: {{ string_value: "{overflow}" }} }}
parameters {{ key: "pad_to" value: {{ string_value: "{width}" }} }}
"""


def scorer_config(name: str, runtime: str, filename: str, manifest: dict, budget: dict) -> str:
    backend, kind = ("onnxruntime", "KIND_AUTO") if runtime == "onnxruntime" else ("openvino", "KIND_CPU")
    inputs = ",\n".join(f'  {{ name: "{n}" data_type: TYPE_INT64 dims: [ -1 ] }}' for n in manifest["inputs"])
    return f"""name: "{name}"
backend: "{backend}"
default_model_filename: "{filename}"
max_batch_size: {budget['max_batch_size']}
input [
{inputs}
]
output [
  {{ name: "{manifest['output']}" data_type: TYPE_FP32 dims: [ {manifest['n_labels']} ] }}
]
{_batching(budget)}instance_group [ {{ kind: {kind} count: 1 }} ]
"""


def ensemble_config(name: str, scorer_model: str, manifest: dict, budget: dict) -> str:
    ids = {n: f"_{n}" for n in manifest["inputs"]}
    out = manifest["output"]
    tok_out = "\n".join(f'        output_map {{ key: "{n}" value: "{t}" }}' for n, t in ids.items())
    sc_in = "\n".join(f'        input_map {{ key: "{n}" value: "{t}" }}' for n, t in ids.items())
    return f"""name: "{name}"
platform: "ensemble"
max_batch_size: {budget['max_batch_size']}
input [
  {{ name: "QUERY" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "DOCUMENT" data_type: TYPE_STRING dims: [ 1 ] }}
]
output [
  {{ name: "{out}" data_type: TYPE_FP32 dims: [ {manifest['n_labels']} ] }}
]
ensemble_scheduling {{
  step [
    {{
      model_name: "{TOKENIZER}"
      model_version: -1
      input_map {{ key: "QUERY" value: "QUERY" }}
      input_map {{ key: "DOCUMENT" value: "DOCUMENT" }}
{tok_out}
    }},
    {{
      model_name: "{scorer_model}"
      model_version: -1
{sc_in}
      output_map {{ key: "{out}" value: "{out}" }}
    }}
  ]
}}
"""


def _readme(models: dict, spec, budget: dict, overflow: Overflow) -> str:
    lines = "\n".join(f"| `{name}` | {v} | {rt} |" for name, (v, rt) in models.items())
    return f"""# r3edge student: Triton model repository

Written by `r3edge export --format triton`. **No Triton server runs on r3edge's machines**: every
`config.pbtxt` here was parsed with Triton's own `model_config` protobuf and the tokenizer model's
code was run against this artifact's tokenizer, but the repository has not been loaded by Triton.

| model | variant | backend |
|---|---|---|
{lines}
| `{TOKENIZER}` | scoring contract (`scorer.json`, fingerprint `{spec.fingerprint()}`) | python |

Send a batch of pairs to the ensemble `{ENSEMBLE}` (`{ENSEMBLE}_openvino` for the OpenVINO IR, CPU):
inputs `QUERY` and `DOCUMENT`, `TYPE_STRING`, shape `[n, 1]` (n <= {budget['max_batch_size']}); output
`label_logits` `[n, {spec.n_labels}]`. Probabilities are
`softmax(label_logits / {spec.temperature}{f' + {list(spec.label_bias)}' if spec.label_bias else ''})`
(the calibration of `scorer.json`); relevance is `sum(probs * {list(spec.label_values)})`.

* The tokenizer (`{TOKENIZER}/1/model.py`) imports `r3edge.core.scoring`: install r3edge (torch-free core:
  tokenizers, numpy) in the Python backend's environment. It pads every pair to max_total_tokens
  ({spec.max_total_tokens}) so that requests share one shape and the scorer's dynamic batcher can merge them;
  over-long input follows its `overflow` parameter: `{overflow}` (`truncate` cuts, `reject` fails that request).
* Scorer batching, from the scoring contract's serving budget: max_batch_size {budget['max_batch_size']},
  preferred batch sizes {budget['preferred_batch_size']} (pairs of {spec.max_total_tokens} tokens filling
  {GPU_MAX_BATCH_TOKENS} padded tokens), max_queue_delay_microseconds {budget['max_queue_delay_microseconds']}
  (r3edge serve's batching wait). The ONNX scorer runs on a GPU where Triton has one (KIND_AUTO).
* Start: `tritonserver --model-repository=THIS_DIR`.
"""
