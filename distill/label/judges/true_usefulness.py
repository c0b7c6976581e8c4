"""TRUE: task-aware, rubric-based usefulness of a (clicked) document from session and behaviour
signals (Dewan et al.), prompts written for r3edge.

Usefulness 0..3 (0 not useful at all … 3 very useful) is judged from the search task, the query, the
document and whatever the log recorded about the searcher. The rubric follows TRUE's shape: rules per
label grounded in relevance, satisfaction and user actions, plus title-summary alignment and the
exception cases where behaviour misleads (the paper found relevance + satisfaction + behaviour
together work best, so the prompt asks for all three to be weighed).

Signals are read from the pair's metadata and only those present are shown (keys below, in this
order); when none of them is present the prompt says so, rather than inventing a neutral value.

* ``pair.query_meta``: ``task`` (task description), ``previous_queries``, ``query_position``,
  ``query_satisfaction`` (1-5), ``session_satisfaction`` (1-5), ``query_dwell_time_s``,
  ``task_dwell_time_s``;
* ``pair.doc_meta``: ``title``, ``summary``, ``url`` (shown with the document), ``serp_rank``,
  ``clicked``, ``dwell_time_s``, ``avg_dwell_time_s``, ``ctr``, ``query_relevance`` (0-3),
  ``task_relevance`` (0-3).

``format_ok``: ``<think>`` and ``<score>`` each exactly once, in that order, nothing but whitespace
outside them, and the score one of 0..3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from r3edge.distill.label.judges import Messages, PairContext, templates_hash
from r3edge.distill.label.judges._single_round import (
    SCORE_CLOSE,
    SCORE_OPEN,
    THINK_PREFIX,
    ThinkScore,
)

SYSTEM = (
    "You evaluate how useful a document was to a person in the middle of a search session. Usefulness is "
    "about the person's task, not topical match alone: a page on the right topic may still not have helped, "
    "and what the searcher did, and how satisfied they said they were, tells you a lot about whether it did."
)

USER = (
    "{task}"
    "Query: {query}\n\n"
    "{signals}\n\n"
    "Document the searcher was shown:\n{doc_fields}Content:\n{document}\n\n"
    "Rate the document's usefulness for the searcher's task:\n"
    "3 = very useful: it clearly moved the task forward; typical evidence is high relevance to the task, a "
    "long visit, and a satisfied query or session.\n"
    "2 = fairly useful: it helped with part of the task; evidence is moderate relevance, a visit of middling "
    "length, or middling satisfaction.\n"
    "1 = slightly useful: it touched the task but added little; evidence is a short visit, low satisfaction, "
    "or a page that delivered less than its title and summary promised.\n"
    "0 = not useful at all: it did nothing for the task; evidence is irrelevance, a click followed by an "
    "immediate return, or very low satisfaction.\n"
    "How to weigh the evidence:\n"
    "- Start from how relevant the document is to the task and to the query.\n"
    "- Satisfaction ratings (1 = very unsatisfied, 5 = very satisfied) move the grade up or down.\n"
    "- User actions: a long dwell time, especially one above the averages given, points to usefulness; a "
    "very short one points to a disappointed searcher.\n"
    "- If the title and summary do not match what the document actually contains, the click was probably "
    "misled: lower the grade.\n"
    "- Exceptions: a short visit can still be very useful when the answer is quick to read (a number, a "
    "date, an address); a long visit is not useful when the page is off-task; a high rank on the result "
    "page is no evidence of usefulness by itself.\n\n"
    "Reason briefly over the evidence, then grade. Reply in exactly this form and nothing else:\n"
    "<think>your brief reasoning</think><score>0, 1, 2 or 3</score>"
)

TASK = "Search task: {task}\n"
SIGNALS_HEAD = "Recorded session and behaviour signals:"
SIGNAL_LINE = "- {label}: {value}"
NO_SIGNALS = (
    "No session or behaviour signals were recorded for this pair: judge usefulness from what the "
    "searcher was looking for and from the document alone."
)
DOC_FIELD = "{label}: {value}\n"

#: (key, label) of the session signals in ``pair.query_meta``, in prompt order
QUERY_SIGNALS = (
    ("previous_queries", "earlier queries in this session"),
    ("query_position", "position of this query in the session"),
    ("query_satisfaction", "searcher's satisfaction with this query (1-5)"),
    ("session_satisfaction", "searcher's satisfaction with the whole session (1-5)"),
    ("query_dwell_time_s", "time spent on this query (seconds)"),
    ("task_dwell_time_s", "time spent on the whole task (seconds)"),
)
#: (key, label) of the behaviour signals in ``pair.doc_meta``, in prompt order
DOC_SIGNALS = (
    ("serp_rank", "rank of the document on the result page"),
    ("clicked", "clicked by the searcher"),
    ("dwell_time_s", "dwell time on the document (seconds)"),
    ("avg_dwell_time_s", "average dwell time on the document across searchers (seconds)"),
    ("ctr", "click-through rate of the document for this query"),
    ("query_relevance", "assessed relevance to the query (0-3)"),
    ("task_relevance", "assessed relevance to the task (0-3)"),
)
#: (key, label) of what the searcher saw of the document, shown above its text
DOC_FIELDS = (("title", "Title"), ("summary", "Summary shown on the result page"), ("url", "URL"))

VALUES = (0, 1, 2, 3)


def _value(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list | tuple):
        return " | ".join(str(x) for x in v) or "(none)"
    return str(v)


def _present(meta: Mapping, key: str) -> bool:
    return key in meta and meta[key] is not None and meta[key] != ""


def signal_lines(pair: PairContext) -> list[str]:
    """One line per signal present in the pair's metadata, in the rubric's order."""
    lines = [SIGNAL_LINE.format(label=label, value=_value(pair.query_meta[key]))
             for key, label in QUERY_SIGNALS if _present(pair.query_meta, key)]
    lines += [SIGNAL_LINE.format(label=label, value=_value(pair.doc_meta[key]))
              for key, label in DOC_SIGNALS if _present(pair.doc_meta, key)]
    return lines


@dataclass(frozen=True)
class TrueJudge(ThinkScore):
    name: str = "true"
    native_scale: str = "0..3"
    native_values: tuple[int, ...] = VALUES
    score_tokens: tuple[str, ...] | None = tuple(str(v) for v in VALUES)
    two_round: bool = False
    default_label_map: dict | None = field(default_factory=lambda: {0: 0, 1: 1, 2: 1, 3: 2})
    score_open: str = SCORE_OPEN
    score_close: str = SCORE_CLOSE
    reply_prefix: str = THINK_PREFIX
    prompt_hash: str = field(default=templates_hash(
        SYSTEM, USER, TASK, SIGNALS_HEAD, SIGNAL_LINE, NO_SIGNALS, DOC_FIELD,
        *(f"{k}={label}" for k, label in (*QUERY_SIGNALS, *DOC_SIGNALS, *DOC_FIELDS)), SCORE_OPEN, THINK_PREFIX,
    ))

    def assess_messages(self, pair: PairContext, history: Messages | None) -> Messages:
        self._check_history(history)
        task = pair.query_meta.get("task")
        lines = signal_lines(pair)
        signals = "\n".join([SIGNALS_HEAD, *lines]) if lines else NO_SIGNALS
        doc_fields = "".join(DOC_FIELD.format(label=label, value=_value(pair.doc_meta[key]))
                             for key, label in DOC_FIELDS if _present(pair.doc_meta, key))
        user = USER.format(task=TASK.format(task=task) if task else "", query=pair.query, signals=signals,
                           doc_fields=doc_fields, document=pair.document)
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


JUDGE = TrueJudge()
