"""``r3edge teacher sft``: supervised fine-tuning of a generative judge on traces in its own format.

R³A's cold start: before a small model can label in the two-round ``<think>``/``<intent>`` then
``<think>``/``<extract>``/``<score>`` format it is fine-tuned on conversations that already follow
it (:mod:`r3edge.distill.teacher.traces`: replies of a stronger judge, or templated traces from gold labels,
which teach the format and the labels but not reasoning).

The loss is on the assistant replies only. Each reply is one training example: the conversation
up to it, rendered by the tokenizer's chat template with the generation prompt and the judge's
prefilled ``reply_prefix`` and tokenised as one string (token for token the prompt labelling sends),
carries no loss; the reply after the prefix and the template's end-of-turn token carry it, so the
model also learns to stop. (SmolLM2's and Qwen's templates mark no ``{% generation %}`` spans, so
the end of a turn is found by rendering the conversation with and without the reply.)

R³A's round 1 and round 2 are therefore separate examples, not one sequence: in one sequence the
round-1 reply would be tokenised either as generated (after the prefix) or as labelling's round-2
prompt re-tokenises it, not both, and the two differ at the seam after ``<think>``. On the toy task
of the tests that seam alone made a tiny model's round-2 replies fail at labelling while its
training loss was 0.004. Round 1 is the same for every candidate of a query, so its example is made
once per query (per distinct intent reply), not once per pair; round 2 sees it as context in every
pair. An example longer than ``max_length`` is dropped and counted, never cut: a cut prompt is not
what labelling shows and a cut reply teaches the model to stop mid-reply.

A training step holds up to ``train.batch_size`` replies of one query and round, and their common
prefix (system prompt, round 1, the round-2 instructions up to the post: ~390 of a demo verdict's
~520 tokens) runs once per step, its key/value cache shared by the rows
(:func:`shared_prefix_chunks`); loss and gradients are those of the unshared batch (tested), at
about half the tokens.

Full fine-tuning or LoRA (peft, merged before saving); bf16 autocast where configured with fp32
master weights; the output is a plain HF directory (safetensors, tokenizer with its chat template,
generation config that stops at the end of a turn, ``sft_report.json``) written atomically, which
both labelling backends load (``r3edge label --teacher CFG --teacher-model DIR``).

Under ``accelerate launch`` a micro-batch is one chunk per process, so the config's
``gradient_accumulation_steps`` chunks of a step are dealt out over the processes (it must be a multiple
of their number; :func:`~r3edge.distill.hf_trainer.per_device_batches`), the loss is normalised by the
labelled tokens of the whole step on every process, and the main process alone prints and saves.
"""

from __future__ import annotations

import json
import math
import platform
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from datasets import Dataset
from transformers import set_seed

from r3edge.core.config import ModelSpec, SFTConfig, SFTParams, TeacherConfig, load_yaml
from r3edge.core.errors import InvalidInput
from r3edge.core.fileio import file_sha256
from r3edge.core.pairs import read_queries
from r3edge.core.sequences import common_prefix_length
from r3edge.distill.hf_trainer import (
    FiniteSteps,
    GlobalBatchTrainer,
    ProgressCallback,
    TimeBudget,
    main_process_log,
    process_state,
    training_arguments,
)
from r3edge.distill.label.driver import load_teacher_config
from r3edge.distill.label.judges import get_judge
from r3edge.distill.teacher.traces import Trace, gold_traces, label_traces, select
from r3edge.model.kv_cache import cache_kwargs, cache_of
from r3edge.model.loading import load_model, load_tokenizer, native_bf16, save_hf_model, torch_dtype

REPORT_FILE = "sft_report.json"
IGNORE = -100


def load_sft_config(config: str | Path | SFTConfig) -> SFTConfig:
    return config if isinstance(config, SFTConfig) else load_yaml(config, SFTConfig)


def stop_token_ids(tokenizer, model=None) -> set[int]:
    """The tokens that end a reply at labelling time: the generation config's EOS, else the tokenizer's."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def reply_examples(tokenizer, messages: list[dict[str, str]], reply_prefix: str, train_reply: Sequence[bool],
                   stop_ids: set[int]) -> list[tuple[list[int], list[int]]]:
    """One training example per trained assistant reply: ``(input_ids, labels)``.

    The context is the conversation up to that reply rendered by the chat template with its
    generation prompt, plus ``reply_prefix``, tokenised as one string: token for token the prompt
    labelling sends for that round. The labels are ``-100`` on it and the ids of the reply after the
    prefix plus the template's end-of-turn token. ``train_reply[k]`` says whether the k-th assistant
    reply gets an example.
    """
    render = tokenizer.apply_chat_template
    out = []
    k = 0
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        if k < len(train_reply) and not train_reply[k]:
            k += 1
            continue
        reply = m["content"]
        if not reply.startswith(reply_prefix):
            raise InvalidInput(f"assistant reply {k} does not start with the judge's prefix {reply_prefix!r}",
                              "build traces with r3edge.distill.teacher.traces (every reply starts with the prefix)")
        prompt = render(messages[:i], tokenize=False, add_generation_prompt=True)
        closed = render(messages[: i + 1], tokenize=False)
        if not closed.startswith(prompt + reply):
            raise InvalidInput("the tokenizer's chat template does not render a reply after its generation prompt, "
                              "so the end of a turn cannot be found", "use a ChatML-style template (SmolLM2, Qwen)")
        context = tokenizer.encode(prompt + reply_prefix, add_special_tokens=False)
        body = tokenizer.encode(reply[len(reply_prefix):], add_special_tokens=False)
        tail = tokenizer.encode(closed[len(prompt) + len(reply):], add_special_tokens=False)
        end = next((j for j, t in enumerate(tail) if t in stop_ids), None)
        if end is None:
            raise InvalidInput(f"the chat template closes a reply with {tokenizer.decode(tail)!r}, which holds no end-of-generation "
                              f"token {sorted(stop_ids)}: the model would never learn to stop",
                              "use a tokenizer whose eos token is the template's end of turn (e.g. <|im_end|>)")
        target = body + tail[: end + 1]
        out.append((context + target, [IGNORE] * len(context) + target))
        k += 1
    if k == 0:
        raise InvalidInput("a trace has no assistant reply", "build traces with r3edge.distill.teacher.traces")
    return out


def trained_replies(traces: Sequence[Trace]) -> list[list[bool]]:
    """Which replies of each trace carry the loss: every last reply; an earlier (R³A round-1) reply
    only where that query's reply text is seen for the first time."""
    seen: set[tuple[str, str]] = set()
    out = []
    for t in traces:
        replies = [m["content"] for m in t.messages if m["role"] == "assistant"]
        flags = []
        for r in replies[:-1]:
            key = (t.qid, r)
            flags.append(key not in seen)
            seen.add(key)
        out.append([*flags, True])
    return out


def _generated_tokens(tokenizer, judge, reply: str, final: bool) -> int:
    """How many tokens labelling must generate to write ``reply`` after the prefilled prefix: up to
    the score marker for a read-out judge's verdict (generation stops there), else the whole reply."""
    text = reply[len(judge.reply_prefix):]
    if final and judge.score_tokens is not None and judge.score_open in text:
        text = text[: text.index(judge.score_open) + len(judge.score_open)]
    return len(tokenizer.encode(text, add_special_tokens=False))


def shared_prefix_chunks(examples: Sequence[tuple[list[int], list[int]]], keys: Sequence, size: int) -> list[dict]:
    """Examples grouped into training steps whose rows share one prefix, computed once per step.

    Every verdict of a query repeats the same context (system prompt, round 1, the round-2
    instructions up to the document): ~390 of a demo trace's ~520 tokens. Examples with the same
    ``key`` (query and round) are cut into chunks of at most ``size``; a chunk's prefix is the
    longest run of tokens all its rows start with, stopped before the first labelled position
    (and one earlier, so every suffix starts with a context token). The loss and the gradients are
    those of the unshared batch (:class:`SharedPrefixStep` runs the prefix once and broadcasts its
    key/value cache): the causal model computes the same prefix for each row anyway.
    """
    groups: dict = {}
    for ex, key in zip(examples, keys):
        groups.setdefault(key, []).append(ex)
    chunks = []
    for rows in groups.values():
        for i in range(0, len(rows), size):
            part = rows[i:i + size]
            n = min(min(len(ids) for ids, _ in part),
                    min(next((j for j, x in enumerate(lab) if x != IGNORE), len(lab)) for _, lab in part) - 1)
            p = common_prefix_length([ids for ids, _ in part], n)
            first = part[0][0]
            chunks.append({"prefix": first[:p], "input_ids": [ids[p:] for ids, _ in part],
                           "labels": [lab[p:] for _, lab in part],
                           "length": p + sum(len(ids) - p for ids, _ in part)})
    return chunks


class SFTCollator:
    """One chunk of :func:`shared_prefix_chunks` per step: its prefix ``[1, P]`` and its suffixes
    right-padded; padded positions carry no loss and no attention."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if len(features) != 1:
            raise InvalidInput(f"an SFT step takes one shared-prefix chunk, got {len(features)}",
                              "build the dataset with shared_prefix_chunks and per-device batch size 1")
        (f,) = features
        width = max(len(r) for r in f["input_ids"])
        ids = [r + [self.pad_id] * (width - len(r)) for r in f["input_ids"]]
        labels = [r + [IGNORE] * (width - len(r)) for r in f["labels"]]
        mask = [[1] * len(r) + [0] * (width - len(r)) for r in f["input_ids"]]
        return {"prefix_ids": torch.tensor([f["prefix"]], dtype=torch.long), "input_ids": torch.tensor(ids),
                "attention_mask": torch.tensor(mask), "labels": torch.tensor(labels)}


class SharedPrefixStep(torch.nn.Module):
    """The model the Trainer runs (and wraps in DDP across processes): one step of :class:`SFTCollator`'s
    batch through ``lm``, returning the logits at the labelled positions and their target ids.

    The shared prefix of a step runs once (batch 1) and its key/value cache is repeated for every
    row, with gradients flowing back through it (``prefix_gradients``; without them the prefix runs outside
    autograd, so a step back-propagates its rows' suffixes only); the rows then run only their own suffix.
    Without ``context_gradients`` each row's tokens before its reply (from the one that predicts its first
    label) join the cache outside autograd too, so only the replies are back-propagated. The vocabulary
    projection runs only where a label is, not over the whole prompt: prompts are most of a trace, and the
    projection is most of a small model's cost. It is a module's forward, not code in the loss, because DDP
    averages the gradients of what runs through its forward only.
    """

    #: the Trainer counts ``num_items_in_batch`` (over every process) from the labels, over ``labels[..., 1:]``
    #: as the loss reads them, and the loss divides by it
    accepts_loss_kwargs = True
    loss_type = "ForCausalLM"

    def __init__(self, lm, prefix_gradients: bool = True, context_gradients: bool = True):
        super().__init__()
        if not context_gradients and prefix_gradients:
            raise InvalidInput("context_gradients=False cuts the shared prefix's gradients too",
                               "pass prefix_gradients=False with it")
        self.lm = lm
        self.prefix_gradients = prefix_gradients
        self.context_gradients = context_gradients

    def forward(self, input_ids, attention_mask, labels, prefix_ids=None):
        lm = self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm
        decoder = lm.get_decoder()
        n, width = input_ids.shape
        p = 0 if prefix_ids is None else prefix_ids.shape[1]
        cache, seen = None, attention_mask.new_ones(n, p)  # the cache, and which of its positions each row sees
        if p:
            with torch.set_grad_enabled(self.prefix_gradients and torch.is_grad_enabled()):
                cache = cache_of(decoder(input_ids=prefix_ids, use_cache=True))
            cache.batch_repeat_interleave(n)
        # row i back-propagates from column start[i]: the token whose output predicts its first label
        start = torch.zeros(n, dtype=torch.long, device=input_ids.device)
        if not self.context_gradients:
            start = ((labels != IGNORE).long().argmax(dim=1) - 1).clamp(min=0)
        c = int(start.max())
        if c:
            cols = torch.arange(c, device=input_ids.device)
            with torch.no_grad():  # every row's first c tokens; a row's own reply then sees only its context
                cache = cache_of(decoder(input_ids=input_ids[:, :c], attention_mask=torch.cat([seen, attention_mask[:, :c]], dim=1),
                                         position_ids=(p + cols).expand(n, -1), use_cache=True,
                                         **({} if cache is None else cache_kwargs(cache))))
            seen = torch.cat([seen, (cols < start[:, None]).to(attention_mask.dtype)], dim=1)
            # each row's remaining tokens, shifted to column 0
            rest = start[:, None] + torch.arange(width - int(start.min()), device=input_ids.device)
            inside = rest < width
            take = rest.clamp(max=width - 1)
            input_ids = input_ids.gather(1, take)
            attention_mask = attention_mask.gather(1, take) * inside
            labels = labels.gather(1, take).masked_fill(~inside, IGNORE)
        targets = labels[:, 1:]
        sel = targets != IGNORE
        if cache is None:
            hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        else:
            pos = p + start[:, None] + torch.arange(input_ids.shape[1], device=input_ids.device)
            hidden = decoder(input_ids=input_ids, attention_mask=torch.cat([seen, attention_mask], dim=1), position_ids=pos,
                             use_cache=True, **cache_kwargs(cache)).last_hidden_state
        return lm.get_output_embeddings()(hidden[:, :-1][sel]), targets[sel]


class SFTTrainer(GlobalBatchTrainer):
    """Causal-LM cross-entropy on the labelled (assistant) positions only, run through
    :class:`SharedPrefixStep` (the Trainer's ``model``; pass the language model itself).

    The loss is the sum over the step's labelled tokens divided by their count over the whole step (every
    micro-batch of every process: the Trainer's ``num_items_in_batch``), times the number of processes,
    which DDP's gradient average divides back out.
    """

    tokens_seen = 0
    finite = FiniteSteps()

    def __init__(self, model, prefix_gradients: bool = True, context_gradients: bool = True, **kwargs):
        super().__init__(model=SharedPrefixStep(model, prefix_gradients, context_gradients), **kwargs)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # accelerate puts bf16 autocast around the top module's forward only where it wraps it; say it here
        with self.accelerator.autocast():
            logits, targets = model(inputs["input_ids"], inputs["attention_mask"], inputs["labels"], inputs.get("prefix_ids"))
        logits = logits.float()
        total = F.cross_entropy(logits, targets, reduction="sum")
        n = torch.as_tensor(num_items_in_batch if num_items_in_batch is not None else targets.numel())
        prefix = inputs.get("prefix_ids")
        self.tokens_seen += (0 if prefix is None else prefix.shape[1]) + int(inputs["attention_mask"].sum())
        loss = total / n.to(total.device).clamp(min=1)
        if num_items_in_batch is not None and self.args.average_tokens_across_devices:
            loss = loss * self.accelerator.num_processes  # n counts every process's tokens; DDP averages the gradients
        loss = self.finite.loss(loss, self.state.global_step)
        return (loss, logits) if return_outputs else loss


def trainable_layer_ids(lm, n_top: int | None) -> list[int] | None:
    """The indices of the top ``n_top`` decoder layers (None: train every layer)."""
    if n_top is None:
        return None
    n = len(lm.get_decoder().layers)
    if n_top > n:
        raise InvalidInput(f"train.trainable_layers {n_top} is more than the model's {n} decoder layers",
                          f"set it to at most {n}, or omit it to fine-tune every weight")
    return list(range(n - n_top, n))


def freeze_below(lm, layer_ids: Sequence[int]) -> None:
    """Only ``layer_ids`` and the final norm keep gradients. Nothing below the lowest of them
    requires a gradient, so autograd records nothing there and the backward pass stops early."""
    lm.requires_grad_(False)
    decoder = lm.get_decoder()
    for i in layer_ids:
        decoder.layers[i].requires_grad_(True)
    if getattr(decoder, "norm", None) is not None:
        decoder.norm.requires_grad_(True)


def use_bf16(setting) -> bool:
    """A config's ``bf16`` (true, false or auto) for this machine: auto is bf16 only where it is native."""
    if setting != "auto":
        return bool(setting)
    return native_bf16()


def build_traces(cfg: SFTConfig, teacher: TeacherConfig, judge, *, gold: str | Path | None,
                 traces: str | Path | Sequence[str | Path] | None, log: Callable[..., None]) -> tuple[list[Trace], dict]:
    """The traces of the requested source, with their provenance and drop counts (see the module docstring
    of :mod:`r3edge.distill.teacher.traces`)."""
    if gold is None:
        raise InvalidInput("teacher sft needs the pairs file (--gold PAIRS.jsonl)",
                          "pass the gold-labelled pairs, or with --traces the pairs file those labels were made from")
    queries = read_queries(gold)
    source: dict = {"pairs_file": Path(gold).name, "pairs_sha256": file_sha256(Path(gold))}
    if traces is None:
        made = gold_traces(teacher, judge, queries, reason=cfg.traces.reason)
        source["kind"] = "gold (templated: teaches the format and the labels, not reasoning)"
    else:
        dirs = [traces] if isinstance(traces, (str, Path)) else list(traces)
        made = label_traces(teacher, judge, queries, gold, dirs, retro_filter=cfg.traces.retro_filter)
        source["kind"] = "labels of a stronger judge"
        source["labels_dirs"] = [Path(d).name for d in dirs]
    source.update(considered=made.considered, built=len(made.traces), dropped=dict(sorted(made.dropped.items())))
    log(f"sft: {made.considered} pairs -> {len(made.traces)} well-formed traces ({source['kind']}); "
        f"dropped {sum(made.dropped.values())}" + "".join(f"\n  {n} {r}" for r, n in sorted(made.dropped.items())))
    return made.traces, source


def teacher_sft(config: str | Path | SFTConfig, out_dir: str | Path, *, gold: str | Path | None = None,
                traces: str | Path | Sequence[str | Path] | None = None, max_examples: int | None = None,
                epochs: float | None = None, max_steps: int | None = None, log: Callable[..., None] = print) -> Path:
    """Fine-tune the config's base model on judge traces and write it to ``out_dir`` (atomically).

    ``gold``: a candidate-list pairs file; alone, source (b) builds templated traces from its gold
    labels; with ``traces`` (one labels directory or several) it is the file those labels were made
    from and source (a) rebuilds the stronger judge's conversations. Returns ``out_dir``.
    """
    cfg = load_sft_config(config)
    log = main_process_log(log)
    if max_examples is not None and max_examples < 1:
        raise InvalidInput(f"--max-examples {max_examples} must be at least 1", "omit it to train on every trace")
    if max_steps is not None and max_steps < 1:
        raise InvalidInput(f"--max-steps {max_steps} must be at least 1", "omit it to train for the configured epochs")
    if epochs is not None and epochs <= 0:
        raise InvalidInput(f"--epochs {epochs} must be positive", "omit it to train for the configured epochs")
    teacher = load_teacher_config(cfg.teacher)
    judge = get_judge(teacher.judge)
    spec: ModelSpec = cfg.model or teacher.model
    all_traces, source = build_traces(cfg, teacher, judge, gold=gold, traces=traces, log=log)
    chosen, selection = select(all_traces, cfg.traces, max_examples)
    if not chosen:
        raise InvalidInput("no trace is left to train on", "check the drop reasons above; use more pairs or another source")

    tp = cfg.train
    set_seed(tp.seed)
    tokenizer, lm = load_base(spec)
    made = training_examples(chosen, tokenizer, judge, teacher, tp.max_length, stop_token_ids(tokenizer, lm), log)
    chunks = shared_prefix_chunks(made.examples, made.keys, tp.batch_size)
    n_computed = sum(c["length"] for c in chunks)
    log(f"sft: training on {len(made.examples)} examples ({sum(made.by_label.values())} verdicts, "
        f"{made.n_first} earlier-round replies; {made.n_tokens} tokens, {made.n_target} with loss; {n_computed} computed "
        f"with shared prefixes, {len(chunks)} steps per epoch), verdict labels {dict(sorted(made.by_label.items()))}; "
        f"base {spec.pretrained or 'random init'}, judge {judge.name}, "
        f"{'LoRA r=' + str(cfg.lora.r) if cfg.lora else 'full fine-tuning'}"
        f"{f' of the top {tp.trainable_layers} layers' if tp.trainable_layers else ''}")

    model = _trainable_model(lm, cfg)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    bf16 = use_bf16(tp.bf16)
    fit = _fit(model, tokenizer, chunks, tp, bf16=bf16, epochs=epochs, max_steps=max_steps)
    if cfg.lora is not None:
        lm = model.merge_and_unload()
    lm.eval()

    report = {
        "config": cfg.model_dump(mode="json"),
        "teacher_config": teacher.name,
        "judge": judge.name,
        "prompt_hash": judge.prompt_hash,
        "base_model": spec.pretrained or f"random-init:{(spec.architecture or {}).get('model_type', '?')}:seed{spec.seed}",
        "source": source,
        "selection": selection,
        "dropped_too_long": dict(made.too_long),
        "over_generation_budget": dict(made.over_budget),
        "examples": len(made.examples),
        "trained": sum(made.by_label.values()),
        "trained_by_label": {str(k): v for k, v in sorted(made.by_label.items())},
        "earlier_round_examples": made.n_first,
        "tokens": made.n_tokens,
        "tokens_computed": n_computed,
        "tokens_with_loss": made.n_target,
        "max_length": tp.max_length,
        "lora": cfg.lora.model_dump() if cfg.lora else None,
        "trainable_layers": tp.trainable_layers,
        "trainable_parameters": n_trainable,
        "bf16": bf16,
        "device": "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)",
        "processes": fit.processes,
        "per_device_gradient_accumulation_steps": fit.per_device_accumulation,
        "epochs": fit.epochs,
        "steps": fit.steps,
        "skipped_steps": fit.skipped_steps,
        "stopped_by_time_at_step": fit.stopped_by_time_at,
        "loss_first": fit.losses[0][1] if fit.losses else None,
        "loss_last": fit.losses[-1][1] if fit.losses else None,
        "loss_log": fit.losses,
        "train_loss_mean": fit.train_loss_mean,
        "wall_time_s": round(fit.wall, 2),
        "seconds_per_step": round(fit.wall / max(1, fit.steps), 3),
        "tokens_per_s": round(fit.tokens_seen / max(fit.wall, 1e-9), 1),
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
    }
    if not process_state().is_main_process:  # the main process saves; the others' weights are the same
        return Path(out_dir)
    out = _save(lm, tokenizer, spec, out_dir, report)
    log(f"sft: {report['examples']} examples, {fit.steps} steps in {fit.wall:.1f} s ({report['seconds_per_step']} s/step, "
        f"{report['tokens_per_s']:.0f} tok/s); loss {_fmt(report['loss_first'])} -> {_fmt(report['loss_last'])}; saved {out}")
    return out


def load_base(spec: ModelSpec) -> tuple:
    """``(tokenizer, model)`` of the base: a tokenizer without a chat template is refused, and the
    weights are fp32 (master weights; bf16 only as autocast)."""
    tokenizer = load_tokenizer(spec.tokenizer_ref)
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidInput(f"tokenizer {spec.tokenizer_ref!r} has no chat template", "fine-tune an instruct model's tokenizer")
    return tokenizer, load_model(spec.model_copy(update={"dtype": "float32"}))


@dataclass
class TrainingExamples:
    """The training examples of a set of traces, with what was dropped or warned about on the way."""

    examples: list[tuple[list[int], list[int]]] = field(default_factory=list)
    keys: list[tuple[str, int]] = field(default_factory=list)  # (query, round): the examples that share a prefix
    by_label: Counter = field(default_factory=Counter)  # final-reply examples per student label
    too_long: Counter = field(default_factory=Counter)
    over_budget: Counter = field(default_factory=Counter)
    n_first: int = 0  # examples of an earlier round (R³A's intent), one per query

    @property
    def n_tokens(self) -> int:
        return sum(len(ids) for ids, _ in self.examples)

    @property
    def n_target(self) -> int:
        """Tokens that carry the loss."""
        return sum(sum(1 for x in lab if x != IGNORE) for _, lab in self.examples)


def training_examples(traces: Sequence[Trace], tokenizer, judge, teacher: TeacherConfig, max_length: int,
                      stop_ids: set[int], log: Callable[..., None]) -> TrainingExamples:
    """The examples of :func:`reply_examples` for every trained reply (:func:`trained_replies`).

    One longer than ``max_length`` is dropped and counted; a reply longer than the teacher config lets
    labelling generate is kept and warned about (labelling would cut it); no verdict left is an error.
    """
    made = TrainingExamples()
    for t, flags in zip(traces, trained_replies(traces)):
        rounds = [k for k, f in enumerate(flags) if f]
        replies = [m["content"] for m in t.messages if m["role"] == "assistant"]
        for (ids, labels), k in zip(reply_examples(tokenizer, t.messages, judge.reply_prefix, flags, stop_ids), rounds):
            final = k == len(flags) - 1
            kind = "final reply" if final else "earlier round"
            if len(ids) > max_length:
                made.too_long[kind] += 1
                continue
            if _generated_tokens(tokenizer, judge, replies[k], final) > (
                    teacher.generation.assess_max_new_tokens if final else teacher.generation.intent_max_new_tokens):
                made.over_budget[kind] += 1
            made.examples.append((ids, labels))
            made.keys.append((t.qid, k))
            if final:
                made.by_label[t.label] += 1
            else:
                made.n_first += 1
    if made.too_long:
        log(f"sft: examples longer than max_length {max_length} tokens dropped (prompts are never cut): {dict(made.too_long)}")
    if made.over_budget:
        log(f"sft: warning: replies longer than teacher config {teacher.name!r} lets labelling generate "
            f"(generation.intent_max_new_tokens / assess_max_new_tokens): {dict(made.over_budget)}; labelling will cut them "
            "(repaired, format_ok false)")
    if not made.by_label:
        raise InvalidInput(f"every trace is longer than max_length {max_length} tokens",
                          "raise train.max_length, or lower the teacher config's max_doc_chars / n_aux")
    return made


def _trainable_model(lm, cfg: SFTConfig):
    """What the optimiser sees: ``lm`` with LoRA adapters (on the top layers where ``train.trainable_layers``
    is set), or ``lm`` itself with everything below its top layers frozen."""
    top = trainable_layer_ids(lm, cfg.train.trainable_layers)
    if cfg.lora is not None:
        from peft import LoraConfig, get_peft_model

        return get_peft_model(lm, LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                                             target_modules=list(cfg.lora.target_modules), task_type="CAUSAL_LM",
                                             layers_to_transform=top))
    if top is not None:
        freeze_below(lm, top)
    return lm


@dataclass
class _Fit:
    """What a training run leaves for the report: the trainer's state, losses and timing."""

    epochs: float
    steps: int
    losses: list[tuple[int, float]]
    train_loss_mean: float
    wall: float
    tokens_seen: int
    skipped_steps: list[int]
    stopped_by_time_at: int | None
    processes: int
    per_device_accumulation: int


def _fit(model, tokenizer, chunks: list[dict], tp: SFTParams, *, bf16: bool, epochs: float | None,
         max_steps: int | None) -> _Fit:
    """Train ``model`` in place, one shared-prefix chunk per step."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    dataset = Dataset.from_list(chunks)
    with tempfile.TemporaryDirectory(prefix="r3edge-sft-") as scratch:
        # a micro-batch is one chunk of up to train.batch_size examples sharing a prefix
        args = training_arguments(scratch, tp.model_copy(update={"batch_size": 1}), bf16=bf16, epochs=epochs, max_steps=max_steps,
                                  batch_field=None, lr_scheduler_type=tp.lr_scheduler)
        progress, finite, clock = ProgressCallback("sft"), FiniteSteps(tp.max_skipped_steps), TimeBudget(tp.max_seconds)
        trainer = SFTTrainer(model=model, prefix_gradients=tp.prefix_gradients,
                             context_gradients=tp.context_gradients, args=args, train_dataset=dataset,
                             data_collator=SFTCollator(pad),
                             callbacks=[progress, finite, clock])
        trainer.finite = finite
        t0 = time.perf_counter()
        progress.extra = lambda: f"{trainer.tokens_seen / max(time.perf_counter() - t0, 1e-9):.0f} tok/s"
        result = trainer.train()
        wall = time.perf_counter() - t0
        losses = [(h["step"], h["loss"]) for h in trainer.state.log_history if "loss" in h]
    return _Fit(epochs=float(trainer.state.epoch or 0.0), steps=int(trainer.state.global_step), losses=losses,
                train_loss_mean=float(result.training_loss), wall=wall, tokens_seen=trainer.tokens_seen,
                skipped_steps=finite.skipped, stopped_by_time_at=clock.stopped_at, processes=args.world_size,
                per_device_accumulation=args.gradient_accumulation_steps)


def _save(lm, tokenizer, spec: ModelSpec, out_dir: str | Path, report: dict) -> Path:
    """A plain HF directory in the base's dtype (:func:`r3edge.model.loading.save_hf_model`) with the report."""
    return save_hf_model(lm.to(torch_dtype(spec.dtype)), tokenizer, out_dir,
                         extra_files={REPORT_FILE: json.dumps(report, indent=2) + "\n"})


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.4f}"
