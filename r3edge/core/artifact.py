"""The artifact contract (contract 4): file names, graph inputs/outputs, the versioned manifest,
and the runtime interface every scorer of an artifact implements.

A runtime is one scoring graph bound to the scorer spec it was exported with. Callers never format
inputs themselves: they ask ``runtime.scorer`` (the one formatter) for ids and hand them to
:meth:`Runtime.label_logits`. Implementations: :class:`r3edge.core.onnx_runtime.OnnxRuntime`
(torch-free, what the server loads), :class:`r3edge.core.openvino_runtime.OpenVinoRuntime` (torch-free,
the OpenVINO IR variants) and :class:`r3edge.model.torch_runtime.TorchRuntime` (the PyTorch reference
that exports are checked against). :func:`r3edge.core.runtime_loader.open_runtime` picks the
torch-free one a variant needs from the manifest.

This module stays torch-free (the server runs without torch).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from r3edge.core.errors import FormatError, InvalidInput, NotFound, check_format_version
from r3edge.core.scoring import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, Scorer

MANIFEST_FILE = "manifest.json"
#: Written into every artifact manifest; readers refuse any other value.
ARTIFACT_FORMAT = "r3edge-artifact/1"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "label_logits"
#: Manifest key of a student's prefix-reuse graphs: ``{variant: {"prefix": file, "candidate":
#: file, "layers": L}}``. The prefix graph maps ``input_ids [1, P]`` to ``present_key_i`` /
#: ``present_value_i`` ``[1, kv_heads, P, head_dim]``; the candidate graph maps ``input_ids``,
#: ``attention_mask`` ``[B, S]`` (document + tail only) and ``past_key_i`` / ``past_value_i`` (the
#: prefix graph's outputs) to ``label_logits [B, n_labels]``. A cosine student's entry has ``layers``
#: 0 and ``"state": ["query_embedding"]``: the prefix graph maps ``input_ids [1, P]`` to the query's
#: embedding ``[1, hidden]``, which the candidate graph takes beside ``input_ids`` and ``attention_mask``.
#: Each variant that has the entry has its own two files. Optional: artifacts without it are scored
#: through the single graph.
PREFIX_GRAPHS = "prefix_graphs"
#: Manifest key ``{variant: runtime}``: which runtime scores each variant's file, ``onnxruntime`` (an
#: ONNX graph) or ``openvino`` (an OpenVINO IR ``.xml``, its weights in the ``.bin`` beside it). A
#: variant absent from it, and every variant of an artifact written before the key existed, is ONNX.
RUNTIMES = "runtimes"
RUNTIME_NAMES = ("onnxruntime", "openvino")
#: Manifest key of the OpenVINO variants' settings: ``{variant: {"inference_precision": "f32"}}``, the
#: precision the export's parity checks compiled the IR with (its weights are the ``.bin`` beside the ``.xml``).
OPENVINO = "openvino"
#: Manifest key: the graph files that remove padding themselves (ONNX Runtime's packing mode, the
#: ``fp16-packed`` variant), whose micro-batches cost their real tokens (``Runtime.packed``). Absent: none.
PACKED_GRAPHS = "packed_graphs"


def cache_names(kind: str, layers: int) -> list[str]:
    """``[kind_key_0, kind_value_0, kind_key_1, ...]`` for ``kind`` ``past`` or ``present``."""
    return [f"{kind}_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]


class Runtime(ABC):
    """``(input_ids, attention_mask) -> label_logits`` plus the scorer that made the ids.

    Attributes every implementation sets:

    * ``scorer`` — :class:`r3edge.core.scoring.Scorer` loaded from the artifact (or student) directory.
    * ``name`` — short human label, e.g. ``"onnxruntime-cpu:int8"`` or ``"torch-cpu:fp32"``.
    * ``max_batch_tokens``, ``max_batch_size`` — the token budget and the pairs of one micro-batch
      on the device it opened (:func:`r3edge.core.scoring.default_batch_limits`); the server's engine reads them.
    * ``packed`` — the graph removes padding itself (the ``fp16-packed`` variant), so a micro-batch
      costs its real tokens and the budget counts those (:func:`r3edge.core.scoring.plan_batches`),
      not batch x longest.
    * ``device`` — where its session actually runs (``cpu``, ``cuda``, ``tensorrt``).
    * ``variant_reason`` — why this variant runs (set by :func:`r3edge.core.runtime_loader.open_runtime`:
      asked for, the GPU default, or the manifest's default with the reason the export recorded).
    """

    scorer: Scorer
    name: str
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    device: str = "cpu"
    variant_reason: str = "opened directly"
    packed: bool = False

    @abstractmethod
    def label_logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """int64 ``[B, T]`` ids and mask -> float32 ``[B, n_labels]`` (one row per pair).

        Implementations must be batch invariant up to float noise: a pair's row must not depend
        on which other pairs share its micro-batch (the candidates of one request are length-sorted
        into micro-batches, so a pair's batchmates change with the rest of the request).
        """

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """What is being served: ``variant``, ``providers``, ``files``, ``scorer_fingerprint``, ..."""

    # Convenience shared by every backend: lets a runtime be passed as ``run_batch`` to
    # :func:`r3edge.core.scoring.score_pairs`.
    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return self.label_logits(input_ids, attention_mask)

    def close(self) -> None:  # noqa: B027  (optional hook: most runtimes hold nothing to release)
        """Release sessions/threads; optional."""


def check_inputs(input_ids: np.ndarray, attention_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coerce to contiguous int64 and check shapes, so every backend rejects the same bad input."""
    ids = np.ascontiguousarray(input_ids, dtype=np.int64)
    mask = np.ascontiguousarray(attention_mask, dtype=np.int64)
    if ids.ndim != 2 or ids.shape != mask.shape:
        raise InvalidInput(
            f"input_ids {ids.shape} and attention_mask {mask.shape} must be the same 2-D [batch, seq] shape",
            "build inputs with Scorer.collate",
        )
    return ids, mask


def read_manifest(artifact_dir: str | Path) -> dict[str, Any]:
    """``manifest.json`` of an export artifact: ``format``, ``variants`` {name: file}, ``default``, ..."""
    artifact_dir = Path(artifact_dir)
    path = artifact_dir / MANIFEST_FILE
    if not artifact_dir.is_dir():
        raise NotFound(f"artifact directory {artifact_dir} does not exist", "run `r3edge export STUDENT_DIR --out DIR` first")
    if not path.is_file():
        raise NotFound(
            f"artifact {artifact_dir} has no {MANIFEST_FILE}",
            "point at a directory written by `r3edge export` (a student directory is scored with `r3edge eval --student`)",
        )
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path} is not valid JSON ({exc})", "re-run `r3edge export`") from exc
    if not isinstance(manifest, dict):
        raise FormatError(f"{path} is not an r3edge manifest", "re-run `r3edge export`")
    check_format_version(manifest.get("format"), ARTIFACT_FORMAT, str(path),
                         "re-export the student with this r3edge version (`r3edge export`)")
    variants = manifest.get("variants")
    if not isinstance(variants, dict) or not variants or manifest.get("default") not in variants:
        raise FormatError(f"{path} lists no variants or a default that is not one of them", "re-run `r3edge export`")
    return manifest


def variant_runtime(manifest: dict[str, Any], variant: str) -> str:
    """The runtime that scores ``variant`` (:data:`RUNTIMES`; ``onnxruntime`` when the manifest names none)."""
    runtime = (manifest.get(RUNTIMES) or {}).get(variant, "onnxruntime")
    if runtime not in RUNTIME_NAMES:
        raise FormatError(f"{MANIFEST_FILE} says variant {variant!r} runs on {runtime!r}; this r3edge knows "
                          f"{', '.join(RUNTIME_NAMES)}", "re-export the student with this r3edge version (`r3edge export`)")
    return runtime


@dataclass(frozen=True)
class ArtifactVariant:
    """One variant of an artifact, checked: its manifest, its scorer, its name and its model file."""

    artifact_dir: Path
    manifest: dict[str, Any]
    scorer: Scorer
    variant: str
    path: Path


def open_variant(artifact_dir: str | Path, variant: str | None, runtime: str) -> ArtifactVariant:
    """Read and check what every runtime of ``runtime``'s kind needs before it loads a graph.

    The manifest's format, the scorer against the fingerprint the graph was exported with, that the
    variant exists (``None``: the manifest's default), is scored by ``runtime`` and that its file is
    there; each failure is a typed error with its fix, so a wrong artifact fails when it is opened.
    """
    artifact_dir = Path(artifact_dir)
    manifest = read_manifest(artifact_dir)
    # Scorer.load fails with a fix when scorer.json is missing or its label ids do not belong
    # to tokenizer.json (files mixed from two models).
    scorer = Scorer.load(artifact_dir)
    fp = manifest.get("scorer_fingerprint")
    if fp and fp != scorer.spec.fingerprint():
        raise FormatError(
            f"{artifact_dir}/scorer.json differs from the spec the graph was exported with "
            f"(fingerprint {scorer.spec.fingerprint()} != {fp} in {MANIFEST_FILE})",
            "do not edit scorer.json inside an artifact; re-export from the student directory",
        )
    variants: dict[str, str] = manifest["variants"]
    name = variant or manifest["default"]
    if name not in variants:
        raise InvalidInput(
            f"artifact {artifact_dir} has no variant {name!r} (it has {', '.join(variants)})",
            f"pick one of {', '.join(variants)}, or re-export with --variants {name}", field="variant",
        )
    found = variant_runtime(manifest, name)
    if found != runtime:
        raise InvalidInput(f"variant {name!r} of {artifact_dir} is scored by {found}, not {runtime}",
                           "open artifacts with r3edge.core.runtime_loader.open_runtime, which picks the runtime "
                           "from the manifest", field="variant")
    path = artifact_dir / variants[name]
    if not path.is_file():
        raise NotFound(f"{path} listed in {MANIFEST_FILE} is missing", "re-run `r3edge export`")
    return ArtifactVariant(artifact_dir, manifest, scorer, name, path)


def write_manifest(artifact_dir: str | Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` with the format version stamped in (paths inside must be relative)."""
    body = {"format": ARTIFACT_FORMAT, **{k: v for k, v in manifest.items() if k != "format"}}
    (Path(artifact_dir) / MANIFEST_FILE).write_text(json.dumps(body, indent=2) + "\n")
