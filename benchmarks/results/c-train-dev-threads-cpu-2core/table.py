"""The three students' C dev metrics side by side (their `r3edge eval --json` files here) -> table.md."""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROWS = [("all of C train (6,700 pairs)", "eval-dev-full.json"),
        ("C train without the dev threads (5,350)", "eval-dev-clean.json"),
        ("C train without 135 random threads (5,350; the size control)", "eval-dev-control.json")]
lines = ["| `minilm-cqa-bi-rank-wise-q1` trained on | C dev nDCG@10 | accuracy | macro F1 | agreement with the teacher |",
         "|---|---:|---:|---:|---:|"]
for name, f in ROWS:
    r = json.loads((HERE / f).read_text())
    g, t = r["student_vs_gold"], r["student_vs_teacher"]
    lines.append(f"| {name} | {g['ndcg@10']:.3f} | {g['accuracy']:.3f} | {g['f1_macro']:.3f} | {t['accuracy_vs_teacher']:.3f} |")
(HERE / "table.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
