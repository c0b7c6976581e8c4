"""Teacher judges as plug-ins: one module per rubric (prompts + parser + native scale).

A judge knows nothing about models. The backend asks it for chat messages, generates, and hands the
text back to be parsed, so a new rubric is one module here plus one entry in :data:`JUDGES`; the
labelling run, the backends and the label files stay as they are.

Two ways to get a soft label, chosen by the judge:

* **read-out** (``score_tokens`` set: every native score is one token, e.g. 0..2, 0..3, 0..5): the
  verdict ends with a fixed ``score_open`` marker after which the next token is the score. The
  backend stops at that marker (or repairs a cut-off reasoning with :meth:`Judge.repair`) and reads
  the probabilities of the ``score_tokens`` there (Rank1's trick);
* **prefill-only read-out** (a read-out judge whose ``reply_prefix`` already ends with its
  ``score_open``, :func:`prefill_only`: the score-only judge): nothing is generated; the prompt is
  run once and the probabilities of the ``score_tokens`` read at its last position;
* **sampling** (``score_tokens`` is None, e.g. Retro*'s 0..100): K reasoning trajectories are
  sampled and their parsed scores integrated (uniform or likelihood-weighted mean@k).

The native scale is mapped to the student's labels by the teacher config (``label_map`` for integer
scales, ``bands`` for 0..100), never implicitly.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from r3edge.core.errors import InvalidInput

#: judge name -> module under r3edge.distill.label.judges that defines ``JUDGE``
JUDGES = {
    "r3a": "r3edge.distill.label.judges.r3a",
    "umbrela": "r3edge.distill.label.judges.umbrela",
    "retro": "r3edge.distill.label.judges.retro",
    "tongxiao": "r3edge.distill.label.judges.tongxiao",
    "true": "r3edge.distill.label.judges.true_usefulness",
    "crux": "r3edge.distill.label.judges.crux",
    "score-only": "r3edge.distill.label.judges.score_only",
    "rank1": "r3edge.distill.label.judges.rank1",
}


@dataclass(frozen=True)
class PairContext:
    """What a judge sees of one pair: texts plus the optional context some rubrics read."""

    query: str
    document: str                        # already cut to the teacher's max_doc_chars
    query_meta: Mapping = field(default_factory=dict)   # e.g. query_time, task, session signals
    doc_meta: Mapping = field(default_factory=dict)     # e.g. title, site, published, clicks, dwell


@dataclass(frozen=True)
class Intent:
    """Round-1 result (judges without an intent round never produce one)."""

    intent: str | None
    format_ok: bool


@dataclass(frozen=True)
class Assessment:
    """A parsed verdict. Nothing is defaulted: a missing part is ``None`` and ``format_ok`` is false.

    ``score`` is on the judge's native scale; ``details`` holds rubric-specific parts (Tongxiao's
    match / trustworthy / recency) and is stored with the record as JSON.
    """

    score: int | None
    extract: str | None
    extract_is_verbatim: bool
    format_ok: bool
    problems: tuple[str, ...] = ()
    details: Mapping | None = None


Messages = list[dict[str, str]]


class Judge(Protocol):
    name: str
    native_scale: str              # e.g. "0..2"; written into every record
    native_values: tuple[int, ...]  # every score the rubric allows, e.g. (0, 1, 2) or 0..100
    score_tokens: tuple[str, ...] | None  # read-out tokens, one per native value in order; None: sample
    score_open: str                # the reasoning ends here; what follows is the score
    score_close: str               # what follows the score token in a complete verdict ("</score>", "}", "")
    prompt_hash: str               # sha256 of the templates: a prompt change is a different teacher
    reply_prefix: str              # prefilled at the start of every assistant reply (part of the raw text)
    two_round: bool                # R³A: an intent round per query before the per-pair round
    default_label_map: Mapping[int, int] | None  # suggested native -> student label (configs state theirs)

    def intent_messages(self, query: str, aux_docs: Sequence[str]) -> Messages: ...

    def parse_intent(self, text: str) -> Intent: ...

    def assess_messages(self, pair: PairContext, history: Messages | None) -> Messages: ...

    def parse_assessment(self, text: str, pair: PairContext) -> Assessment: ...

    def repair(self, generation: str) -> tuple[str, bool]: ...


def get_judge(name: str) -> Judge:
    if name not in JUDGES:
        raise InvalidInput(f"unknown judge {name!r}", f"set 'judge' in the teacher config to one of {sorted(JUDGES)}")
    return importlib.import_module(JUDGES[name]).JUDGE


def prefill_only(judge: Judge) -> bool:
    """Whether a read-out judge's prompt already ends at its score marker (the reply prefix ends with
    ``score_open``): then there is no reasoning to generate and the backend only reads the score
    tokens' probabilities after the prompt (``Backend.read_scores``)."""
    return judge.score_tokens is not None and judge.reply_prefix.endswith(judge.score_open)


def templates_hash(*templates: str) -> str:
    h = hashlib.sha256()
    for t in templates:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


_WS = re.compile(r"\s+")


def normalize_ws(text: str) -> str:
    return _WS.sub(" ", text).strip()


def is_verbatim(extract: str, document: str) -> bool:
    """Whether ``extract`` is copied from ``document``; whitespace runs count as one space because
    models re-flow line breaks, and a paraphrase must not pass as evidence."""
    e = normalize_ws(extract)
    return bool(e) and e in normalize_ws(document)


#: a tag cut off at the end of a generation (``<sco``), dropped before a repair appends its own
PARTIAL_TAG = re.compile(r"<[^<>]*$")


def close_think(generation: str) -> str:
    """The first step of every Rank1 repair of a ``<think>`` reply: drop a cut-off trailing tag and
    close a ``<think>`` left open."""
    text = PARTIAL_TAG.sub("", generation).rstrip()
    if text.count("<think>") > text.count("</think>"):
        text += "</think>"
    return text


def tag_problems(text: str, tags: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Check the strict ``<a>..</a><b>..</b>`` layout; return problems and the first body of each tag."""
    problems: list[str] = []
    bodies: dict[str, str] = {}
    for tag in tags:
        n_open, n_close = text.count(f"<{tag}>"), text.count(f"</{tag}>")
        if n_open == 0 and n_close == 0:
            problems.append(f"missing <{tag}>")
        elif n_open != 1 or n_close != 1:
            problems.append(f"<{tag}> opened {n_open} and closed {n_close} times")
        m = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
        if m:
            bodies[tag] = m.group(1)
    if not problems:
        pattern = r"\s*" + r"\s*".join(rf"<{t}>(.*?)</{t}>" for t in tags) + r"\s*"
        if re.fullmatch(pattern, text, re.DOTALL) is None:
            problems.append("tags out of order, nested, or text outside the tags")
    return problems, bodies
