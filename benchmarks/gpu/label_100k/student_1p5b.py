#!/usr/bin/env python3
"""Issue 47's 1.5B causal student on a lent GPU, in one device call: distil `qwen-coder-cqa` (Qwen2.5-Coder-1.5B from
the packaged GGUF, the label rows' logits only) from committed labels, score C dev with it in torch at fp32, time
torch bf16 in process, export it at fp16, serve the fp16 graph with `r3edge serve --device cuda`, and score C dev,
C train (the calibration fit's pairs) and a top-100's latency through that server.

The student cannot leave the machine (6 GB at fp32, 3 GB at fp16), so it is rebuilt by the same call from the same
committed labels; what comes back is what it measured: results.json and report.md (rewritten after every step, so a
call stopped at its limit keeps its finished steps), the train and export reports, and the label logits of every
C dev pair from torch fp32 and from the served fp16 graph (.npy, in the labels' row order) for any later metric.

It runs there, from run.sh's ``student``. ``--smoke`` runs every step here on the CPU with the random
2-layer Qwen2 of judge_qwen_coder_gpu.py, a few hundred pairs and ``--device cpu``: a proof of the script, not a
result.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))  # judge_qwen_coder_gpu: stand-in packages, machine, smoke model
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))  # bench_gpu: latency rows

CONFIG = ROOT / "configs" / "student" / "qwen-coder-cqa.yaml"
#: the best judge's committed labels (session 69's cold start, C dev nDCG@10 0.528): the 100k pairs' shards labelled
#: so far to learn from (issue 47's students learn the 100k labels), C dev to score, C train's gold for calibration
JUDGE_LABELS = ROOT / "benchmarks" / "results" / "label-100k-h200" / "labels"
#: seconds per optimiser step of qwen-coder-cqa on one H100 (batch 16, bf16 autocast): that run's train_report.json
S_PER_STEP = 0.267
#: issue 47's bar besides the teacher: the recommended MiniLM student's C dev nDCG@10
#: (benchmarks/results/fidelity-semeval-qwen-cold-start-wise/report.md)
MINILM_WISE_NDCG = 0.498
ACC_DELTA_PTS = 0.5  # |accuracy(fp16 served) - accuracy(fp32 torch)| in points, issue 47


def _rel(path: str | Path) -> str:
    """A path as the report shows it: relative to the checkout where it lies inside it."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(path)


def _cut(labels: Path, to: Path, n: int) -> Path:
    """The first ``n`` pairs of a labels directory as a complete labels directory (smoke)."""
    from r3edge.core.labels import read_labels, read_manifest, write_manifest, write_shard

    if (to / "manifest.json").is_file():
        return to
    rows = read_labels(labels).slice(0, n).to_pylist()
    to.mkdir(parents=True)
    write_shard(to, rows)
    write_manifest(to, {**read_manifest(labels), "n_pairs": len(rows), "n_done": len(rows), "complete": True})
    return to


def _metrics(ev: dict) -> dict:
    """The rows of `evaluate` a reader compares (no reliability bins)."""
    keep = ("student_vs_gold", "teacher_vs_gold", "student_vs_teacher")
    out = {k: ev.get(k) for k in ("n_pairs", "scoring_seconds", "pairs_per_second", *keep)}
    for k in keep:
        if out[k]:
            out[k] = {m: v for m, v in out[k].items() if m != "reliability"}
    return out


def _torch_latency(lm, scorer, queries, device: str) -> dict:
    """torch in process on the trained weights: one batch per top-100, the clock around tokenising and scoring."""
    import torch
    from bench_gpu import _row

    from r3edge.model.student import lm_score_fn

    fn = lm_score_fn(lm, scorer, max_batch_size=100)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    texts = [(q.query, [c.text for c in q.candidates]) for q in queries]
    ms = []
    with torch.inference_mode():
        fn([texts[0][0]] * len(texts[0][1]), texts[0][1])  # warm-up
        sync()
        for q, docs in texts:
            t = time.perf_counter()
            fn([q] * len(docs), docs)
            sync()
            ms.append((time.perf_counter() - t) * 1000)
    return _row(ms, sum(len(d) for _, d in texts) / len(texts))


def _calibrated_ece(fit_logits, fit_gold, logits, gold) -> dict:
    """`r3edge calibrate --bias`'s fit on C train gold, applied to C dev (r3edge.core.calibration.calibrated_ece)."""
    from r3edge.core.calibration import calibrated_ece
    from r3edge.core.errors import InvalidInput

    try:
        return calibrated_ece(fit_logits, fit_gold, logits, gold)
    except InvalidInput as exc:  # a student that ranks C train's gold backwards (the smoke's random one)
        return {"error": str(exc), "fit_pairs": len(fit_gold)}


def run(args) -> int:
    import numpy as np
    from judge_qwen_coder_gpu import _machine, smoke_student

    from r3edge.core.pairs import read_queries

    t_start = time.time()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.smoke else "cuda"
    labels, dev, calib = [Path(d) for d in args.labels], Path(args.dev_labels), Path(args.calib_labels)
    if args.smoke:  # the first labels folder only
        labels, dev, calib = ([_cut(labels[0], work / "cut-train", args.smoke_pairs)],
                              *(_cut(p, work / f"cut-{k}", args.smoke_pairs) for k, p in (("dev", dev), ("calib", calib))))
    res: dict = {"smoke": bool(args.smoke), "machine": _machine(), "device": device,
                 "labels": ", ".join(_rel(d) for d in args.labels),
                 "dev_labels": _rel(args.dev_labels), "calib_labels": _rel(args.calib_labels), "config": _rel(args.config),
                 "note": ("SMOKE: a random 2-layer Qwen2 on the CPU, a few hundred pairs: a proof of the script, not a "
                          "result") if args.smoke else "issue 47's 1.5B causal student (benchmarks/gpu/label_100k/README.md)",
                 "steps": {}}

    def left() -> float:
        return args.budget_s - (time.time() - t_start)

    def save(step: str | None = None, value=None) -> None:
        if step:
            res["steps"][step] = value
        res["elapsed_s"] = round(time.time() - t_start, 1)
        (out / "results.json").write_text(json.dumps(res, indent=1, default=float) + "\n")
        (out / "report.md").write_text(report_md(res))
        print(f"[student] {step}: {json.dumps(value, default=float)[:400]} ({res['elapsed_s']} s)", flush=True)

    if not args.smoke:
        from judge_qwen_coder_gpu import _stand_in_packages

        _stand_in_packages(Path(args.gguf_dir), Path(args.stubs))
    config = smoke_student(args.config, work) if args.smoke else Path(args.config)

    # 1. train: as many steps as the time left allows, so the learning-rate schedule ends where training does
    from r3edge.distill.student.train import train_student

    train_s = min(args.train_s, left() - args.after_train_s)
    if train_s < args.min_train_s:
        save("train", {"not_run": f"budget: {left():.0f} s left, {args.after_train_s:.0f} s kept for the steps after"})
        return 0
    steps = 3 if args.smoke else max(1, int(train_s / args.s_per_step))
    t0 = time.time()
    student = train_student(labels, config, work / "student", max_steps=steps, max_seconds=train_s * 1.25)
    gc.collect()  # the Trainer's optimiser states (~18 GB on the GPU) go before the next steps load the student again
    report = json.loads((student / "train_report.json").read_text())
    shutil.copyfile(student / "train_report.json", out / "train_report.json")
    save("train", {"wall_s": round(time.time() - t0, 1), "planned_steps": steps, "steps": report["steps"],
                   "epochs": report["epochs"], "pairs_seen": report["steps"] * report["batch_size"],
                   "labelled_pairs": report["n_examples"]["trained_on"], "seconds_per_step": report["seconds_per_step"],
                   "stopped_by_time_at_step": report.get("stopped_by_time_at_step"),
                   "skipped_steps": report.get("skipped_steps"), "teacher": report["labels"].get("teacher_model")})

    # 2. the export in a child process (CPU work: ~350 s on 2 AVX2 cores, benchmarks/results/export-1p5b-cpu-2core)
    #    while the GPU scores C dev at fp32 (the reference) and times torch bf16
    import subprocess

    import torch

    from r3edge.distill.student.evaluate import evaluate
    from r3edge.model.student import lm_score_fn, load_student

    art = work / "artifact"
    t_export = time.time()
    with (work / "export.log").open("w") as log:
        export = subprocess.Popen([sys.executable, "-m", "r3edge", "export", str(student), "--out", str(art),
                                   "--variants", "fp16", "--max-calib", "4", "--default-variant", "fp16"],
                                  stdout=log, stderr=subprocess.STDOUT)
    queries = read_queries(args.requests)[: args.n_requests]
    t0 = time.time()
    lm, scorer = load_student(student)
    lm = lm.to(device).eval()
    with torch.inference_mode():
        ev = evaluate(dev, lm_score_fn(lm, scorer, max_batch_size=args.eval_batch), scorer=scorer, return_logits=True)
    np.save(out / "dev-logits-torch-fp32.npy", ev["_logits"])
    save("eval_fp32", {**_metrics(ev), "wall_s": round(time.time() - t0, 1), "scored_by": f"torch fp32 on {device}"})
    half = torch.bfloat16 if device.startswith("cuda") else torch.float32  # bf16 is emulated on most CPUs
    save("torch_latency", {"system": f"torch {'bf16' if half is torch.bfloat16 else 'fp32'} in process, one batch per top-100",
                           "requests": len(queries), "c1": _torch_latency(lm.to(half), scorer, queries, device)})
    del lm
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    # 3. the export's end (fp32 checked against torch, then fp16 checked against it), within the budget
    try:
        rc = export.wait(timeout=max(1.0, left() - args.serve_s))
    except subprocess.TimeoutExpired:
        export.kill()
        save("export", {"not_run": f"unfinished after {time.time() - t_export:.0f} s: {args.serve_s:.0f} s kept for "
                                   "serving; export.log's last lines: "
                        + " | ".join((work / "export.log").read_text().splitlines()[-3:])})
        return 0
    if rc != 0:
        save("export", {"error": f"exit {rc}: " + " | ".join((work / "export.log").read_text().splitlines()[-5:])})
        return 0
    xr = json.loads((art / "export_report.json").read_text())
    shutil.copyfile(art / "export_report.json", out / "export_report.json")
    save("export", {"wall_s": round(time.time() - t_export, 1), "rejected": xr["rejected"], "timings": xr["timings_s"],
                    "parity": {v: {k: r.get(k) for k in ("validated_on", "max_abs_logit_diff", "argmax_agreement")}
                               for v, r in xr["variants"].items()}})
    if "fp16" not in xr["variants"]:
        return 0

    # 4. the fp16 graph served on the device: C dev and C train through gRPC, then the latency per top-100
    t0 = time.time()
    served: dict = {"system": f"served fp16 over gRPC (`r3edge serve --device {device}`)"}
    try:
        _serve(art, device, dev, calib, queries, served, out, args)
    except Exception as exc:  # a server that fails is a step that says why; the steps before it are kept
        served["error"] = f"{type(exc).__name__}: {exc}"[:1500]
    served["wall_s"] = round(time.time() - t0, 1)
    save("served_fp16", served)
    if "error" not in served:
        res["goals"] = goals(res)
    save("done", True)
    print((out / "report.md").read_text())
    return 0


def _serve(art: Path, device: str, dev: Path, calib: Path, queries, served: dict, out: Path, args) -> None:
    """The fp16 variant behind `r3edge serve --device`: C dev and C train scored through gRPC, then the load."""
    import numpy as np

    from r3edge.api.client import RerankerClient
    from r3edge.benchmarks.load import run_load
    from r3edge.benchmarks.systems import serve_artifact
    from r3edge.distill.student.evaluate import evaluate, server_score_fn

    with serve_artifact(str(art), "fp16", None, device=device) as target:
        with RerankerClient(target) as client:
            client.wait_ready(300)
            info = client.model_info()
        served["model_info"] = {"runtime": info.runtime, "variant": info.variant}
        ev16 = evaluate(dev, server_score_fn(target), return_logits=True)
        np.save(out / "dev-logits-served-fp16.npy", ev16["_logits"])
        served["eval"] = _metrics(ev16)
        fit = evaluate(calib, server_score_fn(target), return_logits=True)
        served["calibrated"] = _calibrated_ece(fit["_logits"][fit["_has_gold"]], fit["_gold"][fit["_has_gold"]],
                                               ev16["_logits"][ev16["_has_gold"]], ev16["_gold"][ev16["_has_gold"]])
        for conc in (1, 16):
            load = run_load(target, queries, max(conc, args.load_requests * (2 if conc > 1 else 1)), conc, top_k=10,
                            progress=False)
            served[f"c{conc}"] = {k: load[k] for k in ("latency_ms", "pairs_per_s", "requests", "errors")}


def goals(res: dict) -> dict:
    """Issue 47's lines for the 1.5B student, from this run's numbers."""
    st = res["steps"]
    fp32, fp16 = st["eval_fp32"], st["served_fp16"]["eval"]
    ndcg = fp32["student_vs_gold"]["ndcg@10"]
    teacher = fp32["teacher_vs_gold"]["ndcg@10"]
    delta = 100 * (fp16["student_vs_gold"]["accuracy"] - fp32["student_vs_gold"]["accuracy"])
    return {"ndcg@10_fp32": ndcg, "teacher_ndcg@10": teacher, "at_least_teacher": ndcg >= teacher,
            "above_minilm_wise": ndcg > MINILM_WISE_NDCG, "accuracy_delta_fp16_pts": delta,
            "fp16_within_0.5_pts": abs(delta) <= ACC_DELTA_PTS,
            "served_p50_ms_c1": st["served_fp16"]["c1"]["latency_ms"]["p50"]}


def _f(x, nd=3):
    return "–" if x is None else f"{x:,.{nd}f}"


def report_md(res: dict) -> str:
    m, st = res["machine"], res["steps"]
    lines = [f"# The 1.5B causal student on {m.get('gpu') or 'the CPU (smoke)'}", "", res["note"] + ".", "",
             f"torch {m.get('torch')}, transformers {m.get('transformers')}, {m.get('cpu_count')} CPU cores. Config "
             f"`{Path(res['config']).name}`; labels `{res['labels']}`; scored on `{res['dev_labels']}`.", ""]
    tr = st.get("train") or {}
    if "steps" in tr:
        lines += [f"Trained {tr['steps']} steps ({tr['epochs']:.2f} epochs of {tr['labelled_pairs']:,} labelled pairs, "
                  f"{tr['pairs_seen']:,} pairs seen) in {tr['wall_s']} s with loading, {tr['seconds_per_step']} s a "
                  f"step; teacher `{tr['teacher']}`.", ""]
    lines += ["| system | C dev nDCG@10 | accuracy | ECE | agreement with the teacher | p50 ms / top-100, c1 | p95 c1 "
              "| p50 c16 | pairs/s c16 |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def row(name, ev, lat=None, c16=None):
        g, a = (ev or {}).get("student_vs_gold") or {}, (ev or {}).get("student_vs_teacher") or {}
        lat, c16 = (lat or {}).get("latency_ms") or {}, c16 or {}
        lines.append(f"| {name} | {_f(g.get('ndcg@10'))} | {_f(g.get('accuracy'))} | {_f(g.get('ece'))} | "
                     f"{_f(a.get('accuracy_vs_teacher'))} | {_f(lat.get('p50'), 1)} | {_f(lat.get('p95'), 1)} | "
                     f"{_f((c16.get('latency_ms') or {}).get('p50'), 1)} | {_f(c16.get('pairs_per_s'), 0)} |")

    ev32 = st.get("eval_fp32")
    if ev32 and ev32.get("teacher_vs_gold"):
        t = ev32["teacher_vs_gold"]
        lines.append(f"| the teacher (its labels) | {_f(t.get('ndcg@10'))} | {_f(t.get('accuracy'))} | {_f(t.get('ece'))} "
                     "| – | – | – | – | – |")
    if ev32:
        row(ev32["scored_by"], ev32)
    tl = st.get("torch_latency")
    if tl:
        row(tl["system"], None, tl["c1"])
    sv = st.get("served_fp16")
    if sv and "error" in sv:
        lines += ["", f"{sv['system']}: error: {sv['error']}"]
    elif sv:
        row(sv["system"], sv["eval"], sv["c1"], sv["c16"])
        c = sv["calibrated"]
        how = f"`r3edge calibrate --bias`'s fit on {c['fit_pairs']:,} C train gold labels, through the same server"
        lines += ["", f"Calibrated ({how}): " + (f"no fit: {c['error']}" if "error" in c else
                  f"C dev ECE {c['ece']:.3f}, accuracy {c['accuracy']:.3f} (T {c['temperature']:.3f}, bias "
                  f"{[round(b, 3) for b in c['bias']]}).")]
    for name in ("train", "export"):
        if (st.get(name) or {}).get("not_run"):
            lines += ["", f"{name}: not run ({st[name]['not_run']})."]
    if (st.get("export") or {}).get("timings"):
        x = st["export"]
        lines += ["", f"Export: {x['wall_s']} s (stages: {x['timings']}); rejected: {x['rejected'] or 'none'}."]
    if res.get("goals"):
        lines += ["", f"Goals (issue 47): `{json.dumps(res['goals'], default=float)}`"]
    lines.append(f"\nElapsed: {res.get('elapsed_s')} s.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--config", default=str(CONFIG))
    p.add_argument("--labels", nargs="+", default=[str(d) for d in sorted(JUDGE_LABELS.glob("shard-*-of-*"))],
                   help="the labels to learn from: committed folders of one judge, disjoint (`r3edge train`'s union); "
                        "default: the 100k pairs' shards labelled so far")
    p.add_argument("--dev-labels", default=str(JUDGE_LABELS / "dev"), help="C dev, labelled by the same judge")
    p.add_argument("--calib-labels", default=str(JUDGE_LABELS / "train"),
                   help="pairs with gold labels for the calibration fit: C train, as the committed calibrations (only "
                        "the gold labels and the student's logits enter the fit, so any judge's C train labels serve)")
    p.add_argument("--requests", required=True, help="C dev as top-100 lists (a pairs JSONL): the latency requests")
    p.add_argument("--n-requests", type=int, default=20, help="top-100s timed in torch")
    p.add_argument("--load-requests", type=int, default=40, help="served requests at concurrency 1 (x2 at 16)")
    p.add_argument("--gguf-dir", help="folder holding the reassembled GGUF as p00 (the stand-in packages' part)")
    p.add_argument("--stubs", default="/tmp/r3edge-stubs")
    p.add_argument("--budget-s", type=float, default=540.0)
    p.add_argument("--train-s", type=float, default=240.0, help="training seconds at most")
    p.add_argument("--min-train-s", type=float, default=60.0)
    p.add_argument("--after-train-s", type=float, default=340.0,
                   help="kept for what follows training: saving, the export (~250 s estimated there; C dev at fp32, "
                        "~75 s on an H100, runs beside it) and serving")
    p.add_argument("--serve-s", type=float, default=60.0, help="kept for serving after the export")
    p.add_argument("--s-per-step", type=float, default=S_PER_STEP)
    p.add_argument("--eval-batch", type=int, default=64)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--smoke-pairs", type=int, default=300)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
