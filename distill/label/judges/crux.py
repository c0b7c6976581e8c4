"""CRUX-style answerability judge (0..5), as used for Researchy Questions sub-question judgments
(arXiv 2510.21733); prompts written for r3edge.

Complex questions are decomposed into sub-questions and each (sub-question, document) pair is graded
on whether the sub-question can be answered from the document alone: 0 unrelated, 1 on topic but no
help, 2 fragments, 3 a substantial part, 4 answered with a small gap, 5 fully and directly answered.
The pair's ``query`` is the (sub-)question; ``pair.query_meta["parent_question"]``, when present,
is the complex question it came from and is shown as context only.

``format_ok``: ``<think>`` and ``<score>`` each exactly once, in that order, nothing but whitespace
outside them, and the score one of 0..5.
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
    "You build evaluation data for research-style questions. Broad questions are split into narrower "
    "sub-questions, and for each one you decide whether a candidate document holds what is needed to "
    "answer it. You judge only from what the document says, never from your own knowledge."
)

PARENT = "This question is one part of a broader question: {parent}\n"

USER = (
    "{parent}"
    "Question: {query}\n\n"
    "Document:\n{document}\n\n"
    "How far can the question be answered from this document alone?\n"
    "5 = fully: the document answers the question directly and completely; a reader needs nothing else.\n"
    "4 = mostly: the answer is there, but a detail is missing or it takes a little inference to assemble.\n"
    "3 = in part: the document answers a substantial part of the question, while other important parts stay open.\n"
    "2 = barely: only fragments or background that would help with a small part of the answer.\n"
    "1 = not at all, though on topic: the document is about the question's subject but offers nothing toward an answer.\n"
    "0 = unrelated: the document has nothing to do with the question.\n\n"
    "Reason briefly about what the question needs and what the document supplies, then grade. "
    "Reply in exactly this form and nothing else:\n"
    "<think>your brief reasoning</think><score>an integer from 0 to 5</score>"
)

VALUES = (0, 1, 2, 3, 4, 5)


@dataclass(frozen=True)
class CruxJudge(ThinkScore):
    name: str = "crux"
    native_scale: str = "0..5"
    native_values: tuple[int, ...] = VALUES
    score_tokens: tuple[str, ...] | None = tuple(str(v) for v in VALUES)
    two_round: bool = False
    default_label_map: dict | None = field(default_factory=lambda: {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2})
    score_open: str = SCORE_OPEN
    score_close: str = SCORE_CLOSE
    reply_prefix: str = THINK_PREFIX
    prompt_hash: str = field(default=templates_hash(SYSTEM, PARENT, USER, SCORE_OPEN, THINK_PREFIX))

    def assess_messages(self, pair: PairContext, history: Messages | None) -> Messages:
        self._check_history(history)
        parent = pair.query_meta.get("parent_question")
        user = USER.format(parent=PARENT.format(parent=parent) if parent else "", query=pair.query, document=pair.document)
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


JUDGE = CruxJudge()
