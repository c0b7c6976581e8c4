"""Before/after calibration on SemEval C dev: a table and one reliability diagram from four `r3edge eval --json`
outputs (DIR/dev-{before,after}-{fp32,int8}.json; usage: calibration_before_after.py DIR)."""
import json
import sys

from r3edge.core.calibration import plot_reliability

d = sys.argv[1]
rows, lines = {}, []
for v in ("fp32", "int8"):
    for when in ("before", "after"):
        r = json.load(open(f"{d}/dev-{when}-{v}.json"))
        rel, m = r["student_reliability"], r["student_vs_gold"]
        if v == "int8":
            t = r["temperature"]
            rows[f"{v}, " + ("uncalibrated" if when == "before" else f"T={t:.2f} (fitted on A train)")] = rel
        lines.append(f"| {v} | {when} | {r['temperature']:.3f} | {m['ece']:.4f} | {m['accuracy']:.3f} | {m['ndcg@10']:.3f} | {rel['n']} |")
plot_reliability(rows, f"{d}/reliability-dev.png", f"SemEval C dev, {rel['n']} gold-labelled pairs")
print("| variant | calibration | temperature | ECE | accuracy | nDCG@10 | pairs |\n|---|---|---:|---:|---:|---:|---:|")
print("\n".join(lines))
