"""Score-only pointwise judge (0..2): a short instruction, then the grade read at one position.

No reasoning is generated. The prompt holds the query, the document and the three grades (R³A's
scale: 0 unrelated, 1 related but answers only in part, 2 dedicated with the exact answer), and the
assistant's reply is prefilled up to its answer prefix ``<score>``, so the next token *is* the grade.
The backend runs the prompt once (prefill only, :meth:`Backend.read_scores`) and reads the
probabilities of ``0``, ``1`` and ``2`` there: one forward per pair instead of tens to hundreds of
decoding steps, the single-forward teacher of Rank1's forced read-out without its reasoning.

Because the reply prefix already ends at the score marker (:func:`r3edge.distill.label.judges.prefill_only`),
the labelling run never generates for this judge. ``format_ok`` is then about the verdict the
read-out completes (``<score>N</score>`` with N on the scale): always true for a read distribution,
since there is no generated text that could break the format; ``raw_assessment`` is the prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from r3edge.distill.label.judges import Assessment, Messages, PairContext, templates_hash
from r3edge.distill.label.judges._single_round import SCORE_CLOSE, SCORE_OPEN, SingleRound, parse_score

SYSTEM = "You grade how relevant a document is to a search query. You answer with the grade only."

USER = (
    "Query: {query}\n\n"
    "Document:\n{document}\n\n"
    "Grades:\n"
    "0 = the document has nothing to do with the query.\n"
    "1 = the document is related to the query but answers it only in part.\n"
    "2 = the document is dedicated to the query and contains the exact answer.\n\n"
    "Reply with the grade only, in the form <score>N</score>."
)

VALUES = (0, 1, 2)
_VERDICT = re.compile(r"\s*<score>(.*?)</score>\s*", re.DOTALL)


@dataclass(frozen=True)
class ScoreOnlyJudge(SingleRound):
    name: str = "score-only"
    native_scale: str = "0..2"
    native_values: tuple[int, ...] = VALUES
    score_tokens: tuple[str, ...] | None = tuple(str(v) for v in VALUES)
    two_round: bool = False
    default_label_map: dict | None = field(default_factory=lambda: {0: 0, 1: 1, 2: 2})
    score_open: str = SCORE_OPEN
    score_close: str = SCORE_CLOSE
    reply_prefix: str = SCORE_OPEN  # the prompt ends at the marker: prefill only, nothing generated
    prompt_hash: str = field(default=templates_hash(SYSTEM, USER, SCORE_OPEN, SCORE_OPEN))

    def assess_messages(self, pair: PairContext, history: Messages | None) -> Messages:
        return self._query_document(SYSTEM, USER, pair, history)

    def parse_assessment(self, text: str, pair: PairContext) -> Assessment:
        """Strict ``<score>N</score>``, nothing else but surrounding whitespace, N on the scale."""
        problems: list[str] = []
        m = _VERDICT.fullmatch(text)
        if m is None:
            problems.append("reply is not exactly <score>N</score>")
        score = parse_score(m.group(1) if m else None, self.native_values, problems)
        return Assessment(score=score, extract=None, extract_is_verbatim=False, format_ok=not problems,
                          problems=tuple(problems))

    def repair(self, generation: str) -> tuple[str, bool]:
        """The reply up to the marker; it is always there (the prefix ends with it), so never a repair."""
        cut = generation.find(SCORE_OPEN)
        if cut < 0:
            return generation + SCORE_OPEN, True
        return generation[: cut + len(SCORE_OPEN)], False


JUDGE = ScoreOnlyJudge()
