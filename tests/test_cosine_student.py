"""The bi-encoder (cosine) student and the ranking losses, on real parts: the packaged
all-MiniLM-L6-v2 weights checked against sentence-transformers itself, a tiny random BERT trained
through the CLI, exported and scored by ONNX Runtime.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import CONFIGS, SAMPLE_QUERIES, tiny_bi_config
from test_train import write_labels

from r3edge.core.errors import R3EdgeError

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier

QUERY = SAMPLE_QUERIES[0]["query"]
DOCS = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]] + [
    "مرحبا! QNB أفضل بنك 🏦 #doha", "ok", "  leading and trailing spaces  ",
]


def test_untrained_cosine_student_is_its_base_by_cosine():
    """Before training, the student's cosine is sentence-transformers' cosine of the packaged
    all-MiniLM-L6-v2, pair by pair, in one batch of mixed lengths and with either padding side."""
    import torch
    from sentence_transformers import SentenceTransformer

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.model.loading import minilm_dir
    from r3edge.model.student import create_student, scoring_module

    base = yaml.safe_load((CONFIGS / "student" / "minilm-cqa-bi.yaml").read_text())
    lm, scorer = create_student(StudentConfig.model_validate(base))
    assert scorer.spec.head == "cosine" and scorer.spec.template.mid == "[SEP][CLS]"
    st = SentenceTransformer(str(minilm_dir()), device="cpu")
    q = st.encode([QUERY] * len(DOCS), normalize_embeddings=True)
    d = st.encode(DOCS, normalize_embeddings=True)
    expected = (q * d).sum(-1)
    graph = scoring_module(lm, scorer).eval()
    for side in ("right", "left"):
        sc = type(scorer)(type(scorer.spec)(**{**scorer.spec.__dict__, "padding_side": side}), scorer.tokenizer)
        ids, mask = sc.collate(sc.encode_batch([QUERY] * len(DOCS), DOCS))
        with torch.no_grad():
            got = graph.cosines(torch.from_numpy(ids), torch.from_numpy(mask)).squeeze(-1).numpy()
        np.testing.assert_allclose(got, expected, atol=2e-5, err_msg=side)
    # the initial head makes the expected score increase with the cosine: the base's ranking
    with torch.no_grad():
        logits = graph(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    _, score = scorer.relevance(logits)
    assert (np.argsort(score) == np.argsort(expected)).all()
    assert load_yaml("minilm-cqa-bi", StudentConfig).model.kind == "biencoder"


def test_biencoder_config_is_validated(tmp_path):
    from r3edge.core.config import StudentConfig, load_yaml

    raw = yaml.safe_load(tiny_bi_config(tmp_path).read_text())
    for change, needle in (
        ({"scorer": {**raw["scorer"], "instruction": "x"}}, "instruction"),
        ({"train": {**raw["train"], "listwise_weight": 1.0}}, "query_group_size"),
        ({"train": {**raw["train"], "query_group_size": 3}}, "not a multiple"),
    ):
        (tmp_path / "s.yaml").write_text(yaml.safe_dump({**raw, **change}))
        with pytest.raises(R3EdgeError, match=needle):
            load_yaml(tmp_path / "s.yaml", StudentConfig)


# -- ranking losses -------------------------------------------------------------------------------
def test_listwise_kl_and_margin_mse_by_hand():
    import torch

    from r3edge.distill.student.losses import listwise_kl, margin_mse

    s = torch.tensor([0.2, 1.0, 0.5, 2.0, 0.0])
    t = torch.tensor([0.0, 2.0, 1.0, 1.0, 1.5])
    g = torch.tensor([7, 7, 7, 9, 9])
    # MarginMSE: pairs within a query only: (0,1) (0,2) (1,2) of query 7 and (3,4) of query 9
    pairs = [((0.2 - 1.0) - (0.0 - 2.0)), ((0.2 - 0.5) - (0.0 - 1.0)), ((1.0 - 0.5) - (2.0 - 1.0)), ((2.0 - 0.0) - (1.0 - 1.5))]
    assert margin_mse(s, t, g).item() == pytest.approx(np.mean(np.square(pairs)), rel=1e-6)

    def kl(sv, tv, temp):
        p = np.exp(np.asarray(tv) / temp) / np.exp(np.asarray(tv) / temp).sum()
        q = np.exp(np.asarray(sv) / temp) / np.exp(np.asarray(sv) / temp).sum()
        return float((p * np.log(p / q)).sum())

    expected = np.mean([kl([0.2, 1.0, 0.5], [0.0, 2.0, 1.0], 0.5), kl([2.0, 0.0], [1.0, 1.5], 0.5)])
    assert listwise_kl(s, t, g, temperature=0.5).item() == pytest.approx(expected, rel=1e-5)
    # a shift of a whole query's scores changes no margin and no listwise distribution
    shifted = s + torch.tensor([3.0, 3.0, 3.0, -1.0, -1.0])
    assert margin_mse(shifted, t, g).item() == pytest.approx(margin_mse(s, t, g).item(), rel=1e-5)
    assert listwise_kl(shifted, t, g).item() == pytest.approx(listwise_kl(s, t, g).item(), rel=1e-5)
    # rows that each have a query of their own rank nothing
    alone = torch.arange(5)
    assert margin_mse(s, t, alone).item() == 0 and listwise_kl(s, t, alone).item() == 0


def test_query_group_sampler_keeps_queries_together():
    from r3edge.distill.student.train import QueryGroupSampler

    groups = [0] * 8 + [1] * 12 + [2] * 4
    sampler = QueryGroupSampler(groups, group_size=4, seed=3)
    first, second = list(sampler), list(sampler)
    assert sorted(first) == sorted(second) == list(range(len(groups))) and first != second
    assert list(QueryGroupSampler(groups, 4, seed=3)) == first  # seeded
    # every aligned block of 4 (so every batch of 4, 8, ...) holds one query's rows
    assert all(len({groups[i] for i in first[k : k + 4]}) == 1 for k in range(0, len(first), 4))
    # a query of 6 rows comes as a group of 4 and a group of 2, each contiguous
    order = list(QueryGroupSampler([0] * 6 + [1] * 4, group_size=4, seed=0))
    pos = sorted(order.index(i) for i in range(6))
    runs = [len(r) for r in np.split(np.asarray(pos), np.flatnonzero(np.diff(pos) > 1) + 1)]
    assert sorted(runs) in ([2, 4], [6])


def test_distillation_loss_adds_the_ranking_terms_within_each_query():
    import torch
    import torch.nn.functional as F

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.distill.student.losses import expected_scores, listwise_kl, margin_mse
    from r3edge.distill.student.train import DistillCollator, build_dataset, distillation_loss
    from r3edge.model.student import create_student, scoring_module

    lm, scorer = create_student(load_yaml(CONFIGS / "student" / "minilm-cqa-bi.yaml", StudentConfig))
    qs = [q["query"] for q in SAMPLE_QUERIES for _ in q["candidates"]]
    ds = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]
    groups = [i for i, q in enumerate(SAMPLE_QUERIES) for _ in q["candidates"]]
    targets = np.asarray([[0.7, 0.2, 0.1], [0.1, 0.2, 0.7], [0.3, 0.4, 0.3]] * 3)[: len(qs)]
    dataset = build_dataset(scorer, qs, ds, targets, groups=groups)
    batch = DistillCollator(scorer)([dataset[i] for i in range(len(dataset))])
    assert batch["group"].tolist() == groups
    graph = scoring_module(lm, scorer).eval()
    values = scorer.spec.label_values
    with torch.no_grad():
        plain, logits = distillation_loss(graph, batch)
        mixed, _ = distillation_loss(graph, batch, label_values=values, listwise_weight=0.3, listwise_temperature=0.5,
                                     margin_mse_weight=2.0)
    v = torch.tensor(values)
    s, t = expected_scores(F.softmax(logits, -1), v), expected_scores(batch["teacher_probs"], v)
    g = torch.tensor(groups)
    by_hand = plain + 0.3 * listwise_kl(s, t, g, 0.5) + 2.0 * margin_mse(s, t, g)
    assert mixed.item() == pytest.approx(by_hand.item(), rel=1e-6) and mixed.item() > plain.item()


# -- training, export, serving parity -------------------------------------------------------------
@pytest.fixture(scope="module")
def trained_bi(tmp_path_factory) -> Path:
    from r3edge.cli import main

    tmp = tmp_path_factory.mktemp("bi")
    labels = write_labels(tmp / "labels")
    out = tmp / "student"
    cfg = tiny_bi_config(tmp, batch_size=4, query_group_size=2, listwise_weight=0.5, margin_mse_weight=0.5)
    assert main(["train", str(labels), "--student", str(cfg), "--out", str(out), "--max-steps", "6"]) == 0
    return out


def test_base_interpolation_saves_the_mix_of_start_and_trained_weights(tmp_path):
    """WiSE-FT: with base_interpolation a, every encoder weight saved is (1 - a) * its pretrained value +
    a * what the same training run (same seed and steps) saves without it; the head is saved as trained."""
    import torch
    from safetensors.torch import load_file

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.distill.student.train import train_student
    from r3edge.model.student import create_student

    labels = write_labels(tmp_path / "labels")
    lm, _ = create_student(load_yaml(tiny_bi_config(tmp_path), StudentConfig))
    base = tmp_path / "base"
    lm.encoder.save_pretrained(base)  # the tiny random encoder stands in for pretrained weights
    raw = yaml.safe_load(tiny_bi_config(tmp_path).read_text())
    raw["model"] = {"kind": "biencoder", "pretrained": str(base), "tokenizer": raw["model"]["tokenizer"]}
    plain, mixed = tmp_path / "plain.yaml", tmp_path / "mixed.yaml"
    plain.write_text(yaml.safe_dump(raw))
    mixed.write_text(yaml.safe_dump({**raw, "train": {**raw["train"], "base_interpolation": 0.25}}))
    full = load_file(train_student(labels, plain, tmp_path / "full", max_steps=4) / "model.safetensors")
    mix = load_file(train_student(labels, mixed, tmp_path / "mix", max_steps=4) / "model.safetensors")
    start = load_file(base / "model.safetensors")
    moved = 0
    for k, v in start.items():
        key = next(n for n in mix if n.endswith(k))
        moved += not torch.allclose(full[key], v)  # training moved it (mean pooling leaves the pooler alone)
        torch.testing.assert_close(mix[key], 0.75 * v + 0.25 * full[key], rtol=1e-5, atol=1e-6)
    assert moved >= len(start) - 2 > 10
    head = [json.loads((tmp_path / d / "cosine_head.json").read_text()) for d in ("full", "mix")]
    assert head[0] == head[1]  # the head is fitted anew, so it has no pretrained value to return to


def test_base_interpolation_needs_a_start_that_already_ranks(tmp_path):
    from r3edge.core.config import StudentConfig, load_yaml

    random_init = yaml.safe_load(tiny_bi_config(tmp_path, base_interpolation=0.5).read_text())
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(random_init))
    with pytest.raises(R3EdgeError, match="randomly initialised"):
        load_yaml(tmp_path / "r.yaml", StudentConfig)
    cross = yaml.safe_load((CONFIGS / "student" / "minilm-cqa.yaml").read_text())
    cross["train"]["base_interpolation"] = 0.5
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cross))
    with pytest.raises(R3EdgeError, match="cross-encoder"):
        load_yaml(tmp_path / "c.yaml", StudentConfig)
    cross["train"]["base_interpolation"] = 1.0
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cross))
    with pytest.raises(R3EdgeError, match="base_interpolation"):
        load_yaml(tmp_path / "c.yaml", StudentConfig)


def test_cosine_head_is_fitted_before_the_encoder_trains(trained_bi):
    report = json.loads((trained_bi / "train_report.json").read_text())
    fit = report["cosine_head_fit"]
    assert fit["loss_after"] < fit["loss_before"] and fit["pairs"] == report["n_examples"]["trained_on"]
    head = json.loads((trained_bi / "cosine_head.json").read_text())
    assert len(head["weight"]) == len(head["bias"]) == 3 and head["pooling"] == "mean"


def test_cosine_student_reloads_exports_and_serves_the_same_scores(trained_bi, sample_pairs_file, tmp_path):
    from r3edge.cli import main
    from r3edge.core.scoring import score_pairs
    from r3edge.model.runtimes import load_runtime
    from r3edge.model.student import lm_score_fn, load_student

    lm, scorer = load_student(trained_bi)
    assert type(lm).__name__ == "CosineStudent" and scorer.spec.head == "cosine"
    queries = [QUERY] * len(DOCS)
    ref = lm_score_fn(lm, scorer)(queries, DOCS)
    torch_rt = load_runtime(trained_bi, backend="torch")
    np.testing.assert_allclose(score_pairs(torch_rt.scorer, torch_rt.label_logits, queries, DOCS), ref, atol=1e-5)

    out = tmp_path / "artifact"
    assert main(["export", str(trained_bi), "--out", str(out), "--variants", "fp32,int8-smooth",
                 "--calib", str(sample_pairs_file)]) == 0
    report = json.loads((out / "export_report.json").read_text())
    assert report["rejected"] == {} and report["variants"]["fp32"]["argmax_agreement"] == 1.0
    assert report["variants"]["fp32"]["batch_invariance_max_abs_score_diff"] <= 1e-5
    rt = load_runtime(out, variant="fp32")
    got = score_pairs(rt.scorer, rt.label_logits, queries, DOCS)
    np.testing.assert_allclose(got, ref, atol=1e-4)
    # one pair alone scores as it does among its batchmates (segments never see the padding)
    alone = score_pairs(rt.scorer, rt.label_logits, queries[:1], DOCS[:1])
    np.testing.assert_allclose(alone[0], got[0], atol=1e-5)


# -- prefix reuse: the query embedded once per request ------------------------------------------------
@pytest.mark.parametrize("side", ["left", "right"])
def test_torch_query_and_document_graphs_equal_the_single_cosine_graph(trained_bi, side):
    """The split (query once, each document alone) is the single graph's computation, padded on either side."""
    import dataclasses

    import torch

    from r3edge.core.scoring import Scorer, score_pairs
    from r3edge.model.prefix import DocumentCosineGraph, QueryEmbeddingGraph
    from r3edge.model.student import lm_score_fn, load_student, scoring_module

    lm, scorer = load_student(trained_bi)
    lm.eval()
    scorer = Scorer(dataclasses.replace(scorer.spec, padding_side=side), scorer.tokenizer)
    cls = scoring_module(lm, scorer).cls_token_id
    query_graph, doc_graph = QueryEmbeddingGraph(lm), DocumentCosineGraph(lm, cls, right_padded=side == "right")

    class Runner:
        def prefix(self, ids):
            with torch.no_grad():
                return [query_graph(torch.from_numpy(ids))]

        def candidates(self, state, ids, mask):
            with torch.no_grad():
                return doc_graph(torch.from_numpy(ids), torch.from_numpy(mask), state[0]).numpy()

    queries = [QUERY] * len(DOCS) + ["a second query", "a second query"]
    docs = DOCS + DOCS[:2]
    ref = lm_score_fn(lm, scorer)(queries, docs)
    together = score_pairs(scorer, None, queries, docs, prefix=Runner(), max_batch_tokens=1 << 30)
    alone = score_pairs(scorer, None, queries, docs, prefix=Runner(), max_batch_size=1)
    assert np.ptp(ref[:, 2]) > 1e-3  # the documents really score differently
    np.testing.assert_allclose(together, ref, atol=1e-5, rtol=0)
    np.testing.assert_allclose(alone, together, atol=1e-5, rtol=0)


@pytest.mark.parametrize("side", ["left", "right"])
def test_query_once_training_graph_gives_the_single_graphs_logits(trained_bi, side):
    """train.query_once's step embeds each query of a batch once (the prefix-reuse graphs): in eval mode its
    logits for a batch of rows of two queries, in mixed order, are the single cosine graph's."""
    import dataclasses

    import torch

    from r3edge.core.scoring import Scorer
    from r3edge.distill.student.query_once import QueryOnceCosine
    from r3edge.distill.student.train import DistillCollator, build_dataset
    from r3edge.model.student import load_student, scoring_module

    lm, scorer = load_student(trained_bi)
    lm.eval()
    scorer = Scorer(dataclasses.replace(scorer.spec, padding_side=side), scorer.tokenizer)
    queries = ["a second query", QUERY, QUERY, "a second query", QUERY, QUERY]
    docs = [DOCS[0], DOCS[1], DOCS[2], DOCS[3], DOCS[-3], DOCS[4]]
    rows = build_dataset(scorer, queries, docs, np.full((len(docs), 3), 1 / 3)).to_list()
    single, once = scoring_module(lm, scorer), QueryOnceCosine(scoring_module(lm, scorer), right_padded=side == "right")
    packed, split = DistillCollator(scorer)(rows), DistillCollator(scorer, query_once=True)(rows)
    assert len(split["query_prefixes"]) == 2 and split["row_query"].tolist() == [0, 1, 1, 0, 1, 1]
    assert split["input_ids"].numel() + sum(p.numel() for p in split["query_prefixes"]) < packed["input_ids"].numel()
    with torch.no_grad():
        ref = single(packed["input_ids"], packed["attention_mask"])
        got = once(split["input_ids"], split["attention_mask"], split["query_prefixes"], split["row_query"])
    assert float(ref[:, 2].max() - ref[:, 2].min()) > 1e-3  # the rows really score differently
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)


def test_a_query_once_student_trains_and_only_a_cosine_student_may(tmp_path):
    from r3edge.cli import main
    from r3edge.core.config import StudentConfig, load_yaml

    labels = write_labels(tmp_path / "labels")
    cfg = tiny_bi_config(tmp_path, batch_size=4, query_group_size=2, listwise_weight=0.5, query_once=True)
    assert main(["train", str(labels), "--student", str(cfg), "--out", str(tmp_path / "s"), "--max-steps", "6"]) == 0
    report = json.loads((tmp_path / "s" / "train_report.json").read_text())
    assert report["config"]["train"]["query_once"] and report["loss_last"] < report["loss_first"]
    cross = yaml.safe_load((CONFIGS / "student" / "minilm-cqa.yaml").read_text())
    cross["train"]["query_once"] = True
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cross))
    with pytest.raises(R3EdgeError, match="query_once"):
        load_yaml(tmp_path / "c.yaml", StudentConfig)


def test_cosine_prefix_reuse_exports_fused_fp32_and_int8_graphs_and_serves_them(trained_bi, sample_pairs_file, tmp_path):
    from r3edge.cli import main
    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.scoring import score_pairs
    from r3edge.model.student import lm_score_fn, load_student

    out = tmp_path / "artifact"
    assert main(["export", str(trained_bi), "--out", str(out), "--variants", "fp32,int8-smooth",
                 "--calib", str(sample_pairs_file), "--prefix-reuse"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    state = {"layers": 0, "state": ["query_embedding"]}
    assert manifest["prefix_graphs"] == {
        "fp32": {"prefix": "prefix.fp32.onnx", "candidate": "candidate.fp32.onnx", **state},
        "int8-smooth": {"prefix": "prefix.fp32.onnx", "candidate": "candidate.int8-smooth.onnx", **state}}
    report = json.loads((out / "export_report.json").read_text())
    assert report["rejected"] == {}
    layers = json.loads((trained_bi / "config.json").read_text())["num_hidden_layers"]
    assert report["prefix_reuse"]["fp32"]["candidate_graph"]["fused"]["MultiHeadAttention"] == layers
    assert report["prefix_reuse"]["int8-smooth"]["candidate_quantization"]["preset"]["name"] == "int8-smooth"

    lm, scorer = load_student(trained_bi)
    queries = [QUERY] * len(DOCS)
    ref = lm_score_fn(lm, scorer)(queries, DOCS)
    fp32 = OnnxRuntime(out, variant="fp32", threads=1)
    assert fp32.prefix is not None and fp32.info()["prefix_reuse"] is True
    stats: dict = {}
    got = score_pairs(fp32.scorer, None, queries, DOCS, prefix=fp32.prefix, stats=stats)
    assert stats["n_prefixes"] == 1
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)
    single = OnnxRuntime(out, variant="int8-smooth", threads=1, prefix_reuse=False)
    q8 = OnnxRuntime(out, variant="int8-smooth", threads=1)
    assert q8.info()["files"]["candidate"] == "candidate.int8-smooth.onnx"
    q8_scores = q8.scorer.relevance(score_pairs(q8.scorer, None, queries, DOCS, prefix=q8.prefix))[1]
    assert np.abs(q8_scores - scorer.relevance(ref)[1]).max() < 0.1  # quantized: close to fp32, not equal
    assert np.abs(q8_scores - single.scorer.relevance(score_pairs(single.scorer, single, queries, DOCS))[1]).max() < 0.1
    # int8-smooth is batch invariant by construction on the candidate graph too
    alone = score_pairs(q8.scorer, None, queries, DOCS, prefix=q8.prefix, max_batch_size=1)
    np.testing.assert_allclose(q8.scorer.relevance(alone)[1], q8_scores, atol=1e-5, rtol=0)
