"""Retro*-style rubric relevance judge (arXiv 2509.24869), 0..100, prompts written for r3edge.

The prompt opens with a *relevance definition* (the task-specific part: what "relevant" means for
this collection), then asks for three steps — query analysis, document analysis, relevance
annotation — and an integer 0..100 read against five bands (80-100 highly relevant, 60-80 relevant,
40-60 moderately, 20-40 slightly, 0-20 irrelevant). The reasoning is capped by instruction at about
512 tokens, as in the paper. The definition comes from ``pair.query_meta["relevance_definition"]``
when a pairs file carries one, else :data:`DEFAULT_DEFINITION`.

0..100 is not one token, so there is no read-out: the teacher samples K trajectories per pair and
integrates their parsed scores with :func:`integrate` (uniform mean@k, or weighted by trajectory
likelihood); :func:`closest_sample` is Retro*'s SFT filter (keep the trajectory nearest to the
integrated score). The student label comes from the config's ``bands``, so ``default_label_map``
is None.

``format_ok``: ``<think>`` and ``<score>`` each exactly once, in that order, nothing but whitespace
outside them; the reasoning holds the three steps in order; the score a plain integer in 0..100.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from r3edge.core.errors import InvalidInput
from r3edge.distill.label.judges import Assessment, Messages, PairContext, templates_hash
from r3edge.distill.label.judges._single_round import (
    SCORE_CLOSE,
    SCORE_OPEN,
    THINK_PREFIX,
    SingleRound,
    parse_think_score,
    repair_think_score,
)

DEFAULT_DEFINITION = (
    "A document is relevant when the information it contains helps answer the query or meet the need "
    "behind it."
)

SYSTEM = (
    "You annotate relevance for a retrieval system. You read a query and one candidate document, reason "
    "step by step, and rate on a scale from 0 to 100 how relevant the document is, under the definition "
    "of relevance you are given."
)

USER = (
    "Relevance definition: {definition}\n\n"
    "Query:\n{query}\n\n"
    "Document:\n{document}\n\n"
    "Work in three steps:\n"
    "1. Query analysis: what the query asks for, and what a document must contain to be relevant under the "
    "definition.\n"
    "2. Document analysis: what the document actually offers, and which of those needs it meets.\n"
    "3. Relevance annotation: weigh the two and settle on a score from 0 to 100 using these bands:\n"
    "   80-100 highly relevant: the document meets the definition squarely and covers the query's core need.\n"
    "   60-80 relevant: it meets the definition for the main need, with gaps or some indirection.\n"
    "   40-60 moderately relevant: it meets the definition in part; useful pieces sit beside missing or "
    "off-target content.\n"
    "   20-40 slightly relevant: it shares the topic or a minor point but gives little that meets the "
    "definition.\n"
    "   0-20 irrelevant: nothing in it meets the definition.\n"
    "Keep the three steps within about 512 tokens. Reply in exactly this form and nothing else:\n"
    "<think>1. Query analysis: ...\n2. Document analysis: ...\n3. Relevance annotation: ...</think>"
    "<score>an integer from 0 to 100</score>"
)

STEPS = ("query analysis", "document analysis", "relevance annotation")
VALUES = tuple(range(101))


def _has_steps(reasoning: str) -> bool:
    """The three step names appear in order (case-insensitive)."""
    pos = 0
    low = reasoning.lower()
    for step in STEPS:
        pos = low.find(step, pos)
        if pos < 0:
            return False
        pos += len(step)
    return True


@dataclass(frozen=True)
class RetroJudge(SingleRound):
    name: str = "retro"
    native_scale: str = "0..100"
    native_values: tuple[int, ...] = VALUES
    score_tokens: tuple[str, ...] | None = None  # sampled and integrated, never read out
    two_round: bool = False
    default_label_map: dict | None = None  # 0..100 -> labels by the config's bands
    score_open: str = SCORE_OPEN
    score_close: str = SCORE_CLOSE
    reply_prefix: str = THINK_PREFIX
    prompt_hash: str = field(default=templates_hash(SYSTEM, USER, DEFAULT_DEFINITION, *STEPS, SCORE_OPEN, THINK_PREFIX))

    def assess_messages(self, pair: PairContext, history: Messages | None) -> Messages:
        self._check_history(history)
        definition = pair.query_meta.get("relevance_definition") or DEFAULT_DEFINITION
        user = USER.format(definition=definition, query=pair.query, document=pair.document)
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]

    def parse_assessment(self, text: str, pair: PairContext) -> Assessment:
        score, problems, bodies = parse_think_score(text, self.native_values)
        think = bodies.get("think")
        if think is not None and not _has_steps(think):
            problems.append("reasoning lacks the steps query analysis, document analysis, relevance annotation in order")
        return Assessment(score=score, extract=None, extract_is_verbatim=False,
                          format_ok=not problems, problems=tuple(problems))

    def repair(self, generation: str) -> tuple[str, bool]:
        return repair_think_score(generation)


def n_unparsable(scores: Sequence[int | None]) -> int:
    """How many samples :func:`integrate` left out (recorded with the label, never scored as 0)."""
    return sum(s is None for s in scores)


def integrate(scores: Sequence[int | None], logprobs: Sequence[float | None] | None = None,
              mode: Literal["uniform", "likelihood"] = "uniform") -> float | None:
    """Retro*'s score integration over K sampled trajectories: Σ wᵢ sᵢ / Σ wᵢ.

    ``scores`` are the parsed native scores, None where a sample did not parse: those are left out
    (count them with :func:`n_unparsable`), never treated as 0. ``uniform``: wᵢ = 1 (mean@k).
    ``likelihood``: wᵢ ∝ exp(logprobᵢ), the softmax of the trajectories' log-likelihoods (sums of
    token log-probabilities), computed stably. Returns None when no sample parsed.
    """
    weights = sample_weights(scores, logprobs, mode)
    used = [i for i, s in enumerate(scores) if s is not None]
    if not used:
        return None
    return sum(weights[i] * scores[i] for i in used) / sum(weights[i] for i in used)


def sample_weights(scores: Sequence[int | None], logprobs: Sequence[float | None] | None = None,
                   mode: Literal["uniform", "likelihood"] = "uniform") -> list[float]:
    """Each sample's unnormalised weight in :func:`integrate`: 0 for an unparsable sample, else 1
    (``uniform``) or exp(logprob - the largest parsed logprob) (``likelihood``)."""
    if mode not in ("uniform", "likelihood"):
        raise InvalidInput(f"integration mode {mode!r} is unknown", "use 'uniform' or 'likelihood'")
    if logprobs is not None and len(logprobs) != len(scores):
        raise InvalidInput(f"{len(scores)} scores but {len(logprobs)} log-likelihoods", "pass one log-likelihood per sample")
    used = [i for i, s in enumerate(scores) if s is not None]
    weights = [0.0] * len(scores)
    if not used:
        return weights
    if mode == "uniform":
        for i in used:
            weights[i] = 1.0
        return weights
    if logprobs is None:
        raise InvalidInput("likelihood integration needs the samples' log-likelihoods",
                          "have the backend return each trajectory's log-likelihood, or use integration: uniform")
    lps = [logprobs[i] for i in used]
    if any(lp is None or not math.isfinite(lp) for lp in lps):
        raise InvalidInput("a parsed sample has no finite log-likelihood",
                          "have the backend return each trajectory's log-likelihood, or use integration: uniform")
    top = max(lps)
    for i, lp in zip(used, lps):
        weights[i] = math.exp(lp - top)
    return weights


def closest_sample(scores: Sequence[int | None], integrated: float | None) -> int:
    """Retro*'s SFT filter: the index of the parsed sample whose score is nearest the integrated
    score (the first one on a tie)."""
    candidates = [(abs(s - integrated), i) for i, s in enumerate(scores) if s is not None] if integrated is not None else []
    if not candidates:
        raise InvalidInput("no sample parsed, so none can be kept", "drop this pair from the SFT data")
    return min(candidates)[1]


JUDGE = RetroJudge()
