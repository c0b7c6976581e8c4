"""Rank1-style think-then-score judge (binary: 0 false, 1 true), after Rank1 (Weller et al., 2025).

Rank1's reranker is prompted per pair with "Determine if the following passage is relevant to the
query. Answer only with 'true' or 'false'." and the query and passage, reasons inside ``<think>``,
and ends with ``</think> true`` or ``</think> false``. Its score is not the word it writes but
p(true) against p(false) at the position after ``</think>``: a continuous relevance that ranks the
candidates. r3edge sends the prompt as the user message of an instruct model's chat template, with one
more line that states the reply's layout (Rank1's own checkpoints were fine-tuned for it; a zero-shot
instruct model has to be told), and prefills the reply with ``<think>`` as Rank1 does.

The backend stops at ``</think>`` (:data:`SCORE_OPEN`), or closes a cut-off reasoning the way the
other judges' repairs do, and reads the probabilities of `` false`` and `` true`` there. The native
scale is 0..1; the default label map sends false to label 0 and true to label 2, so the student's
expected label is ``2 * p(true)`` and label 1 is never given (a binary judge has no middle grade).

``format_ok``: ``<think>…</think>`` once, then ``true`` or ``false`` and nothing else but whitespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from r3edge.distill.label.judges import Assessment, Messages, PairContext, close_think, tag_problems, templates_hash
from r3edge.distill.label.judges._single_round import THINK_PREFIX, SingleRound

SYSTEM = "You are a search relevance judge."

USER = (
    "Determine if the following passage is relevant to the query. Answer only with 'true' or 'false'.\n"
    "Query: {query}\n"
    "Passage: {document}\n\n"
    # Rank1's checkpoints learnt the layout; a zero-shot model is told it (without it, Qwen2.5-Coder-1.5B
    # answered "True</think>", inside the reasoning and capitalised, so nothing was read after </think>)
    "Think it through briefly first, then answer. Reply in exactly this form and nothing else:\n"
    "<think>your brief reasoning</think> true or false"
)

SCORE_OPEN = "</think>"
SCORE_CLOSE = ""  # the verdict word is the last thing in the reply
VALUES = (0, 1)
WORDS = ("false", "true")  # the verdict word of each native value
_WORD = re.compile(r"\s*(\w*)(.*)", re.DOTALL)  # the first word after the marker, and what follows it


@dataclass(frozen=True)
class Rank1Judge(SingleRound):
    name: str = "rank1"
    native_scale: str = "0..1"
    native_values: tuple[int, ...] = VALUES
    # single tokens after "</think>" in the Qwen2.5 and SmolLM2 tokenizers (a leading space, as Rank1 writes them)
    score_tokens: tuple[str, ...] | None = tuple(f" {w}" for w in WORDS)
    two_round: bool = False
    default_label_map: dict | None = field(default_factory=lambda: {0: 0, 1: 2})
    score_open: str = SCORE_OPEN
    score_close: str = SCORE_CLOSE
    reply_prefix: str = THINK_PREFIX
    prompt_hash: str = field(default=templates_hash(SYSTEM, USER, SCORE_OPEN, THINK_PREFIX))

    def assess_messages(self, pair: PairContext, history: Messages | None) -> Messages:
        return self._query_document(SYSTEM, USER, pair, history)

    def parse_assessment(self, text: str, pair: PairContext) -> Assessment:
        """``<think>…</think>`` exactly once with only whitespace before it, then ``true`` or ``false``
        and nothing else. The verdict is still read when the layout fails, whatever its case."""
        head, close, tail = text.rpartition(SCORE_OPEN)
        tail = tail if close else ""
        problems, _ = tag_problems(head + close, ("think",)) if close else (["missing </think>"], {})
        m = _WORD.match(tail)
        word, rest = m.group(1), m.group(2)
        score = WORDS.index(word.lower()) if word.lower() in WORDS else None
        if score is None:
            problems.append(f"verdict {word!r} is not 'true' or 'false'" if word else "no 'true' or 'false' after </think>")
        elif word not in WORDS:
            problems.append(f"verdict {word!r} is not written in lower case")
        if rest.strip():
            problems.append("text after the verdict")
        return Assessment(score=score, extract=None, extract_is_verbatim=False, format_ok=not problems,
                          problems=tuple(problems))

    def repair(self, generation: str) -> tuple[str, bool]:
        """Rank1's repair: make ``generation`` end with ``</think>``, where the verdict is read.

        Cut at the model's own ``</think>`` (``repaired`` false); otherwise drop a cut-off trailing tag
        and close the reasoning (``repaired`` true: never well formed)."""
        cut = generation.find(SCORE_OPEN)
        if cut >= 0:
            return generation[: cut + len(SCORE_OPEN)], False
        text = close_think(generation)
        return (text if text.endswith(SCORE_OPEN) else text + SCORE_OPEN), True


JUDGE = Rank1Judge()
