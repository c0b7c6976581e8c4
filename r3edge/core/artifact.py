"""The artifact contract (contract 4): file names, graph inputs/outputs, the versioned manifest,
and the runtime interface every scorer of an artifact implements.

A runtime is one scoring graph bound to the scorer spec it was exported with. Callers never format
inputs themselves: they ask ``runtime.scorer`` (the one formatter) for ids and hand them to
:meth:`Runtime.label_logits`. Implementations: :class:`r3edge.core.onnx_runtime.OnnxRuntime`
(torch-free, what the server loads) and :class:`r3edge.model.torch_runtime.TorchRuntime` (the
PyTorch reference that exports are checked against).

This module stays torch-free (the server runs without torch).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np

from r3edge.core.errors import FormatError, InvalidInput, NotFound, check_format_version
from r3edge.core.scoring import Scorer

MANIFEST_FILE = "manifest.json"
#: Written into every artifact manifest; readers refuse any other value.
ARTIFACT_FORMAT = "r3edge-artifact/1"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "label_logits"
#: Manifest key of a causal student's prefix-reuse graphs: ``{variant: {"prefix": file, "candidate":
#: file, "layers": L}}``. The prefix graph maps ``input_ids [1, P]`` to ``present_key_i`` /
#: ``present_value_i`` ``[1, kv_heads, P, head_dim]``; the candidate graph maps ``input_ids``,
#: ``attention_mask`` ``[B, S]`` (document + tail only) and ``past_key_i`` / ``past_value_i`` (the
#: prefix graph's outputs) to ``label_logits [B, n_labels]``. Optional: artifacts without it are
#: scored through the single graph.
PREFIX_GRAPHS = "prefix_graphs"


def cache_names(kind: str, layers: int) -> list[str]:
    """``[kind_key_0, kind_value_0, kind_key_1, ...]`` for ``kind`` ``past`` or ``present``."""
    return [f"{kind}_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]


class Runtime(ABC):
    """``(input_ids, attention_mask) -> label_logits`` plus the scorer that made the ids.

    Attributes every implementation sets:

    * ``scorer`` — :class:`r3edge.core.scoring.Scorer` loaded from the artifact (or student) directory.
    * ``name`` — short human label, e.g. ``"onnxruntime-cpu:int8"`` or ``"torch-cpu:fp32"``.
    """

    scorer: Scorer
    name: str

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


def write_manifest(artifact_dir: str | Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` with the format version stamped in (paths inside must be relative)."""
    body = {"format": ARTIFACT_FORMAT, **{k: v for k, v in manifest.items() if k != "format"}}
    (Path(artifact_dir) / MANIFEST_FILE).write_text(json.dumps(body, indent=2) + "\n")
