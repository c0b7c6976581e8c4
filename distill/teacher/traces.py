"""SFT traces: whole judge conversations, with the judge's replies, for ``r3edge teacher sft``.

A trace is the chat a judge has at labelling time (system, user, assistant, ...) with every
assistant reply filled in. The prompts come from the judge's own builders (``intent_messages``,
``assess_messages``) fed by the labelling run's helpers (:func:`~r3edge.distill.label.driver.intent_prompt`,
:func:`~r3edge.distill.label.driver.pair_context`: auxiliary posts and documents cut to the teacher
config's ``n_aux`` and ``max_doc_chars``), so a fine-tuned judge is trained on exactly the prompts
it will label. For R³A a trace is round 1 (intent) and that pair's round 2 in one conversation.

Two sources:

(a) **a stronger judge's labels** (:func:`label_traces`): the conversations are rebuilt from the
    records' ``raw_intent`` / ``raw_assessment`` and the pairs file they were labelled from (the
    records do not store the auxiliary posts or the pair metadata the prompts show). Read-out judges
    stop generating at the score marker, so the reply is completed with the score the teacher gave
    (``native_score``), as the labelling run's own parse does. The production path.
(b) **gold labels** (:func:`gold_traces`): the score is the gold label, R³A's extract is the
    document sentence with the largest word overlap with the query (``none`` for label 0), and the
    intent and the reasoning are short fixed templates (the score-only judge's reply is the grade
    alone). Such traces teach the reply format and the labels, **not reasoning**: use them where no
    stronger judge is reachable.

Every trace is re-parsed with the judge's own parser before training; a trace that is not well
formed (tags, score, a non-verbatim extract) is dropped and counted under its reason, never repaired
or defaulted.
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from r3edge.core.config import TeacherConfig, TraceParams
from r3edge.core.errors import InvalidInput
from r3edge.core.fileio import file_sha256
from r3edge.core.labels import read_labels, read_manifest
from r3edge.core.pairs import QueryCandidates
from r3edge.distill.label.driver import LabelMapping, intent_prompt, pair_context, verdict_tail
from r3edge.distill.label.judges import Messages, normalize_ws
from r3edge.distill.label.judges._single_round import ThinkScore
from r3edge.distill.label.judges.r3a import R3AJudge
from r3edge.distill.label.judges.score_only import ScoreOnlyJudge

GOLD, LABELS = "gold", "labels"

# Source (b)'s templates. Deliberately plain: they carry the format, nothing a model could mistake
# for an argument. The reasoning is the same sentence whatever the label: a templated reason that
# named the label ("unrelated" / "answers the query") would make the model commit to a label while
# writing it, greedily, so the score token read at <score> would be near one-hot and the student
# would learn hard labels. With a label-neutral reason the first commitment is the extract (none or
# a sentence: relevant or not) and the score token keeps the teacher's 1-vs-2 uncertainty.
INTENT_THINK = "I read the query literally."
# The query is copied on one line: a cold-started SmolLM2 that copied a multi-line forum question
# repeated "Posts that answer: ..." after its line break until the budget ran out (SemEval fidelity
# run: 100 of 600 records, one question of six, lost their intent).
# Only its first words: a forum question runs to 100+ words, and a copy of all of it overflowed the
# intent budget (GPU fidelity run: 26 of 50 dev questions lost their intent at 64 tokens).
INTENT = "Posts that answer: {query}"
INTENT_MAX_WORDS = 24
REASON = "I compare the post with the query."
#: the ``shared_words`` reason (TraceParams.reason): computed from the query and the post alone
SHARED = "Words the post shares with the query: {words}."
#: words too common to say that a post is about the query (content words are 3+ letters and not these)
_STOP = frozenset(
    "the and for you your with that this are was were what how why can any but not have has had from they them there "
    "their about just like get got its our out one all too very into when where which who will would could should does "
    "did been more most much many some such than then also only over under again here help".split())
#: an extract is at most this many words (a verbatim prefix of the best sentence): long forum
#: sentences overflowed the verdict's budget and were cut before <score>
EXTRACT_MAX_WORDS = 30

#: a sentence ends at a line break, or at . ! ? (runs of them) followed by whitespace
_SENTENCE_END = re.compile(r"\n+|(?<=[.!?])\s+")
_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r"\S+")


def first_words(text: str, n: int) -> str:
    """``text`` up to the end of its ``n``-th whitespace-separated word: a verbatim prefix."""
    words = list(_TOKEN.finditer(text))
    return text if len(words) <= n else text[:words[n - 1].end()]


@dataclass(frozen=True)
class Trace:
    """One pair's conversation with every reply; ``label`` is the student label it teaches."""

    qid: str
    docid: str
    label: int
    native: float            # the score the reply states, on the judge's scale
    messages: Messages       # system/user/assistant ...; each assistant reply starts with the reply prefix
    source: str              # GOLD or LABELS


@dataclass
class Traces:
    """The traces a source produced and what it dropped, by reason."""

    traces: list[Trace] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)
    considered: int = 0


def sentences(document: str) -> list[str]:
    """The document's sentences: split at line breaks and after ``.``/``!``/``?`` followed by
    whitespace, stripped, empty ones dropped. Simple on purpose: each piece is verbatim text of the
    document, which is all an extract needs."""
    return [s.strip() for s in _SENTENCE_END.split(document) if s.strip()]


def best_sentence(query: str, document: str) -> str | None:
    """The sentence sharing the most distinct words (case-folded ``\\w+``) with the query, cut to its
    first ``EXTRACT_MAX_WORDS`` words; the earliest wins a tie, so a relevant post without any
    shared word gives its first sentence."""
    words = set(_WORD.findall(query.lower()))
    best, best_n = None, -1
    for s in sentences(document):
        n = len(words & set(_WORD.findall(s.lower())))
        if n > best_n:
            best, best_n = s, n
    return None if best is None else first_words(best, EXTRACT_MAX_WORDS)


def shared_words(query: str, document: str) -> str:
    """The ``shared_words`` reason: the query's content words that the post contains, in query order."""
    doc = set(_WORD.findall(document.lower()))
    words = [w for w in dict.fromkeys(_WORD.findall(query.lower())) if len(w) >= 3 and w not in _STOP and w in doc]
    return SHARED.format(words=", ".join(words) if words else "none")


def _gold_native(cfg: TeacherConfig, judge) -> dict[int, int]:
    if not isinstance(judge, (R3AJudge, ThinkScore, ScoreOnlyJudge)):
        raise InvalidInput(f"gold traces are built for r3a, score-only and the <think><score> judges (umbrela, true, crux), "
                          f"not {judge.name!r}",
                          "use traces from a stronger judge (--traces LABELS_DIR) for this judge")
    return native_of_gold(cfg, judge)


def native_of_gold(cfg: TeacherConfig, judge) -> dict[int, int]:
    """Gold (student) label -> native score: the inverse of the config's label map, which must be one
    to one (gold traces write it as the verdict; R³A's GRPO reward compares the verdict with it)."""
    mapping = LabelMapping(cfg, judge)
    if mapping.map is None:
        raise InvalidInput(f"teacher config {cfg.name!r} maps {judge.native_scale} to labels by bands: "
                          "a gold label has no single native score", "use traces from a stronger judge (--traces LABELS_DIR)")
    inverse: dict[int, int] = {}
    for native, label in mapping.map.items():
        if label in inverse:
            raise InvalidInput(f"teacher config {cfg.name!r} maps native scores {inverse[label]} and {native} to label {label}: "
                              "a gold label does not say which native score to write",
                              "give the config a one-to-one label_map, or use --traces LABELS_DIR")
        inverse[label] = native
    return inverse


def gold_traces(cfg: TeacherConfig, judge, queries: list[QueryCandidates],
                reason: str = TraceParams.model_fields["reason"].default) -> Traces:
    """Source (b): templated traces whose score is each pair's gold label (see the module docstring);
    ``reason`` is TraceParams.reason."""
    native_of = _gold_native(cfg, judge)
    pre = judge.reply_prefix
    out = Traces()
    for q in queries:
        history = None
        if judge.two_round:
            query = first_words(normalize_ws(q.query), INTENT_MAX_WORDS)
            intent = f"{pre}{INTENT_THINK}</think><intent>{INTENT.format(query=query)}</intent>"
            history = [*intent_prompt(cfg, judge, q), {"role": "assistant", "content": intent}]
            intent_ok = judge.parse_intent(intent).format_ok
        for c in q.candidates:
            out.considered += 1
            if c.label is None:
                out.dropped["no gold label"] += 1
                continue
            if c.label not in native_of:
                raise InvalidInput(f"pair ({q.qid}, {c.docid}) has gold label {c.label}, not a student label of teacher "
                                  f"{cfg.name!r} ({sorted(native_of)})", "fix the pairs file's labels or choose another teacher config")
            if judge.two_round and not intent_ok:
                out.dropped["intent reply not well formed"] += 1
                continue
            native = native_of[c.label]
            pair = pair_context(cfg, q, c)
            if isinstance(judge, ScoreOnlyJudge):  # the prefix ends at <score>: the grade is the whole reply
                reply = pre + verdict_tail(judge, native)
            else:
                why = shared_words(q.query, pair.document) if reason == "shared_words" else REASON
                body = f"{why}</think>"
                if isinstance(judge, R3AJudge):
                    extract = best_sentence(q.query, pair.document) if native > 0 else None
                    if native > 0 and extract is None:
                        out.dropped["relevant document has no text to extract"] += 1
                        continue
                    body += f"<extract>{extract or 'none'}</extract>"
                reply = f"{pre}{body}<score>{native}</score>"
            if not _keep(judge, reply, pair, out):
                continue
            messages = [*judge.assess_messages(pair, history), {"role": "assistant", "content": reply}]
            out.traces.append(Trace(q.qid, c.docid, int(c.label), float(native), messages, GOLD))
    return out


def _keep(judge, reply: str, pair, out: Traces) -> bool:
    parsed = judge.parse_assessment(reply, pair)
    if not parsed.format_ok:
        out.dropped[f"assessment: {parsed.problems[0] if parsed.problems else 'not well formed'}"] += 1
        return False
    return True


def label_traces(cfg: TeacherConfig, judge, queries: list[QueryCandidates], pairs_path: str | Path,
                 labels_dirs: Sequence[str | Path], *,
                 retro_filter: bool = TraceParams.model_fields["retro_filter"].default) -> Traces:
    """Source (a): the replies a stronger judge wrote into ``labels_dirs`` (``r3edge label`` output).

    Each directory must have been labelled by this judge with these prompts from ``pairs_path``
    (checked against its manifest: a mismatch is an error, not a drop). Records that do not re-parse
    as well formed, or whose reply was cut off and repaired at labelling, are dropped and counted.
    Where a pair has several traces (several directories), ``retro_filter`` keeps only the one
    whose score is nearest the mean of their scores (Retro*'s filter); otherwise all are kept.
    """
    from r3edge.distill.label.judges.retro import closest_sample, integrate

    pairs_sha = file_sha256(Path(pairs_path))
    by_key = {(q.qid, c.docid): (q, c) for q in queries for c in q.candidates}
    out = Traces()
    per_pair: dict[tuple[str, str], list[Trace]] = defaultdict(list)
    pre = judge.reply_prefix
    for d in labels_dirs:
        m = read_manifest(d)
        checks = (("judge", judge.name, f"label with judge {judge.name!r}, or use a teacher config of judge {m.get('judge')!r}"),
                  ("prompt_hash", judge.prompt_hash,
                   "re-label with this r3edge's prompts: a model must not learn replies to prompts it will never be shown"),
                  ("pairs_sha256", pairs_sha, "pass the pairs file that directory was labelled from"))
        for key, want, fix in checks:
            if m.get(key) != want:
                raise InvalidInput(f"{d}: labels have {key} {m.get(key)!r}, this SFT needs {want!r}", fix)
        cols = ["qid", "docid", "score", "native_score", "raw_intent", "raw_assessment"]
        for r in read_labels(d, allow_partial=True, columns=cols).to_pylist():
            out.considered += 1
            q, c = by_key.get((r["qid"], r["docid"]), (None, None))
            if q is None:
                raise InvalidInput(f"{d}: pair ({r['qid']}, {r['docid']}) is not in {pairs_path}",
                                  "pass the pairs file that directory was labelled from")
            pair = pair_context(cfg, q, c)
            history = None
            if judge.two_round:
                intent = r["raw_intent"]
                if intent is None or not judge.parse_intent(intent).format_ok:
                    out.dropped["intent reply not well formed"] += 1
                    continue
                history = [*intent_prompt(cfg, judge, q), {"role": "assistant", "content": intent}]
            raw = r["raw_assessment"]
            if raw is None or r["score"] is None:
                out.dropped["no reply or no label"] += 1
                continue
            if judge.score_tokens is not None:  # generation stopped at the score marker: complete the verdict
                reply, repaired = judge.repair(raw)
                if repaired:
                    out.dropped["reply cut off before the score (repaired at labelling)"] += 1
                    continue
                reply += verdict_tail(judge, int(r["native_score"]))
            else:
                reply = raw
            if not reply.startswith(pre):
                out.dropped[f"reply does not start with the prefix {pre!r}"] += 1
                continue
            parsed = judge.parse_assessment(reply, pair)
            if not parsed.format_ok:
                out.dropped[f"assessment: {parsed.problems[0] if parsed.problems else 'not well formed'}"] += 1
                continue
            messages = [*judge.assess_messages(pair, history), {"role": "assistant", "content": reply}]
            per_pair[(q.qid, c.docid)].append(Trace(q.qid, c.docid, int(r["score"]), float(parsed.score), messages, LABELS))
    for group in per_pair.values():
        if retro_filter and len(group) > 1:
            scores = [int(t.native) for t in group]
            keep = closest_sample(scores, integrate(scores))
            out.dropped["retro* filter: not the pair's trace nearest its mean score"] += len(group) - 1
            group = [group[keep]]
        out.traces.extend(group)
    return out


def select(traces: list[Trace], params: TraceParams, max_examples: int | None = None) -> tuple[list[Trace], dict]:
    """Cap each label, oversample the smaller labels, shuffle and cut to ``max_examples``, all seeded.

    Returns the chosen traces (an oversampled trace appears more than once) and the counts of each step.
    """
    rng = random.Random(params.seed)
    by_label: dict[int, list[Trace]] = defaultdict(list)
    for t in sorted(traces, key=lambda t: (t.label, t.qid, t.docid, t.source)):
        by_label[t.label].append(t)
    capped = 0
    for label, group in by_label.items():
        rng.shuffle(group)
        cap = params.cap(label)
        if cap is not None and len(group) > cap:
            capped += len(group) - cap
            by_label[label] = group[:cap]
    repeated = 0
    if params.oversample and by_label:
        top = max(len(g) for g in by_label.values())
        for label, group in by_label.items():
            extra = [group[i % len(group)] for i in range(top - len(group))]
            repeated += len(extra)
            by_label[label] = group + extra
    chosen = [t for label in sorted(by_label) for t in by_label[label]]
    rng.shuffle(chosen)
    limit = max_examples if max_examples is not None else params.max_examples
    cut = max(0, len(chosen) - limit) if limit is not None else 0
    chosen = chosen[: len(chosen) - cut]
    counts = {"capped_per_label": capped, "oversampled_copies": repeated, "cut_by_max_examples": cut,
              "chosen": len(chosen), "chosen_by_label": {str(k): v for k, v in sorted(Counter(t.label for t in chosen).items())}}
    return chosen, counts
