"""R³A two-round relevance judge (arXiv 2508.02506), prompts written for r3edge.

Round 1 infers the searcher's intent from the query and a few auxiliary in-platform posts; round 2
continues the same chat with one candidate post and asks for reasoning, a verbatim extract and a
0/1/2 score. Two rounds rather than one long prompt because the paper's ablation lost ~4.6 accuracy
points when they were merged, and the intent is computed once per query instead of once per pair.

I_format (``format_ok``): every tag present exactly once, in order, nothing but whitespace outside
them, score in {0,1,2}, and the extract copied from the post (whitespace-normalised) or ``none``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from r3edge.distill.label.judges import (
    Assessment,
    Intent,
    Messages,
    PairContext,
    close_think,
    is_verbatim,
    tag_problems,
    templates_hash,
)

SYSTEM = (
    "You are a content-understanding engineer at a user-generated-content platform. People post short, "
    "informal notes there: slang, emoji, hashtags, typos, half sentences. You read search queries the way "
    "a careful colleague would and work out what the person searching actually wants."
)

INTENT_USER = (
    "Search query: {query}\n\n"
    "Posts that the platform's search ranked high for this query. They can be off-topic; treat the query "
    "itself as your main evidence and the posts only as hints about how people here use these words.\n"
    "{aux}\n\n"
    "Work out the searcher's underlying intent: what they hope to find or get done, and any implicit "
    "constraints such as place, time or audience.\n"
    "Reply in exactly this form and nothing else:\n"
    "<think>your brief reasoning</think><intent>one or two sentences stating the intent</intent>"
)

AUX_ITEM = "[{i}] {text}"
NO_AUX = "(no posts available)"

ASSESS_USER = (
    "Now judge one candidate post for the same query, in light of the intent you inferred.\n\n"
    "Candidate post:\n{document}\n\n"
    "Score the post:\n"
    "0 = it has nothing to do with the query.\n"
    "1 = it is related to the query but answers it only in part.\n"
    "2 = it is dedicated to the query and contains the exact answer.\n\n"
    "Extract: copy word for word from the post, punctuation kept, the phrases, sentences or paragraphs "
    "that help answer the query. If nothing in the post helps, write none.\n"
    "Reply in exactly this form and nothing else:\n"
    "<think>your brief reasoning</think><extract>copied text or none</extract><score>0, 1 or 2</score>"
)

SCORE_OPEN = "<score>"
SCORE_CLOSE = "</score>"
# Every reply is started with "<think>" (prefilled in the assistant turn), which puts small models on
# the format's track; it is part of the stored raw text and of the prompt hash.
REPLY_PREFIX = "<think>"
LABELS = ("0", "1", "2")

_INTENT_TAGS = ("think", "intent")
_ASSESS_TAGS = ("think", "extract", "score")
@dataclass(frozen=True)
class R3AJudge:
    name: str = "r3a"
    native_scale: str = "0..2"
    native_values: tuple[int, ...] = (0, 1, 2)
    score_tokens: tuple[str, ...] | None = LABELS
    two_round: bool = True
    default_label_map: dict | None = field(default_factory=lambda: {0: 0, 1: 1, 2: 2})
    score_open: str = SCORE_OPEN
    score_close: str = SCORE_CLOSE
    reply_prefix: str = REPLY_PREFIX
    prompt_hash: str = field(
        default=templates_hash(SYSTEM, INTENT_USER, AUX_ITEM, NO_AUX, ASSESS_USER, SCORE_OPEN, REPLY_PREFIX)
    )

    def intent_messages(self, query: str, aux_docs: Sequence[str]) -> Messages:
        aux = "\n".join(AUX_ITEM.format(i=i + 1, text=t) for i, t in enumerate(aux_docs)) or NO_AUX
        return [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": INTENT_USER.format(query=query, aux=aux)},
        ]

    def assess_messages(self, pair: PairContext, history: Messages | None) -> Messages:
        """``history`` is round 1 including the assistant's reply: round 2 is the same conversation."""
        return [*(history or []), {"role": "user", "content": ASSESS_USER.format(document=pair.document)}]

    def parse_intent(self, text: str) -> Intent:
        problems, bodies = tag_problems(text, _INTENT_TAGS)
        intent = bodies.get("intent")
        intent = intent.strip() if intent is not None else None
        return Intent(intent=intent or None, format_ok=not problems and bool(intent))

    def parse_assessment(self, text: str, pair: PairContext) -> Assessment:
        document = pair.document
        problems, bodies = tag_problems(text, _ASSESS_TAGS)
        score = None
        raw_score = bodies.get("score")
        if raw_score is not None:
            if raw_score.strip() in LABELS:
                score = int(raw_score.strip())
            else:
                problems.append(f"score {raw_score.strip()!r} is not one of 0, 1, 2")
        extract = bodies.get("extract")
        verbatim = False
        if extract is not None:
            extract = extract.strip()
            if extract.lower() != "none":
                verbatim = is_verbatim(extract, document)
                if not verbatim:
                    problems.append("extract is not copied verbatim from the document")
        return Assessment(score=score, extract=extract, extract_is_verbatim=verbatim,
                          format_ok=not problems, problems=tuple(problems))

    def repair(self, generation: str) -> tuple[str, bool]:
        """Rank1's repair: make ``generation`` end with ``<score>`` so the next token is the verdict.

        Returns ``(text, repaired)``; ``repaired`` is false only when the model wrote ``<score>``
        itself, and a repaired record never counts as well formed.
        """
        cut = generation.find(SCORE_OPEN)
        if cut >= 0:
            return generation[: cut + len(SCORE_OPEN)], False
        text = close_think(generation)
        if "<extract>" not in text:
            text += "<extract>none</extract>"
        elif text.count("<extract>") > text.count("</extract>"):
            text += "</extract>"
        return text + SCORE_OPEN, True


JUDGE = R3AJudge()
