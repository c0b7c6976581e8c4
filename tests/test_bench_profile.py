"""`r3edge bench profile`: ONNX Runtime's profiler on the tiny artifact's real session, summed per op type."""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytestmark = pytest.mark.slow  # the tiny artifact is exported with torch once per session


def optimized_graph_ops(model_path, tmp_path) -> Counter:
    """Node count per op type of the graph ORT really runs: the model after open_session's optimisations."""
    import onnx
    import onnxruntime as ort

    from r3edge.core.onnx_runtime import DISABLED_OPTIMIZERS

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"],
                         disabled_optimizers=list(DISABLED_OPTIMIZERS))
    return Counter(n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node)


def test_profile_sums_every_kernel_per_op_type_of_the_graph_it_ran(tiny_artifact, sample_pairs_file, tmp_path, capsys):
    """The per-op totals add up to the kernels' total, name exactly the op types of the optimised graph, and count
    one call per node of that type per session run; kernels fit inside the session's runs and the wall time."""
    from r3edge.cli import main
    from r3edge.core.artifact import open_variant

    out = tmp_path / "prof"
    assert main(["bench", "profile", "--artifact", str(tiny_artifact), "--pairs", str(sample_pairs_file),
                 "--variants", "fp32", "--requests", "2", "--threads", "1", "--out", str(out)]) == 0
    (v,) = json.loads((out / "results.json").read_text())["variants"]
    assert v["variant"] == "fp32" and v["requests"] == 2 and v["candidates_per_request"] == 3.5
    assert sum(v["ms_per_request"].values()) == pytest.approx(v["kernel_ms_per_request"])
    assert 0 < v["kernel_ms_per_request"] <= v["model_run_ms_per_request"] <= v["wall_ms_per_request"]

    graph = optimized_graph_ops(open_variant(tiny_artifact, "fp32", "onnxruntime").path, tmp_path)
    assert set(v["ms_per_request"]) == set(graph)
    assert v["nodes"] == dict(graph)
    events = json.loads(open(v["profile"]).read())
    runs = sum(1 for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    assert runs >= 2  # one micro-batch per request at least
    assert {op: c * 2 for op, c in v["calls_per_request"].items()} == {op: n * runs for op, n in graph.items()}

    report = (out / "report.md").read_text()
    assert f"{v['kernel_ms_per_request']:.1f} ms of kernels per request of 3.5 candidates" in report
    for op, ms in v["ms_per_request"].items():
        assert f"| {op} | {ms:.2f} |" in report
    assert "wrote" in capsys.readouterr().out


def test_profile_names_the_variants_it_can_profile(tiny_artifact, sample_pairs_file, tmp_path, capsys):
    from r3edge.cli import main

    assert main(["bench", "profile", "--artifact", str(tiny_artifact), "--pairs", str(sample_pairs_file),
                 "--variants", "fp16", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "'fp16'" in err and "fix: pick from fp32, int8" in err
