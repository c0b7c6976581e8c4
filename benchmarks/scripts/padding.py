#!/usr/bin/env python3
"""How many tokens a top-100 costs a padded graph against a packed one, under the engine's micro-batch plan.

A micro-batch pads every pair to its longest member (``plan_batches`` sorts by length first); a graph in ONNX
Runtime's packing mode (the ``fp16-packed`` variant) computes only the real tokens. This counts, for each
SemEval 2016 C dev top-100 as the served student tokenises it, the real tokens and the padded tokens of the
micro-batches ``r3edge.core.scoring.plan_batches`` makes at several limits, on each path the student's head is
served by: prefix reuse (a candidate is its document + the template's tail, the query runs once; cosine and causal
students) and the single graph (the whole pair; causal and cross-encoder students). It needs no model weights and
no GPU: the student's config gives its tokenizer and its scoring contract. Skips (exit 0 with a message) without
the data.

    .venv/bin/python benchmarks/scripts/padding.py --out benchmarks/results/padding-semeval-c-dev-epyc-2core
    .venv/bin/python benchmarks/scripts/padding.py --student configs/student/qwen2.5-1.5b-random.yaml \\
        --out benchmarks/results/padding-semeval-c-dev-causal-epyc-2core
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
from r3edge.core.scoring import GPU_MAX_BATCH_SIZE, GPU_MAX_BATCH_TOKENS, PREFIX_HEADS, plan_batches
from r3edge.model.student import student_scorer

LIMITS = ((32768, 128), (GPU_MAX_BATCH_TOKENS, GPU_MAX_BATCH_SIZE), (4096, 64), (2048, 64), (1024, 64))
#: the path's name -> the tokens of one candidate on it
PATHS = {"prefix reuse": lambda e: len(e.suffix), "single graph": lambda e: len(e.input_ids)}


def _paths(head: str) -> list[str]:
    """The paths a student with ``head`` is served by: prefix reuse where the head has it, the single graph where
    the whole pair is a graph's input (a cosine student's single graph reads the document alone, as prefix reuse
    does)."""
    return [*(["prefix reuse"] if head in PREFIX_HEADS else []), *(["single graph"] if head != "cosine" else [])]


def count(lengths: list[list[int]], qids: list[str]) -> dict:
    """Real and padded tokens of each request's candidates (``lengths``, one list per request) at each of LIMITS."""
    real = [sum(ls) for ls in lengths]
    rows, per_request = [], [{"qid": qid, "real": r} for qid, r in zip(qids, real)]
    for tokens, size in LIMITS:
        padded, batches = [], []
        for ls, req in zip(lengths, per_request):
            plan = plan_batches(ls, tokens, size)
            padded.append(sum(len(b) * max(ls[i] for i in b) for b in plan))
            batches.append(len(plan))
            req[f"{tokens},{size}"] = [len(plan), padded[-1]]
        packed = [len(plan_batches(ls, tokens, size, padded=False)) for ls in lengths]
        rows.append({"max_batch_tokens": tokens, "max_batch_size": size, "padded_tokens_p50": float(np.median(padded)),
                     "padded_over_real": round(float(np.sum(padded) / np.sum(real)), 2),
                     "micro_batches_p50": float(np.median(batches)), "packed_micro_batches_p50": float(np.median(packed))})
    flat = np.concatenate([np.asarray(ls) for ls in lengths])
    return {"real_tokens_p50": float(np.median(real)),
            "candidate_tokens": {p: float(np.percentile(flat, p)) for p in (10, 50, 90, 99, 100)},
            "rows": rows, "per_request": per_request}


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
    scorer = student_scorer(load_yaml(args.student, StudentConfig))
    queries = read_queries(args.data)
    names = _paths(scorer.spec.head)
    lengths: dict[str, list[list[int]]] = {name: [] for name in names}
    for q in queries:
        enc = scorer.encode_batch([q.query] * len(q.candidates), [c.text for c in q.candidates])
        for name in names:
            lengths[name].append([PATHS[name](e) for e in enc])
    paths = {name: count(ls, [q.qid for q in queries]) for name, ls in lengths.items()}
    result = {"data": Path(args.data).name, "student_config": args.student, "head": scorer.spec.head,
              "requests": len(queries), "candidates_per_request": int(np.median([len(q.candidates) for q in queries])),
              "paths": paths, "machine": cpu_model()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# Padded against real tokens of a top-100 ({result['data']}, {len(queries)} requests)", "",
             f"Student config `{args.student}` (tokenizer and contract only; head `{scorer.spec.head}`). "
             f"Counted on {result['machine']}.", ""]
    for name, path in paths.items():
        what = "document + tail, after the shared prefix" if name == "prefix reuse" else "the whole pair"
        lines += [f"## {name} (a candidate is {what})", "",
                  f"Real tokens per top-100, p50: **{path['real_tokens_p50']:,.0f}**. Tokens of one candidate: "
                  + ", ".join(f"p{p} {v:.0f}" for p, v in path["candidate_tokens"].items()) + ".", "",
                  "| limits (tokens, pairs) | padded tokens p50 | padded / real | micro-batches p50 | packed: micro-batches p50 |",
                  "|---|---:|---:|---:|---:|"]
        for r in path["rows"]:
            lines.append(f"| {r['max_batch_tokens']:,}, {r['max_batch_size']} | {r['padded_tokens_p50']:,.0f} | "
                         f"{r['padded_over_real']:.2f} | {r['micro_batches_p50']:.0f} | {r['packed_micro_batches_p50']:.0f} |")
        lines.append("")
    (out / "report.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
