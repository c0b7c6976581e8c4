"""Distil teacher labels into a student trained on the label logits only.

The student never sees the teacher's reasoning and never projects the full vocabulary: the loss is
KL(teacher probs ‖ softmax(label logits)) (:func:`distillation_loss`) on the graph
:func:`~r3edge.model.student.scoring_module` builds (a causal LM's label-token rows, or an encoder's
n-label head), the same graph that export traces and the server runs, so what is optimised is
exactly what is served. Inputs are
formatted only by the :class:`~r3edge.core.scoring.Scorer` fixed when the student is created, and that
scorer is saved with the weights.

Under ``accelerate launch`` every process reads the labels and builds the same student (same seed);
the data loader gives each its share of every step (:mod:`r3edge.distill.hf_trainer`), and the main
process alone prints and saves.
"""

from __future__ import annotations

import io
import json
import math
import platform
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from datasets import Dataset
from transformers import TrainerCallback, set_seed

from r3edge.core.config import StudentConfig, TrainParams, load_yaml
from r3edge.core.errors import InvalidInput
from r3edge.core.labels import read_labels, read_labels_union, restrict_to_pairs
from r3edge.core.progress import Progress
from r3edge.core.scoring import Encoded, Scorer
from r3edge.distill.hf_trainer import (
    CheckpointClock,
    FiniteSteps,
    GlobalBatchTrainer,
    ProgressCallback,
    TimeBudget,
    main_process_log,
    process_state,
    training_arguments,
)
from r3edge.distill.student.checkpoints import open_run, run_identity, write_record
from r3edge.distill.student.losses import expected_scores, listwise_kl, margin_mse
from r3edge.distill.student.query_once import QUERY_ONCE_INPUTS, QueryOnceCosine, collate_query_once
from r3edge.model.loading import native_bf16
from r3edge.model.student import create_student, save_student, scoring_module

REPORT_FILE = "train_report.json"
PROB_TOLERANCE = 1e-3


class DistillCollator:
    """Pads through ``Scorer.collate`` so training batches look exactly like serving batches; with
    ``query_once``, as the prefix-reuse graphs read a request (:mod:`r3edge.distill.student.query_once`)."""

    def __init__(self, scorer: Scorer, query_once: bool = False):
        self.scorer, self.query_once = scorer, query_once

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if self.query_once:
            return {**collate_query_once(self.scorer, features), **self.targets(features)}
        encoded = [Encoded(f["input_ids"], f["doc_tokens"], f["doc_tokens_dropped"]) for f in features]
        ids, mask = self.scorer.collate(encoded)
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask), **self.targets(features)}

    @staticmethod
    def targets(features: list[dict]) -> dict[str, torch.Tensor]:
        """What the loss compares the logits with: teacher probs, gold labels (-1: none) and each row's query."""
        return {
            "teacher_probs": torch.tensor([f["teacher_probs"] for f in features], dtype=torch.float32),
            "gold": torch.tensor([f.get("gold", -1) for f in features], dtype=torch.long),
            # the row's query (rows without one are each a group of their own: no ranking term)
            "group": torch.tensor([f.get("group", -1 - i) for i, f in enumerate(features)], dtype=torch.long),
        }


class QueryGroupSampler(torch.utils.data.Sampler):
    """Row indices in whole-query groups, for the ranking losses (:mod:`r3edge.distill.student.losses`).

    Every epoch (each ``__iter__``) shuffles each query's rows, cuts them into groups of at most
    ``group_size`` and shuffles the groups, seeded by ``seed`` and the epoch. Emitted back to back,
    so a batch of ``k · group_size`` rows holds ``k`` groups when every query has a multiple of
    ``group_size`` rows; a shorter group shifts the ones after it, and a group a batch boundary cuts
    still ranks within each batch.
    """

    def __init__(self, groups: list[int], group_size: int, seed: int):
        self.group_size, self.seed, self.epoch = group_size, seed, 0
        by_query: dict[int, list[int]] = {}
        for i, g in enumerate(groups):
            by_query.setdefault(g, []).append(i)
        self.queries = [by_query[g] for g in sorted(by_query)]
        self.n = len(groups)

    def __len__(self) -> int:
        return self.n

    def set_epoch(self, epoch: int) -> None:
        """The Trainer names the epoch before each one, a resumed run the epoch it resumes in, so the
        skipped batches and the rest of the epoch are the order an unbroken run drew."""
        self.epoch = epoch

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        chunks = []
        for rows in self.queries:
            rows = rng.permutation(rows).tolist()
            chunks += [rows[i : i + self.group_size] for i in range(0, len(rows), self.group_size)]
        for k in rng.permutation(len(chunks)):
            yield from chunks[k]


class DistillTrainer(GlobalBatchTrainer):
    """A Trainer whose loss is :func:`distillation_loss` with the config's weights (``params``), and
    whose batches are whole-query groups when ``params.query_group_size`` is set."""

    params: TrainParams = TrainParams()
    label_values: tuple[float, ...] = ()
    finite = FiniteSteps()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, logits = distillation_loss(model, inputs, **_loss_settings(self.params, self.label_values))
        loss = self.finite.loss(loss, self.state.global_step)
        return (loss, logits) if return_outputs else loss

    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.params.query_group_size is None or "group" not in dataset.column_names:
            return super()._get_train_sampler(train_dataset)
        return QueryGroupSampler(dataset["group"], self.params.query_group_size, self.params.seed)


class BestEpoch(TrainerCallback):
    """Keeps the weights of the epoch with the lowest held-out loss (a copy in memory, no checkpoint
    files) and stops training after ``patience`` epochs without improvement."""

    def __init__(self, model: torch.nn.Module, patience: int | None):
        self.model, self.patience = model, patience
        self.loss: float | None = None
        self.epoch: float | None = None
        self.state: dict | None = None
        self.waited = 0

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        loss = (metrics or {}).get("eval_loss")
        if loss is None:
            return
        if self.loss is None or loss < self.loss:
            self.loss, self.epoch, self.waited = float(loss), float(state.epoch or 0.0), 0
            self.state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        else:
            self.waited += 1
            if self.patience is not None and self.waited >= self.patience:
                control.should_training_stop = True

    def restore(self) -> None:
        if self.state is not None:
            self.model.load_state_dict(self.state)


def distillation_loss(model: torch.nn.Module, inputs: dict[str, torch.Tensor], **settings) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, label logits)`` for a collated batch: :func:`logits_loss` (its keywords are ``settings``)
    on the label logits of ``model``, a scoring module. The loss sees only its ``[batch, n_labels]``
    output, so nothing else of an LM head receives a gradient."""
    extra = {k: inputs[k] for k in QUERY_ONCE_INPUTS if k in inputs}
    logits = model(inputs["input_ids"], inputs["attention_mask"], **extra).float()
    return logits_loss(logits, inputs, **settings), logits


def logits_loss(logits: torch.Tensor, inputs: dict[str, torch.Tensor], *, temperature: float = 1.0,
                gold_weight: float = 0.0, label_values: tuple[float, ...] = (), listwise_weight: float = 0.0,
                listwise_temperature: float = 1.0, margin_mse_weight: float = 0.0) -> torch.Tensor:
    """KL(teacher ‖ softmax(label logits)), batch-mean, plus the ranking terms; ``inputs`` needs
    ``teacher_probs`` (and ``gold``, ``group`` where their weights are set), no ids.

    At temperature ``T`` both sides are tempered (teacher ``p^(1/T)`` renormalised, student
    ``logits / T``) and the KL is scaled by ``T²`` so its gradients keep their size (Hinton et al.).
    The ranking terms are added to the KL with their weights: :func:`~r3edge.distill.student.losses.listwise_kl`
    and :func:`~r3edge.distill.student.losses.margin_mse` on the expected scores (``label_values``) of the
    rows that share a ``group`` (a query). With ``gold_weight`` w > 0 the loss is
    ``(1 - w)·teacher terms + w·CE(logits, gold)``, the CE averaged over the rows that have a gold
    label (``gold`` ≥ 0).
    """
    target = inputs["teacher_probs"]
    if listwise_weight > 0 or margin_mse_weight > 0:
        values = torch.tensor(label_values, dtype=torch.float32, device=logits.device)
        student, teacher = expected_scores(F.softmax(logits, dim=-1), values), expected_scores(target, values)
        groups = inputs["group"]
    if temperature != 1.0:
        target = target.clamp_min(1e-12) ** (1.0 / temperature)
        target = target / target.sum(-1, keepdim=True)
    loss = F.kl_div(F.log_softmax(logits / temperature, dim=-1), target, reduction="batchmean") * temperature**2
    if listwise_weight > 0:
        loss = loss + listwise_weight * listwise_kl(student, teacher, groups, listwise_temperature)
    if margin_mse_weight > 0:
        loss = loss + margin_mse_weight * margin_mse(student, teacher, groups)
    if gold_weight > 0:
        gold = inputs["gold"]
        has = gold >= 0
        ce = F.cross_entropy(logits[has], gold[has]) if bool(has.any()) else logits.sum() * 0
        loss = (1 - gold_weight) * loss + gold_weight * ce
    return loss


def _loss_settings(tp: TrainParams, label_values: tuple[float, ...]) -> dict:
    """The loss keywords of :func:`distillation_loss` from a config's ``train`` block."""
    return dict(temperature=tp.temperature, gold_weight=tp.gold_weight, label_values=label_values,
                listwise_weight=tp.listwise_weight, listwise_temperature=tp.listwise_temperature,
                margin_mse_weight=tp.margin_mse_weight)


def fit_cosine_head(graph: torch.nn.Module, collator: DistillCollator, dataset: Dataset, tp: TrainParams,
                    label_values: tuple[float, ...]) -> dict:
    """Fit a cosine student's label head to the teacher before the encoder trains.

    The encoder is frozen and the query–document cosines of the training pairs (at most
    ``tp.head_fit_pairs`` of them, :func:`head_fit_rows`) are computed once; the head's ``2 × n_labels``
    numbers then minimise the training loss (:func:`logits_loss`, the same weights) by L-BFGS. So the
    encoder's first gradients come from what the base's cosine cannot already express, not from a head
    that has yet to learn the label scale. Returns the loss before and after and the fitted head, for
    the report.
    """
    rows = [dataset[i] for i in head_fit_rows(len(dataset), tp.head_fit_pairs, tp.seed)]
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]["input_ids"]))
    cos = torch.empty(len(rows), 1)
    was_training = graph.training
    graph.eval()
    main = process_state().is_main_process  # every process fits the same head on every pair; the main one says so
    bar = Progress(len(rows), "train: cosines for the head (encoder frozen)", every_s=10.0,
                   stream=None if main else io.StringIO())
    with torch.no_grad():
        for start in range(0, len(order), 64):
            idx = order[start : start + 64]
            batch = collator([rows[i] for i in idx])
            cos[idx] = graph.cosines(batch["input_ids"], batch["attention_mask"]).float()
            bar.update(len(idx))
    bar.close()
    graph.train(was_training)
    inputs = collator.targets(rows)
    head = graph.student.head
    settings = _loss_settings(tp, label_values)
    with torch.no_grad():
        before = float(logits_loss(head(cos), inputs, **settings))
    opt = torch.optim.LBFGS(head.parameters(), lr=1.0, max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = logits_loss(head(cos), inputs, **settings)
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        after = float(logits_loss(head(cos), inputs, **settings))
    if main:
        print(f"train: cosine head fitted on {len(rows)} pairs with the encoder frozen: loss {before:.4f} -> {after:.4f}",
              flush=True)
    return {"pairs": len(rows), "of": len(dataset), "loss_before": before, "loss_after": after,
            "weight": head.weight.detach().squeeze(-1).tolist(), "bias": head.bias.detach().tolist()}


def head_fit_rows(n: int, limit: int | None, seed: int) -> list[int]:
    """The training rows the cosine head is fitted on: all ``n`` up to ``limit``, else a seeded sample
    of ``limit`` rows in their order."""
    if limit is None or n <= limit:
        return list(range(n))
    return sorted(np.random.default_rng(seed).choice(n, limit, replace=False).tolist())


def teacher_targets(table, n_labels: int, labels_dir: Path) -> np.ndarray:
    """The teacher distributions as ``[n, n_labels]``; a malformed record is an error naming it."""
    probs = table.column("probs").to_pylist()
    qids, docids = table.column("qid").to_pylist(), table.column("docid").to_pylist()
    out = np.zeros((len(probs), n_labels), dtype=np.float64)
    for i, p in enumerate(probs):
        where = f"{labels_dir}: record qid={qids[i]!r} docid={docids[i]!r}"
        if p is None or len(p) != n_labels:
            raise InvalidInput(
                f"{where} has probs {p!r}; the student has {n_labels} labels",
                "re-label with a judge whose label space matches the student's label_tokens",
            )
        row = np.asarray(p, dtype=np.float64)
        if not np.isfinite(row).all() or (row < 0).any() or abs(row.sum() - 1.0) > PROB_TOLERANCE:
            raise InvalidInput(f"{where} has probs {p!r}, not a probability distribution",
                              "fix the labelling backend: probs must be non-negative and sum to 1")
        out[i] = row / row.sum()
    return out


def build_dataset(scorer: Scorer, queries: list[str], documents: list[str], targets: np.ndarray,
                  gold: list[int | None] | None = None, groups: list[int] | None = None) -> Dataset:
    """Token ids from the scorer (the only formatter) plus the teacher targets (and gold labels, -1
    where a pair has none, and each pair's query as an integer ``group`` when given), as a datasets.Dataset."""
    encoded = scorer.encode_batch(queries, documents)
    return Dataset.from_dict(
        ({"group": list(groups)} if groups is not None else {}) | {
            "input_ids": [e.input_ids for e in encoded],
            "doc_tokens": [e.doc_tokens for e in encoded],
            "doc_tokens_dropped": [e.doc_tokens_dropped for e in encoded],
            "prefix_len": [e.prefix_len for e in encoded],
            "length": [len(e.input_ids) for e in encoded],
            "teacher_probs": targets.astype(np.float32).tolist(),
            "gold": [-1 if g is None else int(g) for g in (gold or [None] * len(encoded))],
        }
    )


def gold_targets(table, n_labels: int, labels_dir: Path) -> list[int | None]:
    """The pairs' gold labels as student label indices (None where a pair has none); one outside the
    student's label space is an error naming the record."""
    gold = table.column("gold").to_pylist() if "gold" in table.column_names else [None] * table.num_rows
    for i, g in enumerate(gold):
        if g is not None and not 0 <= g < n_labels:
            raise InvalidInput(f"{labels_dir}: record qid={table.column('qid')[i]!r} has gold label {g}; "
                              f"the student has labels 0..{n_labels - 1}",
                              "set train.gold_weight: 0, or map the gold labels into the student's label space")
    return gold


def split_by_query(qids: list[str], fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices ``(train, eval)`` with ``fraction`` of the queries (at least one) held out whole,
    so that evaluation never sees a training query's other candidates; seeded."""
    unique = sorted(set(qids))
    if len(unique) < 2:
        raise InvalidInput(f"eval_fraction needs at least 2 queries, the labels have {len(unique)}",
                          "label more queries or set train.eval_fraction: 0")
    rng = np.random.default_rng(seed)
    held = set(rng.permutation(unique)[: max(1, round(fraction * len(unique)))].tolist())
    is_eval = np.array([q in held for q in qids])
    return np.flatnonzero(~is_eval), np.flatnonzero(is_eval)


def _provenance(manifest: dict, table) -> dict:
    keep = ("judge", "teacher_model", "prompt_hash", "pairs_sha256", "n_pairs", "n_labels", "label_values")
    out = {k: manifest[k] for k in keep if k in manifest}
    for col in ("judge", "teacher_model", "prompt_hash"):
        if col not in out and col in table.column_names:
            vals = sorted({v for v in table.column(col).to_pylist() if v is not None})
            out[col] = vals[0] if len(vals) == 1 else vals
    return out


def train_student(
    labels_dir: str | Path | Sequence[str | Path],
    student_config_path: str | Path,
    out_dir: str | Path,
    *,
    max_steps: int | None = None,
    eval_labels_dir: str | Path | None = None,
    drop_unformatted: bool = False,
    max_seconds: float | None = None,
    checkpoints: str | Path | None = None,
    resume: bool = False,
    only_pairs: str | Path | None = None,
) -> Path:
    """Train a student on a complete labels directory and save it (weights + scorer.json + report).

    ``labels_dir`` may also be several complete directories of one teacher (the shards of a labelling run
    done so far), read by :func:`r3edge.core.labels.read_labels_union`: checked disjoint, trained on as one set.
    ``only_pairs``: a pairs file whose pairs alone are trained on, each of them labelled
    (:func:`r3edge.core.labels.restrict_to_pairs`), so that two judges teach on the same pairs.

    ``drop_unformatted`` keeps only records whose teacher output was well formed; by default all
    are kept, because the forced score read-out is still the teacher's distribution. ``max_seconds``
    overrides the config's ``train.max_seconds`` for this sitting. ``checkpoints``: a directory for
    resumable checkpoints (:mod:`r3edge.distill.student.checkpoints`); ``resume`` goes on from its latest.
    """
    labels_dirs = [Path(labels_dir)] if isinstance(labels_dir, (str, Path)) else [Path(d) for d in labels_dir]
    labels_dir = labels_dirs[0] if len(labels_dirs) == 1 else Path("+".join(str(d) for d in labels_dirs))
    config = load_yaml(student_config_path, StudentConfig)
    if max_steps is not None and max_steps <= 0:
        raise InvalidInput(f"--max-steps {max_steps} is not positive", "pass a positive number of steps or omit it")
    if max_seconds is not None:
        config = config.model_copy(update={"train": TrainParams.model_validate(
            {**config.train.model_dump(), "max_seconds": max_seconds})})
    tp = config.train
    if resume and checkpoints is None:
        raise InvalidInput("--resume needs the run's directory", "pass --checkpoints DIR, the directory the run was started with")
    if checkpoints is not None and tp.eval_fraction > 0:
        raise InvalidInput(f"--checkpoints with train.eval_fraction {tp.eval_fraction}: the best epoch's weights are kept "
                           "in memory, so a resumed run could not return to them",
                           "set train.eval_fraction: 0 for a resumable run, or train without --checkpoints")
    table, manifest = read_labels_union(labels_dirs)  # refuses an unfinished labelling run
    pairs_info = None
    if only_pairs is not None:
        table, pairs_info = restrict_to_pairs(table, only_pairs)
    if eval_labels_dir is not None:
        read_labels(eval_labels_dir, columns=["qid"])  # fail now, not after training, if the held-out set is unusable
    table, counts = _trainable_records(table, labels_dir, drop_unformatted)
    run = _Run.open(checkpoints, config, table, max_steps=max_steps, drop_unformatted=drop_unformatted, resume=resume)

    # Before the model exists: a pretrained encoder's new label head is initialised from the global RNG.
    set_seed(tp.seed)
    lm, scorer = create_student(config)
    dataset, eval_set = _datasets(table, scorer, tp, labels_dir)
    bf16 = tp.bf16 and native_bf16()  # CPU autocast bf16 GEMMs: ~4x faster than fp32 where native, ~7x slower elsewhere
    graph = scoring_module(lm, scorer)
    head_fit = None
    if scorer.spec.head == "cosine":
        # a resumed run's checkpoint holds the fitted head (and all else): its first sitting's fit is reported
        head_fit = run.record.get("cosine_head_fit") if run.resume_from else None
        if head_fit is None:
            head_fit = fit_cosine_head(graph, DistillCollator(scorer), dataset, tp, scorer.spec.label_values)
            run.save(cosine_head_fit=head_fit)
    if tp.freeze_embeddings:
        lm.get_input_embeddings().weight.requires_grad_(False)
    start = ({k: v.detach().to("cpu", copy=True) for k, v in pretrained_state(lm).items()}
             if tp.base_interpolation else None)
    fit = _fit(graph, scorer, tp, dataset, eval_set, bf16=bf16, max_steps=max_steps, checkpoints=run.directory,
               resume_from=run.resume_from)
    if start is not None:
        interpolate_weights(lm, start, tp.base_interpolation)
    lm.eval()

    report = {
        "config_path": str(student_config_path),
        "config": config.model_dump(mode="json"),
        "labels_dir": str(labels_dir) if len(labels_dirs) == 1 else [str(d) for d in labels_dirs],
        "labels": _provenance(manifest, table),
        **({"only_pairs": pairs_info} if pairs_info is not None else {}),
        "n_examples": {**counts, "trained_on": len(dataset), "eval_split": len(eval_set) if eval_set is not None else 0},
        **({"cosine_head_fit": head_fit} if head_fit is not None else {}),
        "eval_loss_per_epoch": fit.evals,
        "best_eval_loss": fit.best_loss,
        "best_epoch": fit.best_epoch,
        "drop_unformatted": drop_unformatted,
        "docs_truncated": int(sum(1 for d in dataset["doc_tokens_dropped"] if d > 0)),
        "epochs": fit.epochs,
        "steps": fit.steps,
        "skipped_steps": fit.skipped_steps,
        "stopped_by_time_at_step": fit.stopped_by_time_at,
        **({"checkpoints": str(run.directory), "resumed_from_step": run.from_step,
            "sittings": run.record["sittings"] + [run.sitting(fit)]} if run.directory is not None else {}),
        "batch_size": tp.batch_size,
        "processes": fit.processes,
        "per_device_batch_size": fit.per_device_batch_size,
        "per_device_gradient_accumulation_steps": fit.per_device_accumulation,
        "bf16": bf16,
        "device": "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)",
        "loss_first": fit.losses[0][1] if fit.losses else None,
        "loss_last": fit.losses[-1][1] if fit.losses else None,
        "loss_log": fit.losses,
        "train_loss_mean": fit.train_loss_mean,
        "wall_time_s": round(fit.wall, 2),
        "seconds_per_step": round(fit.wall / max(1, fit.steps - run.from_step), 3),
        "scorer_fingerprint": scorer.spec.fingerprint(),
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
    }
    if not process_state().is_main_process:  # the main process saves; the others' weights are the same
        return Path(out_dir)
    out = _save_and_evaluate(lm, scorer, out_dir, report, eval_labels_dir)
    run.end(fit, out)
    steps = (f"steps {run.from_step}-{fit.steps}" if run.from_step else f"{fit.steps} steps")
    print(
        f"trained {len(dataset)} pairs, {steps} in {fit.wall:.1f} s "
        f"({report['seconds_per_step']} s/step); loss {_fmt(report['loss_first'])} -> {_fmt(report['loss_last'])}; "
        f"saved {out}"
    )
    if fit.stopped_by_time_at is not None and run.directory is not None:
        print(f"train: stopped by the time limit at step {fit.steps}; the same command with --resume goes on from "
              f"{run.directory}")
    return out


def pretrained_state(lm: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The student's weights that came from its pretrained checkpoint: a cosine student's encoder (its
    head is fitted from scratch) or the whole causal LM (it reads its label rows from its own output
    embeddings)."""
    return lm.pretrained_state() if hasattr(lm, "pretrained_state") else lm.state_dict()


def interpolate_weights(lm: torch.nn.Module, start: dict[str, torch.Tensor], a: float, *,
                        saved_at: float | None = None) -> None:
    """WiSE-FT in place: each weight named in ``start`` becomes ``(1 - a) * start + a * trained``; a weight
    shared under several names (tied embeddings) once; the others (a cosine head) stay as trained.

    ``saved_at``: the ``train.base_interpolation`` the weights in ``lm`` were saved with, if any. They then hold
    ``start + saved_at * (trained - start)``, so the mix at ``a`` (1: the trained weights) is recovered from them
    exactly: the student that training with ``a`` would have saved, without training again."""
    if saved_at:
        a = a / saved_at
    seen: set[int] = set()
    state = lm.state_dict()
    with torch.no_grad():
        for k in start:
            v = state[k]
            if v.is_floating_point() and v.data_ptr() not in seen:
                seen.add(v.data_ptr())
                v.lerp_(start[k].to(v.device, v.dtype), 1.0 - a)


def remixed(lm: torch.nn.Module, config: StudentConfig, alphas: Sequence[float], *,
            saved_at: float | None = None) -> Iterator[float]:
    """Each ``a`` of ``alphas`` with ``lm`` re-mixed in place to the student ``train.base_interpolation: a``
    would have saved (:func:`interpolate_weights` from the weights as saved, each time from the same copy), so
    a saved student is ranked at several mixes without training again. The pretrained weights come from a
    fresh student of ``config``; ``lm`` is left at the last mix."""
    if not alphas:
        return
    start = pretrained_state(create_student(config)[0])
    trained = {k: v.clone() for k, v in lm.state_dict().items()}
    for a in alphas:
        lm.load_state_dict(trained)
        interpolate_weights(lm, start, a, saved_at=saved_at)
        yield a


def _trainable_records(table, labels_dir: Path, drop_unformatted: bool) -> tuple:
    """The records to train on and the report's counts of them; none left is an error that says why."""
    n_total = table.num_rows
    format_ok = np.asarray([bool(v) for v in table.column("format_ok").to_pylist()])
    n_ok = int(format_ok.sum())
    if drop_unformatted:
        table = table.filter(format_ok)
    # A sampling judge whose K samples all failed to parse left no distribution: counted, not defaulted.
    has_label = np.asarray([p is not None for p in table.column("probs").to_pylist()], dtype=bool)
    n_no_label = int((~has_label).sum())
    if n_no_label:
        main_process_log()(f"train: {n_no_label} of {table.num_rows} records have no teacher distribution "
                           "(no parsable sample); dropped", flush=True)
        table = table.filter(has_label)
    if table.num_rows == 0:
        raise InvalidInput(
            f"{labels_dir} has no records to train on ({n_total} total, {n_ok} format_ok, "
            f"drop_unformatted={drop_unformatted})",
            "label more pairs, or train without --drop-unformatted",
        )
    return table, {"total": n_total, "format_ok": n_ok, "no_teacher_distribution": n_no_label}


def _datasets(table, scorer: Scorer, tp: TrainParams, labels_dir: Path) -> tuple[Dataset, Dataset | None]:
    """``(train, held-out)`` datasets from the records; the held-out one is None without ``eval_fraction``."""
    targets = teacher_targets(table, scorer.spec.n_labels, labels_dir)
    gold = gold_targets(table, scorer.spec.n_labels, labels_dir) if tp.gold_weight > 0 else None
    if gold is not None and all(g is None for g in gold):
        raise InvalidInput(f"train.gold_weight is {tp.gold_weight} but no record of {labels_dir} has a gold label",
                          "label a pairs file with gold labels, or set train.gold_weight: 0")
    qids = table.column("qid").to_pylist()
    index = {q: i for i, q in enumerate(dict.fromkeys(qids))}
    dataset = build_dataset(scorer, table.column("query").to_pylist(), table.column("text").to_pylist(), targets, gold,
                            groups=[index[q] for q in qids])
    if tp.eval_fraction > 0:
        train_idx, eval_idx = split_by_query(qids, tp.eval_fraction, tp.seed)
        return dataset.select(train_idx), dataset.select(eval_idx)
    return dataset, None


@dataclass
class _Fit:
    """What a training run leaves for the report: the trainer's state, losses and timing."""

    epochs: float
    steps: int
    losses: list[tuple[int, float]]
    evals: list[tuple[float, float]]
    train_loss_mean: float
    wall: float
    best_loss: float | None
    best_epoch: float | None
    skipped_steps: list[int]
    stopped_by_time_at: int | None
    processes: int
    per_device_batch_size: int
    per_device_accumulation: int


def _fit(model: torch.nn.Module, scorer: Scorer, tp: TrainParams, dataset: Dataset, eval_set: Dataset | None, *,
         bf16: bool, max_steps: int | None, checkpoints: Path | None = None, resume_from: str | None = None) -> _Fit:
    """Train ``model`` in place; with a held-out set, end on the weights of its best epoch. With
    ``checkpoints`` the Trainer keeps its latest checkpoint there (:class:`CheckpointClock`);
    ``resume_from`` is one to go on from."""
    if tp.query_once:  # the same weights, each query of a batch embedded once
        model = QueryOnceCosine(model, right_padded=scorer.spec.padding_side == "right")
    with tempfile.TemporaryDirectory(prefix="r3edge-train-") as scratch:
        extra = {}
        finite, clock = FiniteSteps(tp.max_skipped_steps), TimeBudget(tp.max_seconds)
        callbacks = [ProgressCallback("train"), finite, clock]
        best = BestEpoch(model, tp.early_stopping_patience)
        if eval_set is not None:
            # the loss on held-out queries after every epoch (label_names: the loss needs the teacher's probs)
            extra = dict(eval_strategy="epoch", label_names=["teacher_probs"])
            callbacks.append(best)
        if checkpoints is not None:
            extra["save_total_limit"] = 1  # the latest only, removed after the next one is written whole
            callbacks.append(CheckpointClock(tp.checkpoint_seconds))  # after TimeBudget: it saves where that stops
        args = training_arguments(str(checkpoints) if checkpoints is not None else scratch, tp, bf16=bf16,
                                  max_steps=max_steps, batch_unit=tp.query_group_size or 1, **extra)
        trainer = DistillTrainer(model=model, args=args, train_dataset=dataset, eval_dataset=eval_set,
                                 data_collator=DistillCollator(scorer, tp.query_once), callbacks=callbacks)
        trainer.params, trainer.label_values, trainer.finite = tp, scorer.spec.label_values, finite
        t0 = time.perf_counter()
        result = trainer.train(resume_from_checkpoint=resume_from)
        wall = time.perf_counter() - t0
        losses = [(h["step"], h["loss"]) for h in trainer.state.log_history if "loss" in h]
        evals = [(h["epoch"], h["eval_loss"]) for h in trainer.state.log_history if "eval_loss" in h]
    best.restore()
    return _Fit(epochs=float(trainer.state.epoch or 0.0), steps=int(trainer.state.global_step), losses=losses, evals=evals,
                train_loss_mean=float(result.training_loss), wall=wall, best_loss=best.loss, best_epoch=best.epoch,
                skipped_steps=finite.skipped, stopped_by_time_at=clock.stopped_at, processes=args.world_size,
                per_device_batch_size=args.per_device_train_batch_size, per_device_accumulation=args.gradient_accumulation_steps)


@dataclass
class _Run:
    """The resumable side of one ``r3edge train`` sitting (no ``--checkpoints``: ``directory`` None and
    every method a no-op): where it resumes from and what its ``run.json`` records."""

    directory: Path | None = None
    resume_from: str | None = None
    record: dict | None = None

    @classmethod
    def open(cls, checkpoints: str | Path | None, config: StudentConfig, table, *, max_steps: int | None,
             drop_unformatted: bool, resume: bool) -> _Run:
        if checkpoints is None:
            return cls(record={"sittings": []})
        directory = Path(checkpoints)
        identity = run_identity(config.model_dump(mode="json"), table, max_steps=max_steps,
                                drop_unformatted=drop_unformatted)
        latest, record = open_run(directory, identity, resume=resume)  # every process checks before any writes
        process_state().wait_for_everyone()
        run = cls(directory, latest, record)
        if not resume:
            run.save()  # a resumed run's record is on disk already
        if latest is None:
            main_process_log()(f"train: a resumable run in {directory} (a checkpoint every "
                               f"{config.train.checkpoint_seconds:g} s and where a time limit ends it)", flush=True)
        else:
            main_process_log()(f"train: resuming from {latest}", flush=True)
        return run

    @property
    def from_step(self) -> int:
        return int(Path(self.resume_from).name.rsplit("-", 1)[1]) if self.resume_from else 0

    def sitting(self, fit: _Fit) -> dict:
        return {"from_step": self.from_step, "to_step": fit.steps, "seconds": round(fit.wall, 2),
                "stopped_by_time": fit.stopped_by_time_at is not None}

    def save(self, **fields) -> None:
        if self.directory is None:
            return
        self.record.update(fields)
        if process_state().is_main_process:
            write_record(self.directory, self.record)

    def end(self, fit: _Fit, out: Path) -> None:
        if self.directory is None:
            return
        finished = {} if fit.stopped_by_time_at is not None else {"finished_at_step": fit.steps, "out": str(out)}
        self.save(sittings=self.record["sittings"] + [self.sitting(fit)], **finished)


def _save_and_evaluate(lm, scorer: Scorer, out_dir: str | Path, report: dict, eval_labels_dir: str | Path | None) -> Path:
    """Save the student with its report, then add the held-out evaluation to the report (``report["eval"]``)."""
    # Save first: a failing evaluation must never throw the trained weights away.
    out = save_student(lm, scorer, out_dir, extra_files={REPORT_FILE: _report_json(report)})
    if eval_labels_dir is not None:
        from r3edge.distill.student.evaluate import evaluate
        from r3edge.model.student import lm_score_fn

        report["eval"] = evaluate(eval_labels_dir, lm_score_fn(lm, scorer), scorer=scorer)
        (out / REPORT_FILE).write_text(_report_json(report))
    return out


def _report_json(report: dict) -> str:
    return json.dumps(report, indent=2, default=_jsonable) + "\n"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.4f}"


def _jsonable(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")
