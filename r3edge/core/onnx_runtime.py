"""ONNX Runtime backend: the production runtime the server loads (torch-free).

The session is checked against the scoring-graph contract when it opens, not on the first
request, so a wrong or mixed-up artifact fails at ``r3edge serve`` start-up with a fix instead
of returning garbage scores. Only the CPU provider is tested here; the CUDA and TensorRT provider
options are written from ONNX Runtime's documented names and are untested on this machine.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from r3edge.core.artifact import INPUT_NAMES, OUTPUT_NAME, PACKED_GRAPHS, Runtime, check_inputs, open_variant
from r3edge.core.devices import resolve_device
from r3edge.core.errors import FormatError, Unavailable, require
from r3edge.core.onnx_prefix import OnnxPrefixRunner, prefix_files
from r3edge.core.scoring import default_batch_limits

#: ONNX Runtime graph rewrites every r3edge session turns off. ``SkipLayerNormFusion`` folds
#: ``Add`` (+ bias ``Add``) + ``LayerNormalization`` back into ``SkipLayerNormalization``, whose CPU
#: kernel (onnxruntime 1.32) took 4.3 ms on a [50, 85, 384] input where the two Adds and
#: ``LayerNormalization`` took 0.86 ms (2 threads, AVX-512 box): 12 of them cost the fused int8
#: encoder ~60 ms per top-100. The export writes the unfused form (r3edge.export.fusion).
DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)


def open_session(path: str | Path, threads: int | None = None, providers: list | None = None,
                 profile_prefix: str | None = None):
    """The ``InferenceSession`` every r3edge caller scores with (server, export parity, benchmarks):
    full graph optimisation minus :data:`DISABLED_OPTIMIZERS`, sequential execution, ``threads``
    intra-op threads (ONNX Runtime's default when None), on ``providers`` (the CPU's when None),
    led by the first of them or an error (:func:`check_leading_provider`)."""
    ort = require("onnxruntime", "serve")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.inter_op_num_threads = 1
    # Idle intra-op workers sleep instead of spinning: the server's batcher, tokenizer and event-loop
    # threads, and whatever else runs on the machine, share the cores with them. On the 2-core AVX2
    # box, the served demo-shape artifact (one top-100 alone, runs interleaved) took p50 2,857-2,915 ms
    # spinning and 1,364-1,499 ms not while other processes loaded it (load 2-4); idle, the two were
    # within noise (serving-cpu-2core: 1,065 ms against the spinning baseline server's 1,025 ms).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        opts.intra_op_num_threads = int(threads)
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    try:
        session = ort.InferenceSession(str(path), sess_options=opts, providers=providers or ["CPUExecutionProvider"],
                                       disabled_optimizers=list(DISABLED_OPTIMIZERS))
    except Exception as exc:  # onnxruntime raises its own exception types
        raise FormatError(f"onnxruntime could not load {path}: {exc}", "re-run `r3edge export`") from exc
    if providers:
        check_leading_provider(providers, session.get_providers(), str(path))
    return session


#: The CUDA provider's options. ``sdpa_kernel`` 2 (ONNX Runtime's ``AttentionBackend.EFFICIENT_ATTENTION``)
#: pins the fused fp16 encoder graph's MultiHeadAttention to memory-efficient attention. Left to choose,
#: onnxruntime-gpu 1.31.1 on an H200 spent 54-95 ms on every new (batch, length) shape of the
#: MiniLM student's candidate graph, and 2 ms once a shape was seen; a server sees new shapes on
#: almost every micro-batch. Pinned, a new shape cost what a seen one did (3.7 ms at 100 x 131), and
#: ``Reranker.rank`` of a top-100 at fp16 went from 138 to 20.5 ms p50
#: (benchmarks/results/gpu-students-h200/diagnostics.md). Graphs without that node ignore it.
CUDA_PROVIDER_OPTIONS = {"cudnn_conv_algo_search": "HEURISTIC", "do_copy_in_default_stream": True, "sdpa_kernel": "2"}


def providers_for(device: str, variant: str, artifact_dir: Path) -> list:
    """Provider list for a device (``auto`` resolved by :func:`r3edge.core.devices.resolve_device`)."""
    device, _ = resolve_device(device)
    cpu = "CPUExecutionProvider"
    if device == "cpu":
        return [cpu]
    ort = require("onnxruntime", "serve")
    if hasattr(ort, "preload_dlls"):
        # onnxruntime-gpu finds the CUDA/cuDNN libraries that pip installed (nvidia-* wheels) only
        # after this; on the lent GPU machines the CUDA provider does not open without it
        ort.preload_dlls()
    cuda = ("CUDAExecutionProvider", dict(CUDA_PROVIDER_OPTIONS))
    if device == "cuda":
        return [cuda, cpu]
    trt = (
        "TensorrtExecutionProvider",
        {
            "trt_fp16_enable": variant == "fp16",
            "trt_int8_enable": variant.startswith("int8"),  # QDQ graphs carry their own scales
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(artifact_dir / "trt_cache"),
        },
    )
    return [trt, cuda, cpu]


def check_leading_provider(providers: list, opened: list[str], where: str) -> None:
    """A session asked to lead with a GPU provider that opened on another one (ONNX Runtime falls back
    to the CPU when the CUDA libraries or the GPU are missing, with only a log line) is an error:
    a GPU server never runs on the CPU silently."""
    asked = providers[0][0] if isinstance(providers[0], tuple) else providers[0]
    if opened and opened[0] != asked:
        raise Unavailable(
            f"{where}: ONNX Runtime was asked for {asked} but opened the session on {opened[0]} "
            "(the GPU's CUDA 12/13 and cuDNN 9 libraries were not found, or no GPU is usable)",
            "check `nvidia-smi` and that onnxruntime-gpu matches the machine's CUDA (see docs/serving.md), "
            "or serve with --device cpu", field="device")


class OnnxRuntime(Runtime):
    """One variant of an export artifact in an ``onnxruntime.InferenceSession``."""

    def __init__(
        self,
        artifact_dir: str | Path,
        variant: str | None = None,
        threads: int | None = None,
        device: str = "auto",
        prefix_reuse: bool = True,
        profile_prefix: str | None = None,
    ):
        """``profile_prefix`` turns on ONNX Runtime's profiler (``session.end_profiling()`` writes
        its JSON there), so a per-op profile times exactly the session the server runs."""
        opened = open_variant(artifact_dir, variant, "onnxruntime")
        self.artifact_dir, self.manifest, self.scorer = opened.artifact_dir, opened.manifest, opened.scorer
        self.variant, self.model_path = opened.variant, opened.path

        self.threads = threads
        providers = providers_for(device, self.variant, self.artifact_dir)

        def make_session(path: Path):
            return open_session(path, threads, providers, profile_prefix)

        self.session = make_session(self.model_path)  # on the provider asked for, or an error (open_session)
        self.providers = self.session.get_providers()
        # what the session opened, not what was asked
        self.max_batch_tokens, self.max_batch_size = default_batch_limits(self.providers)
        self._check_contract()
        # A causal student's prefix-reuse graphs, when the artifact has them for this variant:
        # score_pairs(..., prefix=runtime.prefix) runs the shared prefix once per request.
        entry = prefix_files(self.manifest, self.variant) if prefix_reuse else None
        self.prefix = None if entry is None else OnnxPrefixRunner(self.artifact_dir, entry, make_session,
                                                                  self.scorer.spec.n_labels)
        self._make_session, self._lock = make_session, threading.Lock()
        if self.prefix is not None:
            # Scoring goes through the prefix graphs; the single graph (checked above) is reopened only
            # if label_logits is called, so a server holds two copies of the weights, not three.
            self.session = None
        served = self.model_path.name if self.prefix is None else entry["candidate"]
        self.packed = served in (self.manifest.get(PACKED_GRAPHS) or ())
        self.device = "cpu" if self.providers[0] == "CPUExecutionProvider" else self.providers[0].replace("ExecutionProvider", "").lower()
        self.name = f"onnxruntime-{self.device}:{self.variant}"

    def _check_contract(self) -> None:
        n = self.scorer.spec.n_labels
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = self.session.get_outputs()
        where = f"{self.model_path}"
        if set(inputs) != set(INPUT_NAMES):
            raise FormatError(
                f"{where} has inputs {sorted(inputs)}, expected {list(INPUT_NAMES)}",
                "export with `r3edge export`, which emits the r3edge scoring graph",
            )
        for name in INPUT_NAMES:
            if inputs[name].type != "tensor(int64)":
                raise FormatError(f"{where}: input {name} is {inputs[name].type}, expected tensor(int64)", "re-run `r3edge export`")
        if len(outputs) != 1 or outputs[0].name != OUTPUT_NAME:
            raise FormatError(
                f"{where} has outputs {[o.name for o in outputs]}, expected ['{OUTPUT_NAME}']",
                "this looks like a full LM export; export the label scorer with `r3edge export`",
            )
        out = outputs[0]
        if out.type != "tensor(float)" or len(out.shape) != 2 or (isinstance(out.shape[1], int) and out.shape[1] != n):
            raise FormatError(
                f"{where}: {OUTPUT_NAME} is {out.type} {out.shape}, expected tensor(float) [batch, {n}]",
                "the graph and scorer.json disagree on the label set; re-export from one student directory",
            )

    def label_logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        ids, mask = check_inputs(input_ids, attention_mask)
        session = self.session
        if session is None:
            with self._lock:
                if self.session is None:
                    self.session = self._make_session(self.model_path)
                session = self.session
        (out,) = session.run([OUTPUT_NAME], {"input_ids": ids, "attention_mask": mask})
        return np.asarray(out, dtype=np.float32)

    def info(self) -> dict[str, Any]:
        return {
            "backend": "onnxruntime",
            "name": self.name,
            "variant": self.variant,
            "variants": list(self.manifest["variants"]),
            "providers": list(self.providers),
            "device": self.device,
            "variant_reason": self.variant_reason,
            "threads": self.threads or os.cpu_count(),
            "files": {"model": self.model_path.name, "scorer": "scorer.json", "tokenizer": "tokenizer.json",
                      **({} if self.prefix is None else self.prefix.files)},
            "prefix_reuse": self.prefix is not None,
            "artifact_dir": str(self.artifact_dir),
            "scorer_fingerprint": self.scorer.spec.fingerprint(),
            "n_labels": self.scorer.spec.n_labels,
            "label_tokens": list(self.scorer.spec.label_tokens),
            "quantization": self.manifest.get("quantization", {}).get(self.variant),
            "r3edge_version": self.manifest.get("r3edge_version"),
        }

    def close(self) -> None:
        self.session = None
        if self.prefix is not None:
            self.prefix.close()
