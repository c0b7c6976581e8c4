"""Tongxiao-style multi-dimensional search-quality judge (Alibaba Cloud's evaluator, after Bing and
UMBRELA), prompts and worked examples written for r3edge.

Each passage comes with its title, website and publish time (``pair.doc_meta`` keys ``title``,
``site``, ``published``) and the query with the time it was issued (``pair.query_meta["query_time"]``);
a missing one is shown as "not given". The reply works through five numbered steps — search intent,
recency, match, trustworthiness, overall — and ends with one JSON object::

    {"recency": 0|1, "match": 0-3, "trustworthy": 0|1, "overall": 0-3}

``overall`` (the native score, 0..3) starts from ``match`` and is lowered for an untrustworthy site or
for a recency mismatch in proportion to how much it hurts the answer. ``overall`` is the JSON's last
key so that the Rank1 read-out works: the reasoning ends at ``"overall": `` (:data:`SCORE_OPEN`) and
the next token is the digit. The other dimensions go to ``Assessment.details``.

``format_ok``: the reply is the numbered steps 1-5 in order followed by one JSON object and nothing
after it; the object has exactly the four keys with ``overall`` last, and every value is a JSON
integer in its range (a string "3", 3.0 or true is out of format and read as None, never coerced).
The service's "-1 for every dimension" on a failed call becomes a failed parse here: score None.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from r3edge.distill.label.judges import Assessment, Messages, PairContext, templates_hash
from r3edge.distill.label.judges._single_round import SingleRound, describe_values

SCORE_OPEN = '"overall": '
SCORE_CLOSE = "}"  # the JSON object's end
# Prefilled at the start of every reply: it starts the numbered steps the format asks for.
REPLY_PREFIX = "1. Search intent:"
#: every key of the verdict with its allowed values, in the order the reply writes them (overall last)
RANGES = {"recency": (0, 1), "match": (0, 1, 2, 3), "trustworthy": (0, 1), "overall": (0, 1, 2, 3)}
NOT_GIVEN = "not given"

SYSTEM = (
    "You evaluate the quality of web search results. For a query you rate one result passage on several "
    "dimensions: how well it answers what the searcher wants, whether the website behind it can be trusted, "
    "and whether its date suits any time need in the query. Then you combine them into an overall grade. "
    "You always work through the same numbered steps and finish with a JSON verdict."
)

USER = (
    "Rate the passage for the query on these dimensions:\n"
    "- match (0-3): 0 = irrelevant to the query; 1 = on a related topic but does not answer it; 2 = answers "
    "in part, or the answer is vague or buried among other material; 3 = addresses the query specifically "
    "and gives the exact answer.\n"
    "- trustworthy (0 or 1): from what you know about the website, 1 if it is a reliable source for this "
    "kind of information, 0 if it is unreliable, low quality, or known to spread doubtful claims.\n"
    "- recency (0 or 1): 1 if the passage's publish time fits the time the query is about, or the query has "
    "no time need; 0 if the query needs information from a particular time (often: now, relative to the "
    "query time) and the passage's time does not fit.\n"
    "- overall (0-3): start from match. Lower it when the website is untrustworthy, and when a recency "
    "mismatch makes the answer wrong or useless for this query; a time mismatch that leaves the answer "
    "valid costs little or nothing.\n\n"
    "Number your steps exactly like this:\n"
    "1. Search intent: what the searcher wants, and whether the query carries a time need.\n"
    "2. Recency: compare the publish time with the query time and the time need.\n"
    "3. Match: how well the passage answers the query.\n"
    "4. Trustworthiness: what you know about the website.\n"
    "5. Overall: combine the above.\n"
    "After step 5 write one line of JSON with the keys in this order and nothing after it:\n"
    '{{"recency": 0 or 1, "match": 0-3, "trustworthy": 0 or 1, "overall": 0-3}}\n\n'
    "Worked examples:\n\n{examples}\n\n"
    "Now the case to rate.\n{case}"
)

CASE = "Query time: {query_time}\nQuery: {query}\nTitle: {title}\nWebsite: {site}\nPublished: {published}\nPassage:\n{document}"

EXAMPLES = (
    (
        dict(query_time="2024-11-03", query="uk mortgage rates now", title="Mortgage rates climb past 6% as lenders reprice",
             site="theguardian.com", published="2023-07-10",
             document="Average two-year fixed mortgage rates rose above 6% on Monday, the highest level since last "
                      "autumn, according to the rate tracker Moneyfacts. Five-year fixes averaged 5.8%."),
        "1. Search intent: the searcher wants today's UK mortgage rates; \"now\" is an explicit time need.\n"
        "2. Recency: the passage is from July 2023, sixteen months before the query, and rates have moved since; "
        "it does not fit the time need.\n"
        "3. Match: it gives concrete average rates, exactly the kind of answer wanted.\n"
        "4. Trustworthiness: a major national newspaper quoting a rate tracker; reliable.\n"
        "5. Overall: for a \"now\" question a stale rate is a wrong answer, though it still gives a sense of the "
        "level, so the match is cut down to 1.\n"
        '{"recency": 0, "match": 3, "trustworthy": 1, "overall": 1}',
    ),
    (
        dict(query_time="2025-02-14", query="how long to boil an egg for a runny yolk",
             title="Soft-boiled eggs: timings that work", site="bbcgoodfood.com", published="2019-05-02",
             document="Lower the eggs gently into boiling water and cook for 6 minutes for a set white and a runny "
                      "yolk, or 7 minutes if you like it jammy. Cool under cold water for a minute before peeling."),
        "1. Search intent: the cooking time for an egg with a runny yolk; no time need.\n"
        "2. Recency: cooking times do not age, so the 2019 date fits.\n"
        "3. Match: it states the exact time, 6 minutes.\n"
        "4. Trustworthiness: a well-known cooking site; reliable for recipes.\n"
        "5. Overall: nothing lowers the match.\n"
        '{"recency": 1, "match": 3, "trustworthy": 1, "overall": 3}',
    ),
    (
        dict(query_time="2024-01-28", query="does vitamin c cure colds",
             title="10 miracle foods doctors don't want you to know about", site="health-secrets-daily.biz",
             published="2024-01-20",
             document="Garlic melts belly fat overnight. Vitamin C knocks out any cold in 24 hours. Celery juice "
                      "resets your liver. Click through to see number 7!"),
        "1. Search intent: whether vitamin C cures or shortens the common cold; no time need.\n"
        "2. Recency: no time need, and the passage is recent anyway.\n"
        "3. Match: it does answer the question, but in one line buried in a list about other foods.\n"
        "4. Trustworthiness: a clickbait site with no sources, and its claim contradicts medical evidence; "
        "not reliable.\n"
        "5. Overall: a confident wrong answer to a health question from an unreliable site is worse than no "
        "answer, so the match drops to 0.\n"
        '{"recency": 1, "match": 2, "trustworthy": 0, "overall": 0}',
    ),
)
EXAMPLE = "Example {i}\n{case}\nEvaluation:\n{reply}"


def _case(query_time, query, title, site, published, document) -> str:
    return CASE.format(query_time=query_time, query=query, title=title, site=site, published=published, document=document)


def _meta(meta, key) -> str:
    v = meta.get(key)
    return NOT_GIVEN if v is None or v == "" else str(v)


EXAMPLES_TEXT = "\n\n".join(EXAMPLE.format(i=i + 1, case=_case(**case), reply=reply) for i, (case, reply) in enumerate(EXAMPLES))
_STEP = [re.compile(rf"^[ \t]*{n}\.", re.MULTILINE) for n in range(1, 6)]


class _Pairs(list):
    """A JSON object kept as its (key, value) pairs, so key order and duplicates stay visible."""


_DECODER = json.JSONDecoder(object_pairs_hook=_Pairs)


def last_json_object(text: str) -> tuple[_Pairs, int, int] | None:
    """The last JSON object in ``text`` as ``(pairs, start, end)``, or None when there is none."""
    start = text.rfind("{")
    while start >= 0:
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, _Pairs):
            return obj, start, end
        start = text.rfind("{", 0, start)
    return None


def _has_steps(reasoning: str) -> bool:
    pos = 0
    for step in _STEP:
        m = step.search(reasoning, pos)
        if m is None:
            return False
        pos = m.end()
    return True


_OVERALL = re.compile(r'"overall"\s*:\s*')
# A run of complete ``"key": value`` members right after an object's "{", each with its separator.
_MEMBER = re.compile(r'\s*"[^"\\]*"\s*:\s*(?:-?\d+(?:\.\d+)?|true|false|null|"[^"\\]*")\s*(?:,|(?=\s*$))')


@dataclass(frozen=True)
class TongxiaoJudge(SingleRound):
    name: str = "tongxiao"
    native_scale: str = "0..3"
    native_values: tuple[int, ...] = RANGES["overall"]
    score_tokens: tuple[str, ...] | None = tuple(str(v) for v in RANGES["overall"])
    two_round: bool = False
    default_label_map: dict | None = field(default_factory=lambda: {0: 0, 1: 0, 2: 1, 3: 2})
    score_open: str = SCORE_OPEN
    score_close: str = SCORE_CLOSE
    reply_prefix: str = REPLY_PREFIX
    prompt_hash: str = field(default=templates_hash(
        SYSTEM, USER, CASE, EXAMPLE, EXAMPLES_TEXT, NOT_GIVEN, json.dumps(RANGES), SCORE_OPEN, REPLY_PREFIX))

    def assess_messages(self, pair: PairContext, history: Messages | None) -> Messages:
        self._check_history(history)
        case = _case(query_time=_meta(pair.query_meta, "query_time"), query=pair.query,
                     title=_meta(pair.doc_meta, "title"), site=_meta(pair.doc_meta, "site"),
                     published=_meta(pair.doc_meta, "published"), document=pair.document)
        return [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": USER.format(examples=EXAMPLES_TEXT, case=case)},
        ]

    def parse_assessment(self, text: str, pair: PairContext) -> Assessment:
        found = last_json_object(text)
        if found is None:
            return Assessment(score=None, extract=None, extract_is_verbatim=False, format_ok=False,
                              problems=("missing or invalid JSON verdict",), details=None)
        members, start, end = found
        problems: list[str] = []
        if text[end:].strip():
            problems.append("text after the JSON verdict")
        if not _has_steps(text[:start]):
            problems.append("reasoning lacks the numbered steps 1-5 in order")
        keys = [k for k, _ in members]
        if missing := [k for k in RANGES if k not in keys]:
            problems.append(f"JSON verdict lacks {', '.join(missing)}")
        if extra := sorted({k for k in keys if k not in RANGES}):
            problems.append(f"JSON verdict has unexpected keys {', '.join(extra)}")
        if dup := sorted({k for k in keys if keys.count(k) > 1}):
            problems.append(f"JSON verdict repeats {', '.join(dup)}")
        if keys and "overall" in keys and keys[-1] != "overall":
            problems.append('"overall" is not the last key of the JSON verdict')
        obj = dict(members)
        values: dict[str, int | None] = {}
        for key, allowed in RANGES.items():
            values[key] = None
            if key not in obj:
                continue
            v = obj[key]
            if type(v) is int and v in allowed:
                values[key] = v
            else:
                problems.append(f"{key} {v!r} is not {describe_values(allowed)}")
        return Assessment(
            score=values["overall"], extract=None, extract_is_verbatim=False, format_ok=not problems,
            problems=tuple(problems),
            details={"match": values["match"], "trustworthy": values["trustworthy"], "recency": values["recency"]},
        )

    def repair(self, generation: str) -> tuple[str, bool]:
        """Rank1's repair for a JSON verdict: make the text end with ``"overall": ``.

        Cut at the model's own ``"overall": `` (``repaired`` false); one written with other spacing is
        normalised (repaired). Otherwise the JSON is completed without inventing anything: an object
        in progress keeps its complete members and a cut-off member is dropped; a closed object
        without ``overall`` is reopened; with no object at all a new one is started. The missing
        dimensions stay missing, so the parsed record lists them and is never well formed.
        """
        m = _OVERALL.search(generation)
        if m is not None:
            repaired = generation[m.start(): m.end()] != SCORE_OPEN
            return generation[: m.start()] + SCORE_OPEN, repaired
        start = generation.rfind("{")
        if start >= 0:
            head, body = generation[: start + 1], generation[start + 1:]
            close = body.find("}")
            if close >= 0:
                found = last_json_object(generation[: start + 1 + close + 1])
                if found is not None and found[1] == start:  # a closed object: reopen it
                    inner = body[:close].rstrip()
                    return head + inner + (", " if inner.strip() else "") + SCORE_OPEN, True
            elif not body.strip() or body.lstrip().startswith('"'):  # an object in progress
                end = 0
                for member in _MEMBER.finditer(body):
                    if member.start() != end:
                        break
                    end = member.end()
                kept = body[:end].rstrip()
                if kept and not kept.endswith(","):
                    kept += ","
                return head + kept + (" " if kept else "") + SCORE_OPEN, True
        text = generation.rstrip()
        return (text + "\n" if text else "") + "{" + SCORE_OPEN, True


JUDGE = TongxiaoJudge()
