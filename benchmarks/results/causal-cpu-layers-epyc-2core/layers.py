"""Does a deeper truncation lift issue 47's causal CPU student above the first stage? One table, one plot.

`smollm2-cqa-rank` (SmolLM2-135M's first 6 of 30 layers) learnt the 0.490 judge's labels but ranked C dev at 0.329,
below the first-stage order it reranks (0.347). The chain's README recommended testing more layers before the 1.5B's
first layers. This reads the committed evaluations (nothing is scored again) of the same recipe on the same 6,700
labels at 6 and 12 layers, each trained and untrained, and of the whole 30 layers zero-shot, beside the chain's
floors, and writes `layers.md` and `layers.png`.

    .venv/bin/python benchmarks/results/causal-cpu-layers-epyc-2core/layers.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
CHAIN = HERE.parent / "chain-semeval-c-cpu-2core"
#: (layers, trained?, committed `r3edge eval` JSON or `r3edge train` report with its `eval`)
RUNS = [
    (6, False, CHAIN / "smollm2-cqa-rank-init-zero-shot.json"),
    (6, True, CHAIN / "smollm2-cqa-rank-train_report.json"),
    (12, False, HERE / "smollm2-cqa-rank-12l-init-zero-shot.json"),
    (12, True, HERE / "smollm2-cqa-rank-12l-train_report.json"),
    (30, False, CHAIN / "smollm2-135m-base-zero-shot.json"),
]
FLOORS = ("first-stage order", "BM25", "base by cosine", "minilm-cqa-bi-rank-wise-q1")


def _eval(path: Path) -> dict:
    """The evaluation on C dev of one committed file: an `r3edge eval` JSON, or a train report's ``eval``.

    Speed is left out: the 6-layer rows ran on another box (AVX2 only) beside the test suite, so their seconds are not
    comparable with these."""
    got = json.loads(path.read_text())
    return got.get("eval", got)


def _floors() -> dict[str, float]:
    """C dev nDCG@10 of the chain report's floors and its MiniLM student, by the start of their system name."""
    rows = json.loads((CHAIN / "results.json").read_text())["rows"]
    return {f: next(r["quality"]["ndcg@10"] for r in rows if r["system"].startswith(f)) for f in FLOORS}


def main() -> None:
    floors = _floors()
    lines = ["| layers | trained on 6,700 labels | C dev nDCG@10 | accuracy | ECE | agreement with teacher | "
             "KL(teacher ‖ student) | Spearman vs teacher |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    points = []
    for layers, trained, path in RUNS:
        ev = _eval(path)
        g, t = ev["student_vs_gold"], ev["student_vs_teacher"]
        lines.append(f"| {layers} | {'yes' if trained else 'no'} | {g['ndcg@10']:.3f} | {g['accuracy']:.3f} | "
                     f"{g['ece']:.3f} | {t['accuracy_vs_teacher']:.3f} | {t['kl_teacher_student']:.3f} | "
                     f"{t['spearman_expected_score']:.3f} |")
        points.append((layers, trained, g["ndcg@10"]))
    lines += ["", "| floor on C dev | nDCG@10 |", "|---|---:|"]
    lines += [f"| {f} | {v:.3f} |" for f, v in floors.items()]
    (HERE / "layers.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for trained, marker, label in ((True, "o", "trained on the judge's labels"), (False, "x", "untrained (zero-shot)")):
        xs = [p[0] for p in points if p[1] is trained]
        ys = [p[2] for p in points if p[1] is trained]
        ax.plot(xs, ys, marker=marker, linestyle="-" if trained else "none", label=label, markersize=8)
    for (name, value), style in zip(floors.items(), (":", "-.", "--", "-"), strict=True):
        ax.axhline(value, color="grey", linestyle=style, linewidth=1)
        ax.annotate(f"{name} {value:.3f}", (30, value), textcoords="offset points", xytext=(0, 3), ha="right",
                    fontsize=8, color="dimgrey")
    ax.set_xticks([6, 12, 30])
    ax.set_xlabel("SmolLM2-135M decoder layers kept")
    ax.set_ylabel("C dev nDCG@10")
    ax.set_title("Causal CPU student: layers vs the floors (same recipe, same 6,700 labels)", fontsize=10)
    ax.legend(loc="lower center", fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "layers.png", dpi=120)


if __name__ == "__main__":
    main()
