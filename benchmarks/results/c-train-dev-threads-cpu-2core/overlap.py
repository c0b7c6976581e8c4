"""How much of SemEval-2016 C dev the committed C train labels carry, the teacher's C dev nDCG@10 on the dev
questions that share candidates with C train against those that do not, and how much dev content the cold start's
gold pool holds (`write_fidelity_pairs`, every A and C train question), by `semeval_train_collection`'s rules.

    .venv/bin/python benchmarks/results/c-train-dev-threads-cpu-2core/overlap.py > overlap.json
"""
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from r3edge.core.labels import read_labels
from r3edge.core.metrics import ndcg_at_k
from r3edge.core.pairs import read_queries
from r3edge.distill.data.datasets import DevContent, _titled, semeval_queries, write_fidelity_pairs

DATA = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/semeval2016-cqa"
LABELS = "benchmarks/results/judge-qwen-coder-cold-start-lora-h100/labels"
train, dev = semeval_queries(DATA, "C", "train"), semeval_queries(DATA, "C", "dev")
train_texts = {c.text for q in train for c in q.candidates}
shared = {q.qid: sum(c.text in train_texts for c in q.candidates) for q in dev}
relevant = [(c.label or 0) > 0 for q in dev for c in q.candidates]
relevant_shared = [(c.label or 0) > 0 and c.text in train_texts for q in dev for c in q.candidates]
t = read_labels(f"{LABELS}/dev", columns=["qid", "gold", "probs"]).to_pylist()
qids = [r["qid"] for r in t]
gold = np.array([r["gold"] for r in t], dtype=float)
score = np.array([np.dot(r["probs"], [0.0, 1.0, 2.0]) for r in t])


def teacher_ndcg(keep) -> dict:
    idx = [i for i, q in enumerate(qids) if keep(q)]
    return ndcg_at_k(gold[idx], score[idx], [qids[i] for i in idx])


def gold_pool_dev_content() -> dict:
    rules = DevContent.of(DATA)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        write_fidelity_pairs(DATA, t / "sft-gold.jsonl", t / "train.jsonl", t / "dev.jsonl", sft_queries=1000)
        pool = read_queries(t / "sft-gold.jsonl")
    out = Counter(pairs=sum(len(q.candidates) for q in pool), questions=len(pool))
    for q in pool:
        if rules.question(q.query):
            out["dev_question_pairs"] += len(q.candidates)
            out["dev_questions"] += 1
            continue
        subject = q.query.split("\n", 1)[0].strip()
        for c in q.candidates:  # subtask A's comments come untitled, C's titled: either form counts
            why = rules.comment(c.docid, c.text) or rules.comment(c.docid, _titled(c.text, subject))
            if why:
                out[why] += 1
    return dict(out)


print(json.dumps({
    "c_dev_questions": len(dev),
    "sharing_candidates_with_c_train": sum(n > 0 for n in shared.values()),
    "shared_candidates_per_question": dict(sorted(Counter(shared.values()).items())),
    "relevant_candidates_shared": [sum(relevant_shared), sum(relevant)],
    "teacher_ndcg@10": {"all": teacher_ndcg(lambda q: True),
                        "questions_sharing_candidates": teacher_ndcg(lambda q: shared[q] > 0),
                        "questions_sharing_none": teacher_ndcg(lambda q: shared[q] == 0)},
    "cold_start_gold_pool": gold_pool_dev_content(),
}, indent=1))
