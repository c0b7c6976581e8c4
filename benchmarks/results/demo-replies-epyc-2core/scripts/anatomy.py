"""Token anatomy of the cold start's steps: the shared prefix, each row's tokens before its first label, and its
labelled tokens (means over the chunks and rows ``teacher_sft`` would train on). It stops before training.

Usage: ``python anatomy.py SFT_PAIRS_JSONL`` (a demo run's ``sft-pairs.jsonl``)."""
import statistics
import sys
from pathlib import Path

from r3edge.distill.teacher import sft

IGNORE = -100


class Stop(Exception):
    pass


def grab(model, tokenizer, chunks, *args, **kwargs):
    labels = [lab for c in chunks for lab in c["labels"]]
    print("chunks", len(chunks), "rows", len(labels),
          "prefix mean", statistics.mean(len(c["prefix"]) for c in chunks),
          "row mean", statistics.mean(len(r) for c in chunks for r in c["input_ids"]),
          "row tokens before the first label, mean", statistics.mean(next(i for i, x in enumerate(lab) if x != IGNORE) for lab in labels),
          "labelled tokens, mean", statistics.mean(sum(x != IGNORE for x in lab) for lab in labels))
    raise Stop


sft._fit = grab
try:
    sft.teacher_sft(sft.load_sft_config("r3a-smollm2-demo"), Path("runs/anatomy"), gold=Path(sys.argv[1]), max_steps=1,
                    log=lambda *a, **k: None)
except Stop:
    pass
