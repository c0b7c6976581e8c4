"""What the single-round judges share: no intent round, and the ``<think>…</think><score>N</score>`` verdict.

UMBRELA, Retro*, TRUE and CRUX all answer in that one layout, so its strict parser and Rank1's
repair live here once (the tag check itself is :func:`r3edge.distill.label.judges.tag_problems`, shared
with R³A). Tongxiao answers in JSON and uses only :class:`SingleRound`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from r3edge.core.errors import InvalidInput, R3EdgeError
from r3edge.distill.label.judges import Assessment, Intent, Messages, PairContext, close_think, tag_problems

SCORE_OPEN = "<score>"
SCORE_CLOSE = "</score>"
# Prefilled at the start of every reply (as in R³A): it puts small models on the format's track.
THINK_PREFIX = "<think>"
THINK_SCORE_TAGS = ("think", "score")
_INTEGER = re.compile(r"0|[1-9][0-9]*")


class SingleRound:
    """Mixin for judges that see one pair in one prompt: the intent round does not exist."""

    name: str

    def intent_messages(self, query: str, aux_docs: Sequence[str]) -> Messages:
        raise self._no_intent()

    def parse_intent(self, text: str) -> Intent:
        raise self._no_intent()

    def _no_intent(self) -> R3EdgeError:
        return InvalidInput(
            f"judge {self.name!r} is single-round: it has no intent round",
            "call assess_messages(pair, None) directly (two_round is False for this judge)",
        )

    def _query_document(self, system: str, user: str, pair: PairContext, history: Messages | None) -> Messages:
        """The assessment prompt of a judge that shows only the query and the document: ``user`` is
        formatted with ``{query}`` and ``{document}``."""
        self._check_history(history)
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": user.format(query=pair.query, document=pair.document)},
        ]

    def _check_history(self, history: Messages | None) -> None:
        if history:
            raise InvalidInput(
                f"judge {self.name!r} is single-round but was given a {len(history)}-message history",
                "pass history=None: this judge's assessment prompt is the whole conversation",
            )


def describe_values(values: Sequence[int]) -> str:
    """``one of 0, 1, 2`` for short scales, ``an integer in 0..100`` for long ones."""
    if len(values) > 6:
        return f"an integer in {values[0]}..{values[-1]}"
    return "one of " + ", ".join(str(v) for v in values)


def parse_score(raw: str | None, values: Sequence[int], problems: list[str]) -> int | None:
    """The score tag's body as a native score, or None (with the reason in ``problems``) when it is
    not a plain decimal integer on the scale. Nothing is rounded, clipped or defaulted."""
    if raw is None:
        return None
    s = raw.strip()
    if _INTEGER.fullmatch(s) and int(s) in values:
        return int(s)
    problems.append(f"score {s!r} is not {describe_values(values)}")
    return None


def parse_think_score(text: str, values: Sequence[int]) -> tuple[int | None, list[str], dict[str, str]]:
    """Strict ``<think>…</think><score>N</score>`` check: each tag exactly once, in order, only
    whitespace outside them, N on the scale. The score is still read when the layout fails."""
    problems, bodies = tag_problems(text, THINK_SCORE_TAGS)
    score = parse_score(bodies.get("score"), values, problems)
    return score, problems, bodies


def repair_think_score(generation: str) -> tuple[str, bool]:
    """Rank1's repair: make ``generation`` end with ``<score>`` so that the next token is the verdict.

    Cut at the model's own ``<score>`` (``repaired`` false); otherwise drop a cut-off trailing tag,
    close an open ``<think>`` and append ``<score>`` (``repaired`` true: never well formed).
    """
    cut = generation.find(SCORE_OPEN)
    if cut >= 0:
        return generation[: cut + len(SCORE_OPEN)], False
    return close_think(generation) + SCORE_OPEN, True


class ThinkScore(SingleRound):
    """Mixin for single-round judges whose reply is ``<think>…</think><score>N</score>`` (UMBRELA,
    TRUE, CRUX): one parser and one repair for all of them."""

    native_values: tuple[int, ...]

    def parse_assessment(self, text: str, pair: PairContext) -> Assessment:
        score, problems, _ = parse_think_score(text, self.native_values)
        return Assessment(score=score, extract=None, extract_is_verbatim=False,
                          format_ok=not problems, problems=tuple(problems))

    def repair(self, generation: str) -> tuple[str, bool]:
        return repair_think_score(generation)

