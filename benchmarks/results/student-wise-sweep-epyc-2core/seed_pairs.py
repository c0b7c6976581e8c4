"""Two seeds of the same recipe, question by question: the noise a student-against-student comparison carries.

Reads `per_query.json` (written by `per_query.py`); pairs every two seeds at each mix on each set and bootstraps the
mean difference over questions (10,000 resamples) with `r3edge.core.metrics.paired_bootstrap`, as `per_query.py` does
against the base.
Writes `seed_pairs.md`.

    .venv/bin/python benchmarks/results/student-wise-sweep-epyc-2core/seed_pairs.py
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

from r3edge.core.metrics import paired_bootstrap

HERE = Path(__file__).parent


def main() -> None:
    per = json.loads((HERE / "per_query.json").read_text())["per_query"]
    groups: dict[tuple[str, str], list[tuple[str, dict]]] = {}
    for key, values in per.items():
        m = re.search(r"seed(\d+)\.yaml@([0-9.]+)/(.+)$", key)
        if m:
            groups.setdefault((m.group(2), m.group(3)), []).append((m.group(1), values))
    lines = ["| a | set | seeds | mean diff | per-question SD | 95% bootstrap interval | questions |",
             "|---:|---|---|---:|---:|---|---:|"]
    for (a, set_name), students in sorted(groups.items()):
        for (s1, v1), (s2, v2) in itertools.combinations(sorted(students, key=lambda x: x[0]), 2):
            r = paired_bootstrap(v1, v2, boot=10000)
            lines.append(f"| {a} | {set_name} | {s1} − {s2} | {r['mean_diff']:+.4f} | {r['sd']:.3f} | "
                         f"[{r['ci95'][0]:+.4f}, {r['ci95'][1]:+.4f}] | {r['queries']} |")
    (HERE / "seed_pairs.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
