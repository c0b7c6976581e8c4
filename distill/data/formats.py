"""Data formats users already have, read into the pipeline's records: the one reader layer of
`r3edge pairs` and `r3edge label`.

:data:`FORMATS` is the one list of formats (the CLI's ``--format`` choices and help come from it).
Two things are read:

* **pair sources** (:func:`read_pairs`; `r3edge label SOURCE` and `r3edge pairs --from SOURCE`):

  - ``jsonl``: the pairs JSONL of contract 1 (``r3edge.core.pairs.read_queries``);
  - ``parquet``: a Parquet file whose columns are the JSONL fields (either form, read with pyarrow);
  - ``hf``: a ``datasets`` dataset saved with ``save_to_disk``, or one local ``.json``/``.jsonl``/
    ``.csv``/``.parquet`` data file loaded with ``datasets.load_dataset(builder, data_files=...)``
    (never the hub); rows carry the JSONL fields;
  - ``beir``: a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/SPLIT.tsv``): every pair the
    split's qrels judge, grade as label, in qrels order;
  - ``msmarco``: an MS MARCO folder (``collection.tsv``, ``queries.SPLIT.tsv``, ``qrels.SPLIT.tsv``):
    likewise every judged pair of the split.

  Parquet and ``datasets`` rows go through the JSONL parser (``r3edge.core.pairs.parse_records``), so
  the fields, forms and checks are the same; Arrow cannot tell an absent struct field from a null one,
  so a null value counts as absent.
* **pooling inputs** (:func:`read_collection`; `r3edge pairs --queries Q --corpus C`): queries and a
  corpus as r3edge JSONL, BEIR's ``queries.jsonl``/``corpus.jsonl`` or MS MARCO's ``queries.*.tsv``/
  ``collection.tsv``; qrels as TREC (``qid 0 docid rel``, tab or space separated, as MS MARCO's) or
  BEIR's TSV; a run as TREC's six columns or MS MARCO's ``qid<TAB>pid<TAB>rank``.

BEIR documents are read as BEIR reads them: ``(title + " " + text).strip()`` is the document's text
(``beir/reranking/rerank.py`` and the models of ``beir/retrieval/models``, e.g. ``sentence_bert.py``
with its default separator " ", join a title and its text so), and a split's queries are those its
qrels name, in qrels order (``GenericDataLoader.load``). Ids that are JSON numbers are read as their
strings.

Large sources stream: for a pair source only the queries and documents its pairs name are kept.
Every bad line or row is an error naming the file, the line (rows count from 0, as pyarrow and
``datasets`` index them) and the expected fields; nothing is skipped.
"""

from __future__ import annotations

import csv
import json
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from r3edge.core.errors import InvalidInput, NotFound, require
from r3edge.core.pairs import Candidate, QueryCandidates, parse_records, read_queries
from r3edge.distill.data.pooling import (
    Doc,
    Query,
    RunHit,
    check_ids,
    check_once,
    column_number,
    jsonl_objects,
    read_corpus,
    read_qrels,
    read_query_file,
    read_run,
    whitespace_lines,
)

#: every format, with what its path is (``--format`` choices and help)
FORMATS: dict[str, str] = {
    "jsonl": "r3edge pairs JSONL (for pooling: queries and corpus JSONL)",
    "parquet": "a Parquet file whose columns are the pairs JSONL fields",
    "hf": "a `datasets` save_to_disk folder, or one .json/.jsonl/.csv/.parquet data file",
    "beir": "a BEIR folder: corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv (for pooling: those files)",
    "msmarco": "an MS MARCO folder: collection.tsv, queries.SPLIT.tsv, qrels.SPLIT.tsv (for pooling: those files)",
}
#: the formats of pooling's --queries/--corpus files (the others hold pairs, not a corpus)
POOL_FORMATS = ("jsonl", "beir", "msmarco")
#: BEIR's own default split (GenericDataLoader.load)
BEIR_SPLIT = "test"
BEIR_QRELS_HEADER = ["query-id", "corpus-id", "score"]
HF_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
PAIR_FIELDS = ("qid, query and either candidates (a list of {docid, text, label?, rank?, meta?}) "
               "or docid, text (label?, aux?, meta?, query_meta? beside them)")
FORMAT_FLAG = "--format"


def add_format_arguments(parser, default=None) -> None:
    """``--format`` and ``--split``, the same for every command that reads these formats."""
    parser.add_argument("--format", choices=list(FORMATS), default=default,
                        help="input format (default: told from the path): "
                             + "; ".join(f"{k}: {v}" for k, v in FORMATS.items()))
    parser.add_argument("--split", default=default, metavar="NAME",
                        help=f"split of a beir (qrels/NAME.tsv, default {BEIR_SPLIT}), msmarco (queries.NAME.tsv and "
                             "qrels.NAME.tsv) or hf (a DatasetDict's split; default: its only one) source")


# --- detection -------------------------------------------------------------------------------------

def _markers(folder: Path) -> list[str]:
    found = []
    if (folder / "corpus.jsonl").is_file() and (folder / "queries.jsonl").is_file() and (folder / "qrels").is_dir():
        found.append("beir")
    if any((folder / f).is_file() for f in ("dataset_info.json", "dataset_dict.json", "state.json")):
        found.append("hf")
    if (folder / "collection.tsv").is_file():
        found.append("msmarco")
    return found


def detect_format(path: str | Path) -> str:
    """The format of a pair source, told from the path alone where only one format fits; else an error
    asking for ``--format``."""
    path = Path(path)
    if not path.exists():
        raise NotFound(f"pairs file {path} does not exist",
                       "pass a pairs file or folder (`r3edge pairs --help` makes one)", field="pairs")
    if path.is_dir():
        found = _markers(path)
        if len(found) == 1:
            return found[0]
        what = f"looks like {' and '.join(found)}" if found else "is no known dataset folder"
        raise InvalidInput(f"{path} {what}",
                           "pass --format: beir (corpus.jsonl, queries.jsonl, qrels/), hf (a save_to_disk folder) or "
                           "msmarco (collection.tsv, queries.SPLIT.tsv, qrels.SPLIT.tsv)", field=FORMAT_FLAG)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix in (".tsv", ".csv"):
        raise InvalidInput(f"{path}: a {suffix} file alone is no pair source r3edge can tell",
                           "pass --format hf for a datasets CSV file, or the MS MARCO folder with --format msmarco",
                           field=FORMAT_FLAG)
    return "jsonl"


def detect_pool_format(corpus: str | Path) -> str:
    """The format of pooling's --corpus file: ``.tsv`` is MS MARCO's collection; a JSONL corpus whose
    first record has ``_id`` and no ``docid`` is BEIR's, else r3edge's."""
    corpus = Path(corpus)
    if corpus.suffix.lower() == ".tsv":
        return "msmarco"
    if corpus.is_file():
        with corpus.open("rb") as fh:
            for raw in fh:
                if raw.strip():
                    try:
                        first = json.loads(raw)
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        return "jsonl"  # its reader names the line
                    if isinstance(first, dict) and "_id" in first and "docid" not in first:
                        return "beir"
                    break
    return "jsonl"


# --- pair sources ----------------------------------------------------------------------------------

def read_pairs(source: str | Path, fmt: str | None = None, *, split: str | None = None) -> list[QueryCandidates]:
    """Candidate lists from any pair source (see the module doc); ``fmt`` None tells it from the path."""
    source = Path(source)
    fmt = fmt or detect_format(source)
    if fmt not in FORMATS:
        raise InvalidInput(f"--format {fmt!r} is not a format", f"use one of {', '.join(FORMATS)}", field=FORMAT_FLAG)
    if split is not None and fmt in ("jsonl", "parquet"):
        raise InvalidInput(f"--split {split} is given, but a {fmt} file has no splits", "drop --split", field="--split")
    if fmt == "jsonl":
        return read_queries(source)
    if fmt == "parquet":
        return _parquet_pairs(source)
    if fmt == "hf":
        return _hf_pairs(source, split)
    folder = _folder(source, fmt)
    if fmt == "beir":
        split = split or BEIR_SPLIT
        qrels_path = _split_file(folder / "qrels" / f"{split}.tsv", folder / "qrels", "*.tsv", fmt)
        qrels, lines = read_beir_qrels(qrels_path)
        queries = read_beir_queries(folder / "queries.jsonl", keep=set(qrels))
        texts = read_beir_corpus(folder / "corpus.jsonl", keep={d for g in qrels.values() for d in g})
    else:
        if split is None:
            raise InvalidInput(f"{folder}: which split? --split is missing", f"pass --split, one of {_splits(folder)}",
                               field="--split")
        qrels_path = _split_file(folder / f"qrels.{split}.tsv", folder, "qrels.*.tsv", fmt)
        qrels = read_qrels(qrels_path, flag="qrels")
        lines = None
        queries = read_tsv(_split_file(folder / f"queries.{split}.tsv", folder, "queries.*.tsv", fmt),
                           ("qid", "query"), keep=set(qrels))
        texts = read_tsv(folder / "collection.tsv", ("pid", "passage"), keep={d for g in qrels.values() for d in g})
    return _judged_pairs(qrels_path, qrels, lines, queries, texts)


@contextmanager
def pairs_file(source: str | Path, fmt: str | None = None, split: str | None = None) -> Iterator[Path]:
    """A pairs JSONL path for `r3edge label`: a JSONL source as it is (its bytes are the labels' identity,
    ``pairs_sha256``), any other source written as candidate-list JSONL into a temporary folder (removed
    afterwards), the very bytes ``r3edge pairs --from SOURCE`` writes; so the same source keeps the same
    identity across runs and resumes."""
    from r3edge.core.pairs import write_queries

    source = Path(source)
    fmt = fmt or detect_format(source)
    if fmt == "jsonl" and split is None:
        yield source
        return
    queries = read_pairs(source, fmt, split=split)
    with tempfile.TemporaryDirectory(prefix="r3edge-pairs-") as tmp:
        path = Path(tmp) / f"{source.name}{'.' + split if split else ''}.jsonl"
        write_queries(path, queries)
        yield path


def _folder(path: Path, fmt: str) -> Path:
    if not path.is_dir():
        raise NotFound(f"{path} is not a folder; a {fmt} source is one", f"pass the {fmt} dataset folder", field="pairs")
    return path


def _splits(folder: Path, pattern: str = "queries.*.tsv") -> str:
    names = sorted(p.name.split(".", 1)[1].removesuffix(".tsv") if "." in p.stem else p.stem for p in folder.glob(pattern))
    return ", ".join(names) or "(none found)"


def _split_file(path: Path, folder: Path, pattern: str, fmt: str) -> Path:
    if not path.is_file():
        have = _splits(folder, pattern)
        raise NotFound(f"{path} does not exist", f"pass --split with one of the {fmt} splits there: {have}", field="--split")
    return path


def _judged_pairs(qrels_path: Path, qrels: dict[str, dict[str, int]], lines: dict | None,
                  queries: dict[str, str], texts: dict[str, str]) -> list[QueryCandidates]:
    """Every judged (query, document) pair, grade as label, in qrels order; a qid or docid the queries
    or the corpus lack is an error naming its qrels line."""
    out = []
    for qid, grades in qrels.items():
        if qid not in queries:
            raise InvalidInput(f"{qrels_path} line {_line_of(qrels_path, lines, qid)}: query {qid!r} is not in the queries file",
                               "add the query, or drop its qrels lines")
        missing = [d for d in grades if d not in texts]
        if missing:
            raise InvalidInput(f"{qrels_path} line {_line_of(qrels_path, lines, qid, missing[0])}: document {missing[0]!r} "
                               "is not in the corpus", "add the document to the corpus, or drop that qrels line")
        out.append(QueryCandidates(qid, queries[qid], [Candidate(d, texts[d], g) for d, g in grades.items()]))
    if not out:
        raise InvalidInput(f"{qrels_path} judges no pair", "pass a split whose qrels hold lines")
    return out


def _line_of(path: Path, lines: dict | None, qid: str, docid: str | None = None) -> int | str:
    """The first qrels line naming ``qid`` (and ``docid``): recorded by the BEIR reader, looked up
    again in a TREC qrels file (only on this error path)."""
    if lines is not None:
        return lines[(qid, docid)] if docid is not None else lines[qid]
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            parts = line.split()
            if len(parts) == 4 and parts[0] == qid and (docid is None or parts[2] == docid):
                return lineno
    return "?"


# --- Parquet and datasets rows ---------------------------------------------------------------------

def _no_nulls(value):
    """An Arrow row as the JSON record it stands for: null struct fields and columns are absent."""
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


def _check_columns(columns: list[str], where: str) -> None:
    """Refuse a table that cannot hold pairs before reading a row: qid, query, and candidates or docid + text."""
    need = ["qid", "query"] + ([] if "candidates" in columns else ["docid", "text"])
    missing = [c for c in need if c not in columns]
    if missing:
        raise InvalidInput(f"{where}: no column {', '.join(repr(c) for c in missing)} (columns: {', '.join(columns)})",
                           f"pair rows need {PAIR_FIELDS}: rename or add those columns")


def _rows(rows: Iterable[dict], where: str) -> Iterator[tuple[str, dict]]:
    for i, row in enumerate(rows):
        yield f"{where} row {i}", _no_nulls(row)


def _parquet_pairs(path: Path) -> list[QueryCandidates]:
    pq = require("pyarrow.parquet", "pairs")
    if not path.is_file():
        raise NotFound(f"pairs file {path} does not exist", "pass a Parquet file", field="pairs")
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError ... for a file that is not Parquet
        raise InvalidInput(f"{path} is not a Parquet file ({exc})", "pass a Parquet file, or the right --format") from exc
    _check_columns(pf.schema_arrow.names, str(path))

    def rows():
        for batch in pf.iter_batches(batch_size=4096):
            yield from batch.to_pylist()

    return parse_records(_rows(rows(), str(path)), str(path))


def _hf_pairs(path: Path, split: str | None) -> list[QueryCandidates]:
    datasets = require("datasets", "train")
    with tempfile.TemporaryDirectory(prefix="r3edge-hf-") as cache:  # nothing left in ~/.cache for one read
        if path.is_dir():
            try:
                ds = datasets.load_from_disk(str(path))
            except (FileNotFoundError, ValueError) as exc:
                raise InvalidInput(f"{path} is not a dataset saved with save_to_disk ({exc})",
                                   "pass a save_to_disk folder, or one .json/.jsonl/.csv/.parquet data file") from exc
        elif path.is_file():
            builder = HF_BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise InvalidInput(f"{path}: datasets has no local builder for {path.suffix or 'a file without a suffix'}",
                                   f"pass a {', '.join(HF_BUILDERS)} data file", field=FORMAT_FLAG)
            try:
                ds = datasets.load_dataset(builder, data_files=str(path), cache_dir=cache)
            except Exception as exc:  # the builders raise DatasetGenerationError, ArrowInvalid ... on a bad file
                raise InvalidInput(f"{path}: datasets' {builder} builder cannot read it ({exc})",
                                   "fix the file, or pass the right --format") from exc
        else:
            raise NotFound(f"pairs file {path} does not exist", "pass a save_to_disk folder or a data file", field="pairs")
        where = str(path)
        if isinstance(ds, datasets.DatasetDict):
            names = list(ds)
            if split is None and len(names) != 1:
                raise InvalidInput(f"{path} holds splits {', '.join(names)}", "pass --split NAME", field="--split")
            split = split if split is not None else names[0]
            if split not in ds:
                raise InvalidInput(f"{path} has no split {split!r}", f"pass --split with one of {', '.join(names)}",
                                   field="--split")
            ds, where = ds[split], f"{path} [{split}]"
        elif split is not None:
            raise InvalidInput(f"--split {split} is given, but {path} is one dataset without splits", "drop --split",
                               field="--split")
        _check_columns(ds.column_names, where)
        return parse_records(_rows(iter(ds), where), where)


# --- BEIR ------------------------------------------------------------------------------------------

def _beir_jsonl(path: Path, fields: tuple[str, ...]) -> Iterator[tuple[int, str, str, dict]]:
    """(line number, where, _id, record) per non-blank line, ids unique; ``fields`` must be strings (``_id`` may be a number)."""
    if not path.is_file():
        raise NotFound(f"{path} does not exist", "pass a BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    for lineno, where, obj in jsonl_objects(path, None):
        want = ", ".join(repr(f) for f in ("_id", *fields))
        _id = obj.get("_id")
        if isinstance(_id, (int, float)) and not isinstance(_id, bool):
            _id = str(_id)
        if not isinstance(_id, str):
            raise InvalidInput(f"{where}: field '_id' is {'missing' if _id is None else type(_id).__name__}, expected a string",
                               f"BEIR records need {want}")
        for f in fields:
            if not isinstance(obj.get(f), str):
                got = "missing" if obj.get(f) is None else type(obj[f]).__name__
                raise InvalidInput(f"{where}: field {f!r} is {got}, expected a string", f"BEIR records need {want}")
        yield lineno, where, _id, obj


def _unique(seen: dict[str, int], key: str, lineno: int, where: str) -> None:
    if key in seen:
        raise InvalidInput(f"{where}: _id {key!r} already on line {seen[key]}", "keep one record per _id")
    seen[key] = lineno


def read_beir_queries(path: Path, keep: set[str] | None = None) -> dict[str, str]:
    """``queries.jsonl`` (``_id``, ``text``): id -> query text, in file order (only ``keep``'s when given)."""
    out, seen = {}, {}
    for lineno, where, _id, obj in _beir_jsonl(path, ("text",)):
        _unique(seen, _id, lineno, where)
        if keep is None or _id in keep:
            out[_id] = obj["text"]
    return out


def read_beir_corpus(path: Path, keep: set[str] | None = None) -> dict[str, str]:
    """``corpus.jsonl`` (``_id``, ``title``?, ``text``): id -> ``(title + " " + text).strip()``, BEIR's
    own join of a title and its text (``text.strip()`` without a title, as BEIR's models do); a null title
    counts as none."""
    out, seen = {}, {}
    for lineno, where, _id, obj in _beir_jsonl(path, ("text",)):
        _unique(seen, _id, lineno, where)
        title = obj.get("title")
        if title is not None and not isinstance(title, str):
            raise InvalidInput(f"{where}: field 'title' is {type(title).__name__}, expected a string",
                               "BEIR records need '_id', 'text' and, optionally, 'title'")
        if keep is None or _id in keep:
            out[_id] = ((title or "") + " " + obj["text"]).strip()
    return out


def read_beir_qrels(path: Path, qids: set[str] | None = None, docids: set[str] | None = None, flag: str = "--qrels"
                    ) -> tuple[dict[str, dict[str, int]], dict]:
    """``qrels/SPLIT.tsv``: the header ``query-id corpus-id score``, then one tab-separated judgement a line
    (read with csv as BEIR reads it); per query id, corpus id -> integer grade in file order, and the
    line of each query's and pair's first judgement. A header that is missing is an error (BEIR skips
    the first line unread: a file without one would lose a judgement)."""
    if not path.is_file():
        raise NotFound(f"{path} does not exist", "pass a BEIR qrels file (qrels/SPLIT.tsv)", field=flag)
    qrels: dict[str, dict[str, int]] = {}
    lines: dict = {}
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_MINIMAL)
        header = next(reader, None)
        if header != BEIR_QRELS_HEADER:
            raise InvalidInput(f"{path} line 1: expected the header {chr(9).join(BEIR_QRELS_HEADER)!r}, found {header!r}",
                               "start a BEIR qrels file with the line 'query-id<TAB>corpus-id<TAB>score'", field=flag)
        for row in reader:
            lineno = reader.line_num
            if not any(c.strip() for c in row):
                continue
            where = f"{path} line {lineno}"
            if len(row) != 3:
                raise InvalidInput(f"{where}: expected 3 tab-separated columns 'query-id corpus-id score', found {len(row)}",
                                   "write BEIR qrels lines such as 'q1<TAB>d7<TAB>1'", field=flag)
            qid, docid, score = row
            grade = column_number(where, "score", score, 3, flag, "0, 1, 2, ...")
            if qids is not None and qid not in qids:
                raise InvalidInput(f"{where}: query-id {qid!r} is not in the queries file", "add the query, or drop its lines",
                                   field=flag)
            if docids is not None and docid not in docids:
                raise InvalidInput(f"{where}: corpus-id {docid!r} is not in the corpus", "add the document, or drop that line",
                                   field=flag)
            grades = qrels.setdefault(qid, {})
            if docid in grades:
                if grades[docid] != grade:
                    raise InvalidInput(f"{where}: query-id {qid!r} corpus-id {docid!r} scored {grade} here and {grades[docid]} "
                                       f"on line {lines[qid, docid]}", "keep one score per pair", field=flag)
                continue
            grades[docid] = grade
            lines.setdefault(qid, lineno)
            lines[qid, docid] = lineno
    if not qrels:
        raise InvalidInput(f"{path} holds no judgements", "pass a qrels file with lines under its header", field=flag)
    return qrels, lines


# --- MS MARCO --------------------------------------------------------------------------------------

def read_tsv(path: Path, columns: tuple[str, str], keep: set[str] | None = None, flag: str | None = None) -> dict[str, str]:
    """MS MARCO's ``id<TAB>text`` files (``collection.tsv``, ``queries.*.tsv``): id -> text in file order (only
    ``keep``'s when given); every line is checked. Split on the tab rather than read with csv: MS MARCO quotes
    nothing (a passage may hold a quote), and csv's reader took 4-5x as long over the same lines here. Lines
    end at ``\n`` only, so a stray carriage return inside a passage stays in it."""
    if not path.is_file():
        raise NotFound(f"{path} does not exist", f"pass an MS MARCO {'<TAB>'.join(columns)} file", field=flag)
    out, seen = {}, {}
    want = f"'{columns[0]}<TAB>{columns[1]}'"
    with path.open(encoding="utf-8", newline="\n") as fh:
        for lineno, line in enumerate(fh, start=1):
            line = line.rstrip("\n").removesuffix("\r")
            if not line.strip():
                continue
            row = line.split("\t")
            if len(row) != 2 or not row[0].strip():
                raise InvalidInput(f"{path} line {lineno}: expected 2 tab-separated columns {want}, found {len(row)}"
                                   + ("" if len(row) != 2 else f" with an empty {columns[0]}"),
                                   f"write one {want} per line", field=flag)
            key = row[0].strip()
            if key in seen:
                raise InvalidInput(f"{path} line {lineno}: {columns[0]} {key!r} already on line {seen[key]}",
                                   f"keep one line per {columns[0]}", field=flag)
            seen[key] = lineno
            if keep is None or key in keep:
                out[key] = row[1]
    if not out and keep is None:
        raise InvalidInput(f"{path} holds no lines", f"write one {want} per line", field=flag)
    return out


def read_run_file(path: str | Path, qids: set[str] | None = None, docids: set[str] | None = None,
                  flag: str = "--run") -> dict[str, list[RunHit]]:
    """A run in either form, told by its first line's columns: TREC's six (``qid Q0 docid rank score tag``,
    read by ``pooling.read_run``) or MS MARCO's three (``qid<TAB>pid<TAB>rank``, no score: hits carry
    ``score`` None). Per qid, hits ordered by rank, then file order."""
    path = Path(path)
    if not path.is_file():
        raise NotFound(f"{flag} {path} does not exist", f"pass an existing file to {flag}", field=flag)
    with path.open(encoding="utf-8") as fh:
        first = next((line.split() for line in fh if line.strip()), [])
    if len(first) == 6:
        return read_run(path, qids, docids, flag=flag)
    if len(first) != 3:
        raise InvalidInput(f"{path}: the first line has {len(first)} columns; a run has 3 'qid<TAB>pid<TAB>rank' (MS MARCO) "
                           "or 6 'qid Q0 docid rank score tag' (TREC)", "pass a run in one of those forms", field=flag)
    run: dict[str, list[RunHit]] = {}
    seen: dict[tuple[str, str], int] = {}
    for lineno, parts in whitespace_lines(path):
        where = f"{path} line {lineno}"
        if len(parts) != 3:
            raise InvalidInput(f"{where}: expected 3 columns 'qid pid rank' (MS MARCO run, as line 1), found {len(parts)}",
                               "write MS MARCO run lines such as '1124703<TAB>8766037<TAB>1'", field=flag)
        qid, docid, rank_s = parts
        rank = column_number(where, "rank", rank_s, 3, flag, "1, 2, ...")
        check_ids(where, qid, docid, qids, docids, flag)
        check_once(seen, qid, docid, lineno, where, flag)
        run.setdefault(qid, []).append(RunHit(docid, rank, None, lineno))
    for hits in run.values():
        hits.sort(key=lambda h: (h.rank, h.line))
    return run


# --- pooling inputs --------------------------------------------------------------------------------

@dataclass
class Collection:
    """What pooling reads: queries, the corpus, and optionally a run and qrels (already checked against both)."""

    queries: list[Query]
    docs: list[Doc]
    run: dict[str, list[RunHit]] | None = None
    qrels: dict[str, dict[str, int]] | None = None


def read_collection(fmt: str, queries_path: str | Path, corpus_path: str | Path, *, run_path: str | Path | None = None,
                    qrels_path: str | Path | None = None, progress_stream: TextIO | None = None) -> Collection:
    """Pooling's inputs in ``fmt`` (one of :data:`POOL_FORMATS`); every file is read and checked before
    the corpus is indexed, so a bad line fails fast. BEIR: with qrels, the queries are those the qrels
    name, in qrels order (BEIR's rule)."""
    if fmt not in POOL_FORMATS:
        raise InvalidInput(f"--format {fmt} holds pairs, not queries and a corpus to pool from",
                           f"convert it with `r3edge pairs --from SOURCE --format {fmt}`, or pool from "
                           f"{', '.join(POOL_FORMATS)} files", field=FORMAT_FLAG)
    if fmt == "jsonl":
        queries = read_query_file(queries_path)
        docs = read_corpus(corpus_path, progress_stream=progress_stream)
    elif fmt == "msmarco":
        queries = [Query(k, v) for k, v in read_tsv(Path(queries_path), ("qid", "query"), flag="--queries").items()]
        docs = [Doc(k, v) for k, v in read_tsv(Path(corpus_path), ("pid", "passage"), flag="--corpus").items()]
    else:
        queries = [Query(k, v) for k, v in read_beir_queries(_exists(queries_path, "--queries")).items()]
        docs = [Doc(k, v) for k, v in read_beir_corpus(_exists(corpus_path, "--corpus")).items()]
    qids, docids = {q.qid for q in queries}, {d.docid for d in docs}
    run = read_run_file(run_path, qids, docids) if run_path is not None else None
    qrels = None
    if qrels_path is not None:
        if fmt == "beir":
            qrels, _ = read_beir_qrels(Path(qrels_path), qids, docids)
            by_id = {q.qid: q for q in queries}
            queries = [by_id[qid] for qid in qrels]
        else:
            qrels = read_qrels(qrels_path, qids, docids)
    return Collection(queries, docs, run, qrels)


def _exists(path: str | Path, flag: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise NotFound(f"{flag} {path} does not exist", f"pass an existing file to {flag}", field=flag)
    return path
