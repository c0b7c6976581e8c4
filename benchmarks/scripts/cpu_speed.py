"""CPU speed of an encoder student scoring a top-100, side by side in one process and one run:
the naive transformers forward, the tuned PyTorch scorers (fp32, bf16), every exported ONNX variant,
and the served artifact over gRPC; with accuracy against fp32 on a held-out split.

    python benchmarks/scripts/cpu_speed.py --student runs/demo10/student-minilm \\
        --artifact runs/demo10/artifact --heldout runs/demo10/heldout.jsonl --out benchmarks/results/speed-cpu-2core

Systems (all score the same pairs, formatted by the one Scorer):
* naive — ``AutoModelForSequenceClassification`` (transformers, fp32, default attention) on ONE batch of
  all 100 pairs padded to the longest, token_type_ids from the pair encoding;
* torch fp32 / torch bf16 — ``score_pairs`` + ``TorchRuntime``: length-sorted micro-batches, the
  student's scoring graph (what ``r3edge eval --student`` runs);
* onnxruntime:<variant> — each variant of ``--artifact`` (and of ``--extra-artifact``) in-process,
  through ``score_pairs`` + ``OnnxRuntime`` (2 intra-op threads, sequential);
* served:<variant> — ``r3edge serve`` in a child process, one gRPC ``Rerank`` (top-100 → top-10) per
  request: what a client gets end to end.

Timing: ``--reps`` rounds; each round times every system once on the next held-out query, in an
order shuffled per round (seeded), so machine load (this box is shared) hits every system alike;
p50/p95 over rounds. Each timing starts after a ``--pause`` (0.25 s): the intra-op threads of the
system timed before it (ORT's spin, torch's OpenMP) are parked by then. Measured without it, an
ORT session timed right after another one was ~7% slower, and torch bf16 after ORT ~8%. Achieved FLOP/s
counts the useful work of the top-100 (real tokens only: weight MatMuls + attention), divided by
latency, as a fraction of the GEMM peak of the same runtime and precision measured in the same run
(2048x384x1536-shaped GEMMs, the student's own FFN shape, and 1024³). Accuracy: every held-out pair,
against torch fp32 (max |Δlogit|, argmax agreement, top-10 overlap per query) and against gold
labels (Δ accuracy, Δ nDCG@10); batch invariance: each pair alone vs among all 100 of its query.
Writes OUT/results.json and OUT/report.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from r3edge.core.timing import LOAD_KEY, interleaved_rounds, load_average, percentiles, top_k_overlap

THREADS = 2


def gemm_peaks(reps: int = 5) -> dict:
    """Peak of each runtime/precision on GEMMs: torch fp32, torch bf16, ORT fp32, ORT u8s8 (7-bit weights)."""
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper, numpy_helper

    torch.set_num_threads(THREADS)
    shapes = [(4096, 384, 1536), (4096, 1536, 384), (1024, 1024, 1024)]
    out: dict = {}
    rng = np.random.default_rng(0)

    def best(fn):
        fn()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return min(ts)

    for key, dtype in (("torch-fp32", torch.float32), ("torch-bf16", torch.bfloat16)):
        rates = []
        for m, k, n in shapes:
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
            with torch.inference_mode():
                rates.append(2 * m * k * n / best(lambda a=a, b=b: a @ b))
        out[key] = max(rates)

    def session(nodes, inits, k):
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 10
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = THREADS
        return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])

    fp32, int8 = [], []
    for m, k, n in shapes:
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((k, n)).astype(np.float32)
        s = session([helper.make_node("MatMul", ["X", "W"], ["Y"])], [numpy_helper.from_array(w, "W")], k)
        fp32.append(2 * m * k * n / best(lambda s=s, x=x: s.run(None, {"X": x})))
        xq = rng.integers(0, 256, (m, k), dtype=np.uint8)
        wq = rng.integers(-63, 64, (k, n), dtype=np.int8)
        g = helper.make_graph(
            [helper.make_node("MatMulIntegerToFloat", ["A", "B", "sa", "sb", "za"], ["Y"], domain="com.microsoft")], "g",
            [helper.make_tensor_value_info("A", TensorProto.UINT8, [None, k])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(wq, "B"), numpy_helper.from_array(np.array(1.0, np.float32), "sa"),
             numpy_helper.from_array(np.ones(n, np.float32), "sb"), numpy_helper.from_array(np.array(128, np.uint8), "za")])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 10
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = THREADS
        sq = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        int8.append(2 * m * k * n / best(lambda sq=sq, xq=xq: sq.run(None, {"A": xq})))
    out["onnxruntime-fp32"] = max(fp32)
    out["onnxruntime-u8s8"] = max(int8)
    return {k: round(v / 1e9, 1) for k, v in out.items()}


def useful_flops(config, lengths) -> float:
    """Weight MatMuls (2·params per token) + attention (QKᵀ and PV: 4·L·d per token per layer), real tokens only."""
    d, f, n_layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_token = 2 * n_layers * (4 * d * d + 2 * d * f)
    lengths = np.asarray(lengths, dtype=np.float64)
    return float(per_token * lengths.sum() + n_layers * 4 * d * (lengths ** 2).sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--student", required=True, help="trained student dir (HF weights + scorer.json + tokenizer.json)")
    ap.add_argument("--artifact", required=True, help="export artifact of that student (every variant is timed)")
    ap.add_argument("--extra-artifact", action="append", default=[], metavar="NAME=DIR",
                    help="another artifact of the same student to time too (e.g. the unfused export), as a label=dir")
    ap.add_argument("--heldout", required=True, help="held-back candidate-list JSONL (top-100 requests, gold labels)")
    ap.add_argument("--calib-source", default=None, help="what the int8 calibration used (recorded, for the split)")
    ap.add_argument("--serve", default=None, help="variant to serve over gRPC (default: the artifact's default)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--pause", type=float, default=0.25, help="seconds of quiet before each timing")
    ap.add_argument("--bf16-reps", type=int, default=3, help="bf16 is emulated (slow) without native bf16: fewer rounds")
    ap.add_argument("--budgets", default="256,1024,2048,8192",
                    help="other micro-batch budgets (padded tokens) timed for torch fp32/bf16 and the served variant "
                         "in-process, so the PyTorch baseline is tuned too; the best torch row of any budget is the "
                         "baseline of the ratios")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForSequenceClassification

    from r3edge.api.client import RerankerClient
    from r3edge.benchmarks.machine import machine_info
    from r3edge.benchmarks.systems import serve_artifact
    from r3edge.core.artifact import read_manifest
    from r3edge.core.hardware import cpu_has_bf16
    from r3edge.core.metrics import relevance_metrics
    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.pairs import read_queries
    from r3edge.core.scoring import DEFAULT_MAX_BATCH_TOKENS, plan_batches, score_pairs
    from r3edge.export.parity import batch_invariance
    from r3edge.model.student import EncoderScorer
    from r3edge.model.torch_runtime import TorchRuntime

    torch.set_num_threads(THREADS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    queries = read_queries(args.heldout)
    t_start = time.perf_counter()
    load_before = load_average()

    def log(*a):
        print(f"[{time.perf_counter() - t_start:6.1f}s load {load_average()[0]}]", *a, flush=True)

    # -- systems: name -> (scorer, fn(queries, docs) -> logits, kind) --------------------------------
    ref_rt = TorchRuntime(args.student, "fp32", threads=THREADS)
    scorer = ref_rt.scorer
    config = ref_rt.model.model.config
    systems: dict[str, dict] = {}

    naive_model = AutoModelForSequenceClassification.from_pretrained(args.student, dtype=torch.float32).eval()
    naive_graph = EncoderScorer(naive_model, scorer.tokenizer.token_to_id(scorer.spec.template.mid))

    def naive(qs, ds):
        ids, mask = scorer.collate(scorer.encode_batch(qs, ds))  # one batch, padded to the longest
        ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
        with torch.inference_mode():
            return naive_model(input_ids=ids_t, attention_mask=mask_t,
                               token_type_ids=naive_graph.token_type_ids(ids_t, mask_t)).logits.float().numpy()

    systems["naive transformers fp32 (one padded batch)"] = {"fn": naive, "runtime": "torch-fp32", "kind": "naive"}
    for variant in ("fp32", "bf16"):
        rt = ref_rt if variant == "fp32" else TorchRuntime(args.student, variant, threads=THREADS)
        systems[f"torch {variant} (score_pairs, sorted micro-batches)"] = {
            "fn": (lambda qs, ds, rt=rt: score_pairs(rt.scorer, rt, qs, ds)), "runtime": f"torch-{variant}",
            "kind": "tuned-torch", "rt": rt}
    artifacts = [("", args.artifact)] + [tuple(x.split("=", 1)) for x in args.extra_artifact]
    manifest = read_manifest(args.artifact)
    for label, art in artifacts:
        for variant in read_manifest(art)["variants"]:
            rt = OnnxRuntime(art, variant, threads=THREADS, device="cpu")
            name = f"onnxruntime {variant}" + (f" ({label})" if label else "")
            systems[name] = {"fn": (lambda qs, ds, rt=rt: score_pairs(rt.scorer, rt, qs, ds)),
                             "runtime": "onnxruntime-u8s8" if variant.startswith("int8") else "onnxruntime-fp32",
                             "kind": "onnx", "rt": rt, "variant": variant, "artifact": label or "main"}
    serve_variant = args.serve or manifest["default"]
    # the same systems at other micro-batch budgets (timed only; their accuracy is their default row's)
    budget_rows: dict[str, dict] = {}
    for budget in [int(b) for b in args.budgets.split(",") if b]:
        for name in ("torch fp32 (score_pairs, sorted micro-batches)", "torch bf16 (score_pairs, sorted micro-batches)",
                     f"onnxruntime {serve_variant}"):
            base = systems.get(name)
            if base is None or "rt" not in base:
                continue
            budget_rows[f"{name.split(' (')[0]} @ {budget} tokens"] = {
                "fn": (lambda qs, ds, rt=base["rt"], b=budget: score_pairs(rt.scorer, rt, qs, ds, max_batch_tokens=b)),
                "runtime": base["runtime"], "kind": base["kind"] + "-budget", "budget": budget}

    # -- accuracy on every held-out pair ----------------------------------------------------------
    all_q = [q.query for q in queries for _ in q.candidates]
    all_d = [c.text for q in queries for c in q.candidates]
    qids = [q.qid for q in queries for _ in q.candidates]
    gold = np.array([c.label if c.label is not None else -1 for q in queries for c in q.candidates])
    has_gold = gold >= 0

    by_query = [np.array([i for i, x in enumerate(qids) if x == qid]) for qid in dict.fromkeys(qids)]

    log("accuracy: torch fp32 reference on", len(all_q), "pairs")
    ref = score_pairs(scorer, ref_rt, all_q, all_d)
    p_ref, s_ref = scorer.relevance(ref)
    gold_qids = [q for q, g in zip(qids, has_gold, strict=True) if g]
    m_ref = relevance_metrics(gold[has_gold], p_ref[has_gold], gold_qids, label_values=scorer.spec.label_values)
    q0 = queries[0]
    for name, sysd in systems.items():
        log("accuracy:", name)
        got = ref if "torch fp32" in name else np.concatenate([
            sysd["fn"]([q.query] * len(q.candidates), [c.text for c in q.candidates]) for q in queries])
        p, s = scorer.relevance(got)
        m = relevance_metrics(gold[has_gold], p[has_gold], gold_qids, label_values=scorer.spec.label_values)
        acc = {
            "max_abs_logit_diff_vs_fp32": float(np.abs(got - ref).max()),
            "max_abs_score_diff_vs_fp32": float(np.abs(s - s_ref).max()),
            "argmax_agreement_vs_fp32": float((got.argmax(-1) == ref.argmax(-1)).mean()),
            "top10_overlap_vs_fp32": float(np.mean([top_k_overlap(s_ref[idx], s[idx], 10) for idx in by_query])),
            "accuracy": m["accuracy"], "delta_accuracy_points": 100 * (m["accuracy"] - m_ref["accuracy"]),
            "ndcg@10": m["ndcg@10"], "delta_ndcg@10": m["ndcg@10"] - m_ref["ndcg@10"],
        }
        if "rt" in sysd:  # a pair alone vs among the 100 candidates of its query
            acc["batch_invariance_max_abs_score_diff"] = batch_invariance(
                scorer, sysd["rt"], [q0.query] * len(q0.candidates), [c.text for c in q0.candidates])
        sysd["accuracy"] = acc

    # -- GEMM peaks (same run) ----------------------------------------------------------------------
    log("GEMM peaks")
    peaks = gemm_peaks()
    log(peaks)

    # -- the served artifact ----------------------------------------------------------------------
    server = ExitStack()
    target = server.enter_context(serve_artifact(args.artifact, serve_variant, THREADS))
    client = server.enter_context(RerankerClient(target))
    client.wait_ready(120)
    # the budget the server chose for its device (DEFAULT_MAX_BATCH_TOKENS on CPU, GPU_MAX_BATCH_TOKENS on a GPU provider)
    served_limits = client.model_info().limits
    served_name = f"served {serve_variant} (gRPC Rerank top-100 -> top-10, r3edge serve)"

    def served(qs, ds, client=client):
        return client.rerank(qs[0], [(str(i), d) for i, d in enumerate(ds)], top_k=10)

    # -- interleaved timing: round r times every system on the next held-out query -----------------------------
    timed = {**systems, served_name: {"fn": served, "runtime": None, "kind": "served"}, **budget_rows}
    for sysd in timed.values():  # warm-up
        sysd["fn"]([q0.query] * 100, [c.text for c in q0.candidates])
    requests = [([q.query] * len(q.candidates), [c.text for c in q.candidates])
                for q in (queries[r % len(queries)] for r in range(args.reps))]
    lengths_per_q = [[len(e.input_ids) for e in scorer.encode_batch(qs, ds)] for qs, ds in requests]
    # session-only time of the served variant at the server's micro-batches: its feeds are built before the timing
    srt = OnnxRuntime(args.artifact, serve_variant, threads=THREADS, device="cpu")

    def session_feeds(qs, ds):
        enc = srt.scorer.encode_batch(qs, ds)
        plan = plan_batches([len(e.input_ids) for e in enc], served_limits.max_batch_tokens, served_limits.max_batch_size)
        return [srt.scorer.collate([enc[i] for i in idx]) for idx in plan]

    feeds = [session_feeds(qs, ds) for qs, ds in requests]
    calls = {name: (lambda r, fn=sysd["fn"]: fn(*requests[r])) for name, sysd in timed.items()}
    calls[f"session.run only ({serve_variant})"] = lambda r: [srt.label_logits(ids, mask) for ids, mask in feeds[r]]
    run = interleaved_rounds(calls, args.reps, pause_s=args.pause, seed=0,
                             rounds_of={name: args.bf16_reps for name in calls if "bf16" in name},
                             progress=lambda r, ms: log(f"round {r + 1}/{args.reps}", {k: round(v) for k, v in ms.items()}))
    lat = run["ms"]
    server.close()
    load_after = load_average()

    # -- rows -------------------------------------------------------------------------------------
    flops = [useful_flops(config, ls) for ls in lengths_per_q]
    rows = []
    for name, ts in lat.items():
        sysd = timed.get(name, {})
        ts_ms = np.array(ts)
        pct = percentiles(ts)
        fl = np.array(flops[:len(ts)])
        row = {"system": name, "kind": sysd.get("kind", "session-only"), "runtime": sysd.get("runtime"),
               "rounds": len(ts), "p50_ms": pct["p50"], "p95_ms": pct["p95"], "pairs_per_s": float(100 / pct["p50"] * 1e3),
               "achieved_gflops": float(np.median(fl / (ts_ms / 1e3)) / 1e9)}
        peak = peaks.get(row["runtime"] or "")
        if peak:
            row["gemm_peak_gflops"] = peak
            row["fraction_of_peak"] = row["achieved_gflops"] / peak
        if "accuracy" in sysd:
            row["accuracy"] = sysd["accuracy"]
        rows.append(row)
    by = {r["system"]: r for r in rows}
    naive_ms = by["naive transformers fp32 (one padded batch)"]["p50_ms"]
    t32 = by["torch fp32 (score_pairs, sorted micro-batches)"]["p50_ms"]
    tbf = by["torch bf16 (score_pairs, sorted micro-batches)"]["p50_ms"]
    # the tuned baseline: the faster precision at its fastest budget
    t32 = min([t32] + [r["p50_ms"] for r in rows if r["kind"] == "tuned-torch-budget" and "fp32" in r["system"]])
    tbf = min([tbf] + [r["p50_ms"] for r in rows if r["kind"] == "tuned-torch-budget" and "bf16" in r["system"]])
    best_torch = min(t32, tbf)
    served_ms = by[served_name]["p50_ms"]
    session_ms = by["session.run only (" + serve_variant + ")"]["p50_ms"]
    inproc = by.get(f"onnxruntime {serve_variant}", {}).get("p50_ms")
    ratios = {
        "served_vs_best_tuned_torch": best_torch / served_ms,
        "served_vs_torch_fp32": t32 / served_ms,
        "served_vs_torch_bf16": tbf / served_ms,
        "served_vs_naive": naive_ms / served_ms,
        "inprocess_vs_best_tuned_torch": best_torch / inproc if inproc else None,
        "inprocess_vs_naive": naive_ms / inproc if inproc else None,
        "grpc_tokenisation_overhead_share": 1 - session_ms / served_ms,
        "goal_served_2x_tuned_torch": best_torch / served_ms >= 2,
        "goal_served_20x_naive": naive_ms / served_ms >= 20,
        "goal_overhead_le_10pct": 1 - session_ms / served_ms <= 0.10,
    }
    results = {
        "machine": {**machine_info(), "cpu_native_bf16": cpu_has_bf16(), "threads": THREADS,
                    LOAD_KEY: {"before": load_before, "after": load_after}},
        "student": {"dir": Path(args.student).name, "model_type": config.model_type, "layers": config.num_hidden_layers,
                    "hidden": config.hidden_size},
        "artifact": {"dir": Path(args.artifact).name, "default": manifest["default"], "variants": manifest["variants"],
                     "served_variant": serve_variant},
        "max_batch_tokens": DEFAULT_MAX_BATCH_TOKENS, "served_max_batch_tokens": served_limits.max_batch_tokens,
        "rounds": args.reps, "pause_s": run["pause_s"], "order": run["order"],
        "split": {"validation": Path(args.heldout).name, "validation_pairs": len(all_q), "calibration": args.calib_source},
        "fp32_reference": {"accuracy": m_ref["accuracy"], "ndcg@10": m_ref["ndcg@10"]},
        "mean_tokens_per_top100": float(np.mean([sum(ls) for ls in lengths_per_q])),
        "useful_gflop_per_top100": float(np.mean(flops) / 1e9),
        "gemm_peaks_gflops": peaks, "rows": rows, "ratios": ratios,
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, default=float) + "\n")
    (out / "report.md").write_text(report(results))
    print(report(results))
    return 0


def report(res: dict) -> str:
    m, r = res["machine"], res["ratios"]
    lines = [
        "# CPU speed of the encoder student on one top-100 (side by side, one run)", "",
        f"Machine: {m['cpu']}, {m['cores_usable']} cores, native bf16: {m['cpu_native_bf16']}, {m['ram_gib']} GiB; "
        f"onnxruntime {m['versions']['onnxruntime']}, torch {m['versions']['torch']}, transformers {m['versions']['transformers']}; "
        f"{m['threads']} threads everywhere; {m['timestamp']}.",
        f"Load average before/after: {m[LOAD_KEY]['before']} / {m[LOAD_KEY]['after']} "
        "(above ~1 per core the box was shared: compare ratios, not milliseconds).",
        "",
        f"Student: {res['student']['dir']} ({res['student']['model_type']}, {res['student']['layers']} layers, "
        f"{res['student']['hidden']} wide); artifact {res['artifact']['dir']}, served variant `{res['artifact']['served_variant']}`. "
        f"A top-100 is {res['mean_tokens_per_top100']:.0f} real tokens, {res['useful_gflop_per_top100']:.1f} useful GFLOP.",
        f"Accuracy on {res['split']['validation_pairs']} held-out pairs ({res['split']['validation']}); int8 calibration "
        f"(the calibrated variants: static int8, int8-smooth) on {res['split']['calibration']}: separate queries. fp32 reference: accuracy "
        f"{res['fp32_reference']['accuracy']:.3f}, nDCG@10 {res['fp32_reference']['ndcg@10']:.3f}.",
        f"Micro-batches: length-sorted, at most {res['max_batch_tokens']} padded tokens in process (r3edge's CPU default, "
        "`DEFAULT_MAX_BATCH_TOKENS`)"
        + (f" and {res['served_max_batch_tokens']} in the server (its ModelInfo)" if "served_max_batch_tokens" in res else "")
        + " unless a row names another budget.", "",
        "| system | p50 ms | p95 ms | pairs/s | achieved GFLOP/s | GEMM peak (same runtime, precision) | fraction | "
        "max abs Δlogit | argmax agr. | Δ acc (pt) | Δ nDCG@10 | top-10 overlap | batch inv. max abs Δscore |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in res["rows"]:
        a = row.get("accuracy", {})

        def f(key, fmt, a=a):
            return format(a[key], fmt) if key in a else "–"

        lines.append(
            f"| {row['system']} | {row['p50_ms']:.0f} | {row['p95_ms']:.0f} | {row['pairs_per_s']:.0f} | {row['achieved_gflops']:.1f} | "
            f"{row.get('gemm_peak_gflops', '–')} ({row.get('runtime') or '–'}) | "
            + (f"{row['fraction_of_peak']:.2f}" if "fraction_of_peak" in row else "–")
            + f" | {f('max_abs_logit_diff_vs_fp32', '.3f')} | {f('argmax_agreement_vs_fp32', '.3f')} | "
            f"{f('delta_accuracy_points', '+.2f')} | {f('delta_ndcg@10', '+.4f')} | {f('top10_overlap_vs_fp32', '.3f')} | "
            f"{f('batch_invariance_max_abs_score_diff', '.1e')} |")
    yes = {True: "reached", False: "missed"}
    lines += [
        "", "## Ratios (p50, same run)", "",
        f"- served artifact vs the best tuned PyTorch scorer (the faster of fp32 and bf16, each at its fastest budget): "
        f"**{r['served_vs_best_tuned_torch']:.2f}x** "
        f"(goal ≥ 2x: {yes[r['goal_served_2x_tuned_torch']]}); vs torch fp32 {r['served_vs_torch_fp32']:.2f}x, vs torch bf16 "
        f"{r['served_vs_torch_bf16']:.2f}x.",
        f"- served artifact vs the naive forward: **{r['served_vs_naive']:.2f}x** (goal ≥ 20x: {yes[r['goal_served_20x_naive']]}).",
        f"- in-process artifact (no gRPC) vs best tuned PyTorch {r['inprocess_vs_best_tuned_torch']:.2f}x, "
        f"vs naive {r['inprocess_vs_naive']:.2f}x.",
        f"- gRPC + tokenisation + batching overhead: **{100 * r['grpc_tokenisation_overhead_share']:.1f}%** of end-to-end latency "
        f"(1 - session.run time / served latency; goal ≤ 10%: {yes[r['goal_overhead_le_10pct']]}"
        + ("; a negative share means the two medians differ by less than this run's noise: not resolved" if
           r["grpc_tokenisation_overhead_share"] < 0 else "") + ").",
        "", "GEMM peaks measured in this run (GFLOP/s or GOP/s, best of 4096x384x1536, 4096x1536x384, 1024³): "
        + ", ".join(f"{k} {v}" for k, v in res["gemm_peaks_gflops"].items()) + ".",
        "", f"Reproduce: `{' '.join(['python'] + sys.argv)}`" if sys.argv and sys.argv[0] else "",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
