"""`r3edge bench variants` on the session's tiny artifact (real ONNX Runtime sessions), plus the variant choice
(r3edge.core.fidelity.recommend_variant) on made-up rows."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest
from conftest import SAMPLE_QUERIES

from r3edge.core.fidelity import fidelity_failures, recommend_variant

pytestmark = pytest.mark.slow  # the tiny artifact is exported with torch

#: a variant that reads no weights: every pair's label logits are [0, 0, its token count], so it is far faster
#: than any model and ranks by length, not by the model's judgement
LENGTH_ONLY = "length-only"


def write_heldout(path: Path, n_queries: int = 2, n_candidates: int = 24) -> Path:
    """Requests of more than 10 candidates (so a top-10 overlap can miss), texts of varied lengths."""
    rng = random.Random(0)
    words = " ".join(c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]).split()
    lines = []
    for i in range(n_queries):
        cands = [{"docid": f"d{j}", "text": " ".join(rng.choices(words, k=rng.randint(2, 30)))} for j in range(n_candidates)]
        lines.append(json.dumps({"qid": f"q{i}", "query": SAMPLE_QUERIES[i % 2]["query"], "candidates": cands}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _with_length_only_variant(artifact: Path, out: Path) -> Path:
    """A copy of ``artifact`` whose manifest also lists :data:`LENGTH_ONLY` (a real ONNX graph with the contract's
    inputs and output)."""
    import onnx
    from onnx import TensorProto, helper

    shutil.copytree(artifact, out)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
         helper.make_node("ReduceSum", ["mask_f", "axes"], ["length"], keepdims=1),
         helper.make_node("MatMul", ["length", "pick_last"], ["label_logits"])],
        "length_only",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("label_logits", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
         helper.make_tensor("pick_last", TensorProto.FLOAT, [1, 3], [0.0, 0.0, 1.0])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), out / f"{LENGTH_ONLY}.onnx")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["variants"][LENGTH_ONLY] = f"{LENGTH_ONLY}.onnx"
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


def test_bench_variants_recommends_the_fastest_faithful_variant(tiny_artifact, tmp_path, capsys):
    """The variants asked for are timed and compared with fp32; the length-only graph reads no weights (so it is usually the
    fastest) but keeps too little of fp32's top 10, so it is never the recommendation; the report prints the
    results' own numbers."""
    from r3edge.cli import main

    artifact = _with_length_only_variant(tiny_artifact, tmp_path / "artifact")
    out = tmp_path / "variants"
    assert main(["bench", "variants", "--artifact", str(artifact), "--pairs", str(write_heldout(tmp_path / "heldout.jsonl")),
                 "--variants", LENGTH_ONLY, "--reps", "2", "--pause", "0", "--threads", "1", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    rows = results["variants"]
    assert list(rows) == ["fp32", LENGTH_ONLY]  # the reference is always measured
    assert rows["fp32"]["top10_overlap"] == 1.0 and rows["fp32"]["max_abs_logit_diff"] == 0.0
    assert rows["fp32"]["fidelity_failures"] == []
    broken = rows[LENGTH_ONLY]
    assert broken["top10_overlap"] < results["min_overlap"] and broken["fidelity_failures"]
    assert results["fastest"] == min(rows, key=lambda v: rows[v]["p50_ms"])
    passing = [v for v, r in rows.items() if not r["fidelity_failures"]]
    assert results["recommended_default"] == min(passing, key=lambda v: rows[v]["p50_ms"]) != LENGTH_ONLY
    for r in rows.values():  # the failures listed are the rule applied to the row's own numbers
        assert r["fidelity_failures"] == fidelity_failures(r, min_overlap=results["min_overlap"], batch_tol=results["batch_tol"])
        assert 0 < r["min_ms"] <= r["p50_ms"] <= r["p95_ms"]
    assert len(results["loadavg_1_5_15"]) == results["reps"] == 2
    report = (out / "report.md").read_text()
    assert report in capsys.readouterr().out
    for v, r in rows.items():
        assert f"| {v} | {r['runtime']} | {r['path']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['top10_overlap']:.3f} |" in report
    assert f"Recommended default here (fastest with top-10 overlap >= {results['min_overlap']:g} " in report
    assert f"**{results['recommended_default']}**." in report and f"Fastest: **{results['fastest']}**." in report


def test_recommend_variant_picks_the_fastest_that_passes_fidelity():
    ok = {"top10_overlap": 1.0, "batch_invariance_max_abs_score_diff": 0.0}
    rows = {
        "fp32": {**ok, "p50_ms": 50.0},
        "int8-smooth": {**ok, "top10_overlap": 0.99, "p50_ms": 30.0},
        "ov-int8": {**ok, "top10_overlap": 0.96, "p50_ms": 20.0},  # fastest, but loses fp32's top 10
        "int8-dynamic": {**ok, "batch_invariance_max_abs_score_diff": 0.01, "p50_ms": 10.0},  # moves with batchmates
        "ov-fp32@bf16": {"top10_overlap": math.nan, "batch_invariance_max_abs_score_diff": 0.0, "p50_ms": 5.0},
    }
    assert recommend_variant(rows) == "int8-smooth"
    assert fidelity_failures(rows["ov-int8"]) == ["top-10 overlap 0.960 < 0.98"]
    assert fidelity_failures(rows["int8-dynamic"]) == ["batch invariance 0.01 > 0.001"]
    assert fidelity_failures(rows["ov-fp32@bf16"]) == ["top-10 overlap nan < 0.98"]
    assert fidelity_failures({"p50_ms": 1.0}) == ["top-10 overlap nan < 0.98", "batch invariance nan > 0.001"]
    assert recommend_variant(rows, min_overlap=0.95) == "ov-int8"  # the floor decides
    assert recommend_variant(rows, batch_tol=0.1, min_overlap=0.95) == "int8-dynamic"
    assert recommend_variant({"a": {**ok, "p50_ms": 7.0}, "b": {**ok, "p50_ms": 7.0}}) == "a"  # a tie: the first listed
    assert recommend_variant({"ov-int8": rows["ov-int8"]}) is None  # none passes: no recommendation
    assert recommend_variant({}) is None
    # no top 10 to compare (the export's calibration requests of <= 10 candidates): batch invariance still holds
    unmeasured = {v: {**r, "top10_overlap": None} for v, r in rows.items()}
    assert recommend_variant(unmeasured) is None
    assert recommend_variant(unmeasured, overlap_measured=False) == "ov-fp32@bf16"
    assert fidelity_failures(unmeasured["int8-dynamic"], overlap_measured=False) == ["batch invariance 0.01 > 0.001"]
