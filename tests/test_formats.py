"""Data formats users already have (`r3edge.distill.data.formats`): BEIR, MS MARCO TSV, Parquet and
`datasets` sources, through the library and the real CLI (`r3edge pairs --from`, pooling, `r3edge label`).

Every source is a small real file written into tmp_path with its own library (pyarrow, `datasets`, csv);
`datasets` reads local files only. Each bad input has its own case and must name the file, the line or
row, and a fix. Torch-free except the one labelling run (slow).
"""

from __future__ import annotations

import io
import json

import pytest
from conftest import CONFIGS

from r3edge.cli import main
from r3edge.core.errors import R3EdgeError
from r3edge.core.pairs import read_queries
from r3edge.distill.data.formats import FORMATS, detect_format, read_collection, read_pairs, read_run_file

QUIET = io.StringIO()

# The pairs every Parquet / datasets source below holds: both forms in one table (Arrow gives each row the
# other form's columns as nulls), meta structs with different keys (Arrow fills the missing ones with
# nulls), an unlabelled candidate. Nulls must read as absent.
RECORDS = [
    {"qid": "q1", "query": "best bank in doha for expats?", "aux": ["QNB vs CBQ?"],
     "candidates": [{"docid": "d1", "text": "Commercial Bank: no minimum balance", "label": 2, "rank": 1,
                     "meta": {"title": "Banks", "site": "forum"}},
                    {"docid": "d2", "text": "lol my cat knocked over my coffee", "label": 0, "rank": 2, "meta": {"site": "x"}},
                    {"docid": "d3", "text": "QNB fees are high", "rank": 3}]},
    {"qid": "q2", "query": "renew residence permit", "docid": "e1", "text": "Metrash2 does it online", "label": 1},
]
FLAT = [{"qid": 7, "query": "best bank", "docid": "d1", "text": "Commercial Bank", "label": 2},  # numeric qids: read as strings
        {"qid": 8, "query": "renew permit", "docid": "e1", "text": "Metrash2, online", "label": None}]


def _table_rows(records):
    """Every row with every column (None where a record lacks it), as a DataFrame would hold them:
    pyarrow and datasets infer a table's columns from its first row."""
    keys = list(dict.fromkeys(k for r in records for k in r))
    return [{k: r.get(k) for k in keys} for r in records]


def _as_json(queries):
    return [q.to_json() for q in queries]


def _jsonl_reference(tmp_path, records):
    """What read_queries makes of the same records written as JSONL: the reference every format must equal."""
    path = tmp_path / "reference.jsonl"
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in records))
    return _as_json(read_queries(path))


# --- writers: each source written by its own library --------------------------------------------------

def _parquet(path, records):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(_table_rows(records)), path)
    return path


def _hf_dataset(path, records, split=None):
    import datasets

    ds = datasets.Dataset.from_list(_table_rows(records))
    (datasets.DatasetDict({split: ds, "other": ds.select([0])}) if split else ds).save_to_disk(str(path))
    return path


def _beir(folder, corpus=None, queries=None, qrels=None, split="test"):
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    corpus = corpus if corpus is not None else [
        {"_id": "d1", "title": "Banks in Doha", "text": "Commercial Bank: no minimum balance"},
        {"_id": "d2", "title": "", "text": "lol my cat knocked over my coffee"},
        {"_id": 3, "text": "Metrash2 renews permits online"},  # a numeric _id and no title
    ]
    queries = queries if queries is not None else [
        {"_id": "q1", "text": "best bank in doha"}, {"_id": "q0", "text": "in no qrels of this split"},
        {"_id": "q2", "text": "renew residence permit"},
    ]
    qrels = qrels if qrels is not None else "query-id\tcorpus-id\tscore\nq2\t3\t1\nq1\td1\t2\nq1\td2\t0\n"
    (folder / "corpus.jsonl").write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    (folder / "qrels" / f"{split}.tsv").write_text(qrels)
    return folder


BEIR_PAIRS = [  # qrels order; BEIR's join: (title + " " + text).strip()
    {"qid": "q2", "query": "renew residence permit", "candidates": [{"docid": "3", "text": "Metrash2 renews permits online", "label": 1}]},
    {"qid": "q1", "query": "best bank in doha", "candidates": [
        {"docid": "d1", "text": "Banks in Doha Commercial Bank: no minimum balance", "label": 2},
        {"docid": "d2", "text": "lol my cat knocked over my coffee", "label": 0}]},
]


def _msmarco(folder, collection=None, queries=None, qrels=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "collection.tsv").write_text(collection if collection is not None else
                                           "0\tCommercial Bank: no minimum balance\n1\tlol my cat knocked over my coffee\n"
                                           "2\tMetrash2 renews \"permits\" online\n")
    (folder / "queries.dev.tsv").write_text(queries if queries is not None else "100\tbest bank in doha\n200\trenew permit\n")
    # MS MARCO's own qrels are tab-separated, TREC DL's space-separated: both read
    (folder / "qrels.dev.tsv").write_text(qrels if qrels is not None else "100\t0\t0\t1\n100 0 1 0\n200\t0\t2\t1\n")
    return folder


MSMARCO_PAIRS = [
    {"qid": "100", "query": "best bank in doha", "candidates": [
        {"docid": "0", "text": "Commercial Bank: no minimum balance", "label": 1},
        {"docid": "1", "text": "lol my cat knocked over my coffee", "label": 0}]},
    {"qid": "200", "query": "renew permit", "candidates": [{"docid": "2", "text": 'Metrash2 renews "permits" online', "label": 1}]},
]


# --- the sources read as the JSONL they stand for -----------------------------------------------------

@pytest.mark.parametrize("name", ["parquet", "parquet-flat", "hf-saved", "hf-saved-split", "hf-json", "hf-csv-flat"])
def test_parquet_and_datasets_rows_read_as_the_same_records_in_jsonl(tmp_path, name):
    import csv

    flat = name.endswith("flat")
    records = FLAT if flat else RECORDS
    want = _jsonl_reference(tmp_path, records)
    split = None
    if name.startswith("parquet"):
        path = _parquet(tmp_path / "pairs.parquet", records)
    elif name == "hf-saved":
        path = _hf_dataset(tmp_path / "saved", records)
    elif name == "hf-saved-split":
        path, split = _hf_dataset(tmp_path / "saved", records, split="train"), "train"
    elif name == "hf-json":
        path = tmp_path / "pairs.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        path = tmp_path / "pairs.csv"
        with path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(FLAT[0]))
            w.writeheader()
            w.writerows(FLAT)
    fmt = "hf" if name.startswith("hf") else None  # a .json or .csv file is not told from its name: --format hf
    got = _as_json(read_pairs(path, fmt, split=split))
    assert got == want


def test_beir_folder_is_its_judged_pairs_with_beirs_title_join(tmp_path):
    assert detect_format(_beir(tmp_path / "scifact")) == "beir"
    assert _as_json(read_pairs(tmp_path / "scifact")) == BEIR_PAIRS  # split test by default, as BEIR's loader
    (tmp_path / "scifact" / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td2\t1\n")
    assert [q.qid for q in read_pairs(tmp_path / "scifact", split="dev")] == ["q0"]


def test_msmarco_folder_is_the_splits_judged_pairs(tmp_path):
    folder = _msmarco(tmp_path / "msmarco")
    assert detect_format(folder) == "msmarco"
    assert _as_json(read_pairs(folder, split="dev")) == MSMARCO_PAIRS


def test_msmarco_lines_end_at_newline_only(tmp_path):
    """Windows line ends are line ends; a carriage return inside a passage stays in it (MS MARCO is web text)."""
    folder = _msmarco(tmp_path / "ms", collection="0\tCommercial Bank\r\n1\tlol my cat\rknocked over\r\n2\tMetrash2\n")
    texts = {c.docid: c.text for q in read_pairs(folder, split="dev") for c in q.candidates}
    assert texts == {"0": "Commercial Bank", "1": "lol my cat\rknocked over", "2": "Metrash2"}


def test_cli_converts_every_format_and_tells_folders_and_parquet_from_the_path(tmp_path, capsys):
    sources = {
        "beir": (_beir(tmp_path / "beir"), [], BEIR_PAIRS),
        "msmarco": (_msmarco(tmp_path / "ms"), ["--split", "dev"], MSMARCO_PAIRS),
        "parquet": (_parquet(tmp_path / "p.parquet", RECORDS), [], _jsonl_reference(tmp_path, RECORDS)),
        "hf": (_hf_dataset(tmp_path / "hf", RECORDS), [], _jsonl_reference(tmp_path, RECORDS)),
    }
    for fmt, (path, extra, want) in sources.items():
        out = tmp_path / f"{fmt}.jsonl"
        assert main(["pairs", "--from", str(path), "--out", str(out), *extra]) == 0, capsys.readouterr().err
        assert f"({fmt}) to {out}" in capsys.readouterr().out
        assert _as_json(read_queries(out)) == want
        named = tmp_path / f"{fmt}-named.jsonl"
        assert main(["pairs", "--from", str(path), "--format", fmt, "--out", str(named), *extra]) == 0
        assert named.read_bytes() == out.read_bytes()


def test_pooling_reads_msmarco_tsv_and_its_three_column_run(tmp_path, capsys):
    folder = _msmarco(tmp_path / "ms")
    run = tmp_path / "run.dev.tsv"
    run.write_text("100\t1\t1\n100\t0\t2\n200\t2\t1\n")  # qid<TAB>pid<TAB>rank: no score
    out = tmp_path / "pooled.jsonl"
    argv = ["pairs", "--queries", str(folder / "queries.dev.tsv"), "--corpus", str(folder / "collection.tsv"),
            "--run", str(run), "--qrels", str(folder / "qrels.dev.tsv"), "--bm25-k", "0", "--aux-k", "0", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err  # --format msmarco told from collection.tsv
    qs = read_queries(out)
    assert [(c.docid, c.label, c.meta["reranker_rank"]) for c in qs[0].candidates] == [("1", 0, 1), ("0", 1, 2)]
    assert all("reranker_score" not in c.meta for q in qs for c in q.candidates), "a rank-only run gives no score"
    assert main([*argv, "--format", "msmarco", "--out", str(tmp_path / "again.jsonl")]) == 0
    assert (tmp_path / "again.jsonl").read_bytes() == out.read_bytes()


def test_pooling_reads_beir_files_and_keeps_the_queries_its_qrels_name(tmp_path, capsys):
    folder = _beir(tmp_path / "beir")
    out = tmp_path / "pooled.jsonl"
    assert main(["pairs", "--queries", str(folder / "queries.jsonl"), "--corpus", str(folder / "corpus.jsonl"),
                 "--qrels", str(folder / "qrels" / "test.tsv"), "--bm25-k", "3", "--aux-k", "1", "--out", str(out)]) == 0
    qs = read_queries(out)
    assert [q.qid for q in qs] == ["q2", "q1"], "BEIR's rule: the split's queries, in qrels order (q0 is left out)"
    d1 = next(c for c in qs[1].candidates if c.docid == "d1")
    assert d1.text == "Banks in Doha Commercial Bank: no minimum balance" and d1.label == 2
    coll = read_collection("beir", folder / "queries.jsonl", folder / "corpus.jsonl", progress_stream=QUIET)
    assert [q.qid for q in coll.queries] == ["q1", "q0", "q2"], "without qrels every query is pooled"


def test_trec_runs_still_read_through_the_same_entry(tmp_path):
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d2 2 1.5 rr\nq1 Q0 d1 1 2.5 rr\n")
    hits = read_run_file(run)["q1"]
    assert [(h.docid, h.rank, h.score) for h in hits] == [("d1", 1, 2.5), ("d2", 2, 1.5)]


# --- r3edge label reads the same sources ----------------------------------------------------------------

@pytest.mark.slow
def test_label_reads_a_beir_folder_as_the_pairs_r3edge_pairs_writes(tmp_path):
    """The tiny random UMBRELA teacher (one round, real protocol and files) labels a BEIR folder; the labels
    name the very bytes `r3edge pairs --from` writes (pairs_sha256), and carry the BEIR texts and grades."""
    from r3edge.core.fileio import file_sha256
    from r3edge.core.labels import read_labels, read_manifest

    folder = _beir(tmp_path / "beir")
    out = tmp_path / "labels"
    assert main(["label", str(folder), "--teacher", str(CONFIGS / "teacher" / "umbrela-tiny.yaml"), "--out", str(out)]) == 0
    converted = tmp_path / "beir.jsonl"
    assert main(["pairs", "--from", str(folder), "--out", str(converted)]) == 0
    manifest = read_manifest(out)
    assert manifest["complete"] and manifest["pairs_sha256"] == file_sha256(converted)
    rows = {(r["qid"], r["docid"]): (r["query"], r["text"], r["gold"]) for r in read_labels(out).to_pylist()}
    assert rows == {(q["qid"], c["docid"]): (q["query"], c["text"], c["label"]) for q in BEIR_PAIRS for c in q["candidates"]}


# --- bad input: each error names the file, the line or row, and the fix ---------------------------------

def _bad_parquet(tmp_path, rows):
    return _parquet(tmp_path / "bad.parquet", rows)


BAD_SOURCES = {
    "parquet-missing-column": (lambda t: _bad_parquet(t, [{"qid": "q", "query": "x", "docid": "d"}]), [],
                               r"bad.parquet: no column 'text' \(columns: qid, query, docid\)"),
    "parquet-null-text": (lambda t: _bad_parquet(t, [{"qid": "q", "query": "x", "docid": "d", "text": "t"},
                                                     {"qid": "q", "query": "x", "docid": "e", "text": None}]), [],
                          r"bad.parquet row 1: missing field 'text'"),
    "parquet-bad-label": (lambda t: _bad_parquet(t, [{"qid": "q", "query": "x", "docid": "d", "text": "t", "label": "high"}]),
                          [], r"bad.parquet row 0: field 'label' is 'high'"),
    "parquet-bad-candidate": (lambda t: _bad_parquet(t, [{"qid": "q", "query": "x", "candidates": [{"docid": "d"}]}]),
                              [], r"bad.parquet row 0 candidates\[0\]: missing field 'text'"),
    "not-parquet": (lambda t: (t / "bad.parquet").write_text("qid,query\n") and t / "bad.parquet", [],
                    r"bad.parquet is not a Parquet file"),
    "hf-missing-column": (lambda t: _hf_dataset(t / "hf", [{"qid": "q", "query": "x", "doc": "d", "text": "t"}]), [],
                          r"hf: no column 'docid'"),
    "hf-json-missing-column": (lambda t: (t / "p.jsonl").write_text('{"qid": "q", "query": "x", "passage": "t"}\n')
                               and t / "p.jsonl", ["--format", "hf"], r"p.jsonl \[train\]: no column 'docid', 'text'"),
    "hf-which-split": (lambda t: _hf_dataset(t / "hf", RECORDS, split="train"), [], r"hf holds splits train, other"),
    "hf-no-such-split": (lambda t: _hf_dataset(t / "hf", RECORDS, split="train"), ["--split", "dev"],
                         r"hf has no split 'dev'"),
    "hf-split-of-a-dataset": (lambda t: _hf_dataset(t / "hf", RECORDS), ["--split", "train"], r"one dataset without splits"),
    "hf-not-a-saved-dataset": (lambda t: (t / "hf").mkdir() or t / "hf", ["--format", "hf"],
                               r"hf is not a dataset saved with save_to_disk"),
    "hf-no-builder": (lambda t: (t / "p.xml").write_text("<a/>") and t / "p.xml", ["--format", "hf"],
                      r"datasets has no local builder for .xml"),
    "beir-no-header": (lambda t: _beir(t / "beir", qrels="q1\td1\t2\n"), [],
                       r"qrels/test.tsv line 1: expected the header 'query-id\\tcorpus-id\\tscore'"),
    "beir-bad-score": (lambda t: _beir(t / "beir", qrels="query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\thigh\n"), [],
                       r"qrels/test.tsv line 3: score 'high' is not an integer"),
    "beir-two-columns": (lambda t: _beir(t / "beir", qrels="query-id\tcorpus-id\tscore\nq1 d1 2\n"), [],
                         r"qrels/test.tsv line 2: expected 3 tab-separated columns"),
    "beir-two-scores": (lambda t: _beir(t / "beir", qrels="query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td1\t0\n"), [],
                        r"qrels/test.tsv line 3: .* scored 0 here and 2 on line 2"),
    "beir-doc-not-in-corpus": (lambda t: _beir(t / "beir", qrels="query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\tzz\t1\n"), [],
                               r"qrels/test.tsv line 3: document 'zz' is not in the corpus"),
    "beir-query-not-in-queries": (lambda t: _beir(t / "beir", qrels="query-id\tcorpus-id\tscore\nq9\td1\t2\n"), [],
                                  r"qrels/test.tsv line 2: query 'q9' is not in the queries file"),
    "beir-corpus-no-text": (lambda t: _beir(t / "beir", corpus=['{"_id": "d1", "text": "x"}', '{"_id": "d2", "title": "t"}']),
                            [], r"corpus.jsonl line 2: field 'text' is missing, expected a string"),
    "beir-corpus-no-id": (lambda t: _beir(t / "beir", corpus=['{"id": "d1", "text": "x"}']), [],
                          r"corpus.jsonl line 1: field '_id' is missing"),
    "beir-corpus-twice": (lambda t: _beir(t / "beir", corpus=['{"_id": "d1", "text": "x"}', '{"_id": "d1", "text": "y"}']),
                          [], r"corpus.jsonl line 2: _id 'd1' already on line 1"),
    "beir-no-such-split": (lambda t: _beir(t / "beir"), ["--split", "dev"], r"qrels/dev.tsv does not exist"),
    "msmarco-no-split": (lambda t: _msmarco(t / "ms"), [], r"which split\? --split is missing"),
    "msmarco-three-columns": (lambda t: _msmarco(t / "ms", collection="0\ta\n1\tb\textra\n"), ["--split", "dev"],
                              r"collection.tsv line 2: expected 2 tab-separated columns 'pid<TAB>passage', found 3"),
    "msmarco-query-twice": (lambda t: _msmarco(t / "ms", queries="100\ta\n100\tb\n"), ["--split", "dev"],
                            r"queries.dev.tsv line 2: qid '100' already on line 1"),
    "msmarco-qrels-columns": (lambda t: _msmarco(t / "ms", qrels="100\t0\t1\n"), ["--split", "dev"],
                              r"qrels.dev.tsv line 1: expected 4 columns"),
    "msmarco-doc-not-in-collection": (lambda t: _msmarco(t / "ms", qrels="100\t0\t0\t1\n100\t0\t9\t1\n"), ["--split", "dev"],
                                      r"qrels.dev.tsv line 2: document '9' is not in the corpus"),
    "folder-of-nothing": (lambda t: (t / "empty").mkdir() or t / "empty", [], r"empty is no known dataset folder"),
    "folder-of-two-formats": (lambda t: (_beir(t / "both"), _msmarco(t / "both"))[0], [], r"both looks like beir and msmarco"),
    "tsv-file": (lambda t: (t / "x.tsv").write_text("1\ta\n") and t / "x.tsv", [], r"x.tsv: a .tsv file alone"),
    "split-of-jsonl": (lambda t: (t / "p.jsonl").write_text(json.dumps(RECORDS[0]) + "\n") and t / "p.jsonl",
                       ["--split", "dev"], r"a jsonl file has no splits"),
}


@pytest.mark.parametrize("case", list(BAD_SOURCES))
def test_bad_source_is_named_with_its_line_or_row_and_a_fix(tmp_path, capsys, case):
    make, extra, message = BAD_SOURCES[case]
    path = make(tmp_path)
    assert main(["pairs", "--from", str(path), "--out", str(tmp_path / "o.jsonl"), *extra]) == 2
    err = capsys.readouterr().err
    assert "  fix: " in err and "Traceback" not in err
    with pytest.raises(R3EdgeError, match=message):
        fmt = next((extra[i + 1] for i, a in enumerate(extra) if a == "--format"), None)
        split = next((extra[i + 1] for i, a in enumerate(extra) if a == "--split"), None)
        read_pairs(path, fmt, split=split)
    assert not (tmp_path / "o.jsonl").exists(), "nothing is written from a bad source"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--from", "X", "--corpus", "c.jsonl"], "--from converts a pair source; --corpus belong to pooling"),
        (["--from", "X", "--seed", "1"], "--seed belong to pooling or the demo"),
        (["--split", "dev"], "--split picks a split of a --from source"),
        (["--format", "beir"], "--format names the format of --from or of pooling's files"),
        (["--queries", "q.jsonl", "--corpus", "c.jsonl", "--format", "parquet"], "--format parquet holds pairs, not queries"),
    ],
)
def test_cli_flag_errors_name_the_flag(tmp_path, capsys, argv, message):
    for name in ("q.jsonl", "c.jsonl"):
        (tmp_path / name).write_text('{"qid": "q", "query": "x", "docid": "d", "text": "t"}\n')
    argv = [str(tmp_path / a) if a in ("q.jsonl", "c.jsonl", "X") else a for a in argv]
    assert main(["pairs", "--out", str(tmp_path / "o.jsonl"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "  fix: " in err


@pytest.mark.parametrize(
    "content, message",
    [
        ("100\t1\t1\n100 Q0 2 2 1.0 rr\n", r"run.tsv line 2: expected 3 columns 'qid pid rank'"),
        ("100\t1\tfirst\n", r"run.tsv line 1: rank 'first' is not an integer"),
        ("100\t1\t1\n100\t1\t2\n", r"run.tsv line 2: qid '100' docid '1' already on line 1"),
        ("100\t9\t1\n", r"run.tsv line 1: docid '9' is not in the corpus"),
        ("100 1 1 2\n", r"run.tsv: the first line has 4 columns"),
    ],
)
def test_bad_run_lines_name_file_and_line(tmp_path, content, message):
    folder = _msmarco(tmp_path / "ms")
    (tmp_path / "run.tsv").write_text(content)
    with pytest.raises(R3EdgeError, match=message) as err:
        read_collection("msmarco", folder / "queries.dev.tsv", folder / "collection.tsv", run_path=tmp_path / "run.tsv")
    assert err.value.field == "--run"


def test_beir_pooling_checks_qrels_against_the_corpus(tmp_path):
    folder = _beir(tmp_path / "beir", qrels="query-id\tcorpus-id\tscore\nq1\tnope\t1\n")
    with pytest.raises(R3EdgeError, match=r"test.tsv line 2: corpus-id 'nope' is not in the corpus") as err:
        read_collection("beir", folder / "queries.jsonl", folder / "corpus.jsonl", qrels_path=folder / "qrels" / "test.tsv",
                        progress_stream=QUIET)
    assert err.value.field == "--qrels"


def test_a_missing_library_names_its_extra(tmp_path, monkeypatch):
    """Parquet needs pyarrow (the `pairs` extra), a datasets source `datasets` (the `train` extra)."""
    import sys

    from r3edge.core.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # an import of it now fails, as where it is absent
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingExtraError, match="pyarrow.parquet") as err:
        read_pairs(tmp_path / "p.parquet", "parquet")
    assert "r3edge[pairs]" in err.value.fix
    with pytest.raises(MissingExtraError, match="'datasets'") as err:
        read_pairs(tmp_path / "p.json", "hf")
    assert "r3edge[train]" in err.value.fix


def test_the_format_list_has_one_home():
    from r3edge.cli import build_parser

    for command in ("pairs", "label"):
        sub = build_parser()._subparsers._group_actions[0].choices[command]
        (fmt,) = [a for a in sub._actions if a.dest == "format"]
        assert list(fmt.choices) == list(FORMATS)
