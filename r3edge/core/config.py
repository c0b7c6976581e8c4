"""Typed configs read from YAML (pydantic: unknown keys are errors, not ignored).

A config is given either as a path to a YAML file or by name: ``r3a-smollm2`` for a teacher is
``configs/teacher/r3a-smollm2.yaml``, shipped inside the package as ``r3edge.configs`` and found
with :mod:`importlib.resources`, so a pip-installed r3edge finds it without a checkout.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import ClassVar, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, model_validator

from r3edge.core.errors import InvalidInput
from r3edge.core.scoring import SPEC_DEFAULTS

T = TypeVar("T", bound=BaseModel)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(Strict):
    """Where a model comes from: real weights (``pretrained``) or a random init (``architecture``).

    ``kind`` is what the weights become: ``causal`` (a causal LM, scored on its label-token rows),
    ``encoder`` (a BERT-style cross-encoder with an n-label classification head; students only) or
    ``biencoder`` (a sentence encoder whose label logits are an affine function of the query–document
    cosine, so it starts from its base's own ranking; students only).
    """

    kind: Literal["causal", "encoder", "biencoder"] = "causal"
    pretrained: str | None = None
    architecture: dict | None = None
    tokenizer: str | None = None
    seed: int = 0
    #: ``auto``: bf16 where it is native (GPU, AVX-512 BF16 / AMX CPU), else fp32 (r3edge.core.hardware)
    dtype: Literal["auto", "float32", "bfloat16"] = "float32"
    # Keep only the first N decoder layers of pretrained weights (DistilBERT-style initialisation):
    # a shallower student is proportionally faster to train, export and serve.
    keep_layers: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _one_source(self):
        if (self.pretrained is None) == (self.architecture is None):
            raise ValueError("give exactly one of 'pretrained' (weights) or 'architecture' (random init)")
        if self.architecture is not None and self.tokenizer is None:
            raise ValueError("a random-init 'architecture' needs a 'tokenizer' (e.g. tokenizer:qwen2.5)")
        return self

    @property
    def tokenizer_ref(self) -> str:
        return self.tokenizer or self.pretrained  # type: ignore[return-value]


class ScorerBudget(Strict):
    """The token budgets and instruction written into ``scorer.json`` when a student is created.

    Unset fields take the scoring contract's defaults (:data:`r3edge.core.scoring.SPEC_DEFAULTS`).
    """

    instruction: str | None = None
    max_query_tokens: PositiveInt = SPEC_DEFAULTS["max_query_tokens"]
    max_doc_tokens: PositiveInt = SPEC_DEFAULTS["max_doc_tokens"]
    max_total_tokens: PositiveInt = SPEC_DEFAULTS["max_total_tokens"]
    padding_side: Literal["left", "right"] = SPEC_DEFAULTS["padding_side"]


class TrainParams(Strict):
    """How a student is distilled (:mod:`r3edge.distill.student.train`)."""

    epochs: float = 2.0
    learning_rate: float = 5e-5
    batch_size: int = 8
    gradient_accumulation_steps: int = 1
    warmup_ratio: float = Field(0.1, ge=0.0, lt=1.0)
    weight_decay: float = 0.0
    bf16: bool = False
    seed: int = 0
    logging_steps: int = 5
    # KL at temperature T (teacher probs sharpened or softened as p^(1/T), student logits / T, times T²)
    temperature: float = Field(1.0, gt=0)
    # weight of cross-entropy on the pairs' gold labels, mixed into the KL (0: the teacher alone)
    gold_weight: float = Field(0.0, ge=0.0, le=1.0)
    # share of the training queries held out to evaluate the loss after every epoch (0: none); with
    # it the best epoch's weights are kept, and training stops after `early_stopping_patience`
    # epochs without improvement
    eval_fraction: float = Field(0.0, ge=0.0, lt=1.0)
    early_stopping_patience: PositiveInt | None = None
    # Ranking losses, added to the pointwise KL over the candidates of one query that share a batch
    # (r3edge.distill.student.losses): listwise KL between the softmax of the teacher's and the student's
    # expected scores (at listwise_temperature), and MarginMSE on every pair of those candidates.
    listwise_weight: float = Field(0.0, ge=0.0)
    listwise_temperature: float = Field(1.0, gt=0)
    margin_mse_weight: float = Field(0.0, ge=0.0)
    # Batches of whole-query groups: each epoch shuffles every query's candidates, cuts them into
    # groups of at most this many and shuffles the groups (None: length-grouped batches, no groups).
    # The ranking losses need it.
    query_group_size: int | None = Field(None, ge=2)
    # Keep the pretrained token embeddings as they are (half of a MiniLM's weights): fewer weights
    # for few labels to pull away from what the base knew.
    freeze_embeddings: bool = False
    # WiSE-FT (Wortsman et al., 2022): each pretrained weight is saved as (1 - a) * its pretrained
    # value + a * its trained one, for a = base_interpolation (None: as trained); a cosine student's
    # head stays as trained. A student whose pretrained weights already rank (a cosine student, a
    # causal LM reading its label rows) then keeps part of what its base knew however far a weak
    # teacher pulled it.
    base_interpolation: float | None = Field(None, gt=0.0, lt=1.0)
    #: optimiser steps with a NaN/inf loss or gradient that are skipped (their gradients dropped) before
    #: training stops with a QUALITY error and saves nothing (r3edge.distill.hf_trainer.FiniteSteps)
    max_skipped_steps: int = Field(0, ge=0)
    #: end training after the step that passes this many seconds (None: the configured epochs), so a run
    #: on a lent machine saves its model inside one call; the report says where it stopped
    max_seconds: float | None = Field(None, gt=0)
    #: with ``r3edge train --checkpoints DIR``: a resumable checkpoint (weights, optimiser, schedule, data
    #: position, RNG) after the step that passes this many seconds since the last one, and at the step
    #: where ``max_seconds`` ends the run, so a run longer than a session (a MiniLM epoch over 100k pairs
    #: on 2 cores) goes on with ``--resume`` where it stopped
    checkpoint_seconds: float = Field(900.0, gt=0)
    #: a cosine student's head is fitted on the cosines of at most this many training pairs (a seeded
    #: sample; all of them when there are fewer): its 2 × n_labels numbers need no more, and the frozen
    #: encoder's pass over 100k pairs alone would take hours on a CPU
    head_fit_pairs: PositiveInt | None = 8192
    #: a cosine student's step embeds each query of the batch once, through the prefix-reuse graphs, instead
    #: of once per candidate row (r3edge.distill.student.query_once): the same function, fewer tokens; a
    #: query's dropout mask is then one per step for all its rows
    query_once: bool = False

    @model_validator(mode="after")
    def _patience_needs_eval(self):
        if self.early_stopping_patience is not None and self.eval_fraction == 0:
            raise ValueError("early_stopping_patience needs an evaluation split: set eval_fraction (e.g. 0.2)")
        if (self.listwise_weight > 0 or self.margin_mse_weight > 0) and self.query_group_size is None:
            raise ValueError("the ranking losses compare candidates of one query within a batch: set "
                             "query_group_size (e.g. 8) so batches hold whole-query groups")
        if self.query_group_size is not None and self.batch_size % self.query_group_size:
            raise ValueError(f"batch_size {self.batch_size} is not a multiple of query_group_size "
                             f"{self.query_group_size}: a batch would cut a group")
        return self


class StudentConfig(Strict):
    kind: ClassVar[str] = "student"
    name: str
    model: ModelSpec
    scorer: ScorerBudget = ScorerBudget()
    train: TrainParams = TrainParams()

    @model_validator(mode="after")
    def _encoder_fits_its_scorer(self):
        if self.train.base_interpolation is not None and (self.model.kind == "encoder" or self.model.pretrained is None):
            what = ("a randomly initialised model" if self.model.pretrained is None
                    else "a cross-encoder (its label head starts random)")
            raise ValueError("train.base_interpolation mixes the trained weights with the pretrained ones, which must "
                             f"already rank: a cosine (biencoder) or causal student with pretrained weights, not {what}")
        if self.model.kind == "encoder" and self.scorer.padding_side != "right":
            raise ValueError("an encoder student classifies its first token ([CLS]); left padding would put a pad "
                             "there: set scorer.padding_side: right")
        if self.model.kind == "encoder" and self.scorer.instruction is not None:
            raise ValueError("an encoder student reads [CLS] query [SEP] document [SEP] and no instruction: "
                             "drop scorer.instruction")
        if self.train.query_once and self.model.kind != "biencoder":
            raise ValueError(f"train.query_once embeds each query once, which only a cosine student (model.kind: "
                             f"biencoder) can: its query never attends to the document; this is a {self.model.kind}")
        if self.model.kind == "biencoder" and self.scorer.instruction is not None:
            raise ValueError("a biencoder student reads [CLS] query [SEP] [CLS] document [SEP] and no instruction: "
                             "drop scorer.instruction")
        return self


class GenerationParams(Strict):
    intent_max_new_tokens: int = 64
    assess_max_new_tokens: int = 96
    #: rows per generation batch (in-process backend; several queries' candidates are packed into one)
    batch_size: int = 8
    temperature: float = 0.0
    max_doc_chars: int = 1500


class TeacherConfig(Strict):
    """A judge (rubric), the model that runs it, and how its native scale becomes student labels."""

    kind: ClassVar[str] = "teacher"
    name: str
    judge: str = "r3a"
    model: ModelSpec
    n_aux: int = 3
    generation: GenerationParams = GenerationParams()
    #: backend that runs the model: in-process transformers, or any OpenAI-compatible server (vLLM, SGLang)
    backend: Literal["transformers", "openai"] = "transformers"
    base_url: str | None = None            # openai backend: e.g. http://127.0.0.1:8000/v1
    served_model: str | None = None        # openai backend: model name on the server (default: model.pretrained)
    #: native score -> student label, e.g. {0: 0, 1: 0, 2: 1, 3: 2}; required for integer scales
    label_map: dict[int, int] | None = None
    #: for 0..100 scales: ascending thresholds; score < bands[0] -> 0, < bands[1] -> 1, ... else len(bands)
    bands: list[float] | None = None
    #: sampled trajectories per pair (Retro*'s mean@k; read-out judges use 1)
    samples: int = Field(1, ge=1)
    #: how K samples are integrated: uniform mean, or weighted by each trajectory's likelihood
    integration: Literal["uniform", "likelihood"] = "uniform"
    sample_temperature: float = Field(0.8, gt=0)

    @model_validator(mode="after")
    def _one_mapping(self):
        if self.model.kind != "causal":
            raise ValueError("a teacher generates text: model.kind must be 'causal'")
        if self.label_map is not None and self.bands is not None:
            raise ValueError("give either 'label_map' (integer scales) or 'bands' (0..100 scales), not both")
        if self.bands is not None and list(self.bands) != sorted(self.bands):
            raise ValueError("'bands' must be ascending thresholds")
        if self.backend == "openai" and not self.base_url:
            raise ValueError("backend 'openai' needs 'base_url' (e.g. http://127.0.0.1:8000/v1)")
        return self


class LoraParams(Strict):
    """LoRA adapters (peft) instead of full fine-tuning; merged into the weights before saving."""

    r: int = Field(16, ge=1)
    alpha: float = Field(32.0, gt=0)
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class TraceParams(Strict):
    """Which traces are trained on. Real pairs are mostly label 0, hence the cap and oversampling."""

    #: keep at most this many traces (after capping and oversampling; a seeded random subset)
    max_examples: int | None = Field(None, ge=1)
    #: keep at most this many traces per student label; a mapping caps each label on its own (e.g.
    #: more irrelevant than relevant traces, so a small judge learns that an answer to another
    #: query is a 0)
    per_label_cap: PositiveInt | dict[int, PositiveInt] | None = None

    #: the reasoning of gold-built traces: ``fixed`` (one sentence whatever the pair) or
    #: ``shared_words`` (the content words the post shares with the query, computed from the two
    #: texts, never from the label: a step a small judge can copy, which makes an answer to another
    #: query visible as sharing nothing)
    reason: Literal["fixed", "shared_words"] = "fixed"

    def cap(self, label: int) -> int | None:
        """The cap of ``label``'s traces (None: all)."""
        if isinstance(self.per_label_cap, dict):
            return self.per_label_cap.get(label)
        return self.per_label_cap
    #: repeat the traces of the smaller labels until every label has as many as the largest
    oversample: bool = False
    #: Retro*'s SFT filter where a pair has several traces (several labels dirs): keep only the one
    #: whose score is nearest the pair's integrated (mean) score
    retro_filter: bool = False
    seed: int = 0


class SFTParams(Strict):
    epochs: float = Field(2.0, gt=0)
    learning_rate: float = Field(2e-5, gt=0)
    lr_scheduler: Literal["linear", "cosine", "constant_with_warmup"] = "linear"
    batch_size: int = Field(4, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    warmup_ratio: float = Field(0.05, ge=0.0, lt=1.0)
    weight_decay: float = 0.0
    #: ``auto``: bf16 autocast only where bf16 is native (see r3edge.core.hardware); the master weights stay fp32
    bf16: bool | Literal["auto"] = "auto"
    seed: int = 0
    logging_steps: int = Field(5, ge=1)
    #: tokens per trace; a longer trace is dropped and counted (prompts are never cut, replies never halved)
    max_length: int = Field(1024, ge=16)
    #: fine-tune only the top N decoder layers and the final norm; the embeddings (and a tied
    #: output projection) and the layers below stay frozen, so the backward pass stops at the first
    #: trainable layer (None: every weight). Cheaper steps where compute is scarce (a CPU cold start).
    trainable_layers: PositiveInt | None = None
    #: whether gradients flow back through each step's shared prefix (for R³A: the system prompt, round 1 and the
    #: round-2 instructions up to the post); false runs it outside autograd, so only the rows' own tokens are
    #: back-propagated (7.9 s against 10.0 s a demo step on 2 AVX2 cores, benchmarks/results/demo-levers-cpu-2core)
    prefix_gradients: bool = True
    #: whether gradients flow back through each row's own tokens before its reply (for R³A: the post and the
    #: round-2 instructions after it, ~80% of a demo row); false runs them outside autograd as well, so only
    #: the reply's tokens are back-propagated. The loss is unchanged (the forward pass is the same); the
    #: gradients reach the context only through the reply's attention. Needs ``prefix_gradients: false``.
    context_gradients: bool = True
    #: optimiser steps with a NaN/inf loss or gradient that are skipped (their gradients dropped) before
    #: training stops with a QUALITY error and saves nothing (r3edge.distill.hf_trainer.FiniteSteps)
    max_skipped_steps: int = Field(0, ge=0)
    #: end training after the step that passes this many seconds (None: the configured epochs), so a run
    #: on a lent machine saves its model inside one call; the report says where it stopped
    max_seconds: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _context_after_prefix(self):
        if not self.context_gradients and self.prefix_gradients:
            raise ValueError("train.context_gradients: false runs the rows' context outside autograd, which cuts the "
                             "shared prefix's gradients too; set train.prefix_gradients: false as well")
        return self


class SFTConfig(Strict):
    """A judge's cold start (``r3edge teacher sft``): which teacher it becomes, from which weights, how trained.

    ``teacher`` (a teacher config name or path) fixes the judge, its prompts, ``n_aux`` and
    ``max_doc_chars``: the traces show exactly the prompts that labelling with that config shows.
    ``model`` is the base to fine-tune (default: the teacher config's model).
    """

    kind: ClassVar[str] = "sft"
    name: str
    teacher: str
    model: ModelSpec | None = None
    #: None: full fine-tuning
    lora: LoraParams | None = None
    traces: TraceParams = TraceParams()
    train: SFTParams = SFTParams()


class GRPOData(Strict):
    """Which gold-labelled pairs become GRPO prompts (``r3edge teacher grpo``)."""

    #: keep at most this many prompts per gold label (R³A trained on a class-balanced set); None: all
    per_label_cap: PositiveInt | None = None
    #: keep at most this many prompts (Retro*: couples count as two), a seeded subset; None: all
    max_prompts: PositiveInt | None = None
    seed: int = 0


class GRPOReward(Strict):
    """The reward GRPO maximises (:mod:`r3edge.distill.teacher.rewards`).

    ``r3a``: R = I_format · r_score, r_score 1 for the gold native score, ``near_miss`` (the paper's
    λ) one point off, 0 further. ``retro``: ``alpha`` · intra-document + (1 − ``alpha``) ·
    inter-document, the intra part only where the furthest trajectory is more than ``tau`` native
    points from the group's integrated score.
    """

    kind: Literal["r3a", "retro"] = "r3a"
    near_miss: float = Field(0.0, ge=0.0, le=1.0)
    tau: float = Field(10.0, ge=0.0)
    alpha: float = Field(0.5, ge=0.0, le=1.0)


class GRPOParams(Strict):
    """TRL ``GRPOTrainer`` settings. A step's batch holds ``prompts_per_step`` pairs per device, each
    with a group of ``num_generations`` rollouts."""

    num_generations: int = Field(4, ge=2)
    prompts_per_step: PositiveInt = 2
    gradient_accumulation_steps: PositiveInt = 1
    learning_rate: float = Field(5e-7, gt=0)
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "constant"
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    #: KL coefficient against the starting weights (0: no reference model is kept)
    beta: float = Field(0.0, ge=0.0)
    #: clipping range of the policy ratio (and its upper end where set, DAPO's clip-higher)
    epsilon: float = Field(0.2, gt=0.0)
    epsilon_high: float | None = Field(None, gt=0.0)
    #: policy updates per generation batch (GRPO's μ)
    num_iterations: PositiveInt = 1
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = "dapo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    temperature: float = Field(1.0, gt=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    epochs: float = Field(1.0, gt=0)
    max_steps: PositiveInt | None = None
    #: ``auto``: bf16 autocast only where bf16 is native; the master weights stay fp32
    bf16: bool | Literal["auto"] = "auto"
    seed: int = 0
    logging_steps: PositiveInt = 1
    #: with eval pairs: measure their mean reward every N steps (None: before the first and after the last)
    eval_steps: PositiveInt | None = None
    #: train only the top N decoder layers (and the final norm); None: every weight (a CPU-sized cut: the
    #: backward pass stops at the lowest trainable layer)
    trainable_layers: PositiveInt | None = None
    #: recompute activations in the backward pass (TRL's default; saves GPU memory, costs a forward pass)
    gradient_checkpointing: bool = True


class GRPOVLLM(Strict):
    """Rollouts generated by vLLM (TRL's ``use_vllm``): ``server`` (a ``trl vllm-serve`` process on
    other GPUs) or ``colocate`` (in the training process). Needs a GPU and vLLM; off when absent."""

    mode: Literal["server", "colocate"] = "server"
    server_base_url: str | None = None
    gpu_memory_utilization: float = Field(0.3, gt=0.0, le=1.0)


class TeacherGRPOConfig(Strict):
    """A judge's reinforcement stage (``r3edge teacher grpo``): which teacher config's prompts and
    budgets it rolls out, which reward, how trained. The weights are the teacher config's model,
    or ``--model DIR`` (a cold-started judge from ``r3edge teacher sft``)."""

    kind: ClassVar[str] = "grpo"
    name: str
    teacher: str
    reward: GRPOReward = GRPOReward()
    data: GRPOData = GRPOData()
    train: GRPOParams = GRPOParams()
    vllm: GRPOVLLM | None = None


class ChainTeacher(Strict):
    """A teacher row of `r3edge bench chain`: its labels of the evaluation split (and of the calibration split)."""

    name: str
    labels: str
    fit_labels: str | None = None
    #: where it labelled, as the row names it (label files carry no machine description); None: not timed
    hardware: str | None = None


class ChainStudent(Strict):
    """A student row: an artifact (`r3edge export`) served here, its default variant unless ``variant``."""

    name: str
    artifact: str
    variant: str | None = None
    learnt_from: str | None = None


class ChainImported(Strict):
    """A student measured on another machine: the ``results.json`` of the GPU student call."""

    results: str
    name: str | None = None
    learnt_from: str | None = None


class ChainConfig(Strict):
    """`r3edge bench chain`'s rows: the teachers, the students they taught, rows measured elsewhere and the base
    encoders whose cosine is a floor (student config names); the first-stage order and BM25 are always floors.
    ``not_run`` lists the rows the chain still lacks, so the report says so instead of leaving them out silently."""

    kind: ClassVar[str] = "bench"
    name: str
    title: str | None = None
    teachers: list[ChainTeacher] = []
    students: list[ChainStudent] = []
    imported: list[ChainImported] = []
    base_students: list[str] = []
    not_run: list[str] = []
    #: timed top-10 requests per served student (concurrency 1)
    requests: PositiveInt = 20


def shipped_configs(kind: str) -> list[str]:
    """Names of the configs of ``kind`` (``teacher``, ``student``, ``serve``, ``sft``, ``grpo``) shipped with r3edge."""
    folder = resources.files("r3edge.configs") / kind
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml")) if folder.is_dir() else []


def resolve_config(ref: str | Path, kind: str) -> Path:
    """A config path from a path or a shipped name (``r3a-smollm2`` -> ``configs/teacher/r3a-smollm2.yaml``)."""
    path = Path(ref)
    if path.is_file():
        return path
    looks_like_path = path.suffix in (".yaml", ".yml") or len(path.parts) > 1
    if not looks_like_path:
        shipped = resources.files("r3edge.configs") / kind / f"{ref}.yaml"
        if shipped.is_file():
            return Path(str(shipped))
    names = ", ".join(shipped_configs(kind)) or "none"
    raise InvalidInput(f"{kind} config {str(ref)!r} is neither a YAML file nor a shipped {kind} config",
                      f"pass a path to a YAML file or one of the shipped names: {names}")


def validated(cls: type[T], values: dict, where: Callable[[str], tuple[str, str]]) -> T:
    """``cls.model_validate(values)``, with pydantic's first complaint turned into :class:`InvalidInput`.

    ``where(field)`` gives the message's start (which file, flag or variable held the field) and the fix.
    """
    try:
        return cls.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        what, fix = where(field)
        raise InvalidInput(f"{what}: {first['msg']}", fix, field=field) from exc


def load_yaml(path: str | Path, cls: type[T]) -> T:
    """Read a YAML config (a path, or a shipped name when ``cls`` has a ``kind``) into ``cls``.

    Errors name the file and the field.
    """
    kind = getattr(cls, "kind", None)
    if kind is not None:
        path = resolve_config(path, kind)
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(f"config {path} does not exist", f"pass a YAML file that holds a {cls.__name__}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise InvalidInput(f"config {path} is not valid YAML ({exc})", "fix the YAML syntax") from exc
    return validated(cls, raw, lambda field: (f"config {path}: field '{field}'",
                                              f"fix that field; the shipped {kind or cls.__name__} configs are examples"))
