"""Label pairs with a teacher judge (R³A two-round by default) into resumable Parquet shards.

Round 1 infers each query's intent once; round 2 judges every pair, and the score is read as the
teacher's probabilities over "0", "1", "2" at the <score> position (soft labels for the student).
Re-running the same command after an interruption resumes where it stopped; --shard i/n splits the
queries of one pairs file across n workers (each with its own --out).
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pairs", help="pairs JSONL (candidate-list or flat form; see DESIGN.md contract 1)")
    parser.add_argument("--teacher", default="r3a-smollm2",
                        help="teacher config: a shipped name (r3a-smollm2, r3a-7b, ...) or a YAML path "
                             "(judge, model, generation budgets)")
    parser.add_argument("--out", required=True, help="labels directory (manifest.json + part-*.parquet)")
    parser.add_argument("--shard-size", type=int, default=64,
                        help="pairs per Parquet shard; also the unit of resumption (a kill loses at most one)")
    parser.add_argument("--shard", default="0/1", metavar="I/N",
                        help="label only the queries with sha1(qid) mod N == I, to split the work across N workers")
    parser.add_argument("--limit", type=int, default=None, help="label only the first N pairs (of this shard)")
    parser.add_argument("--overwrite", action="store_true",
                        help="discard labels already in --out instead of resuming (needed when the teacher or pairs changed)")


def run(args: argparse.Namespace) -> int:
    from r3edge.distill.teacher import label_pairs

    label_pairs(args.pairs, args.teacher, args.out, shard_size=args.shard_size, shard=args.shard,
                limit=args.limit, overwrite=args.overwrite)
    return 0
