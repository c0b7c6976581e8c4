"""OpenVINO backend: the artifact's OpenVINO IR variants on CPU (torch-free, like ONNX Runtime).

``r3edge export --variants ov-fp32,ov-int8`` writes IR beside the ONNX graphs (``model.<variant>.xml``
and ``.bin``, converted from the exported fp32 ONNX graph; ``ov-int8`` quantized by NNCF on the
export's calibration pairs). As with :class:`r3edge.core.onnx_runtime.OnnxRuntime`, the compiled
model is checked against the scoring-graph contract when it opens, so a wrong or broken IR fails at
start-up with a fix, not on the first request.

Each variant is compiled with the ``inference_precision`` its manifest entry records, the one its
parity checks ran with: OpenVINO otherwise picks bf16 for the float parts on CPUs with native bf16
(AVX-512 BF16, AMX), which moves logits well past the fp32 tolerance. Only the CPU device is
supported and tested here.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from r3edge.core.artifact import INPUT_NAMES, OPENVINO, OUTPUT_NAME, Runtime, check_inputs, open_variant
from r3edge.core.errors import FormatError, InvalidInput, NotFound, require
from r3edge.core.hardware import usable_cores
from r3edge.core.onnx_prefix import OnnxPrefixRunner, prefix_files
from r3edge.core.scoring import default_batch_limits

#: What ``device`` may be: ``auto`` is the CPU (OpenVINO's GPU and NPU plugins are untested here).
DEVICES = ("auto", "cpu")
#: OpenVINO's ``INFERENCE_PRECISION_HINT`` values an artifact may record.
PRECISIONS = ("f32", "bf16")
#: When a manifest entry names none (the export always does): fp32, whatever the CPU offers.
DEFAULT_PRECISION = "f32"
#: Entries of the CPU plugin's per-shape runtime cache (its hidden ``CPU_RUNTIME_CACHE_CAPACITY``, 5000 by
#: default). Served micro-batches come in many (pairs, tokens) shapes, and each cached one held ~2.5 MB of the
#: demo student's int8 graph: with the default, `r3edge serve` grew from 301 to 1,303 MB over three stress
#: probes; with 200 it held at 717 MB, at the same latency (benchmarks/results/openvino-shape-cache-cpu-2core).
RUNTIME_CACHE_CAPACITY = 200


def compile_ir(path: str | Path, threads: int | None = None, inference_precision: str = DEFAULT_PRECISION):
    """The ``openvino.CompiledModel`` every r3edge caller scores an IR with (runtime, export parity,
    benchmarks): the CPU plugin, the latency hint, and ``threads`` inference threads per call, as
    ONNX Runtime's intra-op threads are (OpenVINO's default, one stream, when None).

    The server's workers call one runtime concurrently, each call meant to use ``threads`` threads (2
    workers x 1 thread on 2 cores). One OpenVINO stream runs one inference at a time, so with
    ``threads`` set the model gets as many streams of ``threads`` threads as the usable cores hold:
    on one stream the 2 workers' calls queued behind each other on one thread (served top-100s took
    1.6x ONNX Runtime fp32's time on the same weights)."""
    ov = require("openvino", "serve")
    path = Path(path)
    if inference_precision not in PRECISIONS:
        raise InvalidInput(f"inference precision {inference_precision!r}", f"use one of {', '.join(PRECISIONS)}",
                           field="inference_precision")
    # an ONNX graph (a prefix-reuse artifact's shared fp32 prefix graph) is read by OpenVINO as it is
    weights = None if path.suffix == ".onnx" else path.with_suffix(".bin")
    for needed in (path, weights):
        if needed is not None and not needed.is_file():
            raise NotFound(f"OpenVINO IR file {needed} is missing", "re-run `r3edge export` (an IR is the .xml and its .bin)")
    # SNIPPETS_MODE DISABLE: OpenVINO's fused "Subgraph" kernels tile by input shape, so a pair's float
    # partial sums, and with them an int8 rounding, changed with its batchmates. NNCF int8 candidate graph of
    # the demo cosine student: a score moved by 0.0014 alone vs in a batch with them, 0.0004 without (the
    # export's gate is 0.001), and it ran faster without them too (217-233 vs 256-302 ms per top-100, Xeon)
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": inference_precision,
                              "SNIPPETS_MODE": "DISABLE", "CPU_RUNTIME_CACHE_CAPACITY": str(RUNTIME_CACHE_CAPACITY)}
    if threads:
        streams = max(1, usable_cores() // int(threads))
        config.update(NUM_STREAMS=streams, INFERENCE_NUM_THREADS=streams * int(threads))
    core = ov.Core()
    try:
        model = core.read_model(str(path)) if weights is None else core.read_model(str(path), str(weights))
        return core.compile_model(model, "CPU", config)
    except Exception as exc:  # openvino raises RuntimeError subclasses of its own
        raise FormatError(f"OpenVINO could not load {path}: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc}",
                          "re-run `r3edge export` (the .xml and .bin must come from the same export)") from exc


def check_ir_contract(compiled, n_labels: int, where: str) -> None:
    """Contract 4 on a compiled IR: int64 ``input_ids``/``attention_mask``, one float ``label_logits [batch, n_labels]``."""
    inputs = {i.get_any_name(): i for i in compiled.inputs}
    if set(inputs) != set(INPUT_NAMES):
        raise FormatError(f"{where} has inputs {sorted(inputs)}, expected {list(INPUT_NAMES)}",
                          "export with `r3edge export`, which emits the r3edge scoring graph")
    for name in INPUT_NAMES:
        if inputs[name].get_element_type().get_type_name() != "i64":
            raise FormatError(f"{where}: input {name} is {inputs[name].get_element_type()}, expected int64", "re-run `r3edge export`")
    outputs = compiled.outputs
    if len(outputs) != 1 or outputs[0].get_any_name() != OUTPUT_NAME:
        raise FormatError(f"{where} has outputs {[o.get_any_name() for o in outputs]}, expected ['{OUTPUT_NAME}']",
                          "this looks like a full LM export; export the label scorer with `r3edge export`")
    out = outputs[0]
    shape = out.get_partial_shape()
    last = shape[shape.rank.get_length() - 1] if shape.rank.is_static else None
    if (out.get_element_type().get_type_name() != "f32" or not shape.rank.is_static or shape.rank.get_length() != 2
            or (last is not None and last.is_static and last.get_length() != n_labels)):
        raise FormatError(f"{where}: {OUTPUT_NAME} is {out.get_element_type()} {shape}, expected f32 [batch, {n_labels}]",
                          "the graph and scorer.json disagree on the label set; re-export from one student directory")


class _Port:
    """A compiled model's input or output as ONNX Runtime names it (``name``, ``shape`` with None
    for a dynamic dimension)."""

    def __init__(self, port):
        self.name = port.get_any_name()
        shape = port.get_partial_shape()
        self.shape = [d.get_length() if d.is_static else None for d in shape] if shape.rank.is_static else []


#: Held by every :class:`IrSession`'s first call, process-wide. OpenVINO 2026.4's Python binding
#: initialises C++ function statics on the first ``InferRequest.infer`` (``tensor.data`` in its data
#: dispatcher) and runs Python while it does: a second thread entering the same statics then waits for
#: the initialiser while holding the GIL the initialiser needs. Two threads making their first calls at
#: once hung 15 of 100 fresh processes (and `r3edge serve` once in its warm-up); through this session,
#: 0 of 100 (benchmarks/results/ov-prefix-plain-epyc-2core/ov_first_call_race.txt).
_FIRST_CALLS = threading.Lock()


class IrSession:
    """A compiled model behind the three ONNX Runtime session calls that
    :class:`r3edge.core.onnx_prefix.OnnxPrefixRunner` makes (``get_inputs``, ``get_outputs``,
    ``run``), so both runtimes share one prefix-reuse implementation and its contract check. Safe
    from several threads at once: each calling thread gets its own infer request, and the session's
    first call runs alone (:data:`_FIRST_CALLS`)."""

    def __init__(self, compiled):
        self.compiled = compiled
        self._local = threading.local()
        self._called = False

    def get_inputs(self) -> list[_Port]:
        return [_Port(p) for p in self.compiled.inputs]

    def get_outputs(self) -> list[_Port]:
        return [_Port(p) for p in self.compiled.outputs]

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if not self._called:
            with _FIRST_CALLS:
                if not self._called:
                    out = self._run(output_names, feeds)
                    self._called = True
                    return out
        return self._run(output_names, feeds)

    def _run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        result = request.infer(feeds)
        return [np.array(result[self.compiled.output(name)]) for name in output_names]


class IrRunner:
    """``(input_ids, attention_mask) -> label_logits`` on a compiled IR, safe to call from several
    threads at once (an :class:`IrSession`)."""

    def __init__(self, compiled):
        self._session = IrSession(compiled)

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        (out,) = self._session.run([OUTPUT_NAME], {"input_ids": input_ids, "attention_mask": attention_mask})
        return np.asarray(out, dtype=np.float32)


def ir_prefix_runner(artifact_dir: str | Path, entry: dict, n_labels: int, threads: int | None = None,
                     inference_precision: str = DEFAULT_PRECISION):
    """The prefix-reuse graphs of a manifest entry (the shared fp32 ONNX prefix graph, the variant's
    candidate IR) compiled by OpenVINO with the variant's inference precision."""
    return OnnxPrefixRunner(artifact_dir, entry, lambda path: IrSession(compile_ir(path, threads, inference_precision)),
                            n_labels)


class OpenVinoRuntime(Runtime):
    """One OpenVINO IR variant of an export artifact, compiled for the CPU."""

    def __init__(
        self,
        artifact_dir: str | Path,
        variant: str | None = None,
        threads: int | None = None,
        device: str = "auto",
        prefix_reuse: bool = True,
        inference_precision: str | None = None,
    ):
        """With ``prefix_reuse`` and prefix-reuse graphs for the variant in the manifest (``r3edge export
        --prefix-reuse``), ``prefix`` runs a request's shared prefix once and its candidates after it,
        both compiled by OpenVINO; otherwise ``prefix`` is None and every pair runs the single graph.
        ``inference_precision`` overrides the manifest's (for measurements)."""
        if device not in DEVICES:
            raise InvalidInput(f"unknown OpenVINO device {device!r}", f"use one of {', '.join(DEVICES)}", field="device")
        opened = open_variant(artifact_dir, variant, "openvino")
        self.artifact_dir, self.manifest, self.scorer = opened.artifact_dir, opened.manifest, opened.scorer
        self.variant, self.model_path = opened.variant, opened.path
        settings = (self.manifest.get(OPENVINO) or {}).get(self.variant) or {}
        self.inference_precision = inference_precision or settings.get("inference_precision", DEFAULT_PRECISION)
        self.threads = threads
        self.compiled = compile_ir(self.model_path, threads, self.inference_precision)
        check_ir_contract(self.compiled, self.scorer.spec.n_labels, str(self.model_path))
        self._run = IrRunner(self.compiled)
        entry = prefix_files(self.manifest, self.variant) if prefix_reuse else None
        self.prefix = (ir_prefix_runner(self.artifact_dir, entry, self.scorer.spec.n_labels, threads, self.inference_precision)
                       if entry else None)
        self.providers = ["OpenVINO:CPU"]
        self.max_batch_tokens, self.max_batch_size = default_batch_limits(self.providers)
        self.name = f"openvino-cpu:{self.variant}"

    def label_logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        ids, mask = check_inputs(input_ids, attention_mask)
        return self._run(ids, mask)

    def info(self) -> dict[str, Any]:
        ov = require("openvino", "serve")
        return {
            "backend": "openvino",
            "name": self.name,
            "variant": self.variant,
            "variants": list(self.manifest["variants"]),
            "providers": list(self.providers),
            "device": self.device,
            "variant_reason": self.variant_reason,
            "threads": self.threads or os.cpu_count(),
            "inference_precision": self.inference_precision,
            "files": {"model": self.model_path.name, "weights": self.model_path.with_suffix(".bin").name,
                      "scorer": "scorer.json", "tokenizer": "tokenizer.json", **(self.prefix.files if self.prefix else {})},
            "prefix_reuse": self.prefix is not None,
            "artifact_dir": str(self.artifact_dir),
            "scorer_fingerprint": self.scorer.spec.fingerprint(),
            "n_labels": self.scorer.spec.n_labels,
            "label_tokens": list(self.scorer.spec.label_tokens),
            "quantization": self.manifest.get("quantization", {}).get(self.variant),
            "r3edge_version": self.manifest.get("r3edge_version"),
            "openvino_version": ov.get_version(),
        }

    def close(self) -> None:
        self._run = None
        self.compiled = None
        if self.prefix is not None:
            self.prefix.close()
