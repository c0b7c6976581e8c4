"""The PyTorch reference runtime: the student's own scoring graph (:func:`r3edge.model.student.scoring_module`).

It is what ONNX exports are compared with (``r3edge eval --student``) and what runs the student on
GPU machines here (no onnxruntime-gpu or TensorRT can be installed offline). The server never
loads it: serving is ONNX Runtime only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from r3edge.core.artifact import Runtime, check_inputs
from r3edge.core.errors import InvalidInput, NotFound

_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


class TorchRuntime(Runtime):
    """Loads a student directory (HF weights + scorer.json + tokenizer.json) and scores under no_grad."""

    def __init__(self, student_dir: str | Path, variant: str | None = None, threads: int | None = None,
                 device: str | None = None):
        import torch

        from r3edge.model.student import load_student, scoring_module

        variant = variant or "fp32"
        if variant not in _DTYPES:
            raise InvalidInput(f"torch runtime has no variant {variant!r}", f"use one of {', '.join(_DTYPES)}")
        if threads:
            torch.set_num_threads(int(threads))
        self.student_dir = Path(student_dir)
        if not (self.student_dir / "config.json").is_file():
            raise NotFound(
                f"{self.student_dir} is not a student directory (no config.json)",
                "--backend torch serves a directory written by `r3edge train`; an ONNX artifact needs --backend onnxruntime",
            )
        lm, scorer = load_student(self.student_dir, dtype=_DTYPES[variant])
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = scoring_module(lm, scorer).to(self.device).eval()
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
