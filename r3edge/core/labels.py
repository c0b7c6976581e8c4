"""Teacher label files (contract 2): a directory of Parquet shards plus a manifest.

Layout::

    labels/
      manifest.json        # run identity (judge, teacher, prompt hash, pairs sha256, n_pairs, n_labels)
                           # and "complete": true once every pair is labelled
      part-00000.parquet   # each shard written to a temp name and renamed: never half a shard
      part-00001.parquet

Readers refuse an incomplete directory unless they ask for a partial view, so a killed labelling
run is never mistaken for a finished one. Unparsable teacher outputs are kept (``format_ok`` false),
never dropped or defaulted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from r3edge.core.errors import Conflict, FormatError, InvalidInput, NotFound, check_format_version
from r3edge.core.fileio import atomic_write_text, file_sha256
from r3edge.core.pairs import read_queries

MANIFEST = "manifest.json"
#: Manifest fields that say what a label means (which judge, weights, config and prompt made it). Labels that
#: differ in any of them are not one teacher's and are never merged or trained on together.
MEANING_KEYS = ("judge", "teacher", "teacher_model", "teacher_config_sha256", "prompt_hash")
#: Written into every labels manifest; readers refuse any other value.
LABELS_FORMAT = "r3edge-labels/1"

SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("docid", pa.string()),
        ("query", pa.string()),
        ("text", pa.string()),
        ("gold", pa.int64()),              # the pair's graded label if the pairs file had one
        ("judge", pa.string()),
        ("teacher_model", pa.string()),
        ("prompt_hash", pa.string()),
        ("probs", pa.list_(pa.float64())),  # over the student's label space, sums to 1; null: no parsable sample
        ("score", pa.int64()),              # argmax of probs, in the student's label space
        ("native_score", pa.float64()),     # the judge's own scale (e.g. 0..100 for Retro*, integrated over K)
        ("native_scale", pa.string()),
        ("format_ok", pa.bool_()),          # R³A's I_format (every round, no repair)
        ("repaired", pa.bool_()),           # the reasoning was cut off and closed before the score was read
        ("intent", pa.string()),
        ("extract", pa.string()),
        ("extract_is_verbatim", pa.bool_()),
        ("details", pa.string()),           # rubric-specific parts as JSON (Tongxiao: match, trustworthy, recency)
        ("raw_intent", pa.string()),
        ("raw_assessment", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("latency_s", pa.float64()),
    ]
)


def read_manifest(directory: str | Path) -> dict:
    """The labels manifest, refused unless its ``format`` is the one this r3edge writes."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise NotFound(f"{directory} has no {MANIFEST}: not a labels directory", "run `r3edge label` to create it")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path} is not valid JSON ({exc})", "re-run `r3edge label --overwrite`") from exc
    check_format_version(manifest.get("format") if isinstance(manifest, dict) else None, LABELS_FORMAT, str(path),
                         "relabel with this r3edge version (`r3edge label ... --overwrite`)")
    return manifest


def write_manifest(directory: str | Path, manifest: dict) -> None:
    """Write the manifest atomically with the format version stamped in."""
    body = {"format": LABELS_FORMAT, **{k: v for k, v in manifest.items() if k != "format"}}
    atomic_write_text(Path(directory) / MANIFEST, json.dumps(body, indent=2, ensure_ascii=False) + "\n")


def shard_paths(directory: str | Path) -> list[Path]:
    return sorted(Path(directory).glob("part-*.parquet"))


def write_shard(directory: str | Path, records: list[dict]) -> Path:
    """Append one shard atomically (temp file + rename)."""
    directory = Path(directory)
    existing = shard_paths(directory)
    # Next index after the highest one (not the count), and never over an existing shard.
    index = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0
    final = directory / f"part-{index:05d}.parquet"
    tmp = directory / f".part-{index:05d}.parquet.tmp"
    if final.exists():
        raise Conflict(f"{final} already exists", "run one labelling process per output directory (use --shard i/n)")
    table = pa.Table.from_pylist(records, schema=SCHEMA)
    pq.write_table(table, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    return final


def read_labels(directory: str | Path, allow_partial: bool = False, columns: list[str] | None = None) -> pa.Table:
    """All records of a labels directory; refuses an unfinished run unless ``allow_partial``.

    ``columns`` reads only those (a resume needs qid/docid, not every raw generation).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise NotFound(f"labels directory {directory} does not exist", "run `r3edge label` first")
    manifest = read_manifest(directory)
    if not manifest.get("complete") and not allow_partial:
        raise InvalidInput(
            f"labels in {directory} are incomplete ({manifest.get('n_done', '?')}/{manifest.get('n_pairs', '?')} pairs)",
            "re-run the same `r3edge label` command: it resumes where it stopped",
        )
    shards = shard_paths(directory)
    schema = pa.schema([SCHEMA.field(c) for c in columns]) if columns else SCHEMA
    table = (pa.concat_tables([pq.read_table(p, schema=SCHEMA, columns=columns) for p in shards])
             if shards else schema.empty_table())
    if manifest.get("complete") and "n_pairs" in manifest and table.num_rows != manifest["n_pairs"]:
        raise FormatError(
            f"labels in {directory} claim to be complete with {manifest['n_pairs']} pairs but hold {table.num_rows} rows",
            "a shard was lost or added by hand; re-run `r3edge label ... --overwrite`",
        )
    return table


def read_labels_union(directories: list[str | Path], columns: list[str] | None = None) -> tuple[pa.Table, dict]:
    """The records of several complete labels directories of one teacher, and a manifest for them all.

    Why: a long labelling run is split into ``--shard i/n`` directories, and a student may learn from
    the shards done so far (or from a run's shards plus another pairs file's labels) without waiting for
    ``r3edge label --merge``, which proves a whole pairs file covered. Refused unless every directory is
    complete, all have the same :data:`MEANING_KEYS`, and no (qid, docid) pair is labelled twice. One
    directory is returned as :func:`read_labels` reads it, with its own manifest. ``columns`` reads only those
    (and qid, docid for the check).
    """
    if not directories:
        raise InvalidInput("no labels directory given", "pass at least one directory written by `r3edge label`")
    if columns is not None:
        columns = list(dict.fromkeys(["qid", "docid", *columns]))
    tables = [read_labels(d, columns=columns) for d in directories]
    manifests = [read_manifest(d) for d in directories]
    if len(directories) == 1:
        return tables[0], manifests[0]
    for d, m in zip(directories[1:], manifests[1:]):
        diff = [k for k in MEANING_KEYS if m.get(k) != manifests[0].get(k)]
        if diff:
            raise InvalidInput(f"{d} was labelled by another teacher than {directories[0]} ({', '.join(diff)} differ)",
                               "train on the labels of one teacher, or relabel with the same teacher config")
    seen: set[tuple[str, str]] = set()
    for d, t in zip(directories, tables):
        keys = set(zip(t.column("qid").to_pylist(), t.column("docid").to_pylist()))
        dup = seen & keys
        if dup or len(keys) != t.num_rows:
            raise InvalidInput(f"{d} labels pairs that an earlier directory (or itself) labels too, e.g. {sorted(dup)[:3]}",
                               "pass each labelled pair once: the shards of one `r3edge label --shard i/n` run are disjoint")
        seen |= keys
    shas = list(dict.fromkeys(m.get("pairs_sha256") for m in manifests))
    manifest = {**{k: manifests[0][k] for k in manifests[0] if k not in ("summary", "merged_from")},
                "pairs_sha256": shas[0] if len(shas) == 1 else shas, "shard": [m.get("shard") for m in manifests],
                "n_pairs": len(seen), "n_done": len(seen), "complete": True,
                "union_of": [str(d) for d in directories]}
    return pa.concat_tables(tables), manifest


def restrict_to_pairs(table: pa.Table, pairs_path: str | Path) -> tuple[pa.Table, dict]:
    """Only the records of the pairs in a pairs file, and what the file was (path, sha256, pair count).

    Why: two judges compared as teachers must teach the same student on the same pairs, and one judge may
    have labelled a superset of them (the 1.5B score-only judge's C train labels hold the 5,000 pairs the
    R³A judge labelled). Every pair of the file must be labelled, so "the same pairs" is checked, not assumed.
    """
    pairs_path = Path(pairs_path)
    want = {(q.qid, c.docid) for q in read_queries(pairs_path) for c in q.candidates}
    keys = list(zip(table.column("qid").to_pylist(), table.column("docid").to_pylist()))
    missing = want - set(keys)
    if missing:
        raise InvalidInput(f"--only-pairs {pairs_path}: {len(missing)} of its {len(want)} pairs have no label in the "
                           f"labels given, e.g. {sorted(missing)[:3]}",
                           "pass labels that cover the pairs file, or label the missing pairs first (`r3edge label`)")
    return table.filter(pa.array([k in want for k in keys])), {
        "path": str(pairs_path), "sha256": file_sha256(pairs_path), "n_pairs": len(want)}
