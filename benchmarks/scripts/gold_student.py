"""A student trained quickly on the gold labels of the demo's generated data, and its top-100 requests.

    python benchmarks/scripts/gold_student.py --out runs/ov-bench

For speed studies that need trained weights (quantization error on random weights says little) but
not a teacher: the gold labels of ``r3edge.distill.data.ugc.generate`` (the demo's data) stand in for
the teacher's distributions (0.9 on the gold label, 0.05 on each other), so no judge runs. Writes
``OUT/pairs.jsonl`` (training and calibration pairs), ``OUT/heldout.jsonl`` (top-100 requests on
held-back phrasings, as the demo's), ``OUT/labels/`` and ``OUT/student/`` (``--student`` config,
default the MiniLM cross-encoder ``minilm-cqa``). It is not the demo's student: the demo distils a
cold-started teacher into a cosine student.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--student", default="minilm-cqa", help="student config name or YAML path")
    ap.add_argument("--train-queries", type=int, default=20)
    ap.add_argument("--train-candidates", type=int, default=20)
    ap.add_argument("--heldout-queries", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from r3edge.core.labels import write_manifest, write_shard
    from r3edge.core.pairs import write_queries
    from r3edge.distill.data.ugc import generate
    from r3edge.distill.student.train import train_student

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train = generate(args.train_queries, args.train_candidates, seed=args.seed, start=0)
    # held-back queries start past every training phrasing (query i is topic i % 10, phrasing i // 10)
    start = 10 * (-(-args.train_queries // 10))
    write_queries(out / "pairs.jsonl", train)
    write_queries(out / "heldout.jsonl", generate(args.heldout_queries, 100, seed=args.seed, start=start))
    labels = out / "labels"
    records = []
    for q in train:
        for c in q.candidates:
            probs = [0.05, 0.05, 0.05]
            probs[c.label] = 0.9
            records.append(dict(qid=q.qid, docid=c.docid, query=q.query, text=c.text, gold=c.label, judge="gold",
                                teacher_model="gold", prompt_hash="gold", probs=probs, score=c.label, format_ok=True))
    labels.mkdir(parents=True, exist_ok=True)
    write_shard(labels, records)
    write_manifest(labels, {"judge": "gold", "teacher_model": "gold", "prompt_hash": "gold", "n_pairs": len(records),
                            "n_done": len(records), "complete": True})
    train_student(labels, args.student, out / "student")
    print(f"{out}/student: {args.student} trained on {len(records)} gold-labelled pairs; {out}/heldout.jsonl")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
