"""nDCG@10 against train.base_interpolation, one panel per set, one line per seed, the base and its 0.01 band.

    .venv/bin/python benchmarks/results/student-wise-sweep-epyc-2core/plot.py
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
SETS = ["C dev", "B dev", "A dev", "demo held-back (UGC)"]


def main() -> None:
    rows = json.loads((HERE / "results.json").read_text())["rows"]
    base = next(r for r in rows if r["system"].startswith("base:"))
    first = next(r for r in rows if r["system"] == "first-stage order")
    curves: dict[str, dict[float, dict]] = defaultdict(dict)
    for r in rows:
        if "base_interpolation" in r:
            seed = re.search(r"seed(\d+)", r["system"]).group(1)
            curves[seed][r["base_interpolation"]] = r
    fig, axes = plt.subplots(1, len(SETS), figsize=(16, 4))
    for ax, s in zip(axes, SETS):
        for seed, pts in sorted(curves.items()):
            a = sorted(pts)
            ax.plot(a, [pts[x][s] for x in a], marker="o", label=f"seed {seed}")
        ax.axhline(base[s], color="k", ls="--", lw=1, label="base by cosine")
        ax.axhspan(base[s] - 0.01, base[s], color="k", alpha=0.08, label="within 0.01 below the base")
        if first[s] > ax.get_ylim()[0]:
            ax.axhline(first[s], color="grey", ls=":", lw=1, label="first-stage order")
        ax.axvline(0.5, color="tab:red", lw=0.8, alpha=0.5)
        ax.set_title(s)
        ax.set_xlabel("base_interpolation a")
    axes[0].set_ylabel("nDCG@10")
    axes[0].legend(fontsize=8)
    fig.suptitle("minilm-cqa-bi-rank-wise-q1 (bf16, 6,700 labels of the 0.490 judge): WiSE-FT mix with its base, "
                 "3 training seeds;\n"
                 "a = 1 is the student unmixed, the red line the recipe's 0.5; 2-core AMD EPYC")
    fig.tight_layout()
    fig.savefig(HERE / "wise_sweep.png", dpi=110)


if __name__ == "__main__":
    main()
