"""The single-round judges (UMBRELA, Retro*, Tongxiao, TRUE, CRUX, score-only, Rank1): strict parsers that never
default a score, repairs that always end at the score position, prompts that carry the pair's context,
Retro*'s score integration, and the registry. Torch-free."""

from __future__ import annotations

import math

import pytest

from r3edge.core.errors import R3EdgeError
from r3edge.distill.label.judges import (
    JUDGES,
    PairContext,
    crux,
    get_judge,
    prefill_only,
    r3a,
    rank1,
    retro,
    score_only,
    tongxiao,
    true_usefulness,
    umbrela,
)

SINGLE_ROUND = ("umbrela", "retro", "tongxiao", "true", "crux", "score-only", "rank1")
THINK_SCORE = ("umbrela", "retro", "true", "crux")
PAIR = PairContext("renew residence permit qatar", "Renew your RP online via Metrash2: upload passport, pay 500 QR.")


# --- registry and identity ---------------------------------------------------------------------------


def test_registry_holds_all_eight_judges_under_their_names():
    assert set(JUDGES) == {"r3a", *SINGLE_ROUND}
    modules = {"r3a": r3a, "umbrela": umbrela, "retro": retro, "tongxiao": tongxiao, "true": true_usefulness, "crux": crux,
               "score-only": score_only, "rank1": rank1}
    for name, module in modules.items():
        judge = get_judge(name)
        assert judge is module.JUDGE and judge.name == name


def test_every_prompt_hash_is_distinct():
    hashes = [get_judge(n).prompt_hash for n in JUDGES]
    assert all(len(h) == 64 for h in hashes)
    assert len(set(hashes)) == len(JUDGES)


@pytest.mark.parametrize(
    "name, scale, values, open_, prefix, label_map",
    [
        ("umbrela", "0..2", (0, 1, 2), "<score>", "<think>", {0: 0, 1: 1, 2: 2}),
        ("retro", "0..100", tuple(range(101)), "<score>", "<think>", None),
        ("tongxiao", "0..3", (0, 1, 2, 3), '"overall": ', "1. Search intent:", {0: 0, 1: 0, 2: 1, 3: 2}),
        ("true", "0..3", (0, 1, 2, 3), "<score>", "<think>", {0: 0, 1: 1, 2: 1, 3: 2}),
        ("crux", "0..5", (0, 1, 2, 3, 4, 5), "<score>", "<think>", {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2}),
        ("score-only", "0..2", (0, 1, 2), "<score>", "<score>", {0: 0, 1: 1, 2: 2}),
    ],
)
def test_identity(name, scale, values, open_, prefix, label_map):
    j = get_judge(name)
    assert (j.native_scale, j.native_values, j.score_open, j.reply_prefix) == (scale, values, open_, prefix)
    assert j.default_label_map == label_map and j.two_round is False
    if name == "retro":
        assert j.score_tokens is None
    else:
        assert j.score_tokens == tuple(str(v) for v in values) and len(j.score_tokens) == len(j.native_values)
        assert set(j.default_label_map) == set(j.native_values) and set(j.default_label_map.values()) == {0, 1, 2}


@pytest.mark.parametrize("name", SINGLE_ROUND)
def test_single_round_judges_have_no_intent_round(name):
    j = get_judge(name)
    with pytest.raises(R3EdgeError, match="no intent round"):
        j.intent_messages("q", ["aux"])
    with pytest.raises(R3EdgeError, match="no intent round"):
        j.parse_intent("<think>x</think><intent>y</intent>")
    with pytest.raises(R3EdgeError, match="single-round"):
        j.assess_messages(PAIR, [{"role": "user", "content": "round one"}])
    msgs = j.assess_messages(PAIR, None)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert PAIR.query in msgs[1]["content"] and PAIR.document in msgs[1]["content"]


def test_only_the_score_only_judge_is_prefill_only():
    assert [n for n in JUDGES if prefill_only(get_judge(n))] == ["score-only"]


# --- score-only: the grade read right after the prompt, nothing generated ---------------------------


def test_score_only_prompt_is_short_and_ends_at_the_score():
    j = score_only.JUDGE
    system, user = j.assess_messages(PAIR, None)
    assert user["content"].index(PAIR.query) < user["content"].index(PAIR.document)
    assert all(f"{v} = " in user["content"] for v in j.native_values)
    assert len(system["content"]) + len(user["content"]) < 600 + len(PAIR.query) + len(PAIR.document)
    assert j.reply_prefix == j.score_open == "<score>" and j.score_tokens == ("0", "1", "2")
    assert j.repair(j.reply_prefix) == ("<score>", False)


@pytest.mark.parametrize(
    "text, score, ok",
    [("<score>2</score>", 2, True), (" <score>0</score>\n", 0, True), ("<score>3</score>", None, False),
     ("<score>2</score> because", None, False), ("2", None, False), ("<score>02</score>", None, False)],
)
def test_score_only_verdict_parser_is_strict(text, score, ok):
    a = score_only.JUDGE.parse_assessment(text, PAIR)
    assert (a.score, a.format_ok) == (score, ok) and bool(a.problems) != ok


# --- Rank1: think, then p(true) read after </think> ---------------------------------------------------


def test_rank1_reads_true_against_false_after_the_reasoning():
    j = rank1.JUDGE
    system, user = j.assess_messages(PAIR, None)
    assert "Answer only with 'true' or 'false'" in user["content"]
    assert user["content"].index(PAIR.query) < user["content"].index(PAIR.document)
    assert (j.native_scale, j.native_values, j.score_open, j.reply_prefix) == ("0..1", (0, 1), "</think>", "<think>")
    assert j.score_tokens == (" false", " true") and j.default_label_map == {0: 0, 1: 2}
    assert not prefill_only(j)


@pytest.mark.parametrize(
    "text, score, problem",
    [
        ("<think>The post lists the renewal steps.</think> true", 1, None),
        ("<think>Unrelated.</think>\nfalse\n", 0, None),
        ("<think>x</think> True", 1, "lower case"),                          # read, but out of format
        ("<think>x</think> true, because", 1, "text after the verdict"),
        ("<think>x</think> maybe", None, "is not 'true' or 'false'"),
        ("<think>x</think>", None, "no 'true' or 'false'"),
        ("<think>x true", None, "missing </think>"),
        ("Sure. <think>x</think> true", 1, "text outside"),
        ("<think>a</think><think>b</think> false", 0, "opened 2"),
    ],
)
def test_rank1_parser_reads_the_verdict_and_names_each_problem(text, score, problem):
    a = rank1.JUDGE.parse_assessment(text, PAIR)
    assert a.score == score and a.format_ok == (problem is None)
    assert (problem is None) == (a.problems == ()) and (problem is None or any(problem in p for p in a.problems))


@pytest.mark.parametrize(
    "generation, expected, repaired",
    [
        ("<think>steps listed</think> true", "<think>steps listed</think>", False),
        ("<think>steps listed", "<think>steps listed</think>", True),
        ("<think>cut off </th", "<think>cut off</think>", True),
        ("no think tag at all", "no think tag at all</think>", True),
    ],
)
def test_rank1_repair_ends_where_the_verdict_is_read(generation, expected, repaired):
    assert rank1.JUDGE.repair(generation) == (expected, repaired)


# --- the <think>…</think><score>N</score> judges -----------------------------------------------------

GOOD = {
    "umbrela": ("<think>The post gives the exact renewal steps.</think><score>2</score>", 2),
    "true": ("<think>Clicked, long dwell, satisfied query.</think>\n<score>3</score>", 3),
    "crux": ("<think>The fee and channel are stated; processing time is not.</think><score>4</score>", 4),
    "retro": ("<think>1. Query analysis: wants renewal steps.\n2. Document analysis: lists them.\n"
              "3. Relevance annotation: highly relevant.</think><score>87</score>", 87),
}


@pytest.mark.parametrize("name", THINK_SCORE)
def test_well_formed_reply_parses(name):
    text, score = GOOD[name]
    a = get_judge(name).parse_assessment(text, PAIR)
    assert a.format_ok and a.score == score and a.problems == ()
    assert a.extract is None and not a.extract_is_verbatim


@pytest.mark.parametrize("name", THINK_SCORE)
@pytest.mark.parametrize(
    "text, score, problem",
    [
        ("<score>1</score>", 1, "missing <think>"),                         # read, but out of format
        ("<think>x</think>", None, "missing <score>"),
        ("<think>x</think><score>1</score> hope this helps", 1, "text outside"),
        ("Sure! <think>x</think><score>1</score>", 1, "text outside"),
        ("<score>1</score><think>x</think>", 1, "out of order"),
        ("<think>x</think><score>one</score>", None, "is not"),
        ("<think>x</think><score>1.5</score>", None, "is not"),
        ("<think>x</think><score>-1</score>", None, "is not"),
        ("<think>x</think><score></score>", None, "is not"),
        ("<think>x</think><score>1</score><score>0</score>", 1, "<score> opened 2"),
        ("<think>x<score>1</score>", 1, "<think> opened 1 and closed 0"),
    ],
)
def test_malformed_replies_fail_with_a_reason_and_no_default(name, text, score, problem):
    if name == "retro":  # give retro its steps so that only the injected fault is reported
        text = text.replace("<think>x", "<think>query analysis, document analysis, relevance annotation")
    a = get_judge(name).parse_assessment(text, PAIR)
    assert not a.format_ok
    assert a.score == score
    assert any(problem in p for p in a.problems), a.problems


@pytest.mark.parametrize(
    "name, out_of_range",
    [("umbrela", "3"), ("true", "4"), ("crux", "6"), ("retro", "101"), ("retro", "007"), ("umbrela", "02")],
)
def test_score_out_of_range_is_none_never_clipped(name, out_of_range):
    text = f"<think>query analysis document analysis relevance annotation</think><score>{out_of_range}</score>"
    a = get_judge(name).parse_assessment(text, PAIR)
    assert a.score is None and not a.format_ok
    assert any(f"score {out_of_range!r} is not" in p for p in a.problems), a.problems


def test_retro_scale_edges_and_missing_steps():
    j = retro.JUDGE
    steps = "1. Query analysis: a\n2. Document analysis: b\n3. Relevance annotation: c"
    assert j.parse_assessment(f"<think>{steps}</think><score>0</score>", PAIR).score == 0
    assert j.parse_assessment(f"<think>{steps}</think><score>100</score>", PAIR).score == 100
    a = j.parse_assessment("<think>It is relevant.</think><score>70</score>", PAIR)
    assert a.score == 70 and not a.format_ok and "lacks the steps" in a.problems[0]
    swapped = "<think>Document analysis: b. Query analysis: a. Relevance annotation: c</think><score>70</score>"
    assert not j.parse_assessment(swapped, PAIR).format_ok


@pytest.mark.parametrize("name", THINK_SCORE)
@pytest.mark.parametrize(
    "generation, expected, repaired",
    [
        ("<think>a</think><score>2</score>", "<think>a</think><score>", False),
        ("<think>a</think><score>", "<think>a</think><score>", False),
        ("<think>cut off mid", "<think>cut off mid</think><score>", True),
        ("<think>a</think><sco", "<think>a</think><score>", True),
        ("<think>a</th", "<think>a</think><score>", True),
        ("<think>a</think>", "<think>a</think><score>", True),
        ("<think>", "<think></think><score>", True),
        ("no tags at all  ", "no tags at all<score>", True),
    ],
)
def test_repair_ends_at_the_score_position(name, generation, expected, repaired):
    text, was_repaired = get_judge(name).repair(generation)
    assert text.endswith("<score>") and (text, was_repaired) == (expected, repaired)


# --- Tongxiao ----------------------------------------------------------------------------------------

TX = tongxiao.JUDGE
TX_PAIR = PairContext(
    "qatar residence permit renewal fee 2025", "Renewal costs 500 QR per year and is done on Metrash2.",
    query_meta={"query_time": "2025-03-02"},
    doc_meta={"title": "RP renewal: the 2025 fees", "site": "portal.moi.gov.qa", "published": "2025-01-15"},
)
TX_STEPS = (
    "1. Search intent: the current fee to renew a Qatari residence permit; 2025 is a time need.\n"
    "2. Recency: published January 2025, fits.\n"
    "3. Match: states the fee exactly.\n"
    "4. Trustworthiness: the ministry's own portal.\n"
    "5. Overall: nothing lowers the match.\n"
)
TX_GOOD = TX_STEPS + '{"recency": 1, "match": 3, "trustworthy": 1, "overall": 3}'


# A well-formed reply of every read-out judge, the native score it states, and the pair it judges.
READ_OUT_REPLIES = {
    "r3a": ("<think>It explains the steps.</think><extract>upload passport, pay 500 QR</extract><score>2</score>", 2, PAIR),
    "umbrela": ("<think>The post gives the exact renewal steps.</think><score>2</score>", 2, PAIR),
    "true": ("<think>Clicked, long dwell.</think><score>3</score>", 3, PAIR),
    "crux": ("<think>The fee is stated.</think><score>4</score>", 4, PAIR),
    "score-only": ("<score>1</score>", 1, PAIR),
    "rank1": ("<think>steps listed</think> true", 1, PAIR),
    "tongxiao": (TX_GOOD, 3, TX_PAIR),
}


@pytest.mark.parametrize("name", sorted(READ_OUT_REPLIES))
def test_verdict_tail_completes_each_read_out_layout(name):
    """The reply cut at its score marker plus verdict_tail is the judge's own well-formed reply again
    (what labelling parses after reading the score there), so a judge's ``score_close`` fits its layout."""
    from r3edge.distill.label.driver import verdict_tail

    j = get_judge(name)
    reply, native, pair = READ_OUT_REPLIES[name]
    cut = reply[: reply.rindex(j.score_open) + len(j.score_open)]
    assert cut + verdict_tail(j, native) == reply
    a = j.parse_assessment(cut + verdict_tail(j, native), pair)
    assert a.format_ok and a.score == native


def test_every_read_out_judge_has_a_verdict_to_complete():
    assert {n for n in JUDGES if get_judge(n).score_tokens is not None} == set(READ_OUT_REPLIES)


def test_tongxiao_well_formed_reply_parses_with_details():
    a = TX.parse_assessment(TX_GOOD, TX_PAIR)
    assert a.format_ok and a.problems == () and a.score == 3
    assert a.details == {"match": 3, "trustworthy": 1, "recency": 1}
    b = TX.parse_assessment(TX_STEPS + '{"recency": 0, "match": 2, "trustworthy": 0, "overall": 1}\n', TX_PAIR)
    assert b.format_ok and b.score == 1 and b.details == {"match": 2, "trustworthy": 0, "recency": 0}


def test_tongxiao_reply_prefix_plus_generation_is_what_is_parsed():
    generation = TX_GOOD[len(TX.reply_prefix):]
    assert TX.parse_assessment(TX.reply_prefix + generation, TX_PAIR).format_ok


@pytest.mark.parametrize(
    "verdict, score, details, problem",
    [
        ("", None, None, "missing or invalid JSON"),
        ('{"recency": 1, "match": 3, "trustworthy": 1, "overall": 3', None, None, "missing or invalid JSON"),
        ("{'recency': 1, 'match': 3, 'trustworthy': 1, 'overall': 3}", None, None, "missing or invalid JSON"),
        ('{"recency": 1, "match": 3, "trustworthy": 1, "overall": 4}', None, {"match": 3, "trustworthy": 1, "recency": 1},
         "overall 4 is not one of 0, 1, 2, 3"),
        ('{"recency": 1, "match": 5, "trustworthy": 1, "overall": 2}', 2, {"match": None, "trustworthy": 1, "recency": 1},
         "match 5 is not"),
        ('{"recency": 2, "match": 3, "trustworthy": 1, "overall": 3}', 3, {"match": 3, "trustworthy": 1, "recency": None},
         "recency 2 is not one of 0, 1"),
        ('{"recency": 1, "match": 3, "trustworthy": true, "overall": 3}', 3, {"match": 3, "trustworthy": None, "recency": 1},
         "trustworthy True is not"),
        ('{"recency": 1, "match": 3, "trustworthy": 1, "overall": "3"}', None, {"match": 3, "trustworthy": 1, "recency": 1},
         "overall '3' is not"),
        ('{"recency": 1, "match": 3, "trustworthy": 1, "overall": 2.0}', None, {"match": 3, "trustworthy": 1, "recency": 1},
         "overall 2.0 is not"),
        ('{"recency": 1, "match": 3, "trustworthy": 1}', None, {"match": 3, "trustworthy": 1, "recency": 1}, "lacks overall"),
        ('{"overall": 3, "recency": 1, "match": 3, "trustworthy": 1}', 3, {"match": 3, "trustworthy": 1, "recency": 1},
         "not the last key"),
        ('{"recency": 1, "match": 3, "trustworthy": 1, "overall": 3, "extra": 1}', 3, {"match": 3, "trustworthy": 1, "recency": 1},
         "unexpected keys extra"),
        ('{"recency": 1, "match": 3, "trustworthy": 1, "overall": 1, "overall": 3}', 3, {"match": 3, "trustworthy": 1, "recency": 1},
         "repeats overall"),
        ('{"recency": 1, "match": 3, "trustworthy": 1, "overall": 3}\nHope this helps!', 3,
         {"match": 3, "trustworthy": 1, "recency": 1}, "text after the JSON"),
        ('```json\n{"recency": 1, "match": 3, "trustworthy": 1, "overall": 3}\n```', 3,
         {"match": 3, "trustworthy": 1, "recency": 1}, "text after the JSON"),
    ],
)
def test_tongxiao_malformed_verdicts_fail_with_a_reason(verdict, score, details, problem):
    a = TX.parse_assessment(TX_STEPS + verdict, TX_PAIR)
    assert not a.format_ok and a.score == score and a.details == details
    assert any(problem in p for p in a.problems), a.problems


def test_tongxiao_needs_the_numbered_steps():
    a = TX.parse_assessment('Looks good.\n{"recency": 1, "match": 3, "trustworthy": 1, "overall": 3}', TX_PAIR)
    assert not a.format_ok and a.score == 3 and a.problems == ("reasoning lacks the numbered steps 1-5 in order",)
    skipped = TX_STEPS.replace("4. Trust", "Trust")
    assert not TX.parse_assessment(skipped + '{"recency": 1, "match": 3, "trustworthy": 1, "overall": 3}', TX_PAIR).format_ok


@pytest.mark.parametrize(
    "generation, expected, repaired",
    [
        (TX_STEPS + '{"recency": 1, "match": 3, "trustworthy": 1, "overall": ',
         TX_STEPS + '{"recency": 1, "match": 3, "trustworthy": 1, "overall": ', False),
        (TX_STEPS + '{"recency": 1, "match": 3, "trustworthy": 1, "overall": 3}',
         TX_STEPS + '{"recency": 1, "match": 3, "trustworthy": 1, "overall": ', False),
        ('1. x\n{"recency": 1, "overall":2}', '1. x\n{"recency": 1, "overall": ', True),   # spacing normalised
        ('1. x\n{"recency": 1, "match": 3, "trust', '1. x\n{"recency": 1, "match": 3, "overall": ', True),
        ('1. x\n{"recency": 1, "match": ', '1. x\n{"recency": 1, "overall": ', True),
        ('1. x\n{"recency": 1,', '1. x\n{"recency": 1, "overall": ', True),
        ('1. x\n{', '1. x\n{"overall": ', True),
        ('1. x\n{"recency": 1, "match": 2}', '1. x\n{"recency": 1, "match": 2, "overall": ', True),  # reopened
        ("1. Search intent: cut off mid", '1. Search intent: cut off mid\n{"overall": ', True),
        ("1. x: the set {a, b} matters", '1. x: the set {a, b} matters\n{"overall": ', True),
        ("", '{"overall": ', True),
    ],
)
def test_tongxiao_repair_completes_the_json_up_to_overall(generation, expected, repaired):
    text, was_repaired = TX.repair(generation)
    assert text.endswith('"overall": ') and (text, was_repaired) == (expected, repaired)


def test_tongxiao_repaired_verdict_keeps_missing_dimensions_missing():
    text, _ = TX.repair('1. x\n{"recency": 0, "mat')
    a = TX.parse_assessment(text + "2}", TX_PAIR)
    assert a.score == 2 and a.details == {"match": None, "trustworthy": None, "recency": 0}
    assert not a.format_ok and any("lacks match, trustworthy" in p for p in a.problems)


def test_tongxiao_messages_carry_passage_metadata_and_query_time():
    user = TX.assess_messages(TX_PAIR, None)[1]["content"]
    case = user[user.index("Now the case to rate."):]
    for needed in ("Query time: 2025-03-02", "Title: RP renewal: the 2025 fees", "Website: portal.moi.gov.qa",
                   "Published: 2025-01-15", TX_PAIR.query, TX_PAIR.document):
        assert needed in case
    assert user.count("Example ") == 3 and '"overall": 1}' in user  # the worked examples precede the case
    bare = TX.assess_messages(PairContext("q", "d"), None)[1]["content"]
    bare_case = bare[bare.index("Now the case to rate."):]
    assert "Query time: not given" in bare_case and "Website: not given" in bare_case and "Published: not given" in bare_case


# --- TRUE and CRUX prompts ---------------------------------------------------------------------------


def test_true_shows_only_the_signals_present():
    pair = PairContext(
        "cheap flights lisbon", "Compare fares from 40 airlines.",
        query_meta={"task": "Plan a weekend trip to Lisbon", "query_position": 2, "query_satisfaction": 4},
        doc_meta={"title": "Cheap flights to Lisbon", "summary": "Compare fares", "serp_rank": 1, "clicked": True,
                  "dwell_time_s": 95.5, "unrelated_key": "zzz"},
    )
    user = true_usefulness.JUDGE.assess_messages(pair, None)[1]["content"]
    for needed in ("Search task: Plan a weekend trip to Lisbon", "position of this query in the session: 2",
                   "satisfaction with this query (1-5): 4", "rank of the document on the result page: 1",
                   "clicked by the searcher: yes", "dwell time on the document (seconds): 95.5",
                   "Title: Cheap flights to Lisbon", "Summary shown on the result page: Compare fares"):
        assert needed in user, needed
    for absent in ("No session or behaviour signals", "whole session", "click-through", "zzz", "URL:"):
        assert absent not in user, absent


def test_true_says_when_no_signals_were_recorded():
    user = true_usefulness.JUDGE.assess_messages(PairContext("q", "d", doc_meta={"title": "T"}), None)[1]["content"]
    assert "No session or behaviour signals were recorded" in user and "Title: T" in user
    assert "Search task:" not in user and "dwell time on the document" not in user
    with_zero = PairContext("q", "d", doc_meta={"dwell_time_s": 0, "clicked": False})
    user = true_usefulness.JUDGE.assess_messages(with_zero, None)[1]["content"]
    assert "No session or behaviour signals" not in user
    assert "dwell time on the document (seconds): 0" in user and "clicked by the searcher: no" in user


def test_crux_shows_the_parent_question_only_when_given():
    sub = PairContext("What fee does a renewal cost?", "500 QR.", query_meta={"parent_question": "How do expats renew permits?"})
    user = crux.JUDGE.assess_messages(sub, None)[1]["content"]
    assert "broader question: How do expats renew permits?" in user and "Question: What fee does a renewal cost?" in user
    assert "broader question" not in crux.JUDGE.assess_messages(PairContext("q", "d"), None)[1]["content"]


def test_retro_relevance_definition_is_a_placeholder():
    default = retro.JUDGE.assess_messages(PAIR, None)[1]["content"]
    assert "Relevance definition: " + retro.DEFAULT_DEFINITION in default
    custom = PairContext("prove x", "Theorem 2 ...", query_meta={"relevance_definition": "its theorems help solve the problem"})
    user = retro.JUDGE.assess_messages(custom, None)[1]["content"]
    assert "Relevance definition: its theorems help solve the problem" in user and retro.DEFAULT_DEFINITION not in user
    assert "80-100" in user and "0-20" in user and "512 tokens" in user


# --- Retro* score integration ------------------------------------------------------------------------


def test_integrate_uniform_is_the_mean_of_parsed_scores():
    assert retro.integrate([80, 60, 70, 90], None, "uniform") == 75.0
    assert retro.integrate([80, None, 40, None], None, "uniform") == 60.0   # not (80+0+40+0)/4
    assert retro.n_unparsable([80, None, 40, None]) == 2
    assert retro.integrate([None, None], [-1.0, -2.0], "uniform") is None
    assert retro.integrate([], None, "uniform") is None


def test_integrate_likelihood_weights_are_a_softmax_of_logprobs():
    # weights ∝ exp(-1), exp(-2), exp(-1 - ln 2) = e^-1 · (1, e^-1, 1/2)
    w = [1.0, math.exp(-1), 0.5]
    expected = (w[0] * 90 + w[1] * 30 + w[2] * 60) / sum(w)
    got = retro.integrate([90, 30, 60], [-1.0, -2.0, -1.0 - math.log(2)], "likelihood")
    assert got == pytest.approx(expected, rel=1e-12) and got == pytest.approx(70.1525, abs=1e-3)  # 131.036 / 1.8679
    # equal likelihoods reduce to the uniform mean; huge magnitudes do not overflow
    assert retro.integrate([10, 50], [-5000.0, -5000.0], "likelihood") == pytest.approx(30.0)
    assert retro.integrate([10, 50], [-5000.0, -5001.0], "likelihood") == pytest.approx((10 + 50 / math.e) / (1 + 1 / math.e))
    # an unparsable sample is left out along with its log-likelihood, however likely it was
    assert retro.integrate([None, 20, 80], [0.0, -3.0, -3.0], "likelihood") == pytest.approx(50.0)
    assert retro.integrate([None, None], [-1.0, -1.0], "likelihood") is None


def test_integrate_rejects_what_it_cannot_weigh():
    with pytest.raises(R3EdgeError, match="log-likelihoods"):
        retro.integrate([10, 20], None, "likelihood")
    with pytest.raises(R3EdgeError, match="finite log-likelihood"):
        retro.integrate([10, 20], [-1.0, None], "likelihood")
    with pytest.raises(R3EdgeError, match="2 scores but 1"):
        retro.integrate([10, 20], [-1.0], "uniform")
    with pytest.raises(R3EdgeError, match="unknown"):
        retro.integrate([10], None, "median")


def test_closest_sample_is_retros_sft_filter():
    scores = [90, None, 62, 40, 58]
    integrated = retro.integrate(scores, None, "uniform")   # 62.5
    assert integrated == 62.5 and retro.closest_sample(scores, integrated) == 2
    assert retro.closest_sample([None, 50, 70], 60.0) == 1   # a tie keeps the first
    assert retro.closest_sample([None, 10], 0.0) == 1        # a None is never picked
    with pytest.raises(R3EdgeError, match="no sample parsed"):
        retro.closest_sample([None, None], None)
