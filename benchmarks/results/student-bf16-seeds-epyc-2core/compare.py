"""bf16 against fp32 training of minilm-cqa-bi-rank-wise-q1, seed by seed, on C dev: each student trained by
base_preservation.py (its --work/students) is scored by `r3edge eval`'s code in torch fp32 on the 0.490 judge's C dev
labels; then, for each seed, the bf16 student against the fp32 one: max |delta expected score| over the 5,000 pairs,
mean top-10 overlap per question (by expected score), and the difference of each metric.

    .venv/bin/python benchmarks/results/student-bf16-seeds-epyc-2core/compare.py runs/s64/bp/students OUT_DIR
"""

import json
import statistics
import sys
from pathlib import Path

import numpy as np

from r3edge.benchmarks.machine import machine_info
from r3edge.core.labels import read_labels
from r3edge.distill.student.evaluate import evaluate, torch_student_score_fn

DEV = "benchmarks/results/judge-qwen-coder-cold-start-lora-h100/labels/dev"
students_root, out = Path(sys.argv[1]), Path(sys.argv[2])
dirs = {p.parent.name.removesuffix(".yaml"): p.parent for p in sorted(students_root.rglob("scorer.json"))}
rows, scores = {}, {}
for name, d in dirs.items():
    fn = torch_student_score_fn(d)
    res = evaluate(DEV, fn, return_logits=True)
    report = json.loads((d / "train_report.json").read_text())
    # the expected score as evaluate() and the server compute it: the scorer's probabilities times the label values
    values = np.asarray(fn.label_values or fn.scorer.spec.label_values, dtype=np.float64)
    scores[name] = fn.scorer.probabilities(res.pop("_logits")) @ values
    for k in ("_gold", "_has_gold"):
        res.pop(k)
    rows[name] = {"bf16": report["bf16"], "seed": report["config"]["train"]["seed"], "steps": report["steps"],
                  "train_s": report["wall_time_s"], "s_per_step": round(report["wall_time_s"] / report["steps"], 3),
                  "ndcg@10": res["student_vs_gold"]["ndcg@10"], "accuracy": res["student_vs_gold"]["accuracy"],
                  "agreement": res["student_vs_teacher"]["accuracy_vs_teacher"],
                  "kl": res["student_vs_teacher"]["kl_teacher_student"],
                  "eval": res}
    print(name, {k: v for k, v in rows[name].items() if k != "eval"}, flush=True)

qids = np.asarray(read_labels(DEV, columns=["qid"]).column("qid").to_pylist())
pairs = {}
for seed in sorted({r["seed"] for r in rows.values()}):
    a, b = f"q1-fp32-seed{seed}", f"q1-bf16-seed{seed}"
    if a not in scores or b not in scores:
        continue
    overlap = []
    for q in dict.fromkeys(qids):
        m = qids == q
        top = [set(np.argsort(-scores[n][m], kind="stable")[:10]) for n in (a, b)]
        overlap.append(len(top[0] & top[1]) / 10)
    pairs[seed] = {"max_abs_delta_expected_score": float(np.abs(scores[a] - scores[b]).max()),
                   "mean_abs_delta_expected_score": float(np.abs(scores[a] - scores[b]).mean()),
                   "mean_top10_overlap": statistics.fmean(overlap),
                   **{f"delta_{k}": rows[b][k] - rows[a][k] for k in ("ndcg@10", "accuracy", "agreement", "kl")}}
    print(seed, pairs[seed], flush=True)
out.mkdir(parents=True, exist_ok=True)
(out / "compare.json").write_text(json.dumps({"machine": machine_info(), "labels": DEV, "students": rows,
                                              "bf16_vs_fp32_by_seed": pairs}, indent=2) + "\n")
lines = ["| student | bf16 | seed | s / step (whole run) | C dev nDCG@10 | accuracy | agreement with the teacher | KL(teacher ‖ student) |",
         "|---|---|---:|---:|---:|---:|---:|---:|"]
for name, r in rows.items():
    lines.append(f"| {name} | {r['bf16']} | {r['seed']} | {r['s_per_step']:.2f} | {r['ndcg@10']:.4f} | {r['accuracy']:.4f} | "
                 f"{r['agreement']:.4f} | {r['kl']:.4f} |")
lines += ["", "| seed | max abs Δ expected score | mean abs Δ | mean top-10 overlap | Δ nDCG@10 | Δ accuracy | Δ agreement | Δ KL |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|"]
for seed, p in pairs.items():
    lines.append(f"| {seed} | {p['max_abs_delta_expected_score']:.4f} | {p['mean_abs_delta_expected_score']:.4f} | "
                 f"{p['mean_top10_overlap']:.3f} | {p['delta_ndcg@10']:+.4f} | {p['delta_accuracy']:+.4f} | "
                 f"{p['delta_agreement']:+.4f} | {p['delta_kl']:+.4f} |")
(out / "compare.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
