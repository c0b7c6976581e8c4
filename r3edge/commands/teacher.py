"""Work on the teacher judge itself. `sft`: R³A's cold start, supervised fine-tuning of a generative
judge on conversations in its judge's own format (loss on the replies only; full or LoRA). `grpo`:
the reinforcement stage after it, GRPO (TRL) with R³A's rule reward or Retro*'s composite reward.

Traces come from a stronger judge's labels (production: `r3edge label` with e.g. r3a-7b, then
`--traces LABELS_DIR --gold` the pairs file they were labelled from), or, where no stronger judge is
reachable, are templated from gold labels (`--gold PAIRS.jsonl` alone): those teach the reply format
and the labels, not reasoning. The result is a plain HF directory that labels with

    r3edge label PAIRS --teacher r3a-smollm2 --teacher-model DIR --out LABELS

(or `--backend openai` against a vLLM serving DIR).

Several GPUs: `accelerate launch --multi_gpu --num_processes N -m r3edge teacher sft ...` (the config's
gradient_accumulation_steps a multiple of N) takes the steps one process takes; `teacher grpo` launches
the same way, with train.prompts_per_step per process, not compared with one process (docs/distillation.md,
"Several GPUs").
"""

from __future__ import annotations

import argparse

from r3edge.commands import HelpFormatter


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="teacher_command", metavar="<action>", required=True,
                                help="sft: supervised fine-tuning on judge traces; grpo: reinforcement on gold pairs")
    sft = sub.add_parser("sft", help="fine-tune a generative judge on traces in its judge's format (R³A cold start)",
                         description=__doc__, formatter_class=HelpFormatter)
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

    grpo = sub.add_parser("grpo", help="GRPO on gold pairs with R³A's or Retro*'s reward (TRL)",
                          description=GRPO_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    grpo.add_argument("--config", default="r3a-smollm2-demo",
                      help="GRPO config: a shipped name (configs/grpo/) or a YAML path; names the teacher config and the reward")
    grpo.add_argument("--pairs", required=True, metavar="PAIRS.jsonl", help="candidate-list pairs with gold labels: the prompts")
    grpo.add_argument("--model", default=None, metavar="DIR",
                      help="the judge's weights, e.g. `r3edge teacher sft` output (default: the teacher config's model)")
    grpo.add_argument("--out", required=True, metavar="DIR", help="model directory to write (replaced atomically at the end)")
    grpo.add_argument("--max-steps", type=int, default=None, metavar="N", help="stop after N optimiser steps")
    grpo.add_argument("--eval-pairs", default=None, metavar="PAIRS.jsonl",
                      help="gold pairs whose mean reward is measured before, during (train.eval_steps) and after training")


GRPO_HELP = """GRPO (TRL's GRPOTrainer) on a pairs file's gold labels. Rewards: `r3a`, R = I_format · r_score
(every tag, in order, the extract verbatim; 1 for the gold score, the config's near_miss one point
off); `retro`, alpha · intra-document + (1 - alpha) · inter-document over couples of a more and a
less relevant pair. R³A is rolled out over both rounds. The result labels unchanged with

    r3edge label PAIRS --teacher r3a-smollm2 --teacher-model DIR --out LABELS
"""


def run(args: argparse.Namespace) -> int:
    from r3edge.core.errors import require

    require("torch", "train")
    require("transformers", "train")
    if args.teacher_command == "grpo":
        require("trl", "train")
        from r3edge.distill.teacher.grpo import teacher_grpo

        teacher_grpo(args.config, args.out, pairs=args.pairs, model=args.model, max_steps=args.max_steps,
                     eval_pairs=args.eval_pairs)
        return 0
    from r3edge.distill.teacher.sft import teacher_sft

    teacher_sft(args.config, args.out, gold=args.gold, traces=args.traces, max_examples=args.max_examples,
                epochs=args.epochs, max_steps=args.max_steps)
    return 0
