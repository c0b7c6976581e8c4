"""FP16 and TensorRT paths for GPU fleets (issue 24, item 4).

What runs here (CPU, no TensorRT): the optimisation profile and the INT8 calibration batches derived
from the scoring contract, and the typed error when ``tensorrt`` is absent. What runs only where the
libraries import and a GPU is present, and skips with the reason otherwise: the TensorRT FP16 and INT8
engine builds (r3edge.export.tensorrt) checked against ONNX Runtime's fp32 graph, and the fp16 and
fp16-packed ONNX variants on onnxruntime's CUDA provider (run by benchmarks/gpu/run.sh on a lent GPU
machine; benchmarks/results/gpu-students-h200-third-run/ has both tests' last pass there).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from conftest import SAMPLE_QUERIES

from r3edge.core.errors import InvalidInput, MissingDependency

pytestmark = pytest.mark.slow
HAS_TRT = importlib.util.find_spec("tensorrt") is not None
QUERIES = [q["query"] for q in SAMPLE_QUERIES for _ in q["candidates"]]
DOCS = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _ort_cuda() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def test_profile_comes_from_the_serving_budget(tiny_artifact):
    from r3edge.core.scoring import GPU_MAX_BATCH_SIZE, GPU_MAX_BATCH_TOKENS, Scorer
    from r3edge.export.tensorrt import serving_profile

    scorer = Scorer.load(tiny_artifact)
    longest = scorer.spec.max_total_tokens  # 256 for qwen2-tiny
    p = serving_profile(scorer)
    assert p.min == (1, 1) and p.max == (GPU_MAX_BATCH_SIZE, longest)
    assert p.opt == (min(GPU_MAX_BATCH_SIZE, GPU_MAX_BATCH_TOKENS // (longest // 2)), longest // 2)
    assert serving_profile(scorer, typical_tokens=4 * longest).opt[1] == longest  # never past the budget


def test_calibration_batches_are_the_contract_padded_to_one_shape(tiny_artifact):
    from r3edge.core.scoring import Scorer
    from r3edge.export.tensorrt import calibration_batches

    scorer = Scorer.load(tiny_artifact)
    batches = calibration_batches(scorer, QUERIES, DOCS, batch=3)
    assert len(batches) == len(QUERIES) // 3
    enc = scorer.encode_batch(QUERIES, DOCS)
    for k, b in enumerate(batches):
        assert b["input_ids"].shape == b["attention_mask"].shape == (3, scorer.spec.max_total_tokens)
        for row, m, e in zip(b["input_ids"], b["attention_mask"], enc[3 * k:3 * k + 3], strict=True):
            assert row[m == 1].tolist() == e.input_ids
    with pytest.raises(InvalidInput, match="calibration"):
        calibration_batches(scorer, QUERIES[:2], DOCS[:2], batch=3)


@pytest.mark.skipif(HAS_TRT, reason="tensorrt is installed: the missing-library error cannot be shown")
def test_without_tensorrt_the_builder_names_the_extra(tiny_artifact, tmp_path):
    from r3edge.core.scoring import Scorer
    from r3edge.export.tensorrt import build_engine

    with pytest.raises(MissingDependency, match="tensorrt"):
        build_engine(tiny_artifact / "model.fp32.onnx", tmp_path / "e.plan", Scorer.load(tiny_artifact))


@pytest.mark.skipif(not (HAS_TRT and _cuda()), reason="needs tensorrt and a CUDA GPU; here: "
                    f"tensorrt {'imports' if HAS_TRT else 'does not import'}, CUDA {'present' if _cuda() else 'absent'}")
@pytest.mark.parametrize("precision,atol", [("fp16", 0.05), ("int8", 0.5)])
def test_tensorrt_engine_scores_like_onnx_fp32(tiny_artifact, tmp_path, precision, atol):
    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.scoring import Scorer, score_pairs
    from r3edge.export.tensorrt import build_engine, calibration_batches, run_engine

    scorer = Scorer.load(tiny_artifact)
    calib = calibration_batches(scorer, QUERIES, DOCS, batch=2) if precision == "int8" else None
    engine = build_engine(tiny_artifact / "model.fp32.onnx", tmp_path / f"{precision}.plan", scorer,
                          precision=precision, calibration=calib, log=lambda *a: None)
    got = score_pairs(scorer, run_engine(engine), QUERIES, DOCS)
    ref = score_pairs(scorer, OnnxRuntime(tiny_artifact, "fp32", device="cpu"), QUERIES, DOCS)
    assert np.abs(got - ref).max() <= atol


@pytest.mark.skipif(not _ort_cuda(), reason="onnxruntime has no CUDAExecutionProvider here (onnxruntime-gpu absent)")
def test_fp16_variant_on_the_cuda_provider_scores_like_fp32(tiny_student, tmp_path):
    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.scoring import score_pairs
    from r3edge.export.onnx import export_artifact

    art = export_artifact(tiny_student, tmp_path / "art", variants=("fp32", "fp16"), log=lambda *a, **k: None)
    fp16 = OnnxRuntime(art, "fp16", device="cuda")
    assert fp16.session.get_providers()[0] == "CUDAExecutionProvider"
    got = score_pairs(fp16.scorer, fp16, QUERIES, DOCS)
    ref = score_pairs(fp16.scorer, OnnxRuntime(art, "fp32", device="cpu"), QUERIES, DOCS)
    probs = fp16.scorer.probabilities
    assert np.abs(probs(got) - probs(ref)).max() <= 0.02


@pytest.mark.skipif(not _ort_cuda(), reason="onnxruntime has no CUDAExecutionProvider here (onnxruntime-gpu absent)")
def test_fp16_packed_variant_on_the_cuda_provider_scores_like_fp32_in_one_micro_batch(tmp_path):
    """A cosine student exported where the CUDA provider runs: fp16-packed is built, validated there, and
    served there with a budget of real tokens; its scores stay within the fp16 gate of fp32's, with
    padding removed and restored inside the graph (a pair's score does not depend on its batchmates'
    lengths beyond fp16 noise)."""
    import json

    from conftest import tiny_bi_config

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.core.fidelity import batch_invariance
    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.scoring import score_pairs
    from r3edge.export.onnx import export_artifact
    from r3edge.export.quantize import FP16_GPU_BATCH_TOL, FP16_MAX_SCORE_DIFF
    from r3edge.model.student import create_student, save_student

    student = save_student(*create_student(load_yaml(tiny_bi_config(tmp_path), StudentConfig)), tmp_path / "student")
    art = export_artifact(student, tmp_path / "art", variants=("fp32", "fp16-packed"), prefix_reuse=True,
                          log=lambda *a, **k: None)
    report = json.loads((art / "export_report.json").read_text())
    assert "fp16-packed" not in report["rejected"], report["rejected"]
    assert report["variants"]["fp16-packed"]["validated_on"] == "CUDAExecutionProvider"
    packed = OnnxRuntime(art, "fp16-packed", device="cuda")
    assert packed.packed and packed.providers[0] == "CUDAExecutionProvider"
    probs = packed.scorer.probabilities
    ref = score_pairs(packed.scorer, OnnxRuntime(art, "fp32", device="cpu"), QUERIES, DOCS)
    for prefix in (packed.prefix, None):
        got = score_pairs(packed.scorer, packed, QUERIES, DOCS, prefix=prefix)
        assert np.abs(probs(got) - probs(ref)).max() <= FP16_MAX_SCORE_DIFF
    assert batch_invariance(packed.scorer, None, QUERIES, DOCS, packed.prefix) <= FP16_GPU_BATCH_TOL

