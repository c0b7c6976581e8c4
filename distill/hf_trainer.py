"""What the stages that train with the transformers Trainer share (the student's ``r3edge train`` and
the judge's ``r3edge teacher sft``)."""

from __future__ import annotations

from collections.abc import Callable

from transformers import TrainerCallback

from r3edge.core.progress import Progress


class ProgressCallback(TrainerCallback):
    """Steps with rate, ETA and the latest loss, as plain lines (the demo and CI have no TTY).

    ``extra`` is called at every step for a suffix such as ``"812 tok/s"``.
    """

    def __init__(self, desc: str = "train", extra: Callable[[], str] | None = None):
        self.desc, self.extra = desc, extra

    def on_train_begin(self, args, state, control, **kwargs):
        self.bar = Progress(state.max_steps, self.desc)

    def on_step_end(self, args, state, control, **kwargs):
        self.bar.update(extra=self.extra() if self.extra else "")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.bar.desc = f"{self.desc} (loss {logs['loss']:.4f})"

    def on_train_end(self, args, state, control, **kwargs):
        self.bar.close()
