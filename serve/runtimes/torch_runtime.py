"""The PyTorch reference runtime: the student's own :class:`distill.student.LabelScorer`.

It is what every ONNX export is checked against and what GPU machines here serve with (no
onnxruntime-gpu or TensorRT can be installed offline). It is the only module under ``serve/``
that imports torch, and only when ``--backend torch`` asks for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from r3edge.errors import R3EdgeError
from serve.runtimes.base import Runtime, check_inputs

_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


class TorchRuntime(Runtime):
    """Loads a student directory (HF weights + scorer.json + tokenizer.json) and scores under no_grad."""

    def __init__(self, student_dir: str | Path, variant: str | None = None, threads: int | None = None,
                 device: str | None = None):
        import torch

        from distill.student import LabelScorer, load_student

        variant = variant or "fp32"
        if variant not in _DTYPES:
            raise R3EdgeError(f"torch runtime has no variant {variant!r}", f"use one of {', '.join(_DTYPES)}")
        if threads:
            torch.set_num_threads(int(threads))
        self.student_dir = Path(student_dir)
        if not (self.student_dir / "config.json").is_file():
            raise R3EdgeError(
                f"{self.student_dir} is not a student directory (no config.json)",
                "--backend torch serves a directory written by `r3edge train`; an ONNX artifact needs --backend onnxruntime",
            )
        lm, scorer = load_student(self.student_dir, dtype=_DTYPES[variant])
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = LabelScorer(lm, scorer.spec.label_token_ids).to(self.device).eval()
        self.scorer = scorer
        self.variant = variant
        self.name = f"torch-{self.device.type}:{variant}"
        self._torch = torch

    def label_logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        ids, mask = check_inputs(input_ids, attention_mask)
        torch = self._torch
        with torch.inference_mode():
            out = self.model(torch.from_numpy(ids).to(self.device), torch.from_numpy(mask).to(self.device))
        return out.float().cpu().numpy()

    def info(self) -> dict[str, Any]:
        torch = self._torch
        return {
            "runtime": "torch",
            "variant": self.variant,
            "device": str(self.device),
            "threads": torch.get_num_threads(),
            "torch_version": torch.__version__,
            "artifact": str(self.student_dir),
            "scorer_fingerprint": self.scorer.spec.fingerprint(),
        }
