"""Pair pooling: candidate lists from queries and a corpus (the Researchy Questions recipe).

A query's pool is the union of three sources, deduplicated by docid:

* ``bm25``: the top ``bm25_k`` BM25 hits over the whole corpus (bm25s, Snowball stemming, English
  stopwords by default). Documents that share no term with the query (score 0) are never hits:
  their order would be arbitrary.
* ``reranker``: the top ``run_k`` documents of a reranker's TREC run (``qid Q0 docid rank score tag``),
  ordered by the rank column (ties: higher score, then file order).
* ``click``: every document a TREC qrels file (``qid 0 docid rel``) grades above 0 (a click or a
  positive judgement). Grade-0 entries join no pool; they only label a document another source
  brought in.

Candidate order, written as ``rank`` 1..n: the BM25 hits by BM25 rank, then the reranker's
documents BM25 missed by reranker rank, then clicked documents neither found, in qrels file order.
A candidate's ``label`` is its qrels grade, copied verbatim, and only where the qrels grade it:
an unjudged document has no label (never 0), so the teacher labels it. Its ``meta`` holds the
corpus record's ``meta`` and ``title``, ``sources`` (subset of ``["bm25", "reranker", "click"]`` in
that order), ``bm25_rank``/``bm25_score`` and ``reranker_rank``/``reranker_score`` where those
sources found it. ``text`` is the corpus ``text``; BM25 indexes ``title`` and ``text`` together.

Auxiliary documents (R³A's intent round reads the platform's top results as evidence of what the
query means) are the top ``aux_k`` BM25 hits, title and text. BM25 rather than the reranker's run:
BM25 answers every query, while a run may miss some, and the teacher's intent evidence then does
not come from the reranker being distilled. Queries whose pool is empty are left out (and
counted).

Input errors name the file and, for a bad record or line, its line number and field; the error's
``field`` is the flag that passed the file. Same files, same output bytes (ties in BM25 score are
broken by corpus order).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from r3edge.core.errors import InvalidInput, NotFound, require
from r3edge.core.pairs import Candidate, QueryCandidates
from r3edge.core.progress import Progress

SOURCES = ("bm25", "reranker", "click")


@dataclass(frozen=True)
class Query:
    qid: str
    query: str
    meta: dict | None = None


@dataclass(frozen=True)
class Doc:
    docid: str
    text: str
    title: str | None = None
    meta: dict | None = None

    @property
    def full_text(self) -> str:
        """What BM25 indexes and what an auxiliary document shows: title, then text."""
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True)
class RunHit:
    docid: str
    rank: int
    score: float | None  # None: the run gives ranks only (MS MARCO's qid<TAB>pid<TAB>rank)
    line: int


@dataclass
class PoolStats:
    queries: int = 0
    candidates: int = 0
    labelled: int = 0
    skipped_empty: list[str] = field(default_factory=list)
    by_source: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))


# --- readers ---------------------------------------------------------------------------------------

def _open(path: str | Path, flag: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise NotFound(f"{flag} {path} does not exist", f"pass an existing file to {flag}", field=flag)
    return path


def _str(obj: dict, key: str, where: str, flag: str, required: bool = True) -> str | None:
    if key not in obj or obj[key] is None:
        if required:
            raise InvalidInput(f"{where}: missing field '{key}'", f"add '{key}' (a string) to the record", field=flag)
        return None
    val = obj[key]
    if isinstance(val, (int, float)) and not isinstance(val, bool) and key in ("qid", "docid"):
        val = str(val)
    if not isinstance(val, str):
        raise InvalidInput(f"{where}: field '{key}' is {type(val).__name__}, expected a string",
                           f"write '{key}' as a JSON string", field=flag)
    return val


def _obj_meta(obj: dict, where: str, flag: str) -> dict | None:
    meta = obj.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise InvalidInput(f"{where}: field 'meta' must be a JSON object", 'write meta as {"site": ..., ...}', field=flag)
    return meta


def jsonl_objects(path: Path, flag: str | None, progress: Progress | None = None) -> Iterable[tuple[int, str, dict]]:
    """(line number, where, object) per non-blank line; read as bytes so progress can count them."""
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if progress is not None:
                progress.update(len(raw))
            if not raw.strip():
                continue
            where = f"{path} line {lineno}"
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise InvalidInput(f"{where}: not valid JSON ({exc})", "fix or remove that line", field=flag) from exc
            if not isinstance(obj, dict):
                raise InvalidInput(f"{where}: expected a JSON object", "write one object per line", field=flag)
            yield lineno, where, obj


def read_query_file(path: str | Path, flag: str = "--queries") -> list[Query]:
    """Queries JSONL: ``{"qid", "query", "meta"?}`` per line; qids unique, queries non-empty."""
    path = _open(path, flag)
    out: dict[str, Query] = {}
    first: dict[str, int] = {}
    for lineno, where, obj in jsonl_objects(path, flag):
        qid = _str(obj, "qid", where, flag)
        query = _str(obj, "query", where, flag)
        if not query.strip():
            raise InvalidInput(f"{where}: field 'query' is empty", "give every query its text", field=flag)
        if qid in out:
            raise InvalidInput(f"{where}: qid {qid!r} already on line {first[qid]}", "keep one line per qid", field=flag)
        out[qid] = Query(qid, query, _obj_meta(obj, where, flag))
        first[qid] = lineno
    if not out:
        raise InvalidInput(f"{flag} {path} holds no queries", 'write one {"qid": ..., "query": ...} per line', field=flag)
    return list(out.values())


def read_corpus(path: str | Path, flag: str = "--corpus", progress_stream: TextIO | None = None) -> list[Doc]:
    """Corpus JSONL: ``{"docid", "text", "title"?, "meta"?}`` per line; docids unique, at least one doc."""
    path = _open(path, flag)
    docs: list[Doc] = []
    seen: dict[str, int] = {}
    with Progress(path.stat().st_size, f"read {path.name} (bytes)", stream=progress_stream) as prog:
        for lineno, where, obj in jsonl_objects(path, flag, prog):
            docid = _str(obj, "docid", where, flag)
            if docid in seen:
                raise InvalidInput(f"{where}: docid {docid!r} already on line {seen[docid]}", "keep one line per docid",
                                   field=flag)
            seen[docid] = lineno
            docs.append(Doc(docid, _str(obj, "text", where, flag), _str(obj, "title", where, flag, required=False),
                            _obj_meta(obj, where, flag)))
    if not docs:
        raise InvalidInput(f"{flag} {path} holds no documents", 'write one {"docid": ..., "text": ...} per line', field=flag)
    return docs


def check_ids(where: str, qid: str, docid: str, qids: set[str] | None, docids: set[str] | None, flag: str) -> None:
    """A run or qrels line names a known query and document (when the sets are given)."""
    if qids is not None and qid not in qids:
        raise InvalidInput(f"{where}: qid {qid!r} is not in the queries file",
                           f"drop that query's lines from {flag} or add the query to --queries", field=flag)
    if docids is not None and docid not in docids:
        raise InvalidInput(f"{where}: docid {docid!r} is not in the corpus",
                           f"drop that line from {flag} or add the document to --corpus", field=flag)


def check_once(seen: dict[tuple[str, str], int], qid: str, docid: str, lineno: int, where: str, flag: str) -> None:
    """A run names each (qid, docid) once: ``seen`` maps those read so far to their line."""
    if (qid, docid) in seen:
        raise InvalidInput(f"{where}: qid {qid!r} docid {docid!r} already on line {seen[qid, docid]}",
                           "keep one line per (qid, docid)", field=flag)
    seen[qid, docid] = lineno


def column_number(where: str, name: str, text: str, column: int, flag: str, example: str | None = None,
                  cast: type = int):
    """A run or qrels column read as ``cast`` (``int`` or ``float``), or an error naming the line, the column and
    the form to write it in (``example``; "a number" for a float)."""
    try:
        return cast(text)
    except ValueError:
        kind = "an integer" if cast is int else "a number"
        raise InvalidInput(f"{where}: {name} {text!r} is not {kind}", f"write the {name} (column {column}) as {example or kind}",
                           field=flag) from None


def whitespace_lines(path: Path) -> Iterable[tuple[int, list[str]]]:
    """(line number, whitespace-split columns) of each non-blank line."""
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            parts = line.split()
            if parts:
                yield lineno, parts


def read_run(path: str | Path, qids: set[str] | None = None, docids: set[str] | None = None,
             flag: str = "--run") -> dict[str, list[RunHit]]:
    """A TREC run (``qid Q0 docid rank score tag``): per qid, hits ordered by rank, then higher score, then line."""
    path = _open(path, flag)
    run: dict[str, list[RunHit]] = {}
    seen: dict[tuple[str, str], int] = {}
    for lineno, parts in whitespace_lines(path):
        where = f"{path} line {lineno}"
        if len(parts) != 6:
            raise InvalidInput(f"{where}: expected 6 columns 'qid Q0 docid rank score tag', found {len(parts)}",
                               "write TREC run lines such as 'q1 Q0 d7 1 12.5 myrun'", field=flag)
        qid, _, docid, rank_s, score_s, _ = parts
        rank = column_number(where, "rank", rank_s, 4, flag, "1, 2, ...")
        score = column_number(where, "score", score_s, 5, flag, cast=float)
        check_ids(where, qid, docid, qids, docids, flag)
        check_once(seen, qid, docid, lineno, where, flag)
        run.setdefault(qid, []).append(RunHit(docid, rank, score, lineno))
    if not run:
        raise InvalidInput(f"{flag} {path} holds no run lines", "pass a TREC run file or leave out the flag", field=flag)
    for hits in run.values():
        hits.sort(key=lambda h: (h.rank, -h.score, h.line))
    return run


def read_qrels(path: str | Path, qids: set[str] | None = None, docids: set[str] | None = None,
               flag: str = "--qrels") -> dict[str, dict[str, int]]:
    """TREC qrels (``qid iter docid rel``): per qid, docid -> integer grade, in file order."""
    path = _open(path, flag)
    qrels: dict[str, dict[str, int]] = {}
    seen: dict[tuple[str, str], int] = {}
    for lineno, parts in whitespace_lines(path):
        where = f"{path} line {lineno}"
        if len(parts) != 4:
            raise InvalidInput(f"{where}: expected 4 columns 'qid 0 docid rel', found {len(parts)}",
                               "write TREC qrels lines such as 'q1 0 d7 2'", field=flag)
        qid, _, docid, rel_s = parts
        rel = column_number(where, "grade", rel_s, 4, flag, "0, 1, 2, ...")
        check_ids(where, qid, docid, qids, docids, flag)
        grades = qrels.setdefault(qid, {})
        if docid in grades and grades[docid] != rel:
            raise InvalidInput(f"{where}: qid {qid!r} docid {docid!r} graded {rel} here and {grades[docid]} on line "
                               f"{seen[qid, docid]}", "keep one grade per (qid, docid)", field=flag)
        if docid not in grades:
            grades[docid] = rel
            seen[qid, docid] = lineno
    if not qrels:
        raise InvalidInput(f"{flag} {path} holds no qrels lines", "pass a TREC qrels file or leave out the flag", field=flag)
    return qrels


# --- BM25 ------------------------------------------------------------------------------------------

class BM25Index:
    """bm25s (its defaults: Lucene BM25, k1 1.5, b 0.75) over ``title + text`` with bm25s's tokenizer:
    lower-cased, bm25s's stopword list (``en``: Lucene's 33 English words), PyStemmer's Snowball stemmer.

    Retrieval scores the whole corpus with bm25s and takes the top k itself, so that ties are broken
    by corpus order (bm25s's own top-k leaves tie order to ``argpartition``).
    """

    def __init__(self, docs: list[Doc], stemmer: str | None = "english", stopwords: str | None = "en",
                 progress_stream: TextIO | None = None):
        bm25s = require("bm25s", "pairs")
        stem_fn = None
        if stemmer is not None:
            stemmer_mod = require("Stemmer", "pairs")
            if stemmer not in stemmer_mod.algorithms():
                raise InvalidInput(f"--stemmer {stemmer!r} is not a Snowball stemmer",
                                   f"use one of {', '.join(stemmer_mod.algorithms())}, or none", field="--stemmer")
            stem_fn = stemmer_mod.Stemmer(stemmer).stemWord
        try:
            self.tokenizer = bm25s.tokenization.Tokenizer(lower=True, stopwords=stopwords or [], stemmer=stem_fn)
        except ValueError as exc:
            raise InvalidInput(f"--stopwords {stopwords!r}: {exc}", "use a language code such as en, de, fr, or none",
                               field="--stopwords") from exc
        ids: list[list[int]] = []
        with Progress(len(docs), "bm25 tokenize (docs)", stream=progress_stream) as prog:
            for doc_ids in self.tokenizer.streaming_tokenize((d.full_text for d in docs), update_vocab=True):
                ids.append(doc_ids)
                prog.update()
        vocab = self.tokenizer.get_vocab_dict()
        self._empty = vocab.get("")
        # bm25s builds its sparse matrix without a progress callback (5 s for 100k docs here): a line before and after
        stream = progress_stream if progress_stream is not None else sys.stderr
        print(f"bm25 index: {len(docs)} docs, {len(vocab)} terms ...", file=stream, flush=True)
        t0 = time.perf_counter()
        self.model = bm25s.BM25()
        self.model.index((ids, vocab), show_progress=False)
        print(f"bm25 index: built in {time.perf_counter() - t0:.1f} s", file=stream, flush=True)
        self.n_docs = len(docs)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Top ``k`` (doc index, score) by score, then corpus order; only documents sharing a term."""
        import numpy as np

        if k <= 0:
            return []
        (q_ids,) = list(self.tokenizer.streaming_tokenize([query], update_vocab=False, allow_empty=False))
        q_ids = [i for i in q_ids if i != self._empty]
        if not q_ids:
            return []
        scores = self.model.get_scores(q_ids)
        hits = np.flatnonzero(scores > 0)
        if len(hits) > k:
            kth = np.partition(scores[hits], len(hits) - k)[len(hits) - k]
            hits = hits[scores[hits] >= kth]
        hits = hits[np.lexsort((hits, -scores[hits]))][:k]
        return [(int(i), float(scores[i])) for i in hits]


def bm25_scores(query: str, texts: list[str]) -> list[float]:
    """BM25 of ``query`` over ``texts`` alone, one score per text (0 where no term is shared): an index of
    just these texts, built quietly, as `r3edge bench` times BM25 reranking one request's candidates."""
    import io

    hits = dict(BM25Index([Doc(str(i), t) for i, t in enumerate(texts)], progress_stream=io.StringIO()).search(query, len(texts)))
    return [hits.get(i, 0.0) for i in range(len(texts))]


# --- pooling ---------------------------------------------------------------------------------------

def pool(queries: list[Query], docs: list[Doc], index: BM25Index, *, bm25_k: int = 100,
         run: dict[str, list[RunHit]] | None = None, run_k: int = 20, qrels: dict[str, dict[str, int]] | None = None,
         aux_k: int = 3, progress_stream: TextIO | None = None) -> tuple[list[QueryCandidates], PoolStats]:
    """Candidate lists, one per query with a non-empty pool, in queries-file order (see the module doc)."""
    by_id = {d.docid: i for i, d in enumerate(docs)}
    stats = PoolStats()
    out: list[QueryCandidates] = []
    with Progress(len(queries), "bm25 retrieve (queries)", stream=progress_stream) as prog:
        for q in queries:
            hits = index.search(q.query, max(bm25_k, aux_k))
            info: dict[str, dict] = {}
            for r, (i, s) in enumerate(hits[:bm25_k], start=1):
                info[docs[i].docid] = {"sources": ["bm25"], "bm25_rank": r, "bm25_score": round(s, 4)}
            for h in (run or {}).get(q.qid, [])[:run_k]:
                m = info.setdefault(h.docid, {"sources": []})
                m["sources"].append("reranker")
                m["reranker_rank"] = h.rank
                if h.score is not None:  # MS MARCO runs rank without a score
                    m["reranker_score"] = h.score
            grades = (qrels or {}).get(q.qid, {})
            for docid, rel in grades.items():
                if rel > 0:
                    info.setdefault(docid, {"sources": []})["sources"].append("click")
            if not info:
                stats.skipped_empty.append(q.qid)
                prog.update()
                continue
            cands = []
            for rank, (docid, m) in enumerate(info.items(), start=1):
                doc = docs[by_id[docid]]
                meta = dict(doc.meta or {})
                if doc.title:
                    meta["title"] = doc.title
                meta.update(m)
                cands.append(Candidate(docid, doc.text, grades.get(docid), rank, meta))
                for s in m["sources"]:
                    stats.by_source[s] += 1
            aux = [docs[i].full_text for i, _ in hits[:aux_k]] or None
            out.append(QueryCandidates(q.qid, q.query, cands, aux, q.meta))
            stats.candidates += len(cands)
            stats.labelled += sum(c.label is not None for c in cands)
            prog.update()
    stats.queries = len(out)
    return out, stats


def pool_files(queries_path: str | Path, corpus_path: str | Path, *, bm25_k: int = 100, run_path: str | Path | None = None,
               run_k: int = 20, qrels_path: str | Path | None = None, aux_k: int = 3, stemmer: str | None = "english",
               stopwords: str | None = "en", progress_stream: TextIO | None = None) -> tuple[list[QueryCandidates], PoolStats]:
    """Read and check every input (before the corpus is indexed, so a bad run line fails fast), then pool."""
    queries = read_query_file(queries_path)
    docs = read_corpus(corpus_path, progress_stream=progress_stream)
    qids, docids = {q.qid for q in queries}, {d.docid for d in docs}
    run = read_run(run_path, qids, docids) if run_path is not None else None
    qrels = read_qrels(qrels_path, qids, docids) if qrels_path is not None else None
    index = BM25Index(docs, stemmer=stemmer, stopwords=stopwords, progress_stream=progress_stream)
    return pool(queries, docs, index, bm25_k=bm25_k, run=run, run_k=run_k, qrels=qrels, aux_k=aux_k,
                progress_stream=progress_stream)
