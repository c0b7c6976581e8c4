"""What a served encoder student would give up for less compute per document: the two levers, measured.

The student's time per top-100 is set by the tokens it encodes and the layers it runs them through. Both
levers are measured here on SemEval-2016 CQA subtask C dev, so that the cost of a faster student is a
number, not a guess:

* **speed** (``--artifact``, ``--variant``): the served variant, opened by
  ``r3edge.core.runtime_loader.open_runtime`` as the server opens it, scores the seeded ``--questions``
  sample's top-100 requests through ``score_encoded`` (its prefix-reuse graphs where the artifact has them,
  long queries cut by the one default overflow policy, as the server cuts them) with the artifact's own document budget
  and each smaller one in ``--doc-tokens``, in shuffled rounds; p50 ms per top-100 and the tokens encoded.
  The weights are the artifact's: a smaller budget here is the time a student trained with that budget
  would take, and the nDCG@10 beside it is that of weights trained on the larger one (a proxy);
* **what the base knew** (``--floor``): that student config's untrained base by cosine
  (``base_cosine_scoring``, the floor every encoder student must clear; ``r3edge bench --base-student``), on
  all C dev questions, with the config's document budget, the artifact's and each of ``--doc-tokens``, and with
  only the first ``--layers`` layers kept (``keep_layers``, DistilBERT-style initialisation).

    .venv/bin/python benchmarks/scripts/student_compute_levers.py --artifact runs/jvs-students/minilm-demo \\
        --variant ov-int8 --semeval ../shared/data/semeval2016-cqa \\
        --out benchmarks/results/student-compute-levers-xeon-2core

Imports torch (a tool, not part of the package); public r3edge names only. Writes OUT/results.json and
OUT/report.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", required=True, help="the served student's export artifact")
    ap.add_argument("--variant", default=None, help="its variant to time (default: the manifest's)")
    ap.add_argument("--floor", default="minilm-cqa-bi-rank",
                    help="the student config whose untrained base is the floor (r3edge bench's --base-student)")
    ap.add_argument("--semeval", required=True, help="SemEval-2016 CQA folder")
    ap.add_argument("--questions", type=int, default=10, help="requests timed: a seeded sample of C dev questions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--doc-tokens", type=ints, default=[96, 64], help="document budgets below the artifact's own")
    ap.add_argument("--layers", type=ints, default=[4, 3], help="layer counts below the base's own, for the floor")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3, help="rounds over the timed requests")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import numpy as np

    from r3edge.benchmarks.machine import machine_info
    from r3edge.benchmarks.systems import scored_floor
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.core.metrics import ndcg_at_k
    from r3edge.core.runtime_loader import open_runtime
    from r3edge.core.scoring import Scorer, score_encoded
    from r3edge.core.timing import LOAD_KEY, interleaved_rounds, percentiles
    from r3edge.distill.data.datasets import sample_queries, semeval_queries
    from r3edge.model.student import base_cosine_scoring

    every = semeval_queries(args.semeval, "C", "dev")
    timed = sample_queries(every, args.questions, args.seed)
    runtime = open_runtime(args.artifact, args.variant, threads=args.threads)
    own = runtime.scorer.spec.max_doc_tokens
    budgets = [own] + [b for b in args.doc_tokens if b < own]
    scorers = {b: Scorer(dataclasses.replace(runtime.scorer.spec, max_doc_tokens=b), runtime.scorer.tokenizer)
               for b in budgets}
    encoded = {b: [s.encode_batch([q.query] * len(q.candidates), [c.text for c in q.candidates])
                   for q in timed] for b, s in scorers.items()}

    def score(b: int, i: int) -> np.ndarray:
        return score_encoded(scorers[b], runtime.label_logits, encoded[b][i], prefix=runtime.prefix)

    ndcg_inputs: dict[int, dict] = {b: {"gains": [], "scores": [], "qids": []} for b in budgets}
    for i, q in enumerate(timed):  # untimed: warms every budget's shapes up and keeps its scores for nDCG@10
        for b in budgets:
            _, expected = scorers[b].relevance(score(b, i))
            ndcg_inputs[b]["gains"] += [c.label for c in q.candidates]
            ndcg_inputs[b]["scores"] += list(expected)
            ndcg_inputs[b]["qids"] += [q.qid] * len(q.candidates)

    seen: dict[int, list[float]] = {b: [] for b in budgets}

    def progress(r: int, ms: dict[int, float]) -> None:
        for b in budgets:
            seen[b].append(ms[b])
        if (r + 1) % len(timed) == 0:
            print(f"round {(r + 1) // len(timed)}: " + ", ".join(
                f"{b} tokens {statistics.median(seen[b]):.0f} ms" for b in budgets), flush=True)

    # one timing round per request: every budget scores it, in a seeded shuffled order
    run = interleaved_rounds({b: (lambda r, b=b: score(b, r % len(timed))) for b in budgets}, args.reps * len(timed),
                             pause_s=0.05, seed=args.seed, progress=progress)
    times = run["ms"]

    speed = []
    for b in budgets:
        # what the runtime encodes: each pair's suffix after its query's shared prefix, or the whole pair
        tokens = [sum(len(e.suffix if runtime.prefix else e.input_ids) for e in req) for req in encoded[b]]
        nd = ndcg_inputs[b]
        pct = percentiles(times[b])
        speed.append({"doc_tokens": b, "p50_ms": pct["p50"], "p95_ms": pct["p95"], "tokens_per_request": float(np.mean(tokens)),
                      "truncated_docs": sum(bool(e.doc_tokens_dropped) for req in encoded[b] for e in req),
                      "ndcg@10": ndcg_at_k(np.asarray(nd["gains"], float), np.asarray(nd["scores"]), nd["qids"])["ndcg@10"]})
    base_speed = speed[0]["p50_ms"]
    for row in speed:
        row["speedup"] = base_speed / row["p50_ms"]

    config = load_yaml(args.floor, StudentConfig)
    floors = []
    widest = config.scorer.max_doc_tokens
    variants = [(None, b) for b in sorted({widest, own, *args.doc_tokens}, reverse=True) if b <= widest]
    variants += [(n, widest) for n in args.layers]
    for layers, b in variants:
        t = time.perf_counter()
        cfg = config.model_copy(update={"model": config.model.model_copy(update={"keep_layers": layers}),
                                        "scorer": config.scorer.model_copy(update={"max_doc_tokens": b})})
        base = base_cosine_scoring(cfg)
        floor = scored_floor(every, base, base.scorer.spec.label_values)
        floors.append({"layers": layers, "doc_tokens": b, "ndcg@10": floor["ndcg@10"],
                       "ndcg_queries": floor["ndcg_queries"]})
        print(f"base by cosine, layers {layers or 'all'}, doc budget {b}: nDCG@10 {floor['ndcg@10']:.3f} "
              f"({time.perf_counter() - t:.0f} s)", flush=True)

    results = {"machine": machine_info(), "artifact": str(args.artifact), "variant": runtime.variant,
               "runtime": runtime.name, "floor": config.name, "questions_timed": len(timed),
               "questions_floor": len(every), "reps": args.reps, "threads": args.threads, "speed": speed,
               LOAD_KEY: run[LOAD_KEY][-1], "order": run["order"], "pause_s": run["pause_s"],
               "base_floor": floors}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "report.md").write_text(markdown(results))
    print(markdown(results))
    return 0


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [f"# Less compute per document: `{r['artifact']}` served as `{r['variant']}` ({r['runtime']})", "",
             f"Machine: {m['cpu']} ({', '.join(m['cpu_flags'])}), "
             f"{m['cores_usable']} usable cores, {m['timestamp']}; {r['threads']} threads. "
             f"Speed: {r['questions_timed']} SemEval C dev top-100 requests x {r['reps']} rounds; the artifact's "
             "weights at each document budget (nDCG@10 of weights trained at the first budget: a proxy).", "",
             "| document budget (tokens) | tokens encoded / top-100 | truncated docs | p50 ms | p95 ms | speed-up | nDCG@10 (proxy) |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for s in r["speed"]:
        lines.append(f"| {s['doc_tokens']} | {s['tokens_per_request']:.0f} | {s['truncated_docs']} | {s['p50_ms']:.0f} | "
                     f"{s['p95_ms']:.0f} | {s['speedup']:.2f}x | {s['ndcg@10']:.3f} |")
    lines += ["", f"The floor: `{r['floor']}`'s base by cosine, untrained, on all {r['questions_floor']} C dev questions.", "",
              "| layers kept | document budget | nDCG@10 | questions |", "|---|---:|---:|---:|"]
    for f in r["base_floor"]:
        lines.append(f"| {f['layers'] or 'all'} | {f['doc_tokens']} | {f['ndcg@10']:.3f} | {f['ndcg_queries']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
