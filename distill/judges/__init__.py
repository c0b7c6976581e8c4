"""Teacher judges as plug-ins: one module per rubric (prompts + parser + score mapping).

A judge knows nothing about models. The backend asks it for chat messages, generates, and hands the
text back to be parsed, so adding UMBRELA or Retro* is one module here plus one entry in
:data:`JUDGES`; the labelling run, the backend and the label files stay as they are.

The contract that makes Rank1-style score read-out possible: every judge's verdict ends with a fixed
``score_open`` marker (``<score>``) after which the next token is the score. The backend stops
generation at that marker (or repairs a cut-off reasoning with :meth:`Judge.repair`) and reads the
probabilities of the ``score_tokens`` at that position.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from r3edge.core.errors import R3EdgeError

#: judge name -> module under r3edge.distill.judges that defines ``JUDGE``
JUDGES = {"r3a": "r3edge.distill.judges.r3a"}


@dataclass(frozen=True)
class Intent:
    """Round-1 result (judges without an intent round never produce one)."""

    intent: str | None
    format_ok: bool


@dataclass(frozen=True)
class Assessment:
    """A parsed verdict. Nothing is defaulted: a missing part is ``None`` and ``format_ok`` is false."""

    score: int | None
    extract: str | None
    extract_is_verbatim: bool
    format_ok: bool
    problems: tuple[str, ...] = ()


Messages = list[dict[str, str]]


class Judge(Protocol):
    name: str
    native_scale: str            # e.g. "0..2"; written into every record
    score_tokens: tuple[str, ...]  # the tokens read at the score position, in label order
    score_open: str              # generation stops here; the next token is the score
    prompt_hash: str             # sha256 of the templates: a prompt change is a different teacher
    reply_prefix: str            # prefilled at the start of every assistant reply (part of the raw text)

    def intent_messages(self, query: str, aux_docs: Sequence[str]) -> Messages: ...

    def parse_intent(self, text: str) -> Intent: ...

    def assess_messages(self, query: str, document: str, history: Messages) -> Messages: ...

    def parse_assessment(self, text: str, document: str) -> Assessment: ...

    def repair(self, generation: str) -> tuple[str, bool]: ...

    def to_label(self, native: int) -> int: ...


def get_judge(name: str) -> Judge:
    if name not in JUDGES:
        raise R3EdgeError(f"unknown judge {name!r}", f"set 'judge' in the teacher config to one of {sorted(JUDGES)}")
    return importlib.import_module(JUDGES[name]).JUDGE


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
