"""The R³A parser and repair: I_format must reject every malformed reply and accept the well-formed one."""

from __future__ import annotations

import pytest

from r3edge.core.errors import R3EdgeError
from r3edge.distill.label.judges import PairContext, get_judge, is_verbatim
from r3edge.distill.label.judges.r3a import JUDGE

DOC_TEXT = "Renew your RP online via Metrash2:   upload passport,\npay 500 QR, done in 2 days ✅"
DOC = PairContext("how to renew residence permit qatar", DOC_TEXT)
GOOD = "<think>It explains the steps.</think><extract>upload passport, pay 500 QR</extract><score>2</score>"


def test_well_formed_reply_passes():
    a = JUDGE.parse_assessment(GOOD, DOC)
    assert a.format_ok and a.score == 2 and a.extract == "upload passport, pay 500 QR"
    assert a.extract_is_verbatim and a.problems == ()


def test_whitespace_between_tags_and_none_extract_are_fine():
    a = JUDGE.parse_assessment("\n<think>off topic</think>\n<extract> none </extract>\n<score> 0 </score>\n", DOC)
    assert a.format_ok and a.score == 0 and a.extract == "none" and not a.extract_is_verbatim


@pytest.mark.parametrize(
    "text, problem",
    [
        ("<think>x</think><score>2</score>", "missing <extract>"),
        ("<extract>none</extract><score>1</score>", "missing <think>"),
        ("<think>x</think><extract>none</extract>", "missing <score>"),
        ("<extract>none</extract><think>x</think><score>1</score>", "out of order"),
        ("<think>x</think><extract>none</extract><score>3</score>", "not one of 0, 1, 2"),
        ("<think>x</think><extract>none</extract><score>two</score>", "not one of 0, 1, 2"),
        ("<think>x</think><extract>pay 600 QR</extract><score>2</score>", "not copied verbatim"),
        ("<think>x</think><extract></extract><score>2</score>", "not copied verbatim"),
        ("<think>x<think>y</think><extract>none</extract><score>1</score>", "opened 2"),
        ("<think>x</think><extract>none</extract><score>1</score> because", "text outside"),
        ("Sure! <think>x</think><extract>none</extract><score>1</score>", "text outside"),
        ("<think>x</think><extract>none<score>1</score>", "<extract> opened 1 and closed 0"),
    ],
)
def test_malformed_replies_fail_with_a_reason(text, problem):
    a = JUDGE.parse_assessment(text, DOC)
    assert not a.format_ok
    assert any(problem in p for p in a.problems), a.problems


def test_score_is_parsed_even_when_the_format_fails():
    a = JUDGE.parse_assessment("<think>x</think><score>1</score>", DOC)
    assert a.score == 1 and not a.format_ok and a.extract is None


def test_verbatim_ignores_whitespace_but_not_words():
    assert is_verbatim("online via Metrash2: upload passport, pay 500 QR", DOC_TEXT)
    assert not is_verbatim("online via Metrash2 upload passport", DOC_TEXT)  # punctuation must be kept
    assert not is_verbatim("   ", DOC_TEXT)


def test_intent_parser():
    ok = JUDGE.parse_intent("<think>expat in Doha</think><intent>Find a bank with low fees.</intent>")
    assert ok.format_ok and ok.intent == "Find a bank with low fees."
    assert not JUDGE.parse_intent("<intent>x</intent><think>y</think>").format_ok
    bad = JUDGE.parse_intent("<think>cut off reasoning")
    assert not bad.format_ok and bad.intent is None
    assert not JUDGE.parse_intent("<think>y</think><intent> </intent>").format_ok


@pytest.mark.parametrize(
    "generation, expected, repaired",
    [
        ("<think>a</think><extract>b</extract><score>2</score>", "<think>a</think><extract>b</extract><score>", False),
        ("<think>cut off", "<think>cut off</think><extract>none</extract><score>", True),
        ("<think>a</think><extract>half", "<think>a</think><extract>half</extract><score>", True),
        ("<think>a</think><extract>b</extract><sco", "<think>a</think><extract>b</extract><score>", True),
        ("no tags at all", "no tags at all<extract>none</extract><score>", True),
        ("", "<extract>none</extract><score>", True),
    ],
)
def test_repair_always_ends_at_the_score_position(generation, expected, repaired):
    assert JUDGE.repair(generation) == (expected, repaired)


def test_messages_make_round_two_a_continuation_of_round_one():
    r1 = JUDGE.intent_messages("best bank in doha?", ["QNB vs CBQ", "bank 🏦"])
    assert [m["role"] for m in r1] == ["system", "user"]
    assert "best bank in doha?" in r1[1]["content"] and "[2] bank 🏦" in r1[1]["content"]
    assert "no posts available" in JUDGE.intent_messages("q", [])[1]["content"]
    history = [*r1, {"role": "assistant", "content": "<think>t</think><intent>i</intent>"}]
    r2 = JUDGE.assess_messages(PairContext("best bank in doha?", "CBQ has no fees"), history)
    assert r2[:3] == history and r2[3]["role"] == "user" and "CBQ has no fees" in r2[3]["content"]


def test_registry_and_identity():
    assert get_judge("r3a") is JUDGE
    assert len(JUDGE.prompt_hash) == 64 and JUDGE.native_scale == "0..2"
    assert JUDGE.native_values == (0, 1, 2) and JUDGE.score_tokens == ("0", "1", "2") and JUDGE.two_round
    with pytest.raises(R3EdgeError, match="unknown judge"):
        get_judge("nope")
