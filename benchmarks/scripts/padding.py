#!/usr/bin/env python3
"""How many tokens a top-100 costs a padded graph against a packed one, under the engine's micro-batch plan.

A micro-batch pads every pair to its longest member (``plan_batches`` sorts by length first); a graph in ONNX
Runtime's packing mode (the ``fp16-packed`` variant) computes only the real tokens. This counts, for each
SemEval 2016 C dev top-100 as the served student tokenises it (the prefix-reuse path: a candidate is its
document + the template's tail, the query runs once), the real tokens and the padded tokens of the micro-batches
``r3edge.core.scoring.plan_batches`` makes at several limits. It needs no model weights and no GPU: the student's
config gives its tokenizer and its scoring contract. Skips (exit 0 with a message) without the data.

    .venv/bin/python benchmarks/scripts/padding.py --out benchmarks/results/padding-semeval-c-dev-epyc-2core
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from r3edge.core.config import StudentConfig, load_yaml
from r3edge.core.hardware import cpu_model
from r3edge.core.pairs import read_queries
from r3edge.core.scoring import GPU_MAX_BATCH_SIZE, GPU_MAX_BATCH_TOKENS, plan_batches
from r3edge.model.student import create_student

LIMITS = ((32768, 128), (GPU_MAX_BATCH_TOKENS, GPU_MAX_BATCH_SIZE), (4096, 64), (2048, 64), (1024, 64))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/semeval2016-cqa/subtaskC_dev.jsonl")
    ap.add_argument("--student", default="configs/student/minilm-cqa-bi-rank-wise.yaml",
                    help="student config: its tokenizer and scoring contract (weights are not read)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if not Path(args.data).is_file():
        print(f"skipped: {args.data} is not here (the SemEval data lives outside the project)")
        return 0
    _, scorer = create_student(load_yaml(args.student, StudentConfig))
    queries = read_queries(args.data)
    lengths = []
    for q in queries:
        enc = scorer.encode_batch([q.query] * len(q.candidates), [c.text for c in q.candidates])
        lengths.append([len(e.suffix) for e in enc])
    real = [sum(ls) for ls in lengths]
    rows = []
    for tokens, size in LIMITS:
        padded, batches = [], []
        for ls in lengths:
            plan = plan_batches(ls, tokens, size)
            padded.append(sum(len(b) * max(ls[i] for i in b) for b in plan))
            batches.append(len(plan))
        packed = [len(plan_batches(ls, tokens, size, padded=False)) for ls in lengths]
        rows.append({"max_batch_tokens": tokens, "max_batch_size": size, "padded_tokens_p50": float(np.median(padded)),
                     "padded_over_real": round(float(np.sum(padded) / np.sum(real)), 2),
                     "micro_batches_p50": float(np.median(batches)), "packed_micro_batches_p50": float(np.median(packed))})
    flat = np.concatenate([np.asarray(ls) for ls in lengths])
    result = {"data": Path(args.data).name, "student_config": args.student, "requests": len(queries),
              "candidates_per_request": int(np.median([len(ls) for ls in lengths])),
              "real_tokens_p50": float(np.median(real)),
              "candidate_tokens": {p: float(np.percentile(flat, p)) for p in (10, 50, 90, 99, 100)},
              "rows": rows, "machine": cpu_model()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"# Padded against real tokens of a top-100 ({result['data']}, {len(queries)} requests)", "",
             f"Student config `{args.student}` (tokenizer and contract only), prefix-reuse candidates "
             f"(document + tail). Counted on {result['machine']}.", "",
             f"Real tokens per top-100, p50: **{result['real_tokens_p50']:,.0f}**. Tokens of one candidate: "
             + ", ".join(f"p{p} {v:.0f}" for p, v in result["candidate_tokens"].items()) + ".", "",
             "| limits (tokens, pairs) | padded tokens p50 | padded / real | micro-batches p50 | packed: micro-batches p50 |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['max_batch_tokens']:,}, {r['max_batch_size']} | {r['padded_tokens_p50']:,.0f} | "
                     f"{r['padded_over_real']:.2f} | {r['micro_batches_p50']:.0f} | {r['packed_micro_batches_p50']:.0f} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
