"""Packed row lengths (the scorer's ids, what a training step pays for) of C train's 6,700 labelled pairs and
of the 100k pairs (runs/pairs-100k, from `r3edge pairs --semeval DIR --bm25-k 243`), for the
minilm-cqa-bi-rank-wise scorer."""

import json

import numpy as np

from r3edge.core.config import StudentConfig, load_yaml, resolve_config
from r3edge.core.labels import read_labels
from r3edge.model.student import create_student

cfg = load_yaml(resolve_config("minilm-cqa-bi-rank-wise", "student"), StudentConfig)
_, scorer = create_student(cfg)
t = read_labels("benchmarks/results/judge-qwen-coder-cold-start-lora-h100/labels/train")
a = [len(e.input_ids) for e in scorer.encode_batch(t.column("query").to_pylist(), t.column("text").to_pylist())]
q, d = [], []
for line in open("runs/pairs-100k/semeval-train-bm25-243.jsonl"):
    r = json.loads(line)
    for c in r["candidates"]:
        q.append(r["query"])
        d.append(c["text"])
b = [len(e.input_ids) for e in scorer.encode_batch(q, d)]
for name, x in (("C train 6.7k", a), ("100k", b)):
    x = np.asarray(x)
    squares = np.square(x.astype(float)).sum() / 1e9
    print(f"{name}: {len(x)} pairs, mean {x.mean():.1f} tokens, median {np.median(x):.0f}, "
          f"p90 {np.percentile(x, 90):.0f}, sum of squares/1e9 {squares:.2f}")
