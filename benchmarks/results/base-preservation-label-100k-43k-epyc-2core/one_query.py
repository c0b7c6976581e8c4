"""One held-back UGC question ranked by the base and by students: their top 10 with each post's grade.

`report-paired.md` shows the 42.8k student's -0.033 on the demo's held-back UGC set coming from one question of ten.
This prints that question's top 10 for the base (all-MiniLM-L6-v2 by cosine) and for each student folder given, as
base_preservation.py ranks them (the torch scoring graph, expected score over the label values), and the rank of
every grade-2 post. `--alphas` also re-mixes each student with its pretrained weights as `train.base_interpolation`
would, computed as base_preservation.py's `--interpolations` computes it.

    .venv/bin/python benchmarks/results/base-preservation-label-100k-43k-epyc-2core/one_query.py --qid ugc026 \
        --students runs/s70/student-43k --alphas 0.4 \
        --out benchmarks/results/base-preservation-label-100k-43k-epyc-2core/one_query-ugc026.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from r3edge.core.config import StudentConfig, load_yaml
from r3edge.distill.data.ugc import generate
from r3edge.distill.student.train import remixed
from r3edge.model.student import base_cosine_scoring, lm_score_fn, load_student

VALUES = np.asarray([0.0, 1.0, 2.0])


def ranked(scoring, query, candidates) -> list[str]:
    logits = scoring([query] * len(candidates), [c.text for c in candidates])
    expected = scoring.scorer.probabilities(logits) @ VALUES
    order = np.argsort(-expected, kind="stable")
    lines = [f"| {r + 1} | {candidates[i].label} | {expected[i]:.3f} | {candidates[i].text[:100]!r} |"
             for r, i in enumerate(order[:10])]
    ranks = sorted(int(np.where(order == i)[0][0]) + 1 for i, c in enumerate(candidates) if c.label == 2)
    return [f"Grade-2 posts at ranks {ranks}.", "", "| rank | grade | expected score | post |", "|---:|---:|---:|---|",
            *lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qid", required=True)
    ap.add_argument("--students", nargs="+", required=True, help="trained student folders")
    ap.add_argument("--alphas", default="", help="comma-separated train.base_interpolation values to re-mix each "
                                                  "student at, beside the weights as saved")
    ap.add_argument("--ugc-seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    q = next(q for q in generate(10, 100, seed=args.ugc_seed, start=20) if q.qid == args.qid)
    grades = np.bincount([c.label for c in q.candidates], minlength=3)
    out = [f"# {q.qid}: {q.query!r}", "", f"{len(q.candidates)} posts: {grades[0]} of grade 0, {grades[1]} of grade 1, "
           f"{grades[2]} of grade 2 (the demo's held-back UGC set, seed {args.ugc_seed}).", ""]
    students = [(Path(s), json.loads((Path(s) / "train_report.json").read_text())) for s in args.students]
    # the base of the first student's config, as base_preservation.py takes it
    config = load_yaml(students[0][1]["config"]["name"], StudentConfig)
    out += ["## base: all-MiniLM-L6-v2 by cosine", "", *ranked(base_cosine_scoring(config), q.query, q.candidates)]
    for student, report in students:
        config = load_yaml(report["config"]["name"], StudentConfig)
        lm, scorer = load_student(student)
        saved = report["config"]["train"].get("base_interpolation")
        out += [f"## {student} ({config.name}), as saved (base_interpolation {saved})", "",
                *ranked(lm_score_fn(lm.eval(), scorer, name=str(student)), q.query, q.candidates)]
        for a in remixed(lm, config, [float(x) for x in args.alphas.split(",") if x], saved_at=saved):
            out += [f"## {student}, re-mixed at base_interpolation {a:g}", "",
                    *ranked(lm_score_fn(lm.eval(), scorer, name=f"{student}@{a}"), q.query, q.candidates)]
    Path(args.out).write_text("\n".join(out))
    print("\n".join(out))


if __name__ == "__main__":
    main()
