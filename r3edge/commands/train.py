"""Distil teacher labels into a student: KL(teacher ‖ student) on the label-token logits only.

Reads a complete labels directory, or several of one teacher (an unfinished `r3edge label` run is
refused; several are checked disjoint: the shards of a `--shard i/n` run done so far), creates the student
from its config (pretrained weights or a random init), fixes its scorer.json, trains with the
transformers Trainer and writes weights + scorer.json + tokenizer.json + train_report.json.

Several GPUs: `accelerate launch --multi_gpu --num_processes N -m r3edge train ...` takes the optimiser
steps one process takes (the config's batch_size x gradient_accumulation_steps is the global batch);
docs/distillation.md, "Several GPUs".

A run longer than one sitting: `--checkpoints DIR` keeps a resumable checkpoint, `--max-seconds S` ends
the sitting (saving the student trained so far), and the same command with `--resume` goes on from there.
"""

from __future__ import annotations


def configure(parser):
    parser.add_argument("labels_dir", metavar="LABELS_DIR", nargs="+",
                        help="labels directory written by `r3edge label`; several (the shards of one labelling run "
                             "done so far) are trained on as one set, refused unless they are one teacher's and disjoint")
    parser.add_argument("--student", required=True, metavar="CONFIG",
                        help="student config: a shipped name (smollm2-demo, qwen2.5-1.5b, ...) or a YAML path")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="student directory to write (replaced atomically when training finishes)")
    parser.add_argument("--max-steps", type=int, default=None, metavar="N",
                        help="stop after N optimiser steps (overrides the config's epochs)")
    parser.add_argument("--drop-unformatted", action="store_true",
                        help="train only on records whose teacher output was well formed (format_ok); "
                             "by default all are kept, since the forced score read-out is still the teacher's distribution")
    parser.add_argument("--eval-labels", default=None, metavar="DIR",
                        help="held-out labels directory to evaluate after training (metrics go into train_report.json)")
    parser.add_argument("--max-seconds", type=float, default=None, metavar="S",
                        help="end this sitting after the step that passes S seconds of training (overrides the "
                             "config's train.max_seconds); the student is saved, and with --checkpoints the run can resume")
    parser.add_argument("--checkpoints", default=None, metavar="DIR",
                        help="keep a resumable checkpoint in DIR (every train.checkpoint_seconds, and where "
                             "--max-seconds ends the sitting); DIR/run.json records the run")
    parser.add_argument("--only-pairs", default=None, metavar="PAIRS_FILE",
                        help="train only on the labels of the pairs in this pairs file (each must be labelled): two "
                             "judges' labels compared as teachers of one student on the same pairs")
    parser.add_argument("--resume", action="store_true",
                        help="go on from the latest checkpoint in --checkpoints DIR; refused if its labels, config "
                             "or step limit differ, or if that run already finished")


def run(args) -> int:
    from r3edge.core.errors import require

    require("torch", "train")
    require("transformers", "train")
    from r3edge.distill.student.train import train_student

    train_student(args.labels_dir, args.student, args.out, max_steps=args.max_steps,
                  eval_labels_dir=args.eval_labels, drop_unformatted=args.drop_unformatted,
                  max_seconds=args.max_seconds, checkpoints=args.checkpoints, resume=args.resume,
                  only_pairs=args.only_pairs)
    return 0
