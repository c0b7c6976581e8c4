"""Work on the teacher judge itself. `sft`: R³A's cold start, supervised fine-tuning of a generative
judge on conversations in its judge's own format (loss on the replies only; full or LoRA).

Traces come from a stronger judge's labels (production: `r3edge label` with e.g. r3a-7b, then
`--traces LABELS_DIR --gold` the pairs file they were labelled from), or, where no stronger judge is
reachable, are templated from gold labels (`--gold PAIRS.jsonl` alone): those teach the reply format
and the labels, not reasoning. The result is a plain HF directory that labels with

    r3edge label PAIRS --teacher r3a-smollm2 --teacher-model DIR --out LABELS

(or `--backend openai` against a vLLM serving DIR).
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="teacher_command", metavar="<action>", required=True,
                                help="sft: supervised fine-tuning on judge traces")
    sft = sub.add_parser("sft", help="fine-tune a generative judge on traces in its judge's format (R³A cold start)",
                         description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sft.add_argument("--config", default="r3a-smollm2-gold",
                     help="SFT config: a shipped name (configs/sft/) or a YAML path; names the teacher config whose prompts it learns")
    sft.add_argument("--gold", required=True, metavar="PAIRS.jsonl",
                     help="candidate-list pairs: alone, templated traces from their gold labels; with --traces, "
                          "the file those labels were made from (its aux posts and metadata rebuild the prompts)")
    sft.add_argument("--traces", nargs="+", default=None, metavar="LABELS_DIR",
                     help="labels directories of a stronger judge (`r3edge label` output) whose replies to train on")
    sft.add_argument("--out", required=True, metavar="DIR", help="model directory to write (replaced atomically at the end)")
    sft.add_argument("--max-examples", type=int, default=None, metavar="N",
                     help="train on at most N traces (a seeded subset; the config's traces.max_examples when left out)")
    sft.add_argument("--epochs", type=float, default=None, metavar="E", help="epochs (the config's train.epochs when left out)")
    sft.add_argument("--max-steps", type=int, default=None, metavar="N", help="stop after N optimiser steps")


def run(args: argparse.Namespace) -> int:
    from r3edge.core.errors import require

    require("torch", "train")
    require("transformers", "train")
    from r3edge.distill.sft import teacher_sft

    teacher_sft(args.config, args.out, gold=args.gold, traces=args.traces, max_examples=args.max_examples,
                epochs=args.epochs, max_steps=args.max_steps)
    return 0
