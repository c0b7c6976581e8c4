"""`r3edge pairs --semeval DIR`: BM25 pools of SemEval-2016 CQA's train questions over its train comments (issue 47's
100k-pair set), and the invariant that dev never enters them.

Small SemEval-shaped files in tmp_path test the logic everywhere; the real-data test (the issue's command, ~6 s)
skips where ../shared/data is absent.
"""

from __future__ import annotations

import json

import pytest
from conftest import SHARED_DATA

from r3edge.cli import main
from r3edge.core.errors import InvalidInput
from r3edge.core.pairs import read_queries
from r3edge.distill.data.datasets import check_not_dev, semeval_dev_split, semeval_train_collection
from r3edge.distill.data.pooling import Doc, Query

#: a thread the forum's search returned for a train and for a dev question, under other ids
SHARED_THREAD = "Car rental monthly\nWhich company rents a car by the month in Doha?"


def _thread(qid: str, question: str, comments: list[str]) -> tuple[dict, dict, list[dict]]:
    """Subtask A's line, subtask B's candidate and the comments (C's candidates) of one thread."""
    cands = [{"docid": f"{qid}_C{i}", "text": t, "label": i % 3, "rank": i} for i, t in enumerate(comments, start=1)]
    return ({"qid": qid, "query": question, "candidates": cands},
            {"docid": qid, "text": question, "label": 0, "rank": int(qid.rsplit("R", 1)[1])}, cands)


def _split(folder, split: str, questions: dict[str, tuple[str, list[tuple[str, list[str]]]]]) -> None:
    """Write subtask A, B and C files of one split: new question -> its related threads -> their comments."""
    suffix = "train2" if split == "train" else "dev"
    rows = {"A": [], "B": [], "C": []}
    for qid, (query, threads) in questions.items():
        b, c = [], []
        for r, (question, comments) in enumerate(threads, start=1):
            a_row, b_cand, cands = _thread(f"{qid}_R{r}", question, comments)
            rows["A"].append(a_row)
            b.append(b_cand)
            c += [dict(x, rank=len(c) + i) for i, x in enumerate(cands, start=1)]
        rows["B"].append({"qid": qid, "query": query, "candidates": b})
        rows["C"].append({"qid": qid, "query": query, "candidates": c})
    for subtask, lines in rows.items():
        (folder / f"subtask{subtask}_{suffix}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture
def semeval(tmp_path):
    train = {
        "Q1": ("Good bank\nWhich bank is good for expats in Doha?", [
            ("Bank account\nHow do I open a bank account as an expat?", ["Commercial bank is good for expats",
                                                                          "Any bank; bring your residence permit",
                                                                          "thanks"]),
            (SHARED_THREAD, ["Oasis rents a car for 1500 a month", "thanks"]),
        ]),
        "Q2": ("Residence permit\nHow long does the residence permit renewal take?", [
            ("Permit renewal\nRenewal of the residence permit online?", ["Metrash2 renews the permit online",
                                                                         "Two days at the immigration office"]),
            # the same forum thread returned for a second train question, under other ids
            ("Bank account\nHow do I open a bank account as an expat?", ["Commercial bank is good for expats",
                                                                          "Any bank; bring your residence permit",
                                                                          "thanks"]),
        ]),
    }
    dev = {"Q9": ("Rent a car\nWhere can I rent a car monthly?", [(SHARED_THREAD, ["Oasis rents a car for 1500 a month",
                                                                                   "Try Al Muftah rent a car"])])}
    _split(tmp_path, "train", train)
    _split(tmp_path, "dev", dev)
    return tmp_path


def test_semeval_pools_train_questions_over_train_comments_without_dev(semeval, tmp_path):
    out = tmp_path / "pairs.jsonl"
    assert main(["pairs", "--semeval", str(semeval), "--bm25-k", "3", "--aux-k", "1", "--out", str(out)]) == 0
    queries = read_queries(out)
    # A train's threads and C train's two questions; the thread also returned for dev and the repeated one left out
    assert sorted(q.qid for q in queries) == ["Q1", "Q1_R1", "Q2", "Q2_R1"]
    assert {q.qid: q.meta["semeval"] for q in queries} == {"Q1": "C", "Q1_R1": "A", "Q2": "C", "Q2_R1": "A"}
    dev = semeval_dev_split(semeval)
    for q in queries:
        assert [c.rank for c in q.candidates] == list(range(1, len(q.candidates) + 1))
        assert [c.meta["bm25_rank"] for c in q.candidates] == [c.rank for c in q.candidates]
        assert len({c.docid for c in q.candidates}) == len({c.text for c in q.candidates}) == len(q.candidates)
        for c in q.candidates:
            assert c.docid.rsplit("_", 1)[0] not in {"Q1_R2"} and c.text not in dev.comments
            assert c.label is None  # the teacher labels them
    texts = {c.text for q in queries for c in q.candidates}
    # comments are titled with their thread's subject line, as the SemEval judges saw them
    assert "Bank account\nCommercial bank is good for expats" in texts
    # one "thanks" in thread Q1_R1 kept; the shared thread's comments (one also in dev) left out
    assert not any("Oasis" in t for t in texts)


def test_semeval_counts_what_it_leaves_out(semeval):
    pool = semeval_train_collection(semeval)
    assert pool.left_out == {"dev_questions": 1, "dev_thread_comments": 2, "dev_comments": 0,
                             "repeated_questions": 1, "repeated_comments": 3}
    assert len(pool.docs) == 5 and len(pool.queries) == 4


def test_a_dev_id_in_the_train_files_is_an_error(semeval, capsys):
    rows = [json.loads(x) for x in (semeval / "subtaskA_train2.jsonl").read_text().splitlines()]
    rows[0]["candidates"][1]["docid"] = "Q9_R1_C2"  # a dev comment's id inside a train thread
    (semeval / "subtaskA_train2.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    assert main(["pairs", "--semeval", str(semeval), "--out", str(semeval / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "comment 'Q9_R1_C2'" in err and "Q9, Q9_R1, Q9_R1_C2 is a dev id" in err
    assert not (semeval / "o.jsonl").exists()


def test_check_not_dev_refuses_dev_texts_and_ids(semeval):
    dev = semeval_dev_split(semeval)
    check_not_dev([Query("Q1", "Good bank\nWhich bank?")], [Doc("Q1_R1_C1", "Bank account\nthanks")], dev, semeval)
    with pytest.raises(InvalidInput, match="query 'Q5'.*its text is a dev question's"):
        check_not_dev([Query("Q5", "Rent a car\nWhere can I rent a car monthly?")], [], dev, semeval)
    with pytest.raises(InvalidInput, match="comment 'Q1_R9_C1'.*its text is a dev comment's"):
        check_not_dev([], [Doc("Q1_R9_C1", "Car rental monthly\nTry Al Muftah rent a car")], dev, semeval)
    with pytest.raises(InvalidInput, match="query 'Q9_R1'.*Q9, Q9_R1 is a dev id"):
        check_not_dev([Query("Q9_R1", "something else")], [], dev, semeval)


def test_semeval_needs_its_dev_files_and_refuses_other_inputs(semeval, capsys):
    assert main(["pairs", "--semeval", str(semeval), "--corpus", "c.jsonl", "--out", str(semeval / "o.jsonl")]) == 2
    assert "--corpus name other inputs" in capsys.readouterr().err
    (semeval / "subtaskB_dev.jsonl").unlink()
    assert main(["pairs", "--semeval", str(semeval), "--out", str(semeval / "o.jsonl")]) != 0
    assert "subtaskB_dev.jsonl does not exist" in capsys.readouterr().err


CQA = SHARED_DATA / "semeval2016-cqa"


@pytest.mark.realdata
@pytest.mark.skipif(not (CQA / "subtaskC_dev.jsonl").is_file(), reason="../shared/data/semeval2016-cqa is absent")
def test_the_100k_command_on_semeval(tmp_path, capsys):
    """docs/distillation.md's command: 413 train questions x BM25 depth 243 over 4,933 train comments >= 100,000
    pairs (depth 242 gives 99,945), with no dev id or text."""
    out = tmp_path / "pairs.jsonl"
    assert main(["pairs", "--semeval", str(CQA), "--bm25-k", "243", "--out", str(out)]) == 0
    queries = read_queries(out)
    n = sum(len(q.candidates) for q in queries)
    assert len(queries) == 413 and n >= 100_000
    dev = semeval_dev_split(CQA)
    check_not_dev([Query(q.qid, q.query) for q in queries],
                  [Doc(c.docid, c.text) for q in queries for c in q.candidates], dev, CQA)
    assert len({(q.qid, c.docid) for q in queries for c in q.candidates}) == n
    assert f"wrote 413 queries, {n} pairs" in capsys.readouterr().out
