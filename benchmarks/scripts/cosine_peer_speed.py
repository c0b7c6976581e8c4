"""The cosine (bi-encoder) student served by r3edge against sentence-transformers on the same weights,
side by side in one run (issue 24's peer table, for the demo's student kind).

    .venv-peers/bin/python benchmarks/scripts/cosine_peer_speed.py --student runs/demo/student \\
        --heldout runs/demo/heldout.jsonl --targets fp32=127.0.0.1:PORT1,int8-smooth=127.0.0.1:PORT2 \\
        --out benchmarks/results/cosine-peers-cpu-2core

It runs in the peers' own venv (sentence-transformers with its ONNX and OpenVINO backends pins
transformers 4.x; see ../shared/probes/README.md) and never imports r3edge's package code: r3edge is
reached over gRPC with the committed stubs (``r3edge/api``, protobuf only), as a client would.

* **r3edge**: one ``r3edge serve`` per ``--targets`` entry (``label=host:port``), ``Rerank`` top_k 10.
  The first target is the reference ranking (serve fp32 first).
* **Peers**: ``SentenceTransformer`` on the student's encoder weights (the directory ``r3edge train``
  wrote: an HF BERT plus ``cosine_head.json``; mean pooling, unit length, as the student embeds),
  ``max_seq_length`` = the scorer's document budget + 2, 2 threads: torch fp32, ONNX fp32 (optimum),
  ONNX dynamic int8 (optimum's ``avx2`` config where the CPU has no VNNI), OpenVINO fp32, and OpenVINO int8
  (NNCF static, calibrated on the first 2 requests' texts). Each peer encodes the query and the 100
  documents in one ``encode`` call (its own length-sorted batches of 32), applies the student's label
  head to the cosines (the same expected score r3edge ranks by) and keeps the top 10.

Timing: after a warm-up round over every request, ``--reps`` rounds; each round scores every request
with every system in a shuffled order after a short pause, so load on this shared box hits all alike.
p50/p95 ms per top-100; top-10 overlap with the reference. Writes OUT/results.json and OUT/report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "2")
import torch  # noqa: E402

torch.set_num_threads(2)
ROOT = Path(__file__).resolve().parents[2]


def expected_scores(cos: np.ndarray, head: dict, values: list[float]) -> np.ndarray:
    logits = np.outer(cos, head["weight"]) + np.asarray(head["bias"])
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return p @ np.asarray(values, dtype=np.float64)


def top10(scores: np.ndarray) -> list[int]:
    return [int(i) for i in np.argsort(-scores, kind="stable")[:10]]


def grpc_ranker(target: str):
    import grpc

    sys.path.insert(0, str(ROOT))
    from r3edge.api import reranker_pb2 as pb2  # the stubs only: protobuf, no r3edge code
    from r3edge.api import reranker_pb2_grpc as pb2_grpc

    stub = pb2_grpc.RerankerStub(grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 << 20)]))

    def rank(query: str, texts: list[str]) -> list[int]:
        req = pb2.RerankRequest(query=query, top_k=10,
                                candidates=[pb2.Candidate(id=str(i), text=t) for i, t in enumerate(texts)])
        return [int(r.id) for r in stub.Rerank(req, timeout=120).results]
    return rank


def st_ranker(encode, head: dict, values: list[float]):
    def rank(query: str, texts: list[str]) -> list[int]:
        emb = np.asarray(encode([query, *texts]), dtype=np.float64)
        return top10(expected_scores(emb[1:] @ emb[0], head, values))
    return rank


def peers(student: str, reqs, head: dict, values: list[float], max_len: int, skip: set[str]) -> dict:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.backend import export_dynamic_quantized_onnx_model

    out = {}

    def encoder(model):
        model.max_seq_length = max_len
        return lambda texts: model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                                          show_progress_bar=False)

    if "st-torch-fp32" not in skip:
        out["st-torch-fp32"] = st_ranker(encoder(SentenceTransformer(student, device="cpu")), head, values)
    tmp = tempfile.mkdtemp(prefix="cosine-peers-")
    if "st-onnx-fp32" not in skip or "st-onnx-qint8" not in skip:
        m = SentenceTransformer(student, backend="onnx", device="cpu")
        m.save_pretrained(f"{tmp}/onnx")
        out["st-onnx-fp32"] = st_ranker(encoder(m), head, values)
        flags = open("/proc/cpuinfo").read() if Path("/proc/cpuinfo").exists() else ""
        config = "avx512_vnni" if "avx512_vnni" in flags else "avx512" if "avx512f" in flags else "avx2"
        export_dynamic_quantized_onnx_model(m, config, f"{tmp}/onnx")
        # model_qint8_avx512_vnni.onnx, or model_quint8_avx2.onnx (the avx2 config quantizes weights unsigned)
        qfile = next(f for f in os.listdir(f"{tmp}/onnx/onnx") if f.endswith(f"int8_{config}.onnx"))
        out[f"st-onnx-{qfile[6:-5]}"] = st_ranker(encoder(SentenceTransformer(
            f"{tmp}/onnx", backend="onnx", device="cpu", model_kwargs={"file_name": f"onnx/{qfile}"})), head, values)
    if "st-openvino-fp32" not in skip or "st-openvino-int8" not in skip:
        import nncf
        import openvino as ov

        mo = SentenceTransformer(student, backend="openvino", device="cpu",
                                 model_kwargs={"ov_config": {"INFERENCE_NUM_THREADS": 2}})
        out["st-openvino-fp32"] = st_ranker(encoder(mo), head, values)
        ovm = mo[0].auto_model.model  # the openvino.Model inside OVModelForFeatureExtraction
        tok = mo.tokenizer
        names = {i.get_any_name() for i in ovm.inputs}
        calib = [{k: v for k, v in tok(t, truncation=True, max_length=max_len, return_tensors="np").items() if k in names}
                 for q, texts in reqs[:2] for t in [q, *texts]]
        qm = nncf.quantize(ovm, nncf.Dataset(calib), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calib))
        compiled = ov.Core().compile_model(qm, "CPU", {"INFERENCE_NUM_THREADS": 2})

        def ov_int8_encode(texts: list[str]) -> np.ndarray:
            # length-sorted batches of 32, as SentenceTransformer.encode does
            order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
            emb = np.zeros((len(texts), ovm.outputs[0].get_partial_shape()[-1].get_length()), np.float64)
            for s in range(0, len(order), 32):
                idx = order[s:s + 32]
                enc = tok([texts[i] for i in idx], truncation=True, max_length=max_len, padding=True, return_tensors="np")
                hidden = compiled({k: v for k, v in enc.items() if k in names})[0].astype(np.float64)
                mask = enc["attention_mask"][..., None]
                mean = (hidden * mask).sum(1) / mask.sum(1)
                emb[idx] = mean / np.linalg.norm(mean, axis=1, keepdims=True)
            return emb
        out["openvino-int8 (nncf static)"] = st_ranker(ov_int8_encode, head, values)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--student", required=True, help="the cosine student's directory (r3edge train's output)")
    ap.add_argument("--heldout", required=True, help="candidate-list JSONL of top-100 requests")
    ap.add_argument("--targets", required=True, help="label=host:port[,label=host:port]: running `r3edge serve`s")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-requests", type=int, default=10)
    ap.add_argument("--skip", default="", help="comma-separated peer names to leave out")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    scorer = json.loads((Path(args.student) / "scorer.json").read_text())
    head = json.loads((Path(args.student) / "cosine_head.json").read_text())
    if scorer.get("head") != "cosine":
        raise SystemExit(f"{args.student} is not a cosine student (scorer.json head {scorer.get('head')!r})")
    values = scorer["label_values"]
    max_len = scorer["max_doc_tokens"] + 2  # [CLS] document [SEP]
    reqs = [json.loads(line) for line in open(args.heldout)][: args.max_requests]
    reqs = [(r["query"], [c["text"] for c in r["candidates"]]) for r in reqs]

    systems = {}
    for entry in args.targets.split(","):
        label, target = entry.split("=", 1)
        systems[f"r3edge served {label}"] = grpc_ranker(target)
    systems.update(peers(args.student, reqs, head, values, max_len, set(filter(None, args.skip.split(",")))))
    names = list(systems)
    ref = {q: systems[names[0]](q, texts) for q, texts in reqs}
    for q, texts in reqs:  # warm-up
        for n in names[1:]:
            systems[n](q, texts)
    rng = random.Random(0)
    times = {n: [] for n in names}
    overlap = {n: [] for n in names}
    for _ in range(args.reps):
        for q, texts in reqs:
            order = names[:]
            rng.shuffle(order)
            for n in order:
                time.sleep(0.2)
                t0 = time.perf_counter()
                top = systems[n](q, texts)
                times[n].append((time.perf_counter() - t0) * 1e3)
                overlap[n].append(len(set(top) & set(ref[q])) / 10)
    rows = []
    for n in names:
        ts = sorted(times[n])
        rows.append({"system": n, "p50_ms": statistics.median(ts), "p95_ms": ts[int(0.95 * (len(ts) - 1))],
                     "top10_overlap_with_ref": statistics.mean(overlap[n]), "n": len(ts)})
    by = {r["system"]: r for r in rows}
    served = [r for r in rows if r["system"].startswith("r3edge")]
    faithful = [r for r in served if r["top10_overlap_with_ref"] >= 0.98] or served[:1]
    best_r3 = min(faithful, key=lambda r: r["p50_ms"])
    best_peer = min((r for r in rows if not r["system"].startswith("r3edge")), key=lambda r: r["p50_ms"])
    import importlib.metadata as md

    versions = {p: md.version(p) for p in ("sentence-transformers", "transformers", "torch", "onnxruntime", "openvino",
                                           "optimum-intel", "optimum-onnx", "nncf")}
    res = {"command": " ".join(["benchmarks/scripts/cosine_peer_speed.py", *sys.argv[1:]]),
           "date": datetime.now(UTC).isoformat(timespec="seconds"),
           "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]},
           "versions": versions, "requests": len(reqs), "reps": args.reps, "max_seq_length": max_len,
           "reference": names[0], "rows": rows,
           "best_r3edge_at_0.98": best_r3["system"], "best_peer": best_peer["system"],
           "ratio_best_peer_over_best_r3edge": best_peer["p50_ms"] / best_r3["p50_ms"]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    lines = [f"| {r['system']} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | {r['top10_overlap_with_ref']:.3f} |" for r in rows]
    report = "\n".join([
        "# The cosine student: r3edge served vs sentence-transformers on the same weights",
        "",
        f"{len(reqs)} top-100 requests x {args.reps} rounds, 2 threads each, {res['date']}; load average at the end "
        f"{res['machine']['loadavg_at_end']}. Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
        "",
        f"| system | p50 ms / top-100 | p95 ms | top-10 overlap with {names[0]} |",
        "|---|---|---|---|",
        *lines,
        "",
        f"Fastest r3edge variant at >= 0.98 top-10 overlap: **{best_r3['system']}** ({best_r3['p50_ms']:.0f} ms); "
        f"fastest peer: **{best_peer['system']}** ({best_peer['p50_ms']:.0f} ms, top-10 overlap "
        f"{by[best_peer['system']]['top10_overlap_with_ref']:.3f}); ratio (peer / r3edge) "
        f"**{res['ratio_best_peer_over_best_r3edge']:.2f}x**.",
        "",
        f"Command: `{res['command']}`",
        "",
    ])
    (out / "report.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
