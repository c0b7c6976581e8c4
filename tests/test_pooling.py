"""Pair pooling (`r3edge pairs --queries Q --corpus C`): BM25 + a reranker run + clicks, labels from qrels only.

Torch-free; real files in tmp_path. The SemEval test measures BM25 recall of the gold comments on real
forum text and skips where ../shared/data is absent.
"""

from __future__ import annotations

import io
import json

import pytest
from conftest import SHARED_DATA

from r3edge.cli import main
from r3edge.core.errors import InvalidInput, NotFound, R3EdgeError
from r3edge.core.pairs import read_queries
from r3edge.distill.data.pooling import BM25Index, Doc, Query, pool, pool_files, read_corpus, read_qrels, read_run

QUIET = io.StringIO()  # progress lines go here rather than to the test log

DOCS = [
    {"docid": "d0", "text": "Beach day at Sealine, sun and waves #weekend"},
    {"docid": "d1", "text": "You can renew the residence permit online through Metrash2 in two days",
     "title": "Residence permit renewal", "meta": {"site": "forum"}},
    {"docid": "d2", "text": "My company PRO handled my permit, no idea how it works"},
    {"docid": "d3", "text": "Which bank has the lowest fees for expats in Doha?"},
    {"docid": "d4", "text": "Commercial Bank: no minimum balance, good app for expats"},
    {"docid": "d5", "text": "lol my cat knocked over my coffee"},
    {"docid": "d6", "text": "Renewing permits takes forever at the immigration office"},
    {"docid": "d7", "text": "Best biryani in town is at the corner shop"},
]
QUERIES = [
    {"qid": "q1", "query": "how to renew residence permit online", "meta": {"task": "visa help"}},
    {"qid": "q2", "query": "bank for expats"},
    {"qid": "q3", "query": "zzz qqq"},  # matches nothing: only a run or clicks can give it candidates
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path):
    q = _jsonl(tmp_path / "queries.jsonl", QUERIES)
    c = _jsonl(tmp_path / "corpus.jsonl", DOCS)
    run = tmp_path / "run.txt"
    # q1: d5 (BM25 misses it) ranked 1 by the reranker, d1 (BM25 hit) 2, d7 beyond --run-k 2
    run.write_text("q1 Q0 d5 1 9.5 rr\nq1 Q0 d1 2 8.0 rr\nq1 Q0 d7 3 7.0 rr\nq2 Q0 d4 1 3.0 rr\n")
    qrels = tmp_path / "qrels.txt"
    # q1: d1 judged 2 (BM25 hit), d7 clicked (no other source), d0 judged 0 (joins no pool); q3 only clicks
    qrels.write_text("q1 0 d1 2\nq1 0 d7 1\nq1 0 d0 0\nq3 0 d3 1\n")
    return {"queries": q, "corpus": c, "run": run, "qrels": qrels, "dir": tmp_path}


def _docs():
    return [Doc(d["docid"], d["text"], d.get("title"), d.get("meta")) for d in DOCS]


def test_bm25_ranks_the_lexical_match_first_and_stems():
    index = BM25Index(_docs(), progress_stream=QUIET)
    hits = index.search("how to renew residence permit online", 10)
    assert hits[0][0] == 1, "the document holding every query term comes first"
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    # "renewing permits" only matches d6 through the Snowball stemmer; without it d6 shares no term
    assert 6 in {i for i, _ in hits}
    unstemmed = BM25Index(_docs(), stemmer=None, progress_stream=QUIET)
    assert 6 not in {i for i, _ in unstemmed.search("how to renew residence permit online", 10)}
    # stopwords (bm25s's "en" list: Lucene's 33 words) alone match nothing; score-0 documents are never hits
    assert index.search("it is in the", 5) == [] and index.search("zzz", 5) == []
    assert {i for i, _ in index.search("bank expats", 2)} == {3, 4} and len(index.search("bank expats", 1)) == 1


def test_bm25_ties_break_by_corpus_order():
    docs = [Doc(f"t{i}", "same words here") for i in range(5)] + [Doc("x", "other stuff")]
    index = BM25Index(docs, progress_stream=QUIET)
    assert [i for i, _ in index.search("same words", 3)] == [0, 1, 2]


def test_pool_unions_sources_dedups_labels_from_qrels_only(files):
    docs = _docs()
    queries = [Query(q["qid"], q["query"], q.get("meta")) for q in QUERIES]
    qids, docids = {q.qid for q in queries}, {d.docid for d in docs}
    run = read_run(files["run"], qids, docids)
    qrels = read_qrels(files["qrels"], qids, docids)
    index = BM25Index(docs, progress_stream=QUIET)
    out, stats = pool(queries, docs, index, bm25_k=3, run=run, run_k=2, qrels=qrels, aux_k=2, progress_stream=QUIET)
    by_qid = {q.qid: q for q in out}
    assert list(by_qid) == ["q1", "q2", "q3"]

    q1 = by_qid["q1"]
    bm25 = [docs[i].docid for i, _ in index.search(q1.query, 3)]
    assert bm25[0] == "d1"
    ids = [c.docid for c in q1.candidates]
    # BM25 hits by BM25 rank, then the run's extra (d5; d7 is past --run-k 2), then clicks (d7); d0 (grade 0) never
    assert ids == [*bm25, "d5", "d7"] and len(set(ids)) == len(ids) and "d0" not in ids
    assert [c.rank for c in q1.candidates] == list(range(1, len(ids) + 1))
    cand = {c.docid: c for c in q1.candidates}
    assert cand["d1"].meta["sources"] == ["bm25", "reranker", "click"]
    assert cand["d1"].meta["bm25_rank"] == 1 and cand["d1"].meta["bm25_score"] > 0
    assert cand["d1"].meta["reranker_rank"] == 2 and cand["d1"].meta["reranker_score"] == 8.0
    assert cand["d1"].meta["title"] == "Residence permit renewal" and cand["d1"].meta["site"] == "forum"
    assert cand["d1"].text == DOCS[1]["text"]
    assert cand["d5"].meta == {"sources": ["reranker"], "reranker_rank": 1, "reranker_score": 9.5}
    assert cand["d7"].meta == {"sources": ["click"]}
    # labels: qrels grades where judged, None (never 0) where not
    assert {d: c.label for d, c in cand.items()} == {d: {"d1": 2, "d7": 1}.get(d) for d in ids}
    # aux: the top-2 BM25 hits, title and text; query meta is kept
    assert q1.aux == [f"{DOCS[1]['title']}\n{DOCS[1]['text']}", docs[int(bm25[1][1:])].text]
    assert q1.meta == {"task": "visa help"}

    q2 = {c.docid: c.meta["sources"] for c in by_qid["q2"].candidates}
    assert q2["d4"] == ["bm25", "reranker"] and q2["d3"] == ["bm25"]
    q3 = by_qid["q3"]
    assert [(c.docid, c.label, c.meta["sources"]) for c in q3.candidates] == [("d3", 1, ["click"])]
    assert q3.aux is None, "no BM25 hit, no aux: the stages fall back to the top-ranked candidates"
    assert stats.queries == 3 and stats.labelled == 3
    assert stats.by_source["click"] == 3 and stats.by_source["reranker"] == 3


def test_query_with_an_empty_pool_is_left_out(files):
    out, stats = pool_files(files["queries"], files["corpus"], bm25_k=5, progress_stream=QUIET)
    assert [q.qid for q in out] == ["q1", "q2"] and stats.skipped_empty == ["q3"]
    assert all(c.label is None for q in out for c in q.candidates), "no qrels, no labels"


def test_cli_pools_end_to_end_deterministically(files, capsys):
    out = files["dir"] / "pooled.jsonl"
    argv = ["pairs", "--queries", str(files["queries"]), "--corpus", str(files["corpus"]), "--out", str(out),
            "--bm25-k", "3", "--run", str(files["run"]), "--run-k", "2", "--qrels", str(files["qrels"]), "--aux-k", "1"]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert "wrote 3 queries" in printed.out and "bm25 tokenize (docs): 8/8" in printed.err
    first = out.read_bytes()
    qs = read_queries(out)
    assert [q.qid for q in qs] == ["q1", "q2", "q3"]
    assert qs[0].candidates[0].docid == "d1" and qs[0].candidates[0].label == 2
    assert qs[0].aux == [f"{DOCS[1]['title']}\n{DOCS[1]['text']}"]
    assert qs[0].candidates[0].meta["sources"] == ["bm25", "reranker", "click"]
    assert main(argv) == 0 and out.read_bytes() == first, "same inputs, same bytes"


def test_cli_demo_mode_is_unchanged(tmp_path):
    out = tmp_path / "demo.jsonl"
    assert main(["pairs", "--out", str(out)]) == 0
    assert len(read_queries(out)) == 12 and all(len(q.candidates) == 12 for q in read_queries(out))


@pytest.mark.parametrize(
    "extra, drop, message",
    [
        ([], "--queries", "--corpus needs the queries"),
        ([], "--corpus", "--corpus is missing"),
        (["--run-k", "5"], None, "--run-k is given without --run"),
        (["--seed", "3"], None, "--seed only apply to the demo generator"),
        (["--bm25-k", "-1"], None, "--bm25-k is -1"),
        (["--bm25-k", "0"], None, "pools nothing"),
        (["--stemmer", "klingon"], None, "not a Snowball stemmer"),
    ],
)
def test_cli_flag_errors_name_the_flag(files, capsys, extra, drop, message):
    argv = {"--queries": str(files["queries"]), "--corpus": str(files["corpus"])}
    if drop:
        argv.pop(drop)
    args = ["pairs", "--out", str(files["dir"] / "o.jsonl"), *[x for kv in argv.items() for x in kv], *extra]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "fix:" in err


def test_cli_run_alone_asks_for_corpus(files, capsys):
    assert main(["pairs", "--out", str(files["dir"] / "o.jsonl"), "--run", str(files["run"])]) == 2
    assert "--run pools from a corpus, but --corpus is missing" in capsys.readouterr().err


@pytest.mark.parametrize(
    "which, content, message",
    [
        ("run", "q1 Q0 d1 1 2.0 rr\nq1 Q0 d2 1 2.0\n", r"run.txt line 2: expected 6 columns"),
        ("run", "q1 Q0 d1 one 2.0 rr\n", r"run.txt line 1: rank 'one' is not an integer"),
        ("run", "q1 Q0 d1 1 2.0 rr\nq9 Q0 d1 1 2.0 rr\n", r"run.txt line 2: qid 'q9' is not in the queries file"),
        ("run", "q1 Q0 nope 1 2.0 rr\n", r"run.txt line 1: docid 'nope' is not in the corpus"),
        ("run", "q1 Q0 d1 1 2.0 rr\nq1 Q0 d1 2 1.0 rr\n", r"run.txt line 2: .* already on line 1"),
        ("qrels", "q1 0 d1 high\n", r"qrels.txt line 1: grade 'high' is not an integer"),
        ("qrels", "q1 0 d1 2\nq1 0 d1 0\n", r"qrels.txt line 2: .* graded 0 here and 2 on line 1"),
        ("qrels", "\n\n", r"holds no qrels lines"),
    ],
)
def test_bad_run_and_qrels_lines_name_file_and_line(files, which, content, message):
    files[which].write_text(content)
    reader = read_run if which == "run" else read_qrels
    with pytest.raises(InvalidInput, match=message) as err:
        reader(files[which], {"q1", "q2"}, {d["docid"] for d in DOCS})
    assert err.value.field == f"--{which}"


@pytest.mark.parametrize(
    "rows, message",
    [
        ([], "holds no documents"),
        ([{"docid": "a", "text": "x"}, {"docid": "a", "text": "y"}], "line 2: docid 'a' already on line 1"),
        ([{"docid": "a"}], "line 1: missing field 'text'"),
        ([{"docid": "a", "text": 3}], "line 1: field 'text' is int"),
        ([{"docid": "a", "text": "x", "meta": [1]}], "line 1: field 'meta' must be a JSON object"),
        (["{not json"], "line 1: not valid JSON"),
    ],
)
def test_bad_corpus_names_line_and_field(tmp_path, rows, message):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    with pytest.raises(InvalidInput, match=message) as err:
        read_corpus(path, progress_stream=QUIET)
    assert err.value.field == "--corpus"


def test_bad_queries_and_missing_files_through_the_cli(files, capsys):
    _jsonl(files["queries"], [{"qid": "q1", "query": "a"}, {"qid": "q1", "query": "b"}])
    args = ["pairs", "--out", str(files["dir"] / "o.jsonl"), "--queries", str(files["queries"]), "--corpus", str(files["corpus"])]
    assert main(args) == 2
    assert "queries.jsonl line 2: qid 'q1' already on line 1" in capsys.readouterr().err
    with pytest.raises(NotFound) as err:
        pool_files(files["dir"] / "nope.jsonl", files["corpus"], progress_stream=QUIET)
    assert err.value.field == "--queries"
    _jsonl(files["queries"], [{"qid": "q1", "query": "  "}])
    with pytest.raises(R3EdgeError, match="field 'query' is empty"):
        pool_files(files["queries"], files["corpus"], progress_stream=QUIET)


# --- real forum data -------------------------------------------------------------------------------

CQA = SHARED_DATA / "semeval2016-cqa"


@pytest.mark.realdata
@pytest.mark.skipif(not (CQA / "subtaskC_dev.jsonl").is_file(), reason="../shared/data/semeval2016-cqa is absent")
def test_semeval_bm25_top100_recalls_the_good_comments(tmp_path, capsys):
    """All 5,000 subtask-C dev comments as one corpus, the 50 new questions as queries, BM25 top-100.

    Measured (bm25s 0.3.16, Snowball English, bm25s's English stopwords): 41% of the 345 gold
    (label-2) comments recalled from the comment text alone (a random top-100 of 5,000 recalls 2%);
    71% when each comment carries its thread's question (subtask B) as title, as a forum index would.
    """
    rows = [json.loads(line) for line in (CQA / "subtaskC_dev.jsonl").open(encoding="utf-8")]
    threads = {}
    if (CQA / "subtaskB_dev.jsonl").is_file():
        threads = {c["docid"]: c["text"] for line in (CQA / "subtaskB_dev.jsonl").open(encoding="utf-8")
                   for c in json.loads(line)["candidates"]}
    queries = _jsonl(tmp_path / "q.jsonl", [{"qid": r["qid"], "query": r["query"]} for r in rows])
    comments = [c for r in rows for c in r["candidates"]]
    gold = {r["qid"]: {c["docid"] for c in r["candidates"] if c["label"] == 2} for r in rows}
    n_gold = sum(map(len, gold.values()))

    def recall(corpus_rows, name):
        corpus = _jsonl(tmp_path / f"{name}.jsonl", corpus_rows)
        out = tmp_path / f"{name}.pairs.jsonl"
        assert main(["pairs", "--queries", str(queries), "--corpus", str(corpus), "--out", str(out), "--bm25-k", "100"]) == 0
        pooled = {q.qid: {c.docid for c in q.candidates} for q in read_queries(out)}
        assert all(len(p) == 100 for p in pooled.values())
        found = {qid: len(g & pooled.get(qid, set())) for qid, g in gold.items()}
        per_query = [found[q] / len(g) for q, g in gold.items() if g]
        return sum(found.values()) / n_gold, sum(r >= 0.5 for r in per_query) / len(per_query)

    micro, half = recall([{"docid": c["docid"], "text": c["text"]} for c in comments], "comments")
    with capsys.disabled():
        print(f"\nSemEval-2016 C dev, BM25 top-100 of {len(comments)}: gold recall {micro:.3f} "
              f"(comments alone), {half:.0%} of queries with >= half their gold found")
    assert micro >= 0.35
    if threads:
        micro_t, half_t = recall([{"docid": c["docid"], "text": c["text"], "title": threads[c["docid"].rsplit("_", 1)[0]]}
                                  for c in comments], "titled")
        with capsys.disabled():
            print(f"SemEval-2016 C dev, with thread titles: gold recall {micro_t:.3f}, "
                  f"{half_t:.0%} of queries with >= half their gold found")
        assert micro_t >= 0.6 and half_t >= 0.5
