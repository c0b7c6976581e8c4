"""UMBRELA-style single-round relevance judge (0..2), prompts written for r3edge.

R³A's baseline and its cold-start annotator: one prompt holds the query and the candidate post, and
the reply is a short reasoning followed by the grade. The scale is R³A's (0 unrelated, 1 some answer
but unclear or buried, 2 dedicated with the exact answer), with UMBRELA's tie-break between 1 and 2:
a post that has what matters plus other material gets 1, a post entirely about the topic gets 2.

``format_ok``: ``<think>`` and ``<score>`` each exactly once, in that order, nothing but whitespace
outside them, and the score one of 0, 1, 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from r3edge.distill.label.judges import Messages, PairContext, templates_hash
from r3edge.distill.label.judges._single_round import (
    SCORE_CLOSE,
    SCORE_OPEN,
    THINK_PREFIX,
    ThinkScore,
)

SYSTEM = (
    "You assess search relevance on a user-generated-content platform, where people share short, informal "
    "posts: tips, reviews, questions and personal stories, often with slang, emoji and typos. Given a search "
    "query and one post, you decide how well the post serves the person who typed the query."
)

USER = (
    "Search query: {query}\n\n"
    "Post:\n{document}\n\n"
    "Grade the post's relevance to the query:\n"
    "0 = the post has nothing to do with the query.\n"
    "1 = the post holds some answer to the query, but the answer is unclear or hidden among unrelated material.\n"
    "2 = the post is dedicated to the query and states the exact answer.\n"
    "Choosing between 1 and 2: if the post contains what matters for the query but also spends time on other "
    "things, grade it 1; grade it 2 only when the whole post is about the query's topic.\n\n"
    "Think it through briefly first, then grade. Reply in exactly this form and nothing else:\n"
    "<think>your brief reasoning</think><score>0, 1 or 2</score>"
)

VALUES = (0, 1, 2)


@dataclass(frozen=True)
class UmbrelaJudge(ThinkScore):
    name: str = "umbrela"
    native_scale: str = "0..2"
    native_values: tuple[int, ...] = VALUES
    score_tokens: tuple[str, ...] | None = tuple(str(v) for v in VALUES)
    two_round: bool = False
    default_label_map: dict | None = field(default_factory=lambda: {0: 0, 1: 1, 2: 2})
    score_open: str = SCORE_OPEN
    score_close: str = SCORE_CLOSE
    reply_prefix: str = THINK_PREFIX
    prompt_hash: str = field(default=templates_hash(SYSTEM, USER, SCORE_OPEN, THINK_PREFIX))

    def assess_messages(self, pair: PairContext, history: Messages | None) -> Messages:
        return self._query_document(SYSTEM, USER, pair, history)


JUDGE = UmbrelaJudge()
