"""Label pairs with a teacher judge into resumable Parquet shards (or merge the shards of n workers).

Judges (``judge:`` in the teacher config): r3a (two-round, default), umbrela (0..2), retro (0..100
rubric, K samples integrated), tongxiao (match / trustworthy / recency / overall 0..3), true
(usefulness 0..3 from session and behaviour signals), crux (answerability 0..5). Each config maps
the judge's native scale to the student's labels. Backends: transformers (in-process) or openai (any
OpenAI-compatible server with logprobs: vLLM, SGLang, TGI), e.g. a GPU vLLM serving R³A-7B:

    r3edge label pairs.jsonl --teacher r3a-7b --backend openai --base-url http://GPU-HOST:8000/v1 --out labels/

Repeat --base-url to label through several servers at once (a dead one's pairs go to the others).

Re-running the same command after an interruption resumes where it stopped; a second run on the
same --out is refused while the first is alive. --shard i/n splits the queries of one pairs file
across n workers (each with its own --out); `--merge DIR0 DIR1 ...` then checks that the n shards
are complete, disjoint and cover the pairs file, and writes one labels directory.
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    from r3edge.distill.data.formats import add_format_arguments

    parser.add_argument("pairs", help="pairs JSONL (candidate-list or flat form; docs/ARCHITECTURE.md, contract 1), a Parquet "
                                      "file, a datasets dataset, or a BEIR or MS MARCO folder (--format, --split)")
    add_format_arguments(parser)
    parser.add_argument("--teacher", default="r3a-smollm2",
                        help="teacher config: a shipped name (r3a-smollm2, r3a-7b, umbrela-smollm2, retro-smollm2, "
                             "tongxiao-smollm2, true-smollm2, crux-smollm2, ...) or a YAML path")
    parser.add_argument("--out", required=True, help="labels directory (manifest.json + part-*.parquet)")
    parser.add_argument("--teacher-model", default=None, metavar="DIR",
                        help="run the teacher config's judge with these weights instead of its model, e.g. the directory "
                             "`r3edge teacher sft` wrote (for --backend openai: serve DIR with vLLM under that name)")
    parser.add_argument("--backend", default=None, choices=["transformers", "openai"],
                        help="generation backend (default: the teacher config's)")
    parser.add_argument("--base-url", action="append", default=None, metavar="URL",
                        help="OpenAI-compatible server for --backend openai, e.g. http://127.0.0.1:8000/v1; repeat it for "
                             "several servers: pairs go to the one with the fewest in flight, a failed server's to the others")
    from r3edge.distill.label.pool import DEFAULT_MAX_IN_FLIGHT

    parser.add_argument("--max-in-flight", type=int, default=None, metavar="N",
                        help=f"calls in flight per --base-url (default {DEFAULT_MAX_IN_FLIGHT}); behind a load balancer, "
                             "enough for all its replicas")
    parser.add_argument("--samples", type=int, default=None, metavar="K",
                        help="sampled trajectories per pair for sampling judges (retro's mean@K; default: the config's)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N",
                        help="generation rows per batch (default: the config's; a GPU takes ~128); not part of the labels' identity")
    parser.add_argument("--shard-size", type=int, default=64,
                        help="pairs per Parquet shard; also the unit of resumption (a kill loses at most one)")
    parser.add_argument("--shard", default="0/1", metavar="I/N",
                        help="label only the queries with sha1(qid) mod N == I, to split the work across N workers")
    parser.add_argument("--limit", type=int, default=None, help="label only the first N pairs (of this shard)")
    parser.add_argument("--overwrite", action="store_true",
                        help="discard labels already in --out instead of resuming (needed when the teacher or pairs changed)")
    parser.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                        help="merge the labels directories of all N shards of PAIRS into --out (checked complete and disjoint)")


def run(args: argparse.Namespace) -> int:
    from r3edge.distill.data.formats import pairs_file

    with pairs_file(args.pairs, args.format, args.split) as args.pairs:  # other formats: as `r3edge pairs --from` writes them
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if args.merge:
        from r3edge.distill.label.driver import merge_shards

        merge_shards(args.pairs, args.merge, args.out, overwrite=args.overwrite)
        return 0
    from r3edge.distill.label.driver import label_pairs

    label_pairs(args.pairs, args.teacher, args.out, shard_size=args.shard_size, shard=args.shard,
                limit=args.limit, overwrite=args.overwrite, backend=args.backend, base_url=args.base_url,
                max_in_flight=args.max_in_flight, samples=args.samples, teacher_model=args.teacher_model, batch_size=args.batch_size)
    return 0
