#!/usr/bin/env python3
"""Issue 46's GPU benchmark: r3edge students served over gRPC on ONNX Runtime's CUDA provider, against torch
on the same weights, in one device call (benchmarks/gpu/README.md gives the call sequence).

Two steps, each its own subcommand:

* ``prepare`` (here, on the CPU, from prepare.sh): the students' directories with their weights stored in fp16
  (half the bytes to carry; ``run`` casts them back to fp32, so every system below runs the same fp16-rounded
  values), and the requests (SemEval 2016 C dev: 50 questions, each a top-100 of real comments).
* ``run`` (on the GPU machine, from run.sh): for each cosine student it exports the artifact there (fp32, fp16,
  fp16-packed, static QDQ int8 and their prefix-reuse graphs; fp16-packed is validated on the CUDA provider, the only
  one that runs it), then measures, on the same requests:
  - served over gRPC (``r3edge serve --device cuda``, a child process): the fp16, fp16-packed and fp32 variants on the
    GPU (fp16 and fp16-packed also with a whole top-100 in one micro-batch), int8 on the GPU, and the fp32 variant on
    that machine's CPU; p50/p95 ms
    per top-100 at concurrency 1 and 16, pairs/s, and where a served top-100's time went (the response's timing);
  - in process on the GPU: r3edge's torch scoring graph at fp32 (the reference) and at fp16 with SDPA attention,
    sentence-transformers at fp32 and fp16 (mean pooling + the student's cosine head, as the student scores);
  - parity of each served variant against the torch fp32 reference: argmax agreement, max |Δ expected score|,
    mean top-10 overlap, nDCG@10 on the requests' gold labels (a record like the export's ``validated_on``);
  - batch invariance of each variant on the provider it is served on (a pair alone vs among its top-100).
  Then the tests that skip without a GPU (run.sh runs pytest), then a causal student of the Qwen2.5-1.5B shape
  (random weights: the packaged GGUF is ~1.1 GB and cannot travel) served at fp16 against torch bf16 in process.

This folder has no ``__init__.py``: it is a script run from the working tree, outside the ``r3edge.benchmarks``
package, whose processes never import torch (its in-process peers here do).

Every part writes ``results.json`` and ``report.md`` into ``--out`` as soon as it ends; ``--budget-s`` skips the
parts that would start after it (they are recorded as not run). ``--smoke`` runs every code path on this CPU with
tiny random models and ``--device cpu`` in under three minutes: a proof of the script, not a result.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: the students the issue names: the demo's cosine student and the recommended SemEval student
STUDENTS = {"demo": "minilm-demo", "semeval": "minilm-cqa-bi-rank-wise"}
CAUSAL = "qwen2.5-1.5b-random"
SMOKE_BI, SMOKE_CAUSAL = "bert-tiny", "qwen2-tiny"
TOP_K = 10
#: a whole top-100 in one micro-batch: the GPU default between the two H200 runs, slower than today's
#: (r3edge.core.scoring.GPU_MAX_BATCH_TOKENS, about three micro-batches for a SemEval top-100) in the second
#: (benchmarks/results/gpu-students-h200-second-run); served beside the default so each run measures both again
GPU_WHOLE_TOP100_LIMITS = {"max_batch_tokens": 32768, "max_batch_size": 128}
PACKED = "fp16-packed"
#: the causal student's served limits beside the default (r3edge.core.scoring.GPU_MAX_BATCH_TOKENS, set on the MiniLM
#: students): a whole top-100 per micro-batch, as the second H200 run served it (267.5 ms), and half the default's
#: tokens, where length-sorted micro-batches pad less (the two lists' padded tokens at each limit:
#: benchmarks/results/padding-semeval-c-dev-causal-epyc-2core)
CAUSAL_LIMITS = {"a whole top-100 per micro-batch": GPU_WHOLE_TOP100_LIMITS,
                 "half the default's tokens": {"max_batch_tokens": 4096, "max_batch_size": 64}}
GOALS = {"p50_ms_c1": 6.0, "speedup_vs_torch": 1.5, "top10_overlap": 0.98, "ndcg_delta": 0.005, "causal_p50_ms": 150.0}


# -- prepare (CPU) ------------------------------------------------------------------------------------------------
def _student_config(name: str, smoke: bool) -> Path:
    """The student config file; in smoke mode bert-tiny turned into a cosine student (as the tests do)."""
    import yaml

    path = ROOT / "configs" / "student" / f"{name}.yaml"
    if not smoke or name != SMOKE_BI:
        return path
    raw = yaml.safe_load(path.read_text())
    raw["name"], raw["model"]["kind"], raw["scorer"]["max_total_tokens"] = "bert-tiny-bi", "biencoder", 180
    out = Path(os.environ.get("TMPDIR", "/tmp")) / "r3edge-gpu-bert-tiny-bi.yaml"
    out.write_text(yaml.safe_dump(raw))
    return out


def _fp16_weights(student: Path) -> None:
    """Store the student's float weights as fp16 (safetensors): what travels."""
    from safetensors.numpy import load_file, save_file

    path = student / "model.safetensors"
    tensors = load_file(str(path))
    save_file({k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in tensors.items()}, str(path))


def prepare(args) -> int:
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.model.student import create_student, save_student

    stage = Path(args.stage)
    (stage / "students").mkdir(parents=True, exist_ok=True)
    notes = {}
    for key, config in STUDENTS.items():
        out = stage / "students" / key
        shutil.rmtree(out, ignore_errors=True)
        given = getattr(args, f"{key}_student")
        if given and not args.smoke:
            shutil.copytree(given, out)
            notes[key] = f"trained student {config} from {Path(given).name}"
        else:
            name = SMOKE_BI if args.smoke else config
            save_student(*create_student(load_yaml(_student_config(name, args.smoke), StudentConfig)), out)
            notes[key] = (f"UNTRAINED {name} (random tiny weights, smoke)" if args.smoke else
                          f"UNTRAINED {config}: the packaged all-MiniLM-L6-v2 encoder with the config's initial cosine "
                          "head (no trained weights on the preparing machine): same shapes and speed, not the trained "
                          "student's rankings")
        _fp16_weights(out)
    pairs = Path(args.pairs) if args.pairs else None
    lines = pairs.read_text().splitlines() if pairs and pairs.is_file() else []
    if not lines:
        raise SystemExit(f"--pairs {args.pairs}: no requests (SemEval C dev: ../shared/data/semeval2016-cqa/subtaskC_dev.jsonl)")
    (stage / "requests.jsonl").write_text("\n".join(lines[: args.max_requests]) + "\n")
    (stage / "students.json").write_text(json.dumps({"students": notes, "weights": "stored fp16, read back as fp32",
                                                     "requests": f"{pairs.name}, first {min(len(lines), args.max_requests)}"},
                                                    indent=1) + "\n")
    print(json.dumps(notes, indent=1))
    return 0


# -- run (GPU machine) ---------------------------------------------------------------------------------------------
class Results:
    """results.json + report.md, rewritten after every part; the parts of an earlier ``run`` into the same
    ``--out`` are kept (run.sh runs the students, then the GPU tests, then the causal part)."""

    def __init__(self, out: Path, meta: dict):
        out.mkdir(parents=True, exist_ok=True)
        earlier = json.loads((out / "results.json").read_text()).get("parts", {}) if (out / "results.json").is_file() else {}
        earlier.pop("done", None)
        self.out, self.data = out, {**meta, "parts": earlier}

    def put(self, part: str, value) -> None:
        self.data["parts"][part] = value
        (self.out / "results.json").write_text(json.dumps(self.data, indent=1, default=float) + "\n")
        (self.out / "report.md").write_text(report_md(self.data))


def _restore_fp32(src: Path, dst: Path) -> Path:
    from safetensors.numpy import load_file, save_file

    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    t = load_file(str(dst / "model.safetensors"))
    save_file({k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in t.items()}, str(dst / "model.safetensors"))
    return dst


def _requests(path: Path, n: int):
    from r3edge.core.pairs import read_queries

    return read_queries(path)[:n]


def _ms(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def _row(ms: list[float], pairs_per_call: float) -> dict:
    from r3edge.core.timing import percentiles

    p = percentiles(ms)
    return {"latency_ms": p, "pairs_per_s": pairs_per_call * len(ms) / (sum(ms) / 1000) if ms else None}


def _parity(queries, ref_scores: dict, got_scores: dict, ref_logits=None, got_logits=None) -> dict:
    """Against the torch fp32 reference: argmax agreement, max |Δ expected score|, mean top-10 overlap, nDCG@10
    of both on the requests' gold labels."""
    from r3edge.core.metrics import ndcg_at_k
    from r3edge.core.timing import top_k_overlap

    overlaps, d, gains, r_all, g_all, qids = [], 0.0, [], [], [], []
    queries = [q for q in queries if q.qid in got_scores]  # the CPU-served row scores fewer requests
    for q in queries:
        r, g = np.asarray(ref_scores[q.qid]), np.asarray(got_scores[q.qid])
        overlaps.append(top_k_overlap(r, g, TOP_K))
        d = max(d, float(np.abs(r - g).max()))
        gains += [float(c.label or 0) for c in q.candidates]
        r_all += list(r)
        g_all += list(g)
        qids += [q.qid] * len(r)
    out = {"top10_overlap": float(np.mean(overlaps)), "max_abs_score_diff": d}
    out["requests"] = len(queries)
    if ref_logits is not None and got_logits is not None:
        k = len(got_logits)  # the first k requests (got_logits follows the scored subset)
        out["argmax_agreement"] = float((np.concatenate(ref_logits[:k]).argmax(-1) == np.concatenate(got_logits).argmax(-1)).mean())
    labelled = any(gains)
    if labelled:
        gains_a = np.asarray(gains)
        out["ndcg@10_ref"] = ndcg_at_k(gains_a, np.asarray(r_all), qids)["ndcg@10"]
        out["ndcg@10"] = ndcg_at_k(gains_a, np.asarray(g_all), qids)["ndcg@10"]
    return out


def _served(art: Path, variant: str, device: str, queries, scorer, args, label: str, env: dict | None = None,
            concurrency: tuple[int, ...] = (1, 16), **limits) -> dict:
    """One variant served by a child ``r3edge serve --device`` (``limits``: more of its flags, e.g.
    ``max_batch_tokens``; ``env``: more of its environment): every candidate's probabilities (top_k=0, also the
    warm-up), then closed-loop load at each of ``concurrency``."""
    from r3edge.api.client import RerankerClient
    from r3edge.benchmarks.load import collect_probs, run_load
    from r3edge.benchmarks.systems import serve_artifact

    row: dict = {"system": label, "variant": variant, "device": device, "limits": limits, **({"env": env} if env else {})}
    try:
        with serve_artifact(str(art), variant, None, device=device, env=env, **limits) as target:
            with RerankerClient(target) as client:
                client.wait_ready(300)
                info = client.model_info()
            row["model_info"] = {"runtime": info.runtime, "variant": info.variant}
            probs = collect_probs(target, queries)
            values = np.asarray(scorer.spec.label_values, dtype=np.float64)
            row["_scores"] = {q.qid: [float(np.asarray(probs[(q.qid, c.docid)]) @ values) for c in q.candidates]
                              for q in queries}
            row["_argmax"] = {q.qid: [int(np.argmax(probs[(q.qid, c.docid)])) for c in q.candidates] for q in queries}
            slow = device == "cpu" and not args.smoke
            for conc in concurrency:
                n = (args.cpu_requests if slow else args.requests) * (2 if conc > 1 else 1)
                load = run_load(target, queries, max(n, conc), conc, top_k=TOP_K, progress=False)
                row[f"c{conc}"] = {"latency_ms": load["latency_ms"], "pairs_per_s": load["pairs_per_s"],
                                   "requests": load["requests"], "errors": load["errors"],
                                   "server_ms_p50": load["server_ms_p50"]}
    except Exception as exc:  # a system that fails is a row that says why, not a lost run
        row["error"] = f"{type(exc).__name__}: {exc}"[:1500]
    return row


def _encode_ms(scorer, queries) -> list[float]:
    """ms of one ``Scorer.encode_batch`` of each top-100, as the server tokenises a request."""
    return [t for q in queries for t in _ms(lambda q=q: scorer.encode_batch([q.query] * len(q.candidates),
                                                                            [c.text for c in q.candidates]), 1)]


def _tokenise_ms(scorer, queries) -> dict:
    """p50 ms of ``Scorer.encode_batch`` on each top-100 in this process, with the Rust tokenizer's threads and on
    one thread (it reads TOKENIZERS_PARALLELISM on every call): the served rows' ``tokenise`` is the same call
    inside the server, beside its other threads, so the two together say what the server adds."""
    from r3edge.core.timing import percentiles

    before, out = os.environ.get("TOKENIZERS_PARALLELISM"), {}
    try:
        for mode, flag in (("threads", "true"), ("one_thread", "false")):
            os.environ["TOKENIZERS_PARALLELISM"] = flag
            out[mode] = percentiles(_encode_ms(scorer, queries))["p50"]
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before
    return out


def tokenise_threads(args) -> int:
    """Whether the tokenizer's thread count is a lever on a served top-100's time: the served rows spend 3.0-3.4 ms of
    a SemEval top-100 tokenising on the H200 machine's 12 measuring cores, 2.4 ms in process there, and 4 ms on a
    2-core EPYC. This measures ``Scorer.encode_batch``'s p50 per top-100 at each thread count of the Rust tokenizer's
    pool (rayon reads ``RAYON_NUM_THREADS`` once per process, so one child process per count) and with
    ``TOKENIZERS_PARALLELISM=false``, on the same requests, into ``tokenise_threads.json`` in ``--out``. On the H200
    machine it fell from 15.4 ms on 1 thread to 2.7 ms on 12 and 16 (benchmarks/results/gpu-students-h200-third-run):
    the served default already uses every core it has."""
    import subprocess

    from r3edge.benchmarks.machine import machine_info
    from r3edge.core.scoring import Scorer

    stage = Path(args.stage)
    scorer = Scorer.load(stage / "students" / args.student)
    queries = _requests(stage / "requests.jsonl", args.max_requests)
    if args.one:
        from r3edge.core.timing import percentiles

        _encode_ms(scorer, queries)  # a warm-up pass: the tokenizer's thread pool starts on its first call
        ms = _encode_ms(scorer, queries) + _encode_ms(scorer, queries)
        print(json.dumps({"p50_ms": percentiles(ms)["p50"], "cores": len(os.sched_getaffinity(0))}))
        return 0
    rows = []
    for count in [c for c in args.counts.split(",") if c] + ["parallelism off"]:
        env = dict(os.environ, TOKENIZERS_PARALLELISM="false" if count == "parallelism off" else "true")
        env.pop("RAYON_NUM_THREADS", None)
        if count != "parallelism off":
            env["RAYON_NUM_THREADS"] = count
        cmd = [sys.executable, str(Path(__file__).resolve()), "tokenise-threads", "--stage", str(stage), "--out", args.out,
               "--student", args.student, "--max-requests", str(args.max_requests), "--one"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        row = {"threads": count, **(json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0
                                    else {"error": done.stderr[-500:]})}
        print(row, flush=True)
        rows.append(row)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "tokenise_threads.json").write_text(json.dumps(
        {"student": args.student, "requests": len(queries), "machine": machine_info(), "rows": rows}, indent=1) + "\n")
    return 0


def _one_call(scorer) -> dict:
    """Limits that score a whole top-100 in one torch call, as sentence-transformers gets (``batch_size`` 128):
    lm_score_fn's own default is the CPU's 512 padded tokens, which cut a SemEval top-100 into 13-48 calls for the
    MiniLM students and more for the causal student's longer pairs: the torch rows of the second H200 run
    (benchmarks/results/gpu-students-h200-second-run) ran so."""
    return {"max_batch_tokens": 128 * scorer.spec.max_total_tokens, "max_batch_size": 128}


def _in_process(student: Path, queries, device: str, args) -> list[dict]:
    """torch (r3edge's scoring graph) at fp32 and fp16+SDPA, sentence-transformers at fp32 and fp16, on ``device``;
    each row keeps every candidate's expected score for the parity columns (fp32 torch is the reference)."""
    import torch

    from r3edge.benchmarks.peers import peer_max_seq_length
    from r3edge.model.student import lm_score_fn, load_student

    rows = []
    texts = [(q.query, [c.text for c in q.candidates]) for q in queries]
    reps = max(1, args.reps)

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def add(label: str, rank_one, logits_one=None):
        row: dict = {"system": label, "device": device, "in_process": True}
        try:
            with torch.inference_mode():
                scores = {q.qid: rank_one(q.query, t) for q, (_, t) in zip(queries, texts, strict=True)}
                row["_scores"] = {k: [float(x) for x in v] for k, v in scores.items()}
                sync()
                ms = []
                for _ in range(reps):
                    for q, t in texts:
                        t0 = time.perf_counter()
                        rank_one(q, t)
                        sync()
                        ms.append((time.perf_counter() - t0) * 1000)
            row["c1"] = _row(ms, float(np.mean([len(t) for _, t in texts])))
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:1500]
        rows.append(row)

    lm, scorer = load_student(student)
    lm = lm.to(device).eval()
    for dtype, attn, label in ((torch.float32, None, "torch fp32 (r3edge graph; reference)"),
                               (torch.float16, "sdpa", "torch fp16, SDPA (r3edge graph)")):
        encoder = getattr(lm, "encoder", lm)  # a cosine student's label head stays fp32, as its graph computes it
        encoder.to(dtype)
        if attn and hasattr(encoder, "set_attn_implementation"):
            encoder.set_attn_implementation(attn)
        fn = lm_score_fn(lm, scorer, **_one_call(scorer))

        def rank_one(q, t, fn=fn):
            return scorer.relevance(fn([q] * len(t), t))[1]

        add(label, rank_one)
        if rows[-1].get("_scores") is not None and dtype is torch.float32:
            rows[-1]["_logits"] = [fn([q.query] * len(q.candidates), [c.text for c in q.candidates]) for q in queries]
    del lm
    try:
        from sentence_transformers import SentenceTransformer

        head = json.loads((student / "cosine_head.json").read_text())
        spec = importlib.util.spec_from_file_location("st_peers", ROOT / "benchmarks" / "peer_side" / "sentence_transformers_peers.py")
        peers = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(peers)
        values, temperature = scorer.spec.label_values, float(scorer.spec.temperature)
        for half in (False, True):
            st = SentenceTransformer(str(student), device=device)
            st.max_seq_length = peer_max_seq_length(scorer)
            if half:
                st = st.half()

            def rank_one(q, t, st=st):
                emb = st.encode([q, *t], batch_size=128, normalize_embeddings=True, convert_to_numpy=True,
                                show_progress_bar=False).astype(np.float64)
                return peers.expected_scores(emb[1:] @ emb[0], head, values, temperature)

            add(f"sentence-transformers {'fp16' if half else 'fp32'}", rank_one)
    except Exception as exc:
        rows.append({"system": "sentence-transformers", "error": f"{type(exc).__name__}: {exc}"[:1500]})
    return rows


def _batch_invariance(art: Path, variant: str, device: str, queries) -> dict:
    """Max |Δ score| of a pair alone vs among its top-100, through the variant's runtime on ``device`` (the
    prefix-reuse graphs the server uses)."""
    from r3edge.core.fidelity import batch_invariance
    from r3edge.core.onnx_runtime import OnnxRuntime

    try:
        rt = OnnxRuntime(art, variant, device=device)
        q = queries[0]
        qs, ds = [q.query] * len(q.candidates), [c.text for c in q.candidates]
        return {"variant": variant, "device": device, "providers": list(rt.providers), "pairs": len(ds),
                "max_abs_score_diff": batch_invariance(rt.scorer, None if rt.prefix else rt, qs, ds, rt.prefix)}
    except Exception as exc:
        return {"variant": variant, "device": device, "error": f"{type(exc).__name__}: {exc}"[:800]}


def student_part(key: str, stage: Path, work: Path, queries, device: str, args) -> dict:
    from r3edge.core.devices import choose_variant
    from r3edge.core.scoring import Scorer
    from r3edge.export.onnx import export_artifact

    student = _restore_fp32(stage / "students" / key, work / f"student-{key}")
    t0 = time.perf_counter()
    art = export_artifact(student, work / f"artifact-{key}", variants=("fp32", "fp16", PACKED, "int8"),
                          prefix_reuse=True, log=lambda *a, **k: None)
    export_s = time.perf_counter() - t0
    report = json.loads((art / "export_report.json").read_text())
    scorer = Scorer.load(art)
    part: dict = {"student": json.loads((stage / "students.json").read_text())["students"][key],
                  "export_s": round(export_s, 1), "export_rejected": report["rejected"],
                  "export_parity": {v: {k: r.get(k) for k in ("validated_on", "max_abs_logit_diff", "max_abs_score_diff",
                                                               "argmax_agreement")}
                                    for v, r in report.get("prefix_reuse", report["variants"]).items()},
                  # the fp16 candidate graph's fusions (a prefix-reuse artifact's served graph), else the single graph's
                  "fp16_fusion": (report.get("prefix_reuse", {}).get("fp16", {}).get("candidate_quantization")
                                  or report["quantization"].get("fp16", {})).get("gpu_fusion")}
    part["tokenise_ms_p50_in_process"] = _tokenise_ms(scorer, queries)
    rows = _in_process(student, queries, device, args)
    cpu_label = "served fp32, CPU provider (same machine)"
    for variant, dev, label in ((("fp16", device, f"served fp16, {device}")), ("fp32", device, f"served fp32, {device}"),
                                ("fp32", "cpu", cpu_label)):
        if dev == "cpu" and device == "cpu" and variant == "fp32" and label == cpu_label:
            continue  # smoke: the CPU row is the fp32 row above
        subset = queries[: args.cpu_requests] if dev == "cpu" and not args.smoke else queries
        rows.append(_served(art, variant, dev, subset, scorer, args, label))
    # The served default cuts a SemEval top-100 into about three micro-batches (GPU_MAX_BATCH_TOKENS); this row
    # serves a whole top-100 in one, so every run measures the two side by side.
    whole = GPU_WHOLE_TOP100_LIMITS
    rows.append(_served(art, "fp16", device, queries, scorer, args, f"served fp16, {device}, a whole top-100 per "
                        f"micro-batch ({whole['max_batch_tokens']:,} tokens, {whole['max_batch_size']} pairs)", **whole))
    # Tokenising a SemEval top-100 took 3.45 ms in the server on the H200's 16 cores with the Rust tokenizer's
    # parallelism on (the second run), 2.8 ms on one core in process in the first; this row serves the default
    # with it off, so the run says which is faster there.
    rows.append(_served(art, "fp16", device, queries, scorer, args, f"served fp16, {device}, tokenizer on one thread "
                        "(TOKENIZERS_PARALLELISM=false)", env={"TOKENIZERS_PARALLELISM": "false"}))
    manifest = json.loads((art / "manifest.json").read_text())
    kept = manifest["variants"]

    def served_if_built(variant: str, label: str, **limits) -> dict:
        if variant in kept:
            return _served(art, variant, device, queries, scorer, args, label, **limits)
        return {"system": label, "variant": variant, "device": device, "limits": limits,
                "error": f"rejected at export: {json.dumps(report['rejected'].get(variant), default=str)[:600]}"}

    # fp16 in ONNX Runtime's packing mode (the CUDA provider only; built and validated where it runs): a SemEval
    # top-100 is 4,958 real tokens, padded to 10,792 in the default's micro-batches and 23,700 in one
    # (benchmarks/results/padding-semeval-c-dev-epyc-2core); packed, a micro-batch costs its real tokens. At the default limits, and
    # with a whole top-100 per micro-batch
    rows.append(served_if_built(PACKED, f"served {PACKED}, {device}"))
    rows.append(served_if_built(PACKED, f"served {PACKED}, {device}, a whole top-100 per micro-batch", **whole))
    # INT8 on the GPU (issue 46): the static QDQ variant, the one int8 kind the CUDA provider can open (the per-row
    # kinds are refused on a GPU, r3edge.core.devices.CPU_ONLY_KINDS); what it gives there against fp16 and fp32
    rows.append(served_if_built("int8", f"served int8 (static QDQ), {device}"))
    ref = next((r for r in rows if r["system"].startswith("torch fp32") and "_scores" in r), None)
    for r in rows:
        if ref is not None and "_scores" in r:
            got_logits = None
            if "_argmax" in r:  # served: argmax of the served probabilities vs the reference's logits
                got_logits = [np.eye(scorer.spec.n_labels)[r["_argmax"][q.qid]] for q in queries if q.qid in r["_argmax"]]
            r["parity_vs_torch_fp32"] = _parity(queries, ref["_scores"], r["_scores"], ref.get("_logits"), got_logits)
            if r.get("variant"):
                r["parity_vs_torch_fp32"]["validated_on"] = "CUDAExecutionProvider" if r["device"] == "cuda" else "CPUExecutionProvider"
    for r in rows:
        for k in ("_scores", "_argmax", "_logits"):
            r.pop(k, None)
    part["systems"] = rows
    part["batch_invariance"] = [_batch_invariance(art, v, device, queries) for v in ("fp32", "fp16", PACKED, "int8")
                                if v in kept]
    # the goals are read on the variant `r3edge serve --device cuda` serves without --variant
    part["gpu_default_variant"] = choose_variant(manifest, None, "cuda")[0]
    part["goals"] = _student_goals(rows, part["gpu_default_variant"])
    return part


def _p50(row: dict, conc: str = "c1"):
    return ((row.get(conc) or {}).get("latency_ms") or {}).get("p50")


def _student_goals(rows: list[dict], variant: str) -> dict:
    """Issue 46's goals, read on ``variant`` served at the default limits (the GPU default: fp16-packed when the
    export built it, else fp16)."""
    fp16 = [r for r in rows if r.get("variant") == variant and _p50(r)]
    served = next((r for r in fp16 if not r["limits"] and not r.get("env")), None)  # the goals are read on the served default
    torch_rows = [r for r in rows if r.get("in_process") and _p50(r)]
    fastest = min(torch_rows, key=_p50) if torch_rows else None
    if served is None:
        return {"met": False, "why": f"the {variant} variant was not served"}
    par = served.get("parity_vs_torch_fp32", {})
    goals = {"variant": variant, "p50_ms_c1": _p50(served), "fastest_in_process": fastest and fastest["system"],
             "speedup_vs_fastest_in_process": fastest and _p50(fastest) / _p50(served),
             "top10_overlap": par.get("top10_overlap"),
             "ndcg_delta": None if par.get("ndcg@10") is None else par["ndcg@10"] - par["ndcg@10_ref"]}
    whole = next((r for r in fp16 if r["limits"] == GPU_WHOLE_TOP100_LIMITS), None)  # what one micro-batch gives
    goals["p50_ms_c1_whole_top100_per_batch"] = whole and _p50(whole)
    goals["met"] = bool(goals["p50_ms_c1"] <= GOALS["p50_ms_c1"]
                        and (goals["speedup_vs_fastest_in_process"] or 0) >= GOALS["speedup_vs_torch"]
                        and (goals["top10_overlap"] or 0) >= GOALS["top10_overlap"]
                        and goals["ndcg_delta"] is not None and abs(goals["ndcg_delta"]) <= GOALS["ndcg_delta"])
    return goals


#: in ``--work``: what the causal student's export wrote (``export_causal``), and the pid of a background one
CAUSAL_EXPORT, CAUSAL_EXPORT_PID = "causal-export.json", "causal-export.pid"


def export_causal(work: Path, smoke: bool, prefix_reuse: bool) -> dict:
    """Build the causal student (seeded random weights), export it into ``work`` and write what the causal part
    reports of it to ``work/CAUSAL_EXPORT``. ``run.sh bench`` starts it first, as ``export-causal`` in a process
    session of its own on 4 of the machine's cores, so its CPU minutes (235 s on the H200 machine in the second
    run) overlap the MiniLM parts instead of following them; the causal part then waits for it."""
    import torch

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.core.hardware import usable_cores
    from r3edge.export.onnx import export_artifact
    from r3edge.model.student import create_student, save_student

    name = SMOKE_CAUSAL if smoke else CAUSAL
    # as many threads as the cores this process may run on (run.sh pins it to 4), as the servers take theirs:
    # ONNX Runtime, left to choose, would start one thread per physical core of the machine and pin them there,
    # onto the measured cores too
    threads = usable_cores()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    lm, scorer = create_student(load_yaml(ROOT / "configs" / "student" / f"{name}.yaml", StudentConfig))
    student = save_student(lm, scorer, work / "student-causal")
    del lm
    # fp16 named the default: the export then skips timing the variants on the CPU (170 s of a 530 s export of this
    # shape on 2 AVX2 cores, benchmarks/results/export-1p5b-cpu-2core), which a GPU server would not use
    art = export_artifact(student, work / "artifact-causal", variants=("fp32", "fp16"), max_calib=4, default="fp16",
                          prefix_reuse=prefix_reuse, threads=threads, log=lambda *a, **k: None)
    report = json.loads((art / "export_report.json").read_text())
    rec = {"student": f"{name} (random weights, seeded: the packaged Qwen2.5-Coder-1.5B GGUF's parts are ~1.1 GB "
           "and cannot travel to the GPU machine)" if not smoke else f"{name} (smoke)",
           "student_dir": str(student), "artifact": str(art), "prefix_reuse": prefix_reuse,
           "export_s": round(time.perf_counter() - t0, 1), "export_timings_s": report["timings_s"],
           "export_rejected": report["rejected"], "cpus": sorted(os.sched_getaffinity(0)), "threads": threads}
    (work / CAUSAL_EXPORT).write_text(json.dumps(rec, indent=1) + "\n")
    return rec


def _running(pid_file: Path) -> bool:
    """Whether the background export named in ``pid_file`` still runs (a finished child that nobody reaped yet
    is a zombie, not running)."""
    try:
        stat = Path(f"/proc/{int(pid_file.read_text())}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class NotRun(Exception):
    """Why the causal part was left for a later call (its budget)."""


def causal_export(work: Path, args, left) -> dict:
    """The causal student's export: a background one's (waited for while ``left()`` keeps ``--causal-serve-s`` for
    serving), else one made here, in this process (with ``--causal-min-s`` left); :class:`NotRun` when the budget
    allows neither."""
    rec_file, pid_file = work / CAUSAL_EXPORT, work / CAUSAL_EXPORT_PID
    t0 = time.perf_counter()
    # with an export in the background (running, done, or ended without a record) the part keeps --causal-serve-s
    # for serving; without one it exports here first, with --causal-min-s
    while rec_file.is_file() or pid_file.is_file():
        running = not rec_file.is_file() and _running(pid_file)
        if left() < args.causal_serve_s:
            raise NotRun(f"budget: the background export was still running with {left():.0f} s left; "
                         "`run.sh part causal` waits for it and serves it" if running else
                         f"budget: {left():.0f} s left, the part needs ~{args.causal_serve_s:.0f} s")
        if not running:
            break
        time.sleep(2)
    if rec_file.is_file():
        rec = json.loads(rec_file.read_text())
        if "error" in rec:
            raise RuntimeError(f"the background export failed: {rec['error']}")
        if rec["prefix_reuse"] != args.causal_prefix_reuse:
            raise RuntimeError(f"the background export was made with prefix_reuse={rec['prefix_reuse']}: run the part "
                               "with the same CAUSAL_PREFIX_REUSE as `run.sh bench`")
        return {**rec, "exported": "in the background (export-causal), beside the MiniLM parts",
                "waited_for_export_s": round(time.perf_counter() - t0, 1)}
    if left() < args.causal_min_s:
        raise NotRun(f"budget: {left():.0f} s left, and exporting here needs ~{args.causal_min_s} s")
    if pid_file.is_file():  # it ended without a record (killed, or never started): export here after all
        log = work / "causal-export.log"
        return {**export_causal(work, args.smoke, args.causal_prefix_reuse),
                "exported": "in this process: the background export ended without a record",
                "background_log_tail": log.read_text()[-1500:] if log.is_file() else "no log"}
    return {**export_causal(work, args.smoke, args.causal_prefix_reuse), "exported": "in this process"}


def causal_part(work: Path, queries, device: str, args, left) -> dict:
    """The Qwen2.5-1.5B shape (random weights, seeded) at fp16 served vs torch bf16 in process."""
    try:
        rec = causal_export(work, args, left)
    except NotRun as why:
        return {"not_run": str(why)}
    import torch

    from r3edge.core.scoring import Scorer
    from r3edge.model.student import lm_score_fn, load_student

    art = Path(rec["artifact"])
    part: dict = {k: rec[k] for k in ("student", "exported", "export_s", "export_timings_s", "export_rejected", "cpus",
                                      "threads", "waited_for_export_s", "background_log_tail") if k in rec}
    lm, _ = load_student(rec["student_dir"])
    scorer = Scorer.load(art)
    enc = scorer.encode_batch([q.query for q in queries[:1] for _ in q.candidates], [c.text for c in queries[0].candidates])
    part["pair_tokens"] = {"min": min(len(e.input_ids) for e in enc), "max": max(len(e.input_ids) for e in enc)}
    rows = _causal_served(art, scorer, queries[:2], device, args)
    bf16 = torch.bfloat16 if device.startswith("cuda") else torch.float32  # smoke: bf16 is emulated on most CPUs
    m = lm.to(device=device, dtype=bf16).eval()
    fn = lm_score_fn(m, scorer, **_one_call(scorer))
    texts = [(q.query, [c.text for c in q.candidates]) for q in queries[:2]]
    row: dict = {"system": f"torch {'bf16' if bf16 is torch.bfloat16 else 'fp32 (smoke)'} in process, one batch of 100",
                 "device": device, "in_process": True}
    with torch.inference_mode():
        ref = {q.qid: scorer.relevance(fn([q.query] * len(q.candidates), [c.text for c in q.candidates]))[1]
               for q in queries[:2]}  # also the warm-up
        ms = [t for _ in range(max(1, args.reps)) for q, t_ in texts
              for t in _ms(lambda q=q, t_=t_: (fn([q] * len(t_), t_), torch.cuda.synchronize() if device.startswith("cuda") else None), 1)]
    row["c1"] = _row(ms, float(np.mean([len(t) for _, t in texts])))
    rows.append(row)
    for r in rows:  # each served row against the in-process torch row (random weights: close scores, a loose check)
        if r.get("variant") and "_scores" in r:
            r["parity_vs_torch"] = _parity(queries[:2], ref, r["_scores"])
    for r in rows:
        for k in ("_scores", "_argmax"):
            r.pop(k, None)
    part["systems"] = rows
    # the goal is read on what `r3edge serve --device cuda` does with this artifact and no flags (the first row);
    # the other served rows say which of its levers moved it
    p = _p50(rows[0])
    fastest = min((r for r in rows if r.get("variant") and _p50(r) is not None), key=_p50, default=None)
    part["goals"] = {"p50_ms_c1": p, "met": p is not None and p <= GOALS["causal_p50_ms"],
                     "fastest_served": fastest and {"system": fastest["system"], "p50_ms_c1": _p50(fastest)}}
    return part


def _causal_served(art: Path, scorer, queries, device: str, args) -> list[dict]:
    """The causal student's served fp16 rows: first as ``r3edge serve --device`` serves it without flags (prefix
    reuse on when the artifact has its graphs), then the single graph at the default limits and at
    :data:`CAUSAL_LIMITS` (at concurrency 1 only: at 16, admission by expected wait refused 77 of 80 such
    requests in the second H200 run)."""
    from r3edge.core.artifact import PREFIX_GRAPHS

    prefix = "fp16" in json.loads((art / "manifest.json").read_text()).get(PREFIX_GRAPHS, {})
    rows = [_served(art, "fp16", device, queries, scorer, args,
                    f"served fp16, {device}" + (", prefix reuse (the served default)" if prefix else ""))]
    single = {"prefix_reuse": "false"} if prefix else {}
    if prefix:
        rows.append(_served(art, "fp16", device, queries, scorer, args, f"served fp16, {device}, single graph",
                            concurrency=(1,), **single))
    for name, limits in CAUSAL_LIMITS.items():
        rows.append(_served(art, "fp16", device, queries, scorer, args,
                            f"served fp16, {device}, single graph, {name} ({limits['max_batch_tokens']:,} tokens, "
                            f"{limits['max_batch_size']} pairs)", concurrency=(1,), **single, **limits))
    return rows


def _gpu_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return f"{torch.cuda.get_device_name(0)} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)"
    return "no GPU (smoke on the CPU)"


def run(args) -> int:
    import onnxruntime as ort

    from r3edge.benchmarks.machine import machine_info

    t_start = time.perf_counter()
    device = "cpu" if args.smoke else args.device
    stage, out = Path(args.stage), Path(args.out)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    res = Results(out, {"smoke": bool(args.smoke), "gpu": _gpu_name(device), "device": device, "machine": machine_info(),
                        "onnxruntime": {"version": ort.__version__, "providers": ort.get_available_providers(),
                                        "module": ort.__file__},
                        "note": "SMOKE: tiny random models on the CPU, a proof of the script, not a result" if args.smoke
                        else "issue 46's GPU benchmark (benchmarks/gpu/README.md)"})
    queries = _requests(stage / "requests.jsonl", args.max_requests)

    def left() -> float:
        return args.budget_s - (time.perf_counter() - t_start)

    for key in STUDENTS:
        if f"student:{key}" not in args.parts.split(",") and "students" not in args.parts.split(","):
            continue
        if args.smoke and key != "demo":
            res.put(f"student:{key}", {"not_run": "smoke: the demo student's part runs the same code"})
            continue
        if left() < args.part_min_s:
            res.put(f"student:{key}", {"not_run": f"budget: {left():.0f} s left"})
            continue
        t0 = time.perf_counter()
        try:
            part = student_part(key, stage, work, queries, device, args)
        except Exception as exc:
            part = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        part["seconds"] = round(time.perf_counter() - t0, 1)
        res.put(f"student:{key}", part)
    if args.pytest_json and Path(args.pytest_json).is_file():
        res.put("gpu_tests", json.loads(Path(args.pytest_json).read_text()))
    if "causal" in args.parts.split(","):  # its budget is causal_export's to judge (NotRun: recorded as not run)
        t0 = time.perf_counter()
        try:
            part = causal_part(work, queries, device, args, left)
        except Exception as exc:
            part = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        part["seconds"] = round(time.perf_counter() - t0, 1)
        res.put("causal", part)
    res.data["seconds"] = round(time.perf_counter() - t_start, 1)
    res.put("done", True)
    print((out / "report.md").read_text())
    return 0


# -- report -------------------------------------------------------------------------------------------------------
def _fmt(x, nd=1):
    return "–" if x is None else f"{x:,.{nd}f}"


def report_md(d: dict) -> str:
    lines = [f"# r3edge students on {d['gpu']}", "",
             f"{d['note']}. ONNX Runtime {d['onnxruntime']['version']} ({', '.join(d['onnxruntime']['providers'])}); "
             f"CPU: {d['machine'].get('cpu')} ({d['machine'].get('cores_usable')} usable cores). "
             "Requests: top-100 lists (1 query + 100 candidates each); p50/p95 are ms per top-100.", ""]
    for name, part in d["parts"].items():
        if name == "done":
            continue
        lines += [f"## {name}", ""]
        if isinstance(part, dict) and "cases" in part:
            lines += [f"{part['counts']}", "", "| test | status | why |", "|---|---|---|"]
            lines += [f"| {c['test']} | {c['status']} | {c['why'][:160]} |" for c in part["cases"]] + [""]
            continue
        if not isinstance(part, dict) or "systems" not in part:
            lines += [f"`{json.dumps(part, default=str)[:1500]}`", ""]
            continue
        where = (f" ({part['exported']}; the part waited {part.get('waited_for_export_s')} s for it)"
                 if part.get("exported") else "")
        lines += [f"Student: {part['student']}. Export {part.get('export_s')} s{where}; rejected: "
                  f"{part.get('export_rejected') or 'none'}.", "",
                  "| system | p50 c1 | p95 c1 | p50 c16 | p95 c16 | pairs/s c16 (c1 in process) | top-10 overlap "
                  "| max abs dScore | argmax | nDCG@10 (ref) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in part["systems"]:
            if "error" in r:
                lines.append(f"| {r['system']} | error: {r['error'][:200]} |||||||||")
                continue
            c1, c16 = r.get("c1") or {}, r.get("c16") or {}
            par = r.get("parity_vs_torch_fp32") or r.get("parity_vs_torch") or {}
            tput = c16.get("pairs_per_s") if c16 else c1.get("pairs_per_s")
            ndcg = "–" if par.get("ndcg@10") is None else f"{par['ndcg@10']:.4f} ({par['ndcg@10_ref']:.4f})"
            lines.append(f"| {r['system']} | {_fmt(_p50(r), 2)} | {_fmt((c1.get('latency_ms') or {}).get('p95'), 2)} | "
                         f"{_fmt(_p50(r, 'c16'), 2)} | {_fmt((c16.get('latency_ms') or {}).get('p95'), 2)} | {_fmt(tput, 0)} | "
                         f"{_fmt(par.get('top10_overlap'), 3)} | {_fmt(par.get('max_abs_score_diff'), 4)} | "
                         f"{_fmt(par.get('argmax_agreement'), 3)} | {ndcg} |")
        lines.append("")
        served = [r for r in part["systems"] if (r.get("c1") or {}).get("server_ms_p50")]
        if served:  # where a served top-100's time went at concurrency 1: the response's Timing, p50 of each
            lines += ["Served at concurrency 1, p50 ms of the client's latency and of the response's timing (server side): "
                      "transport = client - server total; scoring = server total - tokenise - queue (the micro-batches "
                      "and the engine around them, wall time); runtime calls = the ONNX Runtime calls' time summed over "
                      "the request's micro-batches (concurrent workers overlap, so it can exceed scoring).", "",
                      "| system | client | transport | server total | tokenise | queue | scoring | runtime calls |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|"]
            for r in served:
                s, client = r["c1"]["server_ms_p50"], _p50(r)
                lines.append(f"| {r['system']} | {_fmt(client, 2)} | {_fmt(client - s['total'], 2)} | {_fmt(s['total'], 2)} | "
                             f"{_fmt(s['tokenize'], 2)} | {_fmt(s['queue'], 2)} | "
                             f"{_fmt(s['total'] - s['tokenize'] - s['queue'], 2)} | {_fmt(s['inference'], 2)} |")
            lines += ["", "(Differences of p50s, not p50s of differences: approximate.)", ""]
        if part.get("tokenise_ms_p50_in_process"):
            tok = part["tokenise_ms_p50_in_process"]
            lines.append(f"- tokenising a top-100 in this process (Scorer.encode_batch, p50): {_fmt(tok['threads'], 2)} ms "
                         f"with the tokenizer's threads, {_fmt(tok['one_thread'], 2)} ms on one thread")
        for bi in part.get("batch_invariance", []):
            lines.append(f"- batch invariance, {bi.get('variant')} on {bi.get('device')}: "
                         + (f"max |dScore| {bi['max_abs_score_diff']:.2e} over {bi['pairs']} pairs ({bi['providers'][0]})"
                            if "error" not in bi else f"error: {bi['error'][:200]}"))
        lines += [f"- goals: `{json.dumps(part.get('goals'), default=str)}`", ""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="here: the students (fp16 weights) and the requests, into --stage")
    p.add_argument("--stage", required=True)
    p.add_argument("--demo-student", help="a trained demo cosine student directory (`r3edge demo`'s runs/demo/student)")
    p.add_argument("--semeval-student", help="a trained minilm-cqa-bi-rank-wise directory (its reproduce line: "
                   "benchmarks/results/fidelity-semeval-qwen-cold-start-wise/rebuild-xeon-2core/report.md)")
    p.add_argument("--pairs", help="the requests: a pairs JSONL of top-100 lists (SemEval C dev)")
    p.add_argument("--max-requests", type=int, default=50)
    p.add_argument("--smoke", action="store_true")
    r = sub.add_parser("run", help="there: export, serve and measure")
    r.add_argument("--stage", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--work", default="/var/tmp/r3gpu/work")
    r.add_argument("--device", default="cuda", choices=("cuda", "tensorrt", "cpu"))
    r.add_argument("--parts", default="students,causal")
    r.add_argument("--max-requests", type=int, default=50, help="requests for parity (every candidate scored)")
    r.add_argument("--requests", type=int, default=40, help="timed requests at concurrency 1 (x2 at 16)")
    r.add_argument("--cpu-requests", type=int, default=8, help="timed requests of the CPU-served row")
    r.add_argument("--reps", type=int, default=1, help="timed passes of the in-process systems over --max-requests")
    r.add_argument("--budget-s", type=float, default=500.0)
    r.add_argument("--part-min-s", type=float, default=60.0)
    r.add_argument("--causal-min-s", type=float, default=360.0,
                   help="start the causal part only with this much budget left: its export took 235 s on the H200 "
                        "machine, its first served row and the torch row 35 s more (benchmarks/results/"
                        "gpu-students-h200-second-run), and it now serves three more rows at concurrency 1")
    r.add_argument("--causal-serve-s", type=float, default=150.0,
                   help="with the causal student exported in the background, start (or keep waiting for it) only with "
                        "this much budget left for serving it: a served row and the torch row took 35 s in the second "
                        "H200 run, and the part serves three more rows at concurrency 1")
    r.add_argument("--pytest-json", help="run.sh's summary of the GPU tests, folded into results.json")
    t = sub.add_parser("tokenise-threads", help="there: Scorer.encode_batch's p50 per top-100 at each count of the "
                       "Rust tokenizer's threads (RAYON_NUM_THREADS; one process per count)")
    t.add_argument("--stage", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--student", default="semeval", choices=tuple(STUDENTS))
    t.add_argument("--counts", default="1,2,4,8,12,16")
    t.add_argument("--max-requests", type=int, default=50)
    t.add_argument("--one", action="store_true", help="(internal) measure in this process and print one JSON line")
    e = sub.add_parser("export-causal", help="there: the causal student's export alone (run.sh bench starts it in "
                       "the background), into --work")
    e.add_argument("--work", default="/var/tmp/r3gpu/work")
    for q in (r, e):
        q.add_argument("--causal-prefix-reuse", action="store_true",
                       help="export the causal student with its prefix-reuse graphs too and serve them (the served "
                            "default then); the export's time on the GPU machine grows (see benchmarks/gpu/README.md)")
        q.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "export-causal":
        return _export_causal_main(Path(args.work), args)
    if args.cmd == "tokenise-threads":
        return tokenise_threads(args)
    return prepare(args) if args.cmd == "prepare" else run(args)


def _export_causal_main(work: Path, args) -> int:
    """``export-causal``: its record, or the error that stopped it, in ``work/CAUSAL_EXPORT`` either way, so the
    causal part never waits on an export that died."""
    work.mkdir(parents=True, exist_ok=True)
    try:
        print(json.dumps(export_causal(work, args.smoke, args.causal_prefix_reuse), indent=1))
        return 0
    except BaseException as exc:
        (work / CAUSAL_EXPORT).write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:2000]}) + "\n")
        raise


if __name__ == "__main__":
    sys.exit(main())
