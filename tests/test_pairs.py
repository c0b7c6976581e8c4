"""Pair files (both forms), their errors, and the embedded UGC generator."""

from __future__ import annotations

import json

import pytest

from r3edge.cli import main
from r3edge.core.errors import R3EdgeError
from r3edge.core.pairs import read_queries, write_queries
from r3edge.distill.data.ugc import generate


def _write(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_candidate_list_form(sample_pairs_file):
    qs = read_queries(sample_pairs_file)
    assert [q.qid for q in qs] == ["q1", "q2"]
    assert qs[0].candidates[0].label == 2 and qs[0].candidates[0].rank == 1
    assert qs[0].auxiliary_docs(5) == qs[0].aux
    # no aux: the top-ranked candidates stand in
    assert qs[1].auxiliary_docs(2) == [c.text for c in qs[1].candidates[:2]]


def test_flat_form_groups_by_qid(tmp_path):
    p = _write(tmp_path / "flat.jsonl", [
        {"qid": "a", "query": "q a", "docid": "1", "text": "x", "label": 1},
        {"qid": "b", "query": "q b", "docid": "1", "text": "y"},
        {"qid": "a", "query": "q a", "docid": "2", "text": "z", "label": 0},
    ])
    qs = read_queries(p)
    assert [(q.qid, [c.docid for c in q.candidates]) for q in qs] == [("a", ["1", "2"]), ("b", ["1"])]


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('{"qid": "a", "query": "q", "docid": "1", "text": ', "line 2: not valid JSON"),
        ('{"qid": "a", "docid": "1", "text": "t"}', "line 2: missing field 'query'"),
        ('{"qid": "a", "query": "q", "docid": "1", "text": "t", "label": "high"}', "line 2: field 'label'"),
        ('{"qid": "a", "query": "q", "candidates": [{"docid": "1"}]}', "candidates\\[0\\]: missing field 'text'"),
        ('[1, 2]', "line 2: expected a JSON object"),
    ],
)
def test_malformed_lines_name_the_line_and_field(tmp_path, bad_line, message):
    p = _write(tmp_path / "bad.jsonl", [{"qid": "z", "query": "q", "docid": "0", "text": "ok"}, bad_line])
    with pytest.raises(R3EdgeError, match=message):
        read_queries(p)


def test_duplicate_docid_and_missing_file(tmp_path):
    p = _write(tmp_path / "dup.jsonl", [{"qid": "a", "query": "q", "candidates": [
        {"docid": "1", "text": "x"}, {"docid": "1", "text": "y"}]}])
    with pytest.raises(R3EdgeError, match="twice"):
        read_queries(p)
    with pytest.raises(R3EdgeError, match="does not exist"):
        read_queries(tmp_path / "nope.jsonl")


def test_ugc_generator_is_deterministic_graded_and_round_trips(tmp_path):
    a = generate(4, 100, seed=3, start=20)
    b = generate(4, 100, seed=3, start=20)
    assert [q.to_json() for q in a] == [q.to_json() for q in b]
    for q in a:
        assert len(q.candidates) == 100 and len(q.aux) == 3
        assert {c.label for c in q.candidates} == {0, 1, 2}
        assert len({c.docid for c in q.candidates}) == 100
    train_queries = {q.query for q in generate(20, 12)}
    assert not train_queries & {q.query for q in a}, "held-out queries must not be training queries"
    write_queries(tmp_path / "p.jsonl", a)
    assert [q.to_json() for q in read_queries(tmp_path / "p.jsonl")] == [q.to_json() for q in a]


def test_pairs_cli_writes_a_readable_file(tmp_path, capsys):
    out = tmp_path / "pairs.jsonl"
    assert main(["pairs", "--out", str(out), "--queries", "3", "--candidates", "5"]) == 0
    assert len(read_queries(out)) == 3
    assert main(["pairs", "--out", str(out), "--queries", "0"]) == 2
    assert "--queries" in capsys.readouterr().err
