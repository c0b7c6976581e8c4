"""The judges' reinforcement rewards, on parsed trajectories (torch-free), and their TRL adapters.

**R³A** (arXiv 2508.02506): R = I_format · r_score. I_format is the labeller's own: every round's
reply parses with the judge's parser (:meth:`Judge.parse_intent`, :meth:`Judge.parse_assessment`:
every tag once, in order, nothing outside them, the score on the scale, the extract verbatim in the
document or ``none``), so a verdict the reward pays for is one that labelling records as
``format_ok``. r_score is 1 for the gold native score, ``near_miss`` (the paper's λ; its best is 0)
one point off, 0 further.

**Retro*** (arXiv 2509.24869), for one pair's group of N trajectories and, for inter-document, the
group of the other pair of its couple (a more and a less relevant document of one query):

* intra-document: the group's integrated score is :func:`~r3edge.distill.label.judges.retro.integrate`
  (uniform mean@N). Where the furthest parsed score is more than ``tau`` from it, the trajectories
  nearest it get +1 and the furthest −1 (every trajectory at that distance: ties are paid alike, so
  the reward does not depend on sampling order); otherwise, or where all are equally far, 0.
* inter-document: a positive's trajectory gets the share of the negative's parsed scores it
  strictly exceeds; a negative's, the share of the positive's parsed scores strictly above it
  (a tie is not outscoring). No parsed partner score: 0.
* composite = ``alpha`` · intra + (1 − ``alpha``) · inter.

A trajectory that is not well formed by the judge's parser (Retro*: the three steps, the tags, an
integer 0..100) counts as unscored, even where a score could still be read from it: the reward
teaches the format labelling expects. It is left out of the integrated score and gets −1 intra and
0 inter: −``alpha``, the least a trajectory can get.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from r3edge.core.errors import R3EdgeError
from r3edge.distill.label.judges import PairContext
from r3edge.distill.label.judges.retro import integrate


def r_score(score: int | None, gold: int, near_miss: float) -> float:
    """R³A's score term: 1 exact, ``near_miss`` one point off, 0 further or unparsed."""
    if score is None:
        return 0.0
    d = abs(score - gold)
    return 1.0 if d == 0 else near_miss if d == 1 else 0.0


def i_format(judge, pair: PairContext, raw_intent: str | None, raw_assessment: str) -> tuple[bool, int | None]:
    """``(I_format, score)`` of one trajectory: every round parses with the judge's own parser (a
    two-round judge's intent too), as the labelling record's ``format_ok``. The raw texts start
    with the judge's ``reply_prefix``, as labelling stores them."""
    parsed = judge.parse_assessment(raw_assessment, pair)
    ok = parsed.format_ok
    if judge.two_round:
        ok = ok and raw_intent is not None and judge.parse_intent(raw_intent).format_ok
    return ok, parsed.score


def r3a_reward(judge, pair: PairContext, raw_intent: str | None, raw_assessment: str, gold_native: int,
               near_miss: float) -> float:
    """R = I_format · r_score for one trajectory."""
    ok, score = i_format(judge, pair, raw_intent, raw_assessment)
    return r_score(score, gold_native, near_miss) if ok else 0.0


def well_formed_score(judge, pair: PairContext, raw_assessment: str) -> int | None:
    """The verdict's score where the judge's parser finds it well formed, else None (Retro*'s rewards)."""
    parsed = judge.parse_assessment(raw_assessment, pair)
    return parsed.score if parsed.format_ok else None


def retro_intra(scores: Sequence[int | None], tau: float) -> list[float]:
    """Retro*'s intra-document reward of one pair's group (see the module docstring)."""
    mean = integrate(scores)
    out = [-1.0 if s is None else 0.0 for s in scores]
    if mean is None:
        return out
    dist = {i: abs(s - mean) for i, s in enumerate(scores) if s is not None}
    near, far = min(dist.values()), max(dist.values())
    if far <= tau or near == far:
        return out
    for i, d in dist.items():
        out[i] = 1.0 if d == near else -1.0 if d == far else 0.0
    return out


def retro_inter(scores: Sequence[int | None], partner: Sequence[int | None], positive: bool) -> list[float]:
    """Retro*'s inter-document reward of one pair's group against its couple's other group."""
    other = [t for t in partner if t is not None]
    if not other:
        return [0.0] * len(scores)
    beats = (lambda s, t: s > t) if positive else (lambda s, t: t > s)
    return [0.0 if s is None else sum(beats(s, t) for t in other) / len(other) for s in scores]


def retro_reward(scores: Sequence[int | None], partner: Sequence[int | None], positive: bool, alpha: float,
                 tau: float) -> list[float]:
    """α · intra + (1 − α) · inter for one pair's group."""
    intra, inter = retro_intra(scores, tau), retro_inter(scores, partner, positive)
    return [alpha * a + (1 - alpha) * b for a, b in zip(intra, inter)]


# ---- TRL adapters ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Prompt:
    """One GRPO prompt: a pair, what the judge is shown of it, and its gold label.

    ``couple`` and ``positive`` place it in a Retro* couple (None for R³A's reward)."""

    key: str
    qid: str
    docid: str
    pair: PairContext
    intent_messages: list[dict[str, str]] | None  # a two-round judge's round 1
    gold: int                                     # student label
    gold_native: int | None                       # R³A's reward: the gold label on the judge's scale
    couple: int | None = None
    positive: bool | None = None


def _groups(prompts: Sequence[str], size: int) -> list[range]:
    """TRL's groups: ``size`` consecutive completions of one prompt (its advantage blocks)."""
    if len(prompts) % size:
        raise R3EdgeError(f"{len(prompts)} completions are not whole groups of {size}", "report this as a bug")
    out = []
    for start in range(0, len(prompts), size):
        block = range(start, start + size)
        if len({prompts[i] for i in block}) != 1:
            raise R3EdgeError("a group of completions spans several prompts", "report this as a bug")
        out.append(block)
    return out


class R3AReward:
    """R³A's reward as a TRL reward function: reads the rollout's ``raw_intent`` / ``raw_assessment``.

    ``groups`` keeps every call's rewards by prompt, in order: ``{"step", "key", "rewards"}`` per run
    of consecutive completions of one prompt, ``step`` being the optimizer steps done when it was
    generated (TRL's ``trainer_state``; None without one). The report shows which prompts were learnt."""

    __name__ = "r3a"

    def __init__(self, judge, prompts: Mapping[str, Prompt], near_miss: float):
        self.judge, self.prompts, self.near_miss = judge, prompts, near_miss
        self.groups: list[dict] = []

    def __call__(self, prompts, completions, raw_assessment, raw_intent=None, log_metric=None, trainer_state=None,
                 **_) -> list[float]:
        out, n_ok, n_exact = [], 0, 0
        for k, key in enumerate(prompts):
            p = self.prompts[key]
            intent = raw_intent[k] if raw_intent is not None else None
            ok, score = i_format(self.judge, p.pair, intent, raw_assessment[k])
            n_ok += ok
            n_exact += ok and score == p.gold_native
            out.append(r_score(score, p.gold_native, self.near_miss) if ok else 0.0)
        step = getattr(trainer_state, "global_step", None)
        for k, key in enumerate(prompts):
            if k and key == prompts[k - 1]:
                self.groups[-1]["rewards"].append(out[k])
            else:
                self.groups.append({"step": step, "key": key, "rewards": [out[k]]})
        if log_metric is not None:
            log_metric("r3a/format_ok", n_ok / len(out))
            log_metric("r3a/exact", n_exact / len(out))
        return out


class RetroReward:
    """Retro*'s composite reward as a TRL reward function. The batch must hold both pairs of every
    couple it holds (``r3edge.distill.teacher.grpo`` orders the prompts so), each as a group of
    ``num_generations`` consecutive completions."""

    __name__ = "retro"

    def __init__(self, judge, prompts: Mapping[str, Prompt], num_generations: int, alpha: float, tau: float):
        self.judge, self.prompts, self.size = judge, prompts, num_generations
        self.alpha, self.tau = alpha, tau

    def __call__(self, prompts, completions, raw_assessment, log_metric=None, **_) -> list[float]:
        groups = _groups(prompts, self.size)
        scores, by_couple = {}, {}
        for g in groups:
            p = self.prompts[prompts[g.start]]
            scores[g.start] = [well_formed_score(self.judge, p.pair, raw_assessment[i]) for i in g]
            by_couple.setdefault(p.couple, {})[p.positive] = g.start
        out = [0.0] * len(prompts)
        for g in groups:
            p = self.prompts[prompts[g.start]]
            partner = by_couple[p.couple].get(not p.positive)
            if partner is None:
                raise R3EdgeError(f"the batch holds pair ({p.qid}, {p.docid}) without the other pair of its couple",
                                  "report this as a bug: the prompts must come in whole couples")
            for i, r in zip(g, retro_reward(scores[g.start], scores[partner], p.positive, self.alpha, self.tau)):
                out[i] = r
        if log_metric is not None:
            parsed = [s for ss in scores.values() for s in ss]
            log_metric("retro/parsed", sum(s is not None for s in parsed) / len(parsed))
        return out
