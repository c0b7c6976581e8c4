"""Where a student's agreement with its teacher lives: between questions, within them, or at the top.

`r3edge eval` reports one Spearman of expected scores over all 5,000 C dev pairs (0.755 for the 12-layer causal
student), yet that student ranks C dev below the first-stage order. A reranker is judged within each question, so this
splits the agreement:
- pooled Spearman (all pairs at once, as `r3edge eval`);
- the Spearman of per-question mean expected scores (does it know which questions have good comments);
- the mean over questions of the within-question Spearman (does it order one question's comments as the teacher does),
  beside the first-stage order's within-question Spearman with the same teacher, the floor a reranker must beat;
- and, since nDCG@10 reads only the top of each list, the mean overlap of its top 10 with the teacher's top 10 and its
  nDCG@10 with the teacher's expected scores as gains.
Last, each student against the first-stage order on gold, question by question (`paired_bootstrap`). The MiniLM student
of the same labels is the reference: what the same measures read for a student that is above every floor.

It scores C dev with each trained student in torch (about 8 min for the 12 causal layers, 2 for MiniLM, on 2 cores)
and writes `within_question.json` and `.md` here. The student directories are not committed (`run.sh` rebuilds them).

    .venv/bin/python benchmarks/results/causal-cpu-layers-epyc-2core/within_question.py \
        smollm2-cqa-rank-12l=runs/causal-12l/student minilm-cqa-bi-rank-wise-q1=runs/causal-12l/minilm \
        --semeval ../shared/data/semeval2016-cqa
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from r3edge.core.labels import read_labels
from r3edge.core.metrics import ndcg_at_k, paired_bootstrap
from r3edge.core.timing import top_k_overlap
from r3edge.distill.data.datasets import semeval_queries
from r3edge.distill.student.evaluate import evaluate, torch_student_score_fn

HERE = Path(__file__).resolve().parent
LABELS = HERE.parent / "judge-qwen-coder-cold-start-lora-h100/labels/dev"


def _rho(a, b) -> float | None:
    """Spearman, or None where either side is constant (a question whose comments one side scores alike)."""
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(spearmanr(a, b).statistic)


def split_agreement(qids: list[str], side: np.ndarray, teacher: np.ndarray, *, within_only: bool = False) -> dict:
    """Pooled, between-question and mean within-question Spearman of ``side`` against ``teacher``; the mean overlap
    of their top 10s; and ``side``'s nDCG@10 with the teacher's expected scores as gains. ``within_only``: ``side``
    restarts in every question (a first-stage rank), so its pooled and between-question values mean nothing and are
    left out (None)."""
    by_q: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(qids):
        by_q[q].append(i)
    within = [r for idx in by_q.values() if (r := _rho(side[idx], teacher[idx])) is not None]
    means = np.asarray([[side[idx].mean(), teacher[idx].mean()] for idx in by_q.values()])
    overlap = [top_k_overlap(teacher[idx], side[idx]) for idx in by_q.values()]
    return {"pooled": None if within_only else _rho(side, teacher),
            "between_question_means": None if within_only else _rho(means[:, 0], means[:, 1]),
            "within_question_mean": float(np.mean(within)), "within_question_n": len(within),
            "top10_overlap_mean": float(np.mean(overlap)),
            "ndcg@10_teacher_gains": ndcg_at_k(teacher, side, qids)["ndcg@10"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("students", nargs="+", metavar="NAME=DIR",
                    help="trained student directories, each named for the table (the 12-layer one after run.sh: "
                         "runs/causal-12l/student)")
    ap.add_argument("--semeval", required=True, help="the semeval2016-cqa folder (for the first-stage ranks)")
    args = ap.parse_args()

    table = read_labels(LABELS)
    qids = table.column("qid").to_pylist()
    rank = {c.docid: c.rank for q in semeval_queries(args.semeval, "C", "dev") for c in q.candidates}
    first_stage = -np.asarray([rank[d] for d in table.column("docid").to_pylist()], dtype=np.float64)
    students, label_values = [], set()
    for spec in args.students:
        name, _, directory = spec.partition("=")
        scoring = torch_student_score_fn(directory)
        got = evaluate(LABELS, scoring, return_logits=True)
        label_values.add(tuple(scoring.scorer.spec.label_values))
        students.append((name, directory, scoring.scorer.probabilities(got["_logits"])))
    if len(label_values) != 1:
        raise SystemExit(f"the students read different label values {sorted(label_values)}: one table needs one scale")
    values = np.asarray(label_values.pop(), dtype=np.float64)
    teacher = np.asarray(table.column("probs").to_pylist(), dtype=np.float64) @ values
    gold = values[np.asarray(table.column("gold").to_pylist())]
    students = [(name, directory, probs @ values) for name, directory, probs in students]
    on_gold = {name: ndcg_at_k(gold, side, qids, per_query=True)
               for name, side in [(n, s) for n, _, s in students] + [("first-stage order", first_stage),
                                                                      ("teacher", teacher)]}
    first = on_gold["first-stage order"]["ndcg@10_per_query"]
    out = {"labels": str(LABELS.relative_to(HERE.parent.parent.parent)),
           "teacher_ndcg@10": on_gold["teacher"]["ndcg@10"],
           "rows": [{"system": name, "student": directory, "ndcg@10": on_gold[name]["ndcg@10"],
                     "minus_first_stage": paired_bootstrap(on_gold[name]["ndcg@10_per_query"], first),
                     **split_agreement(qids, side, teacher)} for name, directory, side in students]
           + [{"system": "first-stage order", "ndcg@10": on_gold["first-stage order"]["ndcg@10"],
               **split_agreement(qids, first_stage, teacher, within_only=True)}]}
    (HERE / "within_question.json").write_text(json.dumps(out, indent=1) + "\n")
    rows = ["| expected score against the teacher's | pooled Spearman | Spearman of per-question means | "
            "mean within-question Spearman (questions) | top-10 overlap | nDCG@10, teacher's scores as gains | "
            "nDCG@10, gold | gold nDCG@10 minus the first stage, per question (95%) |",
            "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in out["rows"]:
        d = r.get("minus_first_stage")
        pooled, between = (("–", "–") if r["pooled"] is None
                           else (f"{r['pooled']:.3f}", f"{r['between_question_means']:.3f}"))
        paired = (f"{d['mean_diff']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]; {d['better']} better, "
                  f"{d['worse']} worse of {d['queries']}" if d else "–")
        rows.append(f"| {r['system']} | {pooled} | {between} | {r['within_question_mean']:.3f} "
                    f"({r['within_question_n']}) | {r['top10_overlap_mean']:.3f} | {r['ndcg@10_teacher_gains']:.3f} | "
                    f"{r['ndcg@10']:.3f} | {paired} |")
    rows += ["", f"The teacher on gold: nDCG@10 {out['teacher_ndcg@10']:.3f}."]
    (HERE / "within_question.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
