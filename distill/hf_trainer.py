"""What the stages that train with the transformers Trainer share (the student's ``r3edge train`` and
the judge's ``r3edge teacher sft``)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from transformers import TrainerCallback, TrainingArguments

from r3edge.core.errors import ErrorKind, R3EdgeError
from r3edge.core.progress import Progress


class FiniteSteps(TrainerCallback):
    """Skips up to ``budget`` optimiser steps whose loss or gradients are NaN or inf; a QUALITY error at
    the next one, before anything is saved.

    The Trainer keeps going after a non-finite loss (its log filters it out, and clipping a NaN
    gradient norm writes NaN into every weight), then saves the NaN weights, which label or score
    everything NaN. A skipped step drops its gradients (the optimiser leaves every weight and its
    moments as they were), as fp16 loss scaling skips an overflowed step; ``skipped`` lists the
    skipped steps (1-based) for the report. ``budget`` 0 stops at the first; a run that skipped every
    step stops too.
    """

    def __init__(self, budget: int = 0):
        self.budget, self.skipped = budget, []
        self._bad_loss: str | None = None

    def loss(self, loss: torch.Tensor, step: int) -> torch.Tensor:
        """``loss``, or, where it is not finite, a zero with no gradient once the step is allowed to skip."""
        if bool(torch.isfinite(loss.detach()).all()):
            return loss
        self._bad_loss = f"the loss is {float(loss.detach().float().mean())}"
        self._allow(step)
        return loss.new_zeros((), requires_grad=True)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        finite = not grads or bool(torch.isfinite(torch.stack(torch._foreach_norm(grads))).all())
        if self._bad_loss is None and finite:
            return
        if self._bad_loss is None:
            self._bad_loss = "the gradients are not finite"
            self._allow(state.global_step)
        for p in model.parameters():
            p.grad = None
        self.skipped.append(state.global_step + 1)
        self._bad_loss = None

    def on_train_end(self, args, state, control, **kwargs):
        if self.skipped and len(self.skipped) >= state.global_step:
            raise R3EdgeError(f"training skipped every one of its {state.global_step} steps (non-finite loss or gradients); "
                              "nothing was saved", "check the base weights and the data; lower train.learning_rate",
                              kind=ErrorKind.QUALITY)

    def _allow(self, step: int) -> None:
        if len(self.skipped) >= self.budget:
            raise R3EdgeError(f"training diverged at step {step + 1}: {self._bad_loss}"
                              f"{f' after {len(self.skipped)} skipped steps {self.skipped}' if self.skipped else ''}; "
                              "nothing was saved",
                              "lower train.learning_rate, or train in fp32 (train.bf16: false)", kind=ErrorKind.QUALITY)


class TimeBudget(TrainerCallback):
    """Ends training after the step that passes ``seconds`` of training (None: no limit), so a run on a
    lent machine saves a model inside its call; ``stopped_at`` is that step (None: it ran to the end)."""

    def __init__(self, seconds: float | None):
        self.seconds, self.stopped_at = seconds, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if (self.seconds is not None and time.perf_counter() - self.t0 > self.seconds
                and state.global_step < state.max_steps):
            self.stopped_at = state.global_step
            control.should_training_stop = True


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
