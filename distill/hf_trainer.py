"""What the stages that train with the transformers Trainer share (the student's ``r3edge train`` and
the judge's ``r3edge teacher sft``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import TrainerCallback, TrainingArguments

from r3edge.core.errors import ErrorKind, R3EdgeError
from r3edge.core.progress import Progress


def require_finite(loss: torch.Tensor, step: int) -> torch.Tensor:
    """``loss``, or a QUALITY error at the first step whose loss is NaN or inf.

    The Trainer keeps going after a non-finite loss (its log filters it out, and clipping a NaN
    gradient norm writes NaN into every weight), then saves the NaN weights, which label or score
    everything NaN. Stopping at that step saves the rest of the run's time and never writes them.
    """
    if not bool(torch.isfinite(loss.detach()).all()):
        raise R3EdgeError(f"training diverged at step {step + 1}: the loss is {float(loss.detach().float().mean())}; "
                          "nothing was saved",
                          "lower train.learning_rate, or train in fp32 (train.bf16: false)", kind=ErrorKind.QUALITY)
    return loss


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


def training_arguments(output_dir: str, params, *, bf16: bool, epochs: float | None = None,
                       max_steps: int | None = None, **extra) -> TrainingArguments:
    """The Trainer settings both stages use, from a ``TrainParams`` / ``SFTParams`` config block.

    No checkpoints unless ``extra`` asks for them (the stage saves its own output atomically), progress from
    :class:`ProgressCallback` instead of tqdm, seeded data order, and length-grouped batches: the
    kernels pay for padded tokens as much as for real ones.
    """
    settings = dict(
        output_dir=output_dir,
        num_train_epochs=epochs if epochs is not None else params.epochs,
        max_steps=max_steps if max_steps is not None else -1,
        per_device_train_batch_size=params.batch_size,
        gradient_accumulation_steps=params.gradient_accumulation_steps,
        learning_rate=params.learning_rate,
        warmup_steps=params.warmup_ratio,  # transformers 5 reads a value below 1 as a ratio
        weight_decay=params.weight_decay,
        bf16=bf16,
        use_cpu=not torch.cuda.is_available(),
        seed=params.seed,
        data_seed=params.seed,
        logging_steps=params.logging_steps,
        logging_first_step=True,
        save_strategy="no",
        disable_tqdm=True,
        report_to=[],
        remove_unused_columns=False,
        dataloader_pin_memory=False,
        train_sampling_strategy="group_by_length",
        length_column_name="length",
    )
    return TrainingArguments(**{**settings, **extra})
