"""Which variant to serve on this CPU: ONNX Runtime and OpenVINO variants of one artifact, timed side by
side in one process on the same top-100 requests, with their fidelity to ONNX Runtime fp32.

    python benchmarks/scripts/openvino_speed.py --artifact runs/ov-bench/artifact \\
        --heldout runs/ov-bench/heldout.jsonl --out benchmarks/results/openvino-cpu-2core

Every variant is opened by ``r3edge.core.runtime_loader.open_runtime`` (what the server will open) with
``--threads`` threads and scored through ``r3edge.core.scoring.score_pairs`` with the server's CPU
defaults (length-sorted micro-batches of at most ``DEFAULT_MAX_BATCH_TOKENS`` padded tokens, and a
variant's prefix-reuse graphs where the artifact has them), so the times are the model time of one
``Rerank`` of 100 candidates, tokenisation included, gRPC excluded. ``--variants ov-fp32@bf16`` opens an
OpenVINO variant with another inference precision than its manifest's (bf16 on AMX / AVX-512 BF16 CPUs).

Timing: ``--reps`` rounds; each round scores the next held-out query once with every variant, in an
order shuffled per round (seeded) after a ``--pause`` of quiet, so load on this shared box hits every
variant alike; p50 and p95 over rounds. Fidelity over every held-out query against ``fp32`` (ONNX
Runtime): max |Δlogit|, argmax agreement, mean top-10 overlap (by expected relevance); batch
invariance on the first query (each pair alone vs all 100 in one batch). The recommended default is
the fastest variant (p50) whose top-10 overlap is at least ``--min-overlap``. Writes OUT/results.json
and OUT/report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

import numpy as np


def top10_overlap(ref_scores: np.ndarray, scores: np.ndarray, k: int = 10) -> float:
    top = lambda s: set(np.argsort(-s, kind="stable")[:k].tolist())
    return len(top(ref_scores) & top(scores)) / k


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", required=True, help="artifact with fp32 and the variants to compare")
    ap.add_argument("--heldout", required=True, help="candidate-list JSONL of top-100 requests")
    ap.add_argument("--variants", default=None,
                    help="comma-separated (default: every variant of the artifact); VARIANT@bf16 or @f32: an OpenVINO "
                         "variant compiled with that inference precision")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--pause", type=float, default=0.25, help="seconds of quiet before each timing")
    ap.add_argument("--min-overlap", type=float, default=0.98, help="top-10 overlap with fp32 a default must keep")
    ap.add_argument("--student", default=None, help="what the artifact's student is, for the report")
    ap.add_argument("--prefix-reuse", action=argparse.BooleanOptionalAction, default=True,
                    help="score through each variant's prefix-reuse graphs where the artifact has them (the server's "
                         "default); --no-prefix-reuse: every pair through the single graph")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from r3edge.benchmarks.machine import machine_info
    from r3edge.core.artifact import read_manifest, variant_runtime
    from r3edge.core.pairs import read_queries
    from r3edge.core.runtime_loader import open_runtime
    from r3edge.core.scoring import DEFAULT_MAX_BATCH_TOKENS, score_pairs
    from r3edge.export.parity import Tolerances

    manifest = read_manifest(args.artifact)
    variants = args.variants.split(",") if args.variants else list(manifest["variants"])
    if "fp32" not in variants:
        variants.insert(0, "fp32")
    queries = read_queries(args.heldout)
    runtimes = {}
    for v in variants:
        t = time.perf_counter()
        name, _, precision = v.partition("@")
        runtimes[v] = open_runtime(args.artifact, name, threads=args.threads, prefix_reuse=args.prefix_reuse,
                                   **({"inference_precision": precision} if precision else {}))
        print(f"{v}: {runtimes[v].name} opened in {time.perf_counter() - t:.2f} s", flush=True)

    def score(v: str, q, **kw) -> np.ndarray:
        rt = runtimes[v]
        return score_pairs(rt.scorer, rt, [q.query] * len(q.candidates), [c.text for c in q.candidates],
                           prefix=rt.prefix, **kw)

    # fidelity (and warm-up): every held-out query, every variant
    logits = {v: [score(v, q) for q in queries] for v in variants}
    scorer = runtimes["fp32"].scorer
    fidelity = {}
    for v in variants:
        ref, got = np.concatenate(logits["fp32"]), np.concatenate(logits[v])
        overlaps = [top10_overlap(scorer.relevance(a)[1], scorer.relevance(b)[1]) for a, b in zip(logits["fp32"], logits[v])]
        alone = score(v, queries[0], max_batch_size=1)
        together = score(v, queries[0], max_batch_size=len(queries[0].candidates), max_batch_tokens=1 << 30)
        fidelity[v] = {
            "max_abs_logit_diff": float(np.abs(ref - got).max()),
            "mean_abs_logit_diff": float(np.abs(ref - got).mean()),
            "argmax_agreement": float((ref.argmax(-1) == got.argmax(-1)).mean()),
            "top10_overlap": float(np.mean(overlaps)),
            "batch_invariance_max_abs_score_diff": float(np.abs(scorer.relevance(alone)[1] - scorer.relevance(together)[1]).max()),
        }

    rng = random.Random(0)
    times: dict[str, list[float]] = {v: [] for v in variants}
    loads = []
    for r in range(args.reps):
        q = queries[r % len(queries)]
        order = variants[:]
        rng.shuffle(order)
        for v in order:
            time.sleep(args.pause)
            t = time.perf_counter()
            score(v, q)
            times[v].append((time.perf_counter() - t) * 1e3)
        loads.append(os.getloadavg()[0])
        print(f"round {r + 1}/{args.reps}: " + ", ".join(f"{v} {times[v][-1]:.0f}" for v in variants), flush=True)

    rows = {}
    for v in variants:
        ts = sorted(times[v])
        rows[v] = {
            "runtime": variant_runtime(manifest, v.partition("@")[0]),
            "name": runtimes[v].name,
            "path": "prefix reuse" if runtimes[v].prefix is not None else "single graph",
            "p50_ms": round(statistics.median(ts), 1),
            "p95_ms": round(ts[min(len(ts) - 1, int(round(0.95 * (len(ts) - 1))))], 1),
            "min_ms": round(ts[0], 1),
            **{k: round(x, 6) for k, x in fidelity[v].items()},
        }
    # what the export's parity gate holds a batch-invariant variant to: a pair's score does not depend on its batchmates
    BATCH_INVARIANCE = Tolerances().quant_batch_tol
    eligible = [v for v in variants if rows[v]["top10_overlap"] >= args.min_overlap
                and rows[v]["batch_invariance_max_abs_score_diff"] <= BATCH_INVARIANCE]
    default = min(eligible, key=lambda v: rows[v]["p50_ms"])
    fastest = min(variants, key=lambda v: rows[v]["p50_ms"])
    tokens = [sum(len(e.input_ids) for e in scorer.encode_batch([q.query] * len(q.candidates), [c.text for c in q.candidates]))
              for q in queries]
    results = {
        "machine": machine_info(),
        "artifact": Path(args.artifact).name,
        "student": args.student or manifest.get("student"),
        "threads": args.threads,
        "max_batch_tokens": DEFAULT_MAX_BATCH_TOKENS,
        "requests": len(queries),
        "candidates_per_request": [len(q.candidates) for q in queries],
        "tokens_per_request_mean": round(float(np.mean(tokens)), 1),
        "reps": args.reps,
        "load_avg_1min_per_round": [round(x, 2) for x in loads],
        "variants": rows,
        "min_overlap": args.min_overlap,
        "recommended_default": default,
        "fastest": fastest,
        "quantization": {v: manifest.get("quantization", {}).get(v.partition("@")[0]) for v in variants},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    m = results["machine"]
    lines = [
        "# ONNX Runtime vs OpenVINO on CPU: one artifact, every variant, the same top-100 requests",
        "",
        f"Machine: {m['cpu']} ({', '.join(m['cpu_flags'])}), {m['cores_usable']} usable cores, {args.threads} threads; "
        f"onnxruntime {m['versions'].get('onnxruntime')}; openvino {_version('openvino')}; {m['timestamp']}.",
        f"Student: {results['student']}. {len(queries)} held-out requests of {int(np.mean(results['candidates_per_request']))} "
        f"candidates (~{results['tokens_per_request_mean']:.0f} tokens each), {args.reps} timed rounds; each round scores the next "
        f"request with every variant in a shuffled order (`score_pairs`, micro-batches of <= {DEFAULT_MAX_BATCH_TOKENS} tokens). "
        f"1-min load average per round: {min(loads):.2f}-{max(loads):.2f}.",
        "",
        "| variant | runtime | graphs | p50 ms per top-100 | p95 ms | top-10 vs fp32 | max abs Δlogit | argmax agreement "
        "| batch invariance |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in sorted(variants, key=lambda v: rows[v]["p50_ms"]):
        r = rows[v]
        lines.append(f"| {v} | {r['runtime']} | {r['path']} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | {r['top10_overlap']:.3f} | "
                     f"{r['max_abs_logit_diff']:.3g} | {r['argmax_agreement']:.3f} | {r['batch_invariance_max_abs_score_diff']:.2g} |")
    lines += ["", f"Fastest: **{fastest}**. Recommended default here (fastest with top-10 overlap >= {args.min_overlap} "
              f"and batch invariance <= {BATCH_INVARIANCE:g}): **{default}**.", ""]
    (out / "report.md").write_text("\n".join(lines))
    print("\n".join(lines))
    for rt in runtimes.values():
        rt.close()
    return 0


def _version(pkg: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
