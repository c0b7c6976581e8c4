"""What the stages that train with the transformers Trainer share (the student's ``r3edge train`` and
the judge's ``r3edge teacher sft``).

**Several processes** (``accelerate launch --multi_gpu --num_processes N -m r3edge train ...``; on CPU the
same command trains over gloo). The config's ``batch_size`` × ``gradient_accumulation_steps`` is the
global batch of one optimiser step whatever N is (:func:`per_device_batches` splits it), the length-grouped
order is drawn for that global batch (:class:`GlobalBatchTrainer`), so N processes take the optimiser steps
one process takes, each on its shard of every step (accelerate's data loader deals out the micro-batches;
DDP averages the gradients). Only the main process prints progress and writes the output; the callbacks
that can end or skip a step decide it together (:func:`any_process`), so no process waits alone in a
collective.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch
from safetensors.torch import save_model
from transformers import PreTrainedModel, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.utils import SAFE_WEIGHTS_NAME

from r3edge.core.errors import ErrorKind, InvalidInput, R3EdgeError
from r3edge.core.progress import Progress


def process_state():
    """This process among those a launcher started (``accelerate launch``, ``torchrun``; one process
    without one): accelerate's ``PartialState``, the singleton the Trainer's arguments set up too
    (``num_processes``, ``process_index``, ``is_main_process``)."""
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def main_process_log(log: Callable[..., None] = print) -> Callable[..., None]:
    """``log`` on the main process, a no-op on the others: one set of lines per run, not one per process."""
    return log if process_state().is_main_process else (lambda *a, **k: None)


def any_process(flag: bool, device: torch.device | str = "cpu") -> bool:
    """``flag`` or'ed over every training process. A collective: every process calls it at the same point
    of the same step (one process alone: ``flag``)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    t = torch.tensor([int(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def per_device_batches(batch_size: int, accumulation: int, processes: int, *, unit: int = 1,
                       batch_field: str | None = "train.batch_size") -> tuple[int, int]:
    """``(per-device batch, gradient accumulation steps)`` for ``processes`` processes whose optimiser step
    holds ``batch_size × accumulation`` rows, as one process's does.

    The batch is split first (``batch_size / processes``, which must stay a multiple of ``unit``: whole
    query groups), else the accumulation (``accumulation / processes`` micro-batches of ``batch_size`` per
    process); neither dividing is an error naming the fields. ``batch_field`` None: the batch is one
    indivisible item (an SFT shared-prefix chunk), only the accumulation splits.
    """
    if processes == 1:
        return batch_size, accumulation
    if batch_field is not None and batch_size % (processes * unit) == 0:
        return batch_size // processes, accumulation
    if accumulation % processes == 0:
        return batch_size, accumulation // processes
    what = (f"{batch_field} {batch_size} × train.gradient_accumulation_steps {accumulation}" if batch_field is not None
            else f"train.gradient_accumulation_steps {accumulation} (a micro-batch is one shared-prefix chunk per process)")
    fix = (f"set {batch_field} to a multiple of {processes * unit} or " if batch_field is not None else "set ")
    raise InvalidInput(f"the global batch of {what} cannot be split evenly over {processes} processes, so they would not take "
                       "the optimiser steps one process takes",
                       f"{fix}train.gradient_accumulation_steps to a multiple of {processes}")


class GlobalBatchTrainer(Trainer):
    """A Trainer whose length-grouped order does not depend on the number of processes.

    transformers groups lengths by the per-process batch (``train_batch_size × gradient_accumulation_steps``),
    so the order it draws, and with it every step, would change with N. Here the groups are drawn for the
    global batch of a step; accelerate then deals each step's rows out to the processes.
    """

    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        args = self.args
        if args.train_sampling_strategy != "group_by_length" or dataset is None or args.length_column_name not in getattr(
                dataset, "column_names", ()):
            return super()._get_train_sampler(train_dataset)
        return LengthGroupedSampler(args.train_batch_size * args.gradient_accumulation_steps * args.world_size,
                                    dataset=dataset, lengths=dataset[args.length_column_name])

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """A checkpoint's weights. The Trainer saves a model that is not a ``PreTrainedModel`` (a scoring
        graph) as its state dict, which safetensors refuses where an LM ties its input and output
        embeddings; ``safetensors.torch.save_model`` keeps one name of each shared tensor, and the
        Trainer's non-strict load fills the tie through it."""
        if isinstance(self.model, PreTrainedModel) or state_dict is not None:
            return super()._save(output_dir, state_dict)
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if self.args.should_save:
            os.makedirs(output_dir, exist_ok=True)
            save_model(self.model, os.path.join(output_dir, SAFE_WEIGHTS_NAME), metadata={"format": "pt"})

    def _issue_warnings_after_load(self, load_result) -> None:
        """After the Trainer loads a checkpoint's weights (non-strictly): a tied name that :meth:`_save`
        left out is filled through its twin; any other weight missing or unexpected is an error, since
        training would go on from weights that are not the checkpoint's."""
        state = self.model.state_dict()
        loaded = {state[k].data_ptr() for k in state if k not in set(load_result.missing_keys)}
        missing = [k for k in load_result.missing_keys if state[k].data_ptr() not in loaded]
        if missing or load_result.unexpected_keys:
            raise InvalidInput(f"the checkpoint does not fit the model: missing {missing[:5]}, "
                               f"unexpected {list(load_result.unexpected_keys)[:5]}",
                               "resume with the student config the run was started with, or start afresh")


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
        """``loss``, or, where it is not finite, a zero that stays on the graph (noted; the optimiser step
        skips or stops). On the graph: under DDP every process's backward must reach the weights, or the
        others wait for its gradients forever; the gradients it leaves are dropped with the step's."""
        if bool(torch.isfinite(loss.detach()).all()):
            return loss
        if self._bad_loss is None:
            self._bad_loss = f"the loss is {float(loss.detach().float().mean())}"
        return loss.nan_to_num(0.0, 0.0, 0.0) * 0.0

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        params = list(model.parameters())
        grads = [p.grad for p in params if p.grad is not None]
        finite = not grads or bool(torch.isfinite(torch.stack(torch._foreach_norm(grads))).all())
        if not any_process(self._bad_loss is not None or not finite, params[0].device if params else "cpu"):
            return
        if self._bad_loss is None:
            self._bad_loss = "the gradients are not finite" if not finite else "another process's loss is not finite"
        self._allow(state.global_step)
        for p in params:
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
    lent machine saves a model inside its call; ``stopped_at`` is that step (None: it ran to the end).
    Processes stop together: after the step where any of them passed the time."""

    def __init__(self, seconds: float | None):
        self.seconds, self.stopped_at = seconds, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self.seconds is None:
            return
        if (any_process(time.perf_counter() - self.t0 > self.seconds, args.device)
                and state.global_step < state.max_steps):
            self.stopped_at = state.global_step
            control.should_training_stop = True


class CheckpointClock(TrainerCallback):
    """Asks the Trainer for a resumable checkpoint (its own ``checkpoint-N``: weights, optimiser,
    schedule, RNG, the step reached) after the step that passes ``seconds`` since the last one, and
    at the step where a callback before this one ended training early (:class:`TimeBudget`), so a run
    cut by its budget resumes exactly where it ended. Processes decide together."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_train_begin(self, args, state, control, **kwargs):
        self.last = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        due = any_process(time.perf_counter() - self.last >= self.seconds, args.device)
        if due or (control.should_training_stop and state.global_step < state.max_steps):
            control.should_save = True
            self.last = time.perf_counter()


class ProgressCallback(TrainerCallback):
    """Steps with rate, ETA and the latest loss, as plain lines (the demo and CI have no TTY), from the
    main process only.

    ``extra`` is called at every step for a suffix such as ``"812 tok/s"``.
    """

    def __init__(self, desc: str = "train", extra: Callable[[], str] | None = None):
        self.desc, self.extra = desc, extra
        self.bar: Progress | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        # a resumed run counts on from its checkpoint's step, and its rate and ETA are this sitting's
        self.bar = Progress(state.max_steps, self.desc, initial=state.global_step) if state.is_world_process_zero else None

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(extra=self.extra() if self.extra else "")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is not None and logs and "loss" in logs:
            self.bar.desc = f"{self.desc} (loss {logs['loss']:.4f})"

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()


def training_arguments(output_dir: str, params, *, bf16: bool, epochs: float | None = None,
                       max_steps: int | None = None, batch_unit: int = 1, batch_field: str | None = "train.batch_size",
                       **extra) -> TrainingArguments:
    """The Trainer settings both stages use, from a ``TrainParams`` / ``SFTParams`` config block.

    No checkpoints unless ``extra`` asks for them (the stage saves its own output atomically), progress from
    :class:`ProgressCallback` instead of tqdm, seeded data order, and length-grouped batches: the
    kernels pay for padded tokens as much as for real ones. The per-device batch and accumulation are
    :func:`per_device_batches` of the config's for this run's processes (``batch_unit``, ``batch_field``: its
    keywords).
    """
    per_device, accumulation = per_device_batches(params.batch_size, params.gradient_accumulation_steps,
                                                  process_state().num_processes, unit=batch_unit, batch_field=batch_field)
    settings = dict(
        output_dir=output_dir,
        num_train_epochs=epochs if epochs is not None else params.epochs,
        max_steps=max_steps if max_steps is not None else -1,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
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
