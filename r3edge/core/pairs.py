"""Pair files: the input contract of the pipeline (torch-free).

Two JSONL forms are accepted (docs/ARCHITECTURE.md, contract 1):

* candidate-list form, one query per line:
  ``{"qid", "query", "candidates": [{"docid", "text", "label"?, "rank"?, "meta"?}], "aux"?: [text, ...], "meta"?}``
* flat form, one pair per line: ``{"qid", "query", "docid", "text", "label"?, "aux"?, "meta"?, "query_meta"?}``

Both are read into :class:`QueryCandidates`; flat lines of the same ``qid`` are grouped in file order.
Errors name the file, the line number and the field. :func:`parse_records` is the one parser of these
fields: the Parquet and ``datasets`` readers (``r3edge.distill.data.formats``) hand it their rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from r3edge.core.errors import InvalidInput
from r3edge.core.fileio import atomic_write_text


@dataclass
class Candidate:
    docid: str
    text: str
    label: int | None = None
    rank: int | None = None
    #: optional context some judges read: ``title``, ``site``, ``published`` (Tongxiao), behaviour
    #: signals such as ``serp_rank``, ``clicked``, ``dwell_time_s`` (TRUE); free-form JSON object
    meta: dict | None = None


@dataclass
class QueryCandidates:
    qid: str
    query: str
    candidates: list[Candidate]
    aux: list[str] | None = None
    #: optional query context: ``query_time``, ``task`` (TRUE's task description), ``session`` ...
    meta: dict | None = None

    def auxiliary_docs(self, k: int) -> list[str]:
        """R³A's auxiliary documents: the given ``aux``, else the top-ranked candidates."""
        if self.aux:
            return self.aux[:k]
        ranked = sorted(self.candidates, key=lambda c: (c.rank is None, c.rank or 0))
        return [c.text for c in ranked[:k]]

    def to_json(self) -> dict:
        d = {
            "qid": self.qid,
            "query": self.query,
            "candidates": [
                {k: v for k, v in c.__dict__.items() if v is not None} for c in self.candidates
            ],
        }
        if self.aux is not None:
            d["aux"] = self.aux
        if self.meta is not None:
            d["meta"] = self.meta
        return d


def _need(obj: dict, key: str, typ, where: str):
    if key not in obj:
        raise InvalidInput(f"{where}: missing field '{key}'", f"add '{key}' ({typ.__name__}) to the record")
    val = obj[key]
    if typ is str and isinstance(val, (int, float)) and not isinstance(val, bool):
        val = str(val)
    if not isinstance(val, typ):
        raise InvalidInput(
            f"{where}: field '{key}' is {type(val).__name__}, expected {typ.__name__}",
            f"write '{key}' as a JSON {'string' if typ is str else typ.__name__}",
        )
    return val


def _label(obj: dict, where: str) -> int | None:
    lab = obj.get("label")
    if lab is None:
        return None
    if isinstance(lab, bool) or not isinstance(lab, (int, float)) or int(lab) != lab:
        raise InvalidInput(f"{where}: field 'label' is {lab!r}", "use an integer graded label such as 0, 1 or 2")
    return int(lab)


def _aux(obj: dict, where: str) -> list[str] | None:
    aux = obj.get("aux")
    if aux is None:
        return None
    if not isinstance(aux, list) or not all(isinstance(a, str) for a in aux):
        raise InvalidInput(f"{where}: field 'aux' must be a list of strings", "write aux as [\"text\", ...]")
    return aux


def _meta(obj: dict, where: str, key: str = "meta") -> dict | None:
    """Optional context object: a candidate's ``meta``; a query's ``meta`` (candidate-list form) or
    ``query_meta`` (flat form, where ``meta`` belongs to the candidate)."""
    meta = obj.get(key)
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise InvalidInput(f"{where}: field '{key}' must be a JSON object", f'write {key} as {{"title": ..., "site": ...}}')
    return meta


def read_queries(path: str | Path) -> list[QueryCandidates]:
    """Read a pairs JSONL file in either form; every error names the line."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(f"pairs file {path} does not exist", "pass a JSONL file (`r3edge pairs --help` makes one)")

    def lines():
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                where = f"{path} line {lineno}"
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidInput(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})",
                                       "fix or remove that line (a file in another format: pass --format)") from exc
                yield where, obj

    return parse_records(lines(), str(path))


def parse_records(records: Iterable[tuple[str, object]], source: str) -> list[QueryCandidates]:
    """Pair records in either form (a JSONL line's object, a Parquet or ``datasets`` row) into candidate
    lists, ``where`` naming each record's line or row in errors: the one parser of contract 1's fields."""
    groups: dict[str, QueryCandidates] = {}
    for where, obj in records:
        if not isinstance(obj, dict):
            raise InvalidInput(f"{where}: expected a JSON object", "write one object per line")
        qid = _need(obj, "qid", str, where)
        query = _need(obj, "query", str, where)
        if "candidates" in obj:
            cands_raw = _need(obj, "candidates", list, where)
            cands = []
            for j, c in enumerate(cands_raw):
                cw = f"{where} candidates[{j}]"
                if not isinstance(c, dict):
                    raise InvalidInput(f"{cw}: expected an object", "write {\"docid\":..., \"text\":...}")
                rank = c.get("rank")
                cands.append(
                    Candidate(_need(c, "docid", str, cw), _need(c, "text", str, cw), _label(c, cw),
                              int(rank) if rank is not None else None, _meta(c, cw))
                )
            if qid in groups:
                raise InvalidInput(f"{where}: qid {qid!r} appears twice", "merge its candidates into one line")
            groups[qid] = QueryCandidates(qid, query, cands, _aux(obj, where), _meta(obj, where))
        else:
            cand = Candidate(_need(obj, "docid", str, where), _need(obj, "text", str, where), _label(obj, where),
                             None, _meta(obj, where))
            g = groups.get(qid)
            if g is None:
                groups[qid] = QueryCandidates(qid, query, [cand], _aux(obj, where), _meta(obj, where, "query_meta"))
            else:
                if g.query != query:
                    raise InvalidInput(f"{where}: qid {qid!r} has a different query text than before",
                                      "use one query text per qid")
                cand.rank = None
                g.candidates.append(cand)
    if not groups:
        raise InvalidInput(f"pairs file {source} holds no records", "write at least one pair record")
    for g in groups.values():
        seen = set()
        for c in g.candidates:
            if c.docid in seen:
                raise InvalidInput(f"{source}: qid {g.qid!r} lists docid {c.docid!r} twice", "keep one copy of each candidate")
            seen.add(c.docid)
    return list(groups.values())


def write_queries(path: str | Path, queries: list[QueryCandidates]) -> None:
    """Write candidate-list JSONL atomically (a killed run never leaves a half file)."""
    atomic_write_text(path, "".join(json.dumps(q.to_json(), ensure_ascii=False) + "\n" for q in queries))
