"""Before/after calibration on SemEval C dev: a table and one reliability diagram from four `r3edge eval --json`
outputs (DIR/dev-{before,after}-{V}.json for each variant V; usage: calibration_before_after.py DIR [fp32,int8] [FIT], FIT naming
what the calibration was fitted on, default "fitted on A train").
The diagram shows the last variant listed (the served int8 one)."""
import json
import sys

from r3edge.core.calibration import plot_reliability

d = sys.argv[1]
variants = (sys.argv[2] if len(sys.argv) > 2 else "fp32,int8").split(",")
fit = sys.argv[3] if len(sys.argv) > 3 else "fitted on A train"
rows, lines = {}, []
for v in variants:
    for when in ("before", "after"):
        r = json.load(open(f"{d}/dev-{when}-{v}.json"))
        rel, m = r["student_reliability"], r["student_vs_gold"]
        if v == variants[-1]:
            t = r["temperature"]
            rows[f"{v}, " + ("uncalibrated" if when == "before" else f"T={t:.2f} ({fit})")] = rel
        lines.append(f"| {v} | {when} | {r['temperature']:.3f} | {m['ece']:.4f} | {m['accuracy']:.3f} | {m['ndcg@10']:.3f} | {rel['n']} |")
plot_reliability(rows, f"{d}/reliability-dev.png", f"SemEval C dev, {rel['n']} gold-labelled pairs")
print("| variant | calibration | temperature | ECE | accuracy | nDCG@10 | pairs |\n|---|---|---:|---:|---:|---:|---:|")
print("\n".join(lines))
