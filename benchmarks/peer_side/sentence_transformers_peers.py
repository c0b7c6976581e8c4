"""The peer side of ``r3edge bench peers``: sentence-transformers on a cosine student's own weights, run as a
worker process by whichever interpreter has the peers installed (``--peers-python``).

It imports sentence-transformers (and optimum, OpenVINO, NNCF for the ONNX and OpenVINO peers), never r3edge:
that lets it run in a venv whose transformers r3edge cannot share (sentence-transformers' ONNX and OpenVINO
backends pin transformers 4.x), and keeps torch out of the benchmark's own process. This folder has no
``__init__.py``: it is a file the benchmark runs, not a module of ``r3edge.benchmarks``.

Protocol, one JSON object per line. stdin: first the setup ``{"student", "requests": [[query, [text, ...]], ...],
"peers": [name, ...], "threads", "max_seq_length"}``, then one ``{"peer", "request"}`` per call; stdout: first
``{"ready": [name, ...], "skipped": {name: why}, "versions": {...}}``, then ``{"top": [index, ...]}`` per call (the
request's ten best candidates, best first), or ``{"error": traceback}`` before the worker exits. Anything the
libraries print goes to stderr.

Each peer embeds the query and the candidates in one ``encode`` call (its own length-sorted batches of 32) with
mean pooling at unit length, as the student embeds; applies the student's label head (``cosine_head.json``) to
the cosines and ranks by the expected label value (``scorer.json``'s ``label_values`` and ``temperature``), the
score r3edge ranks by.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

#: every peer this worker knows, in the order they are built
PEERS = ("st-torch-fp32", "st-onnx-fp32", "st-onnx-int8", "st-openvino-fp32", "openvino-int8-nncf")
#: what each peer imports beyond sentence-transformers (sentence-transformers' own error for a missing backend is a
#: bare Exception, so they are tried first)
NEEDS = {"st-onnx-fp32": ("optimum.onnxruntime",), "st-onnx-int8": ("optimum.onnxruntime",),
         "st-openvino-fp32": ("optimum.intel.openvino",), "openvino-int8-nncf": ("optimum.intel.openvino", "nncf")}
BATCH = 32


def expected_scores(cos: np.ndarray, head: dict, values: list[float], temperature: float) -> np.ndarray:
    """The student's label head on the cosines, then Σ softmax(logits / temperature) · values."""
    logits = (np.outer(cos, head["weight"]) + np.asarray(head["bias"])) / temperature
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return p @ np.asarray(values, dtype=np.float64)


def ranker(encode, student: Path):
    head = json.loads((student / "cosine_head.json").read_text())
    scorer = json.loads((student / "scorer.json").read_text())
    values, temperature = scorer["label_values"], float(scorer.get("temperature", 1.0))

    def rank(query: str, texts: list[str]) -> list[int]:
        emb = np.asarray(encode([query, *texts]), dtype=np.float64)
        scores = expected_scores(emb[1:] @ emb[0], head, values, temperature)
        return [int(i) for i in np.argsort(-scores, kind="stable")[:10]]
    return rank


def build(names: list[str], student: str, max_len: int, threads: int, requests, tmp: str) -> tuple[dict, dict]:
    """``({name: encode}, {name: why it was skipped})``; ``["all"]``: every peer in :data:`PEERS`. ``tmp`` holds the
    exported ONNX files while the worker runs."""
    import importlib

    from sentence_transformers import SentenceTransformer

    def encoder(model):
        model.max_seq_length = max_len
        return lambda texts: model.encode(texts, batch_size=BATCH, normalize_embeddings=True, convert_to_numpy=True,
                                          show_progress_bar=False)

    built, skipped = {}, {}
    for name in PEERS if list(names) == ["all"] else names:
        try:
            for module in NEEDS.get(name, ()):
                importlib.import_module(module)
            if name == "st-torch-fp32":
                built[name] = encoder(SentenceTransformer(student, device="cpu"))
            elif name == "st-onnx-fp32":
                built[name] = encoder(SentenceTransformer(student, backend="onnx", device="cpu"))
            elif name == "st-onnx-int8":
                built[name] = _onnx_int8(SentenceTransformer, student, f"{tmp}/onnx", encoder)
            elif name == "st-openvino-fp32":
                built[name] = encoder(SentenceTransformer(student, backend="openvino", device="cpu",
                                                          model_kwargs={"ov_config": {"INFERENCE_NUM_THREADS": threads}}))
            elif name == "openvino-int8-nncf":
                built[name] = _openvino_int8(SentenceTransformer, student, max_len, threads, requests)
            else:
                skipped[name] = f"unknown peer (this worker knows {', '.join(PEERS)})"
        except ImportError as exc:
            skipped[name] = f"{type(exc).__name__}: {exc}"
    return built, skipped


def _onnx_int8(SentenceTransformer, student: str, where: str, encoder):
    """ONNX Runtime dynamic int8 by sentence-transformers' own export, with the config this CPU can run."""
    from sentence_transformers.backend import export_dynamic_quantized_onnx_model

    m = SentenceTransformer(student, backend="onnx", device="cpu")
    m.save_pretrained(where)
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    config = "avx512_vnni" if "avx512_vnni" in flags else "avx512" if "avx512f" in flags else "avx2"
    export_dynamic_quantized_onnx_model(m, config, where)
    # model_qint8_avx512_vnni.onnx, or model_quint8_avx2.onnx (the avx2 config quantizes weights unsigned)
    qfile = next(f for f in os.listdir(f"{where}/onnx") if f.endswith(f"int8_{config}.onnx"))
    return encoder(SentenceTransformer(where, backend="onnx", device="cpu", model_kwargs={"file_name": f"onnx/{qfile}"}))


def _openvino_int8(SentenceTransformer, student: str, max_len: int, threads: int, requests):
    """NNCF static int8 of sentence-transformers' OpenVINO model, calibrated on the first two requests' texts,
    run in length-sorted batches of :data:`BATCH` with the student's mean pooling."""
    import nncf
    import openvino as ov

    mo = SentenceTransformer(student, backend="openvino", device="cpu",
                             model_kwargs={"ov_config": {"INFERENCE_NUM_THREADS": threads}})
    ovm = mo[0].auto_model.model  # the openvino.Model inside OVModelForFeatureExtraction
    tok = mo.tokenizer
    names = {i.get_any_name() for i in ovm.inputs}
    calib = [{k: v for k, v in tok(t, truncation=True, max_length=max_len, return_tensors="np").items() if k in names}
             for q, texts in requests[:2] for t in [q, *texts]]
    qm = nncf.quantize(ovm, nncf.Dataset(calib), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calib))
    compiled = ov.Core().compile_model(qm, "CPU", {"INFERENCE_NUM_THREADS": threads})

    def encode(texts: list[str]) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        emb = np.zeros((len(texts), ovm.outputs[0].get_partial_shape()[-1].get_length()), np.float64)
        for s in range(0, len(order), BATCH):
            idx = order[s:s + BATCH]
            enc = tok([texts[i] for i in idx], truncation=True, max_length=max_len, padding=True, return_tensors="np")
            hidden = compiled({k: v for k, v in enc.items() if k in names})[0].astype(np.float64)
            mask = enc["attention_mask"][..., None]
            mean = (hidden * mask).sum(1) / mask.sum(1)
            emb[idx] = mean / np.linalg.norm(mean, axis=1, keepdims=True)
        return emb
    return encode


def versions() -> dict:
    from importlib import metadata

    out = {}
    for pkg in ("sentence-transformers", "transformers", "torch", "onnxruntime", "openvino", "optimum", "optimum-intel",
                "optimum-onnx", "nncf"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def main() -> int:
    reply = os.fdopen(os.dup(sys.stdout.fileno()), "w")  # the protocol's own channel
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever the libraries print goes to stderr
    send = lambda obj: (reply.write(json.dumps(obj) + "\n"), reply.flush())
    try:
        setup = json.loads(sys.stdin.readline())
        threads = int(setup["threads"])
        import torch

        torch.set_num_threads(threads)
        requests = setup["requests"]
        with tempfile.TemporaryDirectory(prefix="r3edge-peers-") as tmp:
            built, skipped = build(setup["peers"], setup["student"], int(setup["max_seq_length"]), threads, requests, tmp)
            ranks = {name: ranker(encode, Path(setup["student"])) for name, encode in built.items()}
            send({"ready": list(ranks), "skipped": skipped, "versions": versions()})
            for line in sys.stdin:
                call = json.loads(line)
                query, texts = requests[call["request"]]
                send({"top": ranks[call["peer"]](query, texts)})
    except Exception:
        send({"error": traceback.format_exc()})
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
