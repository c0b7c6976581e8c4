"""Does distillation keep what the student's base model knew? Cross-encoder vs cosine student, in and out of domain.

Each student config is trained by ``r3edge train`` (the code users run) on the same labels of
SemEval-2016 CQA subtask C train questions, then ranks four graded sets next to its untrained base
(the packaged all-MiniLM-L6-v2 by cosine) and the first-stage order:

* C dev (questions vs comments: the training task, other questions);
* B dev (questions vs related questions) and A dev (related questions vs their comments): the same
  forum, other tasks;
* the demo's held-back UGC requests (`r3edge demo`'s generator, ``--ugc-seed``, 0 by default): another
  domain entirely for a SemEval student, the home domain of a demo student.

The labels are a *gold proxy*: each pair's gold label with ``--smoothing`` spread over the others,
written as a labels directory. A perfect teacher isolates what fine-tuning itself does to the base;
a real judge's labels of SemEval need a GPU (issue 21) and drop in with ``--labels``. nDCG@10 is
r3edge's own (``r3edge.core.metrics``), scores come from the torch scoring graph (``lm_score_fn``),
the path export is checked against. ``--interpolations`` adds, for each trained student, the rows
``train.base_interpolation`` (WiSE-FT) would give: its pretrained weights mixed back in, computed from
the trained weights by the functions ``r3edge train`` runs. Every row is also paired with the base question by
question (``r3edge.core.metrics.paired_bootstrap``): the mean difference, a 95% bootstrap interval over the
set's questions and how often a resample falls 0.01 or more below the base, so that "within 0.01 of its base" is
read against what a set of 10 or 50 questions can resolve.

    .venv/bin/python benchmarks/scripts/base_preservation.py --out benchmarks/results/base-preservation-cpu-2core
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from r3edge.benchmarks.machine import machine_info
from r3edge.benchmarks.systems import baselines, scored_floor
from r3edge.core.labels import read_labels_union, write_manifest, write_shard
from r3edge.core.metrics import paired_bootstrap
from r3edge.core.pairs import QueryCandidates
from r3edge.core.scoring import DEFAULT_OVERFLOW, OVERFLOW
from r3edge.distill.data.datasets import sample_queries, semeval_queries
from r3edge.distill.data.ugc import generate


def proxy_labels(out: Path, queries: list[QueryCandidates], smoothing: float) -> Path:
    """A complete labels directory whose teacher distribution is each pair's gold label, smoothed."""
    if (out / "manifest.json").is_file():
        return out
    out.mkdir(parents=True)
    records = []
    for q in queries:
        for c in q.candidates:
            probs = [smoothing / 2] * 3
            probs[c.label] = 1 - smoothing
            records.append(dict(qid=q.qid, docid=c.docid, query=q.query, text=c.text, gold=c.label, judge="gold-proxy",
                                teacher_model=f"gold labels, smoothing {smoothing}", probs=probs, score=c.label,
                                format_ok=True))
    write_shard(out, records)
    write_manifest(out, {"judge": "gold-proxy", "teacher_model": "gold", "n_pairs": len(records),
                         "n_done": len(records), "complete": True})
    return out


def main() -> None:
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.distill.student.train import remixed, train_student
    from r3edge.model.student import base_cosine_scoring, lm_score_fn, load_student

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="../shared/data/semeval2016-cqa")
    ap.add_argument("--out", default="benchmarks/results/base-preservation-cpu-2core")
    ap.add_argument("--work", default="runs/base-preservation", help="labels and trained students")
    ap.add_argument("--students", default="minilm-cqa,minilm-cqa-bi")
    ap.add_argument("--train-queries", type=int, default=10, help="C train questions labelled (x100 comments)")
    ap.add_argument("--c-dev-queries", type=int, default=20)
    ap.add_argument("--a-dev-queries", type=int, default=60)
    ap.add_argument("--smoothing", type=float, default=0.15)
    ap.add_argument("--labels", nargs="+", default=None,
                    help="a real teacher's labels directory instead of the gold proxy; several (one teacher's shards) "
                         "are trained on as one set, as by `r3edge train`")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--interpolations", default="",
                    help="comma-separated a in (0, 1]: also rank each trained student with train.base_interpolation a "
                         "(WiSE-FT; 1: unmixed), computed from its trained weights as `r3edge train` computes it, also "
                         "for a student saved already mixed")
    ap.add_argument("--overflow", "--query-overflow", dest="overflow", choices=OVERFLOW, default=DEFAULT_OVERFLOW,
                    help="a query or document over the student's budget: cut (the one default of library and server) "
                         "or refused (--query-overflow: the name earlier reports' reproduce lines use)")
    ap.add_argument("--ugc-seed", type=int, default=0,
                    help="the demo seed whose held-back requests form the UGC set (`r3edge demo --seed`; that demo "
                         "student's home domain)")
    args = ap.parse_args()

    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sets = {
        "C dev": sample_queries(semeval_queries(args.data, "C", "dev"), args.c_dev_queries, args.seed),
        "B dev": semeval_queries(args.data, "B", "dev"),
        "A dev": sample_queries(semeval_queries(args.data, "A", "dev"), args.a_dev_queries, args.seed),
        "demo held-back (UGC" + (f", seed {args.ugc_seed})" if args.ugc_seed else ")"):
            generate(10, 100, seed=args.ugc_seed, start=20),
    }
    labels = [Path(d) for d in args.labels] if args.labels else [proxy_labels(
        work / "labels", sample_queries(semeval_queries(args.data, "C", "train"), args.train_queries, args.seed),
        args.smoothing)]
    names = [n for n in args.students.split(",") if n]
    alphas = [float(a) for a in args.interpolations.split(",") if a]
    if any(not 0 < a <= 1 for a in alphas):
        ap.error(f"--interpolations {args.interpolations}: each a must be in (0, 1] (1: the trained weights unmixed)")
    values = (0.0, 1.0, 2.0)  # SemEval's grades and the demo's are the gains, as in every r3edge report

    per_query: dict[str, dict[str, dict[str, float]]] = {}  # system -> set -> question -> nDCG@10

    def ranked(system: str, scoring) -> dict[str, float]:
        """The row's nDCG@10 on each set; each question's value is kept for the pairing with the base."""
        got = {k: scored_floor(v, scoring, values, per_query=True) for k, v in sets.items()}
        per_query[system] = {k: g["ndcg@10_per_query"] for k, g in got.items()}
        return {"system": system, **{k: g["ndcg@10"] for k, g in got.items()}}

    rows = [{"system": "first-stage order", **{k: baselines(v, values)["input_order"]["ndcg@10"] for k, v in sets.items()}}]
    base = base_cosine_scoring(load_yaml(names[0], StudentConfig), overflow=args.overflow)
    rows.append(ranked(f"base: {base.name}", base))
    for name in names:
        student = work / "students" / name
        t0 = time.time()
        if not (student / "scorer.json").is_file():
            train_student(labels, name, student)
        report = json.loads((student / "train_report.json").read_text())
        lm, scorer = load_student(student)
        scoring = lm_score_fn(lm.eval(), scorer, name=name, overflow=args.overflow)
        rows.append({**ranked(f"{name} ({load_yaml(name, StudentConfig).model.kind}), trained", scoring),
                     "train_pairs": report["n_examples"]["trained_on"],
                     # a run trained in sittings (`r3edge train --resume`): its wall_time_s is the last sitting's
                     "train_s": sum(s["seconds"] for s in report.get("sittings") or []) or report["wall_time_s"],
                     "wall_s": round(time.time() - t0, 1)})
        print(json.dumps(rows[-1]), flush=True)
        if alphas:
            config = load_yaml(name, StudentConfig)
            # a student saved already mixed (its own train.base_interpolation) is un-mixed first
            saved = report["config"]["train"].get("base_interpolation")
            for a in remixed(lm, config, alphas, saved_at=saved):
                scoring = lm_score_fn(lm.eval(), scorer, name=f"{name}@{a}", overflow=args.overflow)
                rows.append({**ranked(f"{name} ({config.model.kind}), trained, base_interpolation {a}", scoring),
                             "base_interpolation": a})
                print(json.dumps(rows[-1]), flush=True)
    # the labels' own questions and pairs (a given labels directory need not be SemEval's)
    qids = read_labels_union(labels, columns=["qid"])[0].column("qid").to_pylist()
    results = {"machine": machine_info(), "labels": " + ".join(map(str, labels)), "gold_proxy": args.labels is None,
               "smoothing": args.smoothing, "train_queries": len(set(qids)), "train_pairs": len(qids),
               "overflow": args.overflow,
               "sets": {k: {"queries": len(v), "pairs": sum(len(q.candidates) for q in v)} for k, v in sets.items()},
               "rows": rows,
               "paired_with_base": [{"system": r["system"], "set": k, **paired_bootstrap(per_query[r["system"]][k],
                                                                                       per_query[rows[1]["system"]][k])}
                                    for r in rows[2:] for k in sets],
               "per_query": per_query}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "report.md").write_text(markdown(results, args))
    print((out / "report.md").read_text())


def markdown(results: dict, args) -> str:
    m, sets = results["machine"], list(results["sets"])
    base = next(r for r in results["rows"] if r["system"].startswith("base:"))
    head = ["system"] + sets
    lines = ["# Does distillation keep what the base knew? (nDCG@10)", "",
             f"Machine: {m['cpu']} ({' '.join(m.get('cpu_flags') or [])}), {m['cores_usable']} cores, {m['ram_gib']} GiB, "
             f"no GPU; {m['timestamp']}. Scores: the torch scoring graph, fp32"
             + ("; queries over the student's max_query_tokens cut, as the server cuts them by default."
                if results.get("overflow", results.get("query_overflow")) == "truncate" else "."), "",
             "Teacher: " + (f"gold proxy (each pair's gold label, smoothing {results['smoothing']})"
                            if results["gold_proxy"] else results["labels"])
             + f": {results['train_pairs']} labelled pairs of {results['train_queries']} questions.", "",
             "Sets: " + "; ".join(f"{k} {v['queries']} queries / {v['pairs']} pairs" for k, v in results["sets"].items()),
             "", "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in results["rows"]:
        cells = [f"{r[k]:.3f}" + ("" if r is base or r["system"] == "first-stage order"
                                  else f" ({r[k] - base[k]:+.3f})") for k in sets]
        lines.append("| " + " | ".join([r["system"], *cells]) + " |")
    lines += ["", "In brackets: the difference from the base encoder by cosine (no training).", ""]
    if results.get("paired_with_base"):
        lines += ["Question by question against the base: the mean difference (the bracket above), a 95% bootstrap "
                  "interval over the set's questions (10,000 resamples), the share of resamples 0.01 or more below "
                  "the base, and how many questions the row ranks better, the same or worse.", "",
                  "| system | set | mean diff | 95% interval | P(< -0.01) | better / same / worse |",
                  "|---|---|---:|---|---:|---|"]
        lines += [f"| {p['system']} | {p['set']} | {p['mean_diff']:+.3f} | [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}] | "
                  f"{p['p_below_minus_0.01']:.2f} | {p['better']} / {p['same']} / {p['worse']} |"
                  for p in results["paired_with_base"]]
        lines.append("")
    for r in results["rows"]:
        if "train_pairs" in r or "base_interpolation" in r:
            kept = [k for k in sets if r[k] >= base[k] - 0.01]
            how = (f"trained on {r['train_pairs']} pairs in {r['train_s']:.0f} s" if "train_pairs" in r else
                   f"the trained weights mixed with the pretrained ones at {r['base_interpolation']}")
            lines.append(f"- {r['system']}: {how}; within 0.01 of its base or above on {len(kept)} of {len(sets)} sets "
                         f"({', '.join(kept) or 'none'}).")
    cmd = ("python benchmarks/scripts/base_preservation.py --out " + str(args.out) + f" --work {args.work}"
           + f" --students {args.students} "
           f"--train-queries {args.train_queries} --c-dev-queries {args.c_dev_queries} --a-dev-queries {args.a_dev_queries}"
           + (f" --labels {' '.join(args.labels)}" if args.labels else "")
           + (f" --interpolations {args.interpolations}" if args.interpolations else "")
           + (f" --seed {args.seed}" if args.seed else "")
           + (f" --ugc-seed {args.ugc_seed}" if args.ugc_seed else "")
           + (f" --overflow {args.overflow}" if args.overflow != DEFAULT_OVERFLOW else ""))
    lines += ["", f"Reproduce: `{cmd}`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
