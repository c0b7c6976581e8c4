"""``r3edge teacher grpo``: the judge's reinforcement stage, GRPO (TRL's ``GRPOTrainer``) on gold pairs.

R³A cold-starts its judge by SFT (``r3edge teacher sft``) and then runs GRPO with the rule reward
R = I_format · r_score; Retro* trains its judge with a composite intra-/inter-document reward. Both
rewards are :mod:`r3edge.distill.teacher.rewards`; this module builds the prompts, rolls the judge out and
hands both to TRL.

**Prompts.** One per gold-labelled pair of a candidate-list pairs file, shown exactly as labelling
shows it (:func:`~r3edge.distill.label.driver.intent_prompt`, :func:`~r3edge.distill.label.driver.pair_context`
and the judge's own message builders, with its ``reply_prefix`` prefilled). R³A's reward: the pairs,
optionally capped per label, in a seeded order. Retro*'s: *couples*, a more and a less relevant pair
of one query, as two adjacent prompts; the dataset is not reshuffled by TRL, and each device's
generation batch is a whole number of couples, so the inter-document reward finds both groups.

**Rollouts** (TRL's ``rollout_func``). A two-round judge (R³A) is rolled out over both rounds: each
trajectory samples its own intent (cut at ``</intent>`` and at the teacher config's
``intent_max_new_tokens``, as labelling cuts it), then the round-2 user turn is appended as
environment tokens (``env_mask`` 0: no loss) and the verdict is sampled after it. The loss is on
both replies. Single-round judges are one generation. Generation is TRL's own
(``GRPOTrainer._generate_single_turn``, the call its tool loop makes for later turns), so the
transformers path, TRL's paged generation and vLLM (``use_vllm``, server or colocate mode) all work
unchanged; a trajectory keeps the generated ids, so the policy is scored on what it sampled.
The verdict's budget is the teacher config's ``assess_max_new_tokens`` plus the score and the
end of the turn (labelling reads a read-out judge's score at ``<score>``; here the judge writes it).

The output is a plain HF directory (fp32 master weights saved in the base's dtype, tokenizer with
its chat template, ``grpo_report.json``) written atomically, which labelling loads unchanged
(``r3edge label --teacher CFG --teacher-model DIR``). Several GPUs: ``accelerate launch --multi_gpu
--num_processes N -m r3edge teacher grpo ...``; TRL deals the prompts out to the processes, and
``train.prompts_per_step`` is per process (TRL's per-device batch), so N processes take N times the
prompts of a step. The main process alone prints and saves. Two processes on CPU have run 2 steps of a
tiny random teacher whose rewards were all 0 (docs/distillation.md, "Several GPUs"): the launch and the
single writer are checked, the training is not compared with one process's (``r3edge train`` and
``teacher sft`` are, in tests/test_multiprocess_training.py).
"""

from __future__ import annotations

import importlib.util
import json
import math
import platform
import random
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from datasets import Dataset

from r3edge.core.config import TeacherConfig, TeacherGRPOConfig, load_yaml
from r3edge.core.errors import InvalidInput, MissingDependency, require
from r3edge.core.fileio import file_sha256
from r3edge.core.pairs import read_queries
from r3edge.distill.hf_trainer import ProgressCallback, main_process_log, process_state
from r3edge.distill.label.driver import intent_prompt, load_teacher_config, pair_context, verdict_tail
from r3edge.distill.label.judges import get_judge
from r3edge.distill.teacher.rewards import Prompt, R3AReward, RetroReward
from r3edge.distill.teacher.sft import freeze_below, load_base, trainable_layer_ids, use_bf16
from r3edge.distill.teacher.traces import native_of_gold
from r3edge.model.loading import save_hf_model, torch_dtype

REPORT_FILE = "grpo_report.json"
#: where labelling stops round 1 (``r3edge.distill.label.driver``)
INTENT_STOP = "</intent>"


def load_grpo_config(config: str | Path | TeacherGRPOConfig) -> TeacherGRPOConfig:
    return config if isinstance(config, TeacherGRPOConfig) else load_yaml(config, TeacherGRPOConfig)


def build_prompts(cfg: TeacherGRPOConfig, teacher: TeacherConfig, judge, queries) -> list[Prompt]:
    """The GRPO prompts in training order (see the module docstring); unlabelled pairs are skipped."""
    rng = random.Random(cfg.data.seed)
    native = native_of_gold(teacher, judge) if cfg.reward.kind == "r3a" else None

    def prompt(q, c, key, **kw) -> Prompt:
        if native is not None and c.label not in native:
            raise InvalidInput(f"pair ({q.qid}, {c.docid}) has gold label {c.label}, not a label of teacher config "
                              f"{teacher.name!r} ({sorted(native)})", "fix the pairs file's labels or choose another teacher config")
        return Prompt(key=key, qid=q.qid, docid=c.docid, pair=pair_context(teacher, q, c),
                      intent_messages=intent_prompt(teacher, judge, q) if judge.two_round else None,
                      gold=int(c.label), gold_native=native[c.label] if native is not None else None, **kw)

    if cfg.reward.kind == "r3a":
        by_label: dict[int, list[Prompt]] = defaultdict(list)
        for q in queries:
            for c in q.candidates:
                if c.label is not None:
                    by_label[int(c.label)].append(prompt(q, c, f"{q.qid}/{c.docid}"))
        chosen = []
        for label in sorted(by_label):
            group = by_label[label]
            rng.shuffle(group)
            chosen += group[: cfg.data.per_label_cap]
        rng.shuffle(chosen)
        out = chosen[: cfg.data.max_prompts]
    else:
        # every candidate above the query's lowest label is a positive, paired with one less relevant candidate
        couples = []
        for q in queries:
            labelled = [c for c in q.candidates if c.label is not None]
            for c in labelled:
                lower = [d for d in labelled if d.label < c.label]
                if lower:
                    couples.append((q, c, rng.choice(lower)))
        rng.shuffle(couples)
        if cfg.data.max_prompts is not None:
            couples = couples[: cfg.data.max_prompts // 2]
        out = []
        for i, (q, pos, neg) in enumerate(couples):
            out.append(prompt(q, pos, f"{i}:{q.qid}/{pos.docid}", couple=i, positive=True))
            out.append(prompt(q, neg, f"{i}:{q.qid}/{neg.docid}", couple=i, positive=False))
    if not out:
        raise InvalidInput("no GRPO prompt was built from the pairs file",
                          "pass candidate-list pairs with gold labels (Retro*'s reward needs two labels within a query)")
    return out


class Rollout:
    """TRL's ``rollout_func``: one trajectory per incoming prompt key (TRL repeats each key
    ``num_generations`` times), over both rounds for a two-round judge (see the module docstring)."""

    def __init__(self, judge, tokenizer, prompts: dict[str, Prompt], intent_budget: int, assess_budget: int):
        self.judge, self.tok, self.prompts = judge, tokenizer, prompts
        self.intent_budget, self.assess_budget = intent_budget, assess_budget

    def render(self, messages) -> str:
        """The prompt text labelling sends (the transformers backend's ``render`` plus the prefix)."""
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + self.judge.reply_prefix

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def text(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def cut_at(self, ids: list[int], stop: str) -> list[int]:
        """``ids`` up to the token that completes ``stop`` (all of them if it never appears)."""
        if stop not in self.text(ids):
            return ids
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if stop in self.text(ids[:mid]):
                hi = mid
            else:
                lo = mid + 1
        return ids[:lo]

    def __call__(self, keys: list[str], trainer) -> dict:
        judge, pre = self.judge, self.judge.reply_prefix
        ps = [self.prompts[k] for k in keys]
        eos = set(trainer.eos_token_ids)
        group = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        if not judge.two_round:
            first = [self.encode(self.render(judge.assess_messages(p.pair, None))) for p in ps]
            ids, lps = trainer._generate_single_turn(first, None, {}, group)
            ids = [list(x[: self.assess_budget]) for x in ids]
            return {"prompt_ids": first, "completion_ids": ids,
                    "logprobs": None if lps is None else [list(lp[: len(x)]) for lp, x in zip(lps, ids)],
                    "raw_assessment": [pre + self.text(x) for x in ids]}
        r1_text = [self.render(p.intent_messages) for p in ps]
        r1_ids = [self.encode(t) for t in r1_text]
        gen1, lps1 = trainer._generate_single_turn(r1_ids, None, {}, group)
        kept, envs, raw_intent, second = [], [], [], []
        for p, text1, ids1, g in zip(ps, r1_text, r1_ids, gen1):
            g = self.cut_at(list(g[: self.intent_budget]), INTENT_STOP)
            body = self.text(g)
            if INTENT_STOP in body:
                body = body[: body.index(INTENT_STOP) + len(INTENT_STOP)]
            intent = pre + body
            history = [*p.intent_messages, {"role": "assistant", "content": intent}]
            text2 = self.render(judge.assess_messages(p.pair, history))
            if not text2.startswith(text1 + body):
                raise InvalidInput("the tokenizer's chat template changes a reply when it renders it, so round 2 cannot "
                                  "continue round 1's generated tokens", "use a ChatML-style template (SmolLM2, Qwen)")
            env = self.encode(text2[len(text1) + len(body):])
            if g and g[-1] in eos and env[:1] == g[-1:]:
                env = env[1:]  # the model ended its turn itself: its end-of-turn token is trained, not given
            kept.append(g)
            envs.append(env)
            raw_intent.append(intent)
            second.append(ids1 + g + env)
        gen2, lps2 = trainer._generate_single_turn(second, None, {}, 1)
        gen2 = [list(x[: self.assess_budget]) for x in gen2]
        logprobs = None
        if lps1 is not None and lps2 is not None:
            logprobs = [list(a[: len(g)]) + [0.0] * len(e) + list(b[: len(x)])
                        for a, g, e, b, x in zip(lps1, kept, envs, lps2, gen2)]
        return {"prompt_ids": r1_ids, "completion_ids": [g + e + x for g, e, x in zip(kept, envs, gen2)],
                "env_mask": [[1] * len(g) + [0] * len(e) + [1] * len(x) for g, e, x in zip(kept, envs, gen2)],
                "logprobs": logprobs, "raw_intent": raw_intent, "raw_assessment": [pre + self.text(x) for x in gen2]}


def _check_batching(cfg: TeacherGRPOConfig) -> None:
    tp = cfg.train
    if cfg.reward.kind == "retro" and (tp.prompts_per_step * tp.gradient_accumulation_steps) % 2:
        raise InvalidInput(f"train.prompts_per_step {tp.prompts_per_step} × gradient_accumulation_steps "
                          f"{tp.gradient_accumulation_steps} is odd: Retro*'s inter-document reward needs both pairs of a "
                          "couple in one generation batch", "make train.prompts_per_step even", field="train.prompts_per_step")


def grpo_arguments(cfg: TeacherGRPOConfig, output_dir: str, *, max_completion_length: int, max_steps: int | None,
                   bf16: bool, evaluate: bool = False):
    """TRL's ``GRPOConfig`` from ours: no checkpoints, plain-line progress, no Hub, no reporting. With
    ``evaluate``, the eval prompts' mean reward is measured before the first step, every
    ``train.eval_steps`` steps and after the last."""
    from trl import GRPOConfig

    tp = cfg.train
    steps = max_steps if max_steps is not None else tp.max_steps
    extra: dict = {}
    if cfg.vllm is not None:
        if importlib.util.find_spec("vllm") is None:
            raise MissingDependency("the config's vllm block asks for vLLM rollouts, and vLLM is not installed",
                                    "pip install vllm on the GPU machine, or drop the vllm block (transformers generation)")
        extra = {"use_vllm": True, "vllm_mode": cfg.vllm.mode, "vllm_server_base_url": cfg.vllm.server_base_url,
                "vllm_gpu_memory_utilization": cfg.vllm.gpu_memory_utilization}
    if evaluate:
        extra |= {"eval_strategy": "steps", "eval_steps": tp.eval_steps or steps or 10**9, "eval_on_start": True,
                 "per_device_eval_batch_size": tp.prompts_per_step * tp.num_generations}
    return GRPOConfig(
        output_dir=output_dir,
        num_generations=tp.num_generations,
        per_device_train_batch_size=tp.prompts_per_step * tp.num_generations,
        gradient_accumulation_steps=tp.gradient_accumulation_steps,
        learning_rate=tp.learning_rate,
        lr_scheduler_type=tp.lr_scheduler,
        warmup_steps=tp.warmup_ratio,  # transformers 5 reads a value below 1 as a ratio
        beta=tp.beta,
        epsilon=tp.epsilon,
        epsilon_high=tp.epsilon_high,
        num_iterations=tp.num_iterations,
        loss_type=tp.loss_type,
        scale_rewards=tp.scale_rewards,
        gradient_checkpointing=tp.gradient_checkpointing,
        temperature=tp.temperature,
        top_p=tp.top_p,
        max_completion_length=max_completion_length,
        num_train_epochs=tp.epochs,
        max_steps=steps if steps is not None else -1,
        shuffle_dataset=cfg.reward.kind != "retro",  # Retro*'s couples stay adjacent (build_prompts orders them)
        bf16=bf16,
        use_cpu=not torch.cuda.is_available(),
        seed=tp.seed,
        data_seed=tp.seed,
        logging_steps=tp.logging_steps,
        save_strategy="no",
        disable_tqdm=True,
        report_to=[],
        **extra,
    )


@dataclass
class GRPORun:
    """A GRPO trainer ready to train, with what the report says about it."""

    trainer: object
    teacher: TeacherConfig
    judge: object
    prompts: list[Prompt]
    held: list[Prompt]
    budgets: dict[str, int]
    bf16: bool


def grpo_trainer(cfg: TeacherGRPOConfig, scratch: str | Path, *, pairs: str | Path, model: str | Path | None = None,
                 max_steps: int | None = None, eval_pairs: str | Path | None = None,
                 log: Callable[..., None] = print) -> GRPORun:
    """TRL's trainer for ``cfg``: prompts, rollouts, reward and arguments (``scratch``: its output dir)."""
    GRPOTrainer = _trainer_class(require("trl", "train"))
    if max_steps is not None and max_steps < 1:
        raise InvalidInput(f"--max-steps {max_steps} must be at least 1", "omit it to train for the configured steps/epochs")
    _check_batching(cfg)
    teacher = load_teacher_config(cfg.teacher, model=model)
    judge = get_judge(teacher.judge)
    prompts = build_prompts(cfg, teacher, judge, read_queries(pairs))
    held = build_prompts(cfg, teacher, judge, read_queries(eval_pairs)) if eval_pairs is not None else []
    held = [replace(p, key="eval:" + p.key) for p in held]
    by_key = {p.key: p for p in [*prompts, *held]}
    tp, rw = cfg.train, cfg.reward

    torch.manual_seed(tp.seed)
    tokenizer, lm = load_base(teacher.model)
    top = trainable_layer_ids(lm, tp.trainable_layers)
    if top is not None:
        freeze_below(lm, top)
    gen = teacher.generation
    tail = len(tokenizer.encode(verdict_tail(judge, max(judge.native_values)), add_special_tokens=False)) + 1
    assess_budget = gen.assess_max_new_tokens + (tail if judge.score_tokens is not None else 1)
    intent_budget = gen.intent_max_new_tokens if judge.two_round else 0
    rollout = Rollout(judge, tokenizer, by_key, intent_budget, assess_budget)
    if rw.kind == "r3a":
        reward = R3AReward(judge, by_key, rw.near_miss)
    else:
        reward = RetroReward(judge, by_key, tp.num_generations, rw.alpha, rw.tau)
    bf16 = use_bf16(tp.bf16)
    log(f"grpo: {len(prompts)} prompts ({'pairs' if rw.kind == 'r3a' else 'couples of pairs'}), reward {rw.kind}, "
        f"judge {judge.name}{' (two rounds)' if judge.two_round else ''}, group {tp.num_generations}, "
        f"{_prompts_per_step(tp.prompts_per_step, process_state().num_processes)}, "
        f"lr {tp.learning_rate}, beta {tp.beta}, epsilon {tp.epsilon}, "
        f"temperature {tp.temperature}{f', top {tp.trainable_layers} layers trained' if top else ''}, "
        f"budgets intent {intent_budget} / verdict {assess_budget} tokens; base {teacher.model.pretrained or 'random init'}")
    args = grpo_arguments(cfg, str(scratch), max_completion_length=max(intent_budget, assess_budget),
                          max_steps=max_steps, bf16=bf16, evaluate=bool(held))
    progress = ProgressCallback("grpo")
    trainer = GRPOTrainer(model=lm, reward_funcs=[reward], args=args,
                          train_dataset=Dataset.from_list([{"prompt": p.key} for p in prompts]),
                          eval_dataset=Dataset.from_list([{"prompt": p.key} for p in held]) if held else None,
                          processing_class=tokenizer, rollout_func=rollout, callbacks=[progress])
    progress.extra = lambda: _last_reward(trainer)
    return GRPORun(trainer, teacher, judge, prompts, held, {"intent": intent_budget, "verdict": assess_budget}, bf16)


def teacher_grpo(config: str | Path | TeacherGRPOConfig, out_dir: str | Path, *, pairs: str | Path,
                 model: str | Path | None = None, max_steps: int | None = None, eval_pairs: str | Path | None = None,
                 log: Callable[..., None] = print) -> Path:
    """Train the judge of ``config``'s teacher by GRPO on ``pairs``' gold labels; write it to ``out_dir``.

    ``model`` replaces the teacher config's weights (the cold-started judge). ``eval_pairs``: gold
    pairs whose mean reward (same reward, same sampling, no training) is measured before, during and
    after training: a fixed set, unlike the training batches. Returns ``out_dir``.
    """
    cfg = load_grpo_config(config)
    log = main_process_log(log)
    with tempfile.TemporaryDirectory(prefix="r3edge-grpo-") as scratch:
        run = grpo_trainer(cfg, scratch, pairs=pairs, model=model, max_steps=max_steps, eval_pairs=eval_pairs, log=log)
        trainer, teacher, judge = run.trainer, run.teacher, run.judge
        t0 = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t0
        history = [h for h in trainer.state.log_history if "reward" in h]
        evals = [h for h in trainer.state.log_history if "eval_reward" in h]
        steps = int(trainer.state.global_step)
    lm = trainer.accelerator.unwrap_model(trainer.model)
    lm.eval()

    report = {
        "config": cfg.model_dump(mode="json"),
        "teacher_config": teacher.name,
        "judge": judge.name,
        "prompt_hash": judge.prompt_hash,
        "base_model": str(model) if model is not None else teacher.model.pretrained,
        "pairs_file": Path(pairs).name,
        "pairs_sha256": file_sha256(Path(pairs)),
        "prompts": len(run.prompts),
        "rollouts": "two rounds (intent, then verdict)" if judge.two_round else "one round",
        "budgets": run.budgets,
        "bf16": run.bf16,
        "device": "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)",
        "vllm": cfg.vllm.model_dump() if cfg.vllm else None,
        "steps": steps,
        "log": history,
        "reward_first": history[0]["reward"] if history else None,
        "reward_last": history[-1]["reward"] if history else None,
        "eval_pairs_file": Path(eval_pairs).name if eval_pairs is not None else None,
        "eval_prompts": len(run.held),
        "eval_log": evals,
        # R³A: every group's rewards by prompt key (eval prompts' keys start with "eval:")
        "groups": getattr(trainer.reward_funcs[0], "groups", None),
        "wall_time_s": round(wall, 2),
        "seconds_per_step": round(wall / max(1, steps), 3),
        "versions": {"torch": torch.__version__, "python": platform.python_version(), "trl": _version("trl")},
    }
    if not process_state().is_main_process:  # the main process saves; the others' weights are the same
        return Path(out_dir)
    out = save_hf_model(lm.to(torch_dtype(teacher.model.dtype)), trainer.processing_class, out_dir,
                        extra_files={REPORT_FILE: json.dumps(report, indent=2) + "\n"})
    log(f"grpo: {steps} steps in {wall:.1f} s ({report['seconds_per_step']} s/step); mean reward "
        f"{_fmt(report['reward_first'])} -> {_fmt(report['reward_last'])}; saved {out}")
    return out


def _prompts_per_step(per_process: int, processes: int) -> str:
    """The prompts of a (micro-)step: TRL's per-device batch is per process, so N processes take N times it."""
    return f"{per_process} prompts/step" if processes == 1 else \
        f"{per_process * processes} prompts/step ({per_process} on each of {processes} processes)"


def _trainer_class(trl):
    """TRL's ``GRPOTrainer`` with the eval prompts in file order, unshuffled: TRL shuffles them, which
    would split Retro*'s couples (the training order is kept by ``shuffle_dataset``)."""
    from trl.trainer.grpo_trainer import RepeatSampler

    class GRPOTrainer(trl.GRPOTrainer):
        def _get_eval_sampler(self, eval_dataset):
            return RepeatSampler(data_source=eval_dataset, mini_repeat_count=self.num_generations_eval, shuffle=False,
                                 seed=self.args.seed)

    return GRPOTrainer


def _last_reward(trainer) -> str:
    logged = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return f"reward {logged[-1]:.3f}" if logged else ""


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.3f}"


def read_report(model_dir: str | Path) -> dict:
    return json.loads((Path(model_dir) / REPORT_FILE).read_text())
