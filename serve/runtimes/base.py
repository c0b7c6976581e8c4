"""The runtime interface the server, the benchmarks and the parity checks program against.

A runtime is one scoring graph (contract 4) bound to the scorer spec it was exported with. The
server never formats inputs itself: it asks ``runtime.scorer`` (the one formatter) for ids and
hands them to :meth:`Runtime.label_logits`. Keeping the interface this small lets the ONNX
Runtime, TensorRT and torch reference backends be swapped without touching the server.

This module must stay torch-free (the server runs without torch).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np

from r3edge.errors import R3EdgeError
from r3edge.scoring import Scorer

MANIFEST_FILE = "manifest.json"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "label_logits"


class Runtime(ABC):
    """``(input_ids, attention_mask) -> label_logits`` plus the scorer that made the ids.

    Attributes every implementation sets:

    * ``scorer`` — :class:`r3edge.scoring.Scorer` loaded from the artifact (or student) directory.
    * ``name`` — short human label, e.g. ``"onnxruntime-cpu:int8"`` or ``"torch-cpu:fp32"``.
    """

    scorer: Scorer
    name: str

    @abstractmethod
    def label_logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """int64 ``[B, T]`` ids and mask -> float32 ``[B, n_labels]`` (one row per pair).

        Implementations must be batch invariant up to float noise: a pair's row must not depend
        on which other pairs share its batch, because the server batches unrelated requests.
        """

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """What is being served: ``variant``, ``providers``, ``files``, ``scorer_fingerprint``, ..."""

    # Convenience shared by every backend: lets a runtime be passed as ``run_batch`` to
    # :func:`r3edge.scoring.score_pairs`.
    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return self.label_logits(input_ids, attention_mask)

    def close(self) -> None:
        """Release sessions/threads; optional."""


def check_inputs(input_ids: np.ndarray, attention_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coerce to contiguous int64 and check shapes, so every backend rejects the same bad input."""
    ids = np.ascontiguousarray(input_ids, dtype=np.int64)
    mask = np.ascontiguousarray(attention_mask, dtype=np.int64)
    if ids.ndim != 2 or ids.shape != mask.shape:
        raise R3EdgeError(
            f"input_ids {ids.shape} and attention_mask {mask.shape} must be the same 2-D [batch, seq] shape",
            "build inputs with Scorer.collate",
        )
    return ids, mask


def read_manifest(artifact_dir: str | Path) -> dict[str, Any]:
    """``manifest.json`` of an export artifact: ``variants`` {name: file}, ``default``, ``n_labels``, ..."""
    artifact_dir = Path(artifact_dir)
    path = artifact_dir / MANIFEST_FILE
    if not artifact_dir.is_dir():
        raise R3EdgeError(f"artifact directory {artifact_dir} does not exist", "run `r3edge export STUDENT_DIR --out DIR` first")
    if not path.is_file():
        raise R3EdgeError(
            f"artifact {artifact_dir} has no {MANIFEST_FILE}",
            "point at a directory written by `r3edge export` (a student directory needs `--backend torch`)",
        )
    try:
        manifest = json.loads(path.read_text())
        variants = manifest["variants"]
        manifest["default"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise R3EdgeError(f"{path} is not a valid r3edge manifest ({exc})", "re-run `r3edge export`") from exc
    if not isinstance(variants, dict) or not variants:
        raise R3EdgeError(f"{path} lists no variants", "re-run `r3edge export`")
    return manifest
