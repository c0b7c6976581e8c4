"""Benchmarks end to end: `r3edge serve` child processes on the tiny artifact, teacher labels, report files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import SAMPLE_QUERIES

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier

TEACHER_PAIR_S = 2.0


@pytest.fixture(scope="module")
def labels_dir(tmp_path_factory):
    """A real labels directory (written by r3edge.core.labels) with teacher soft labels and latencies."""
    from r3edge.core.labels import write_manifest, write_shard

    out = tmp_path_factory.mktemp("labels")
    records = []
    for q in SAMPLE_QUERIES:
        for c in q["candidates"]:
            probs = [0.1, 0.1, 0.1]
            probs[c["label"]] = 0.8
            records.append({"qid": q["qid"], "docid": c["docid"], "query": q["query"], "text": c["text"],
                            "gold": c["label"], "judge": "r3a", "teacher_model": "tiny-teacher", "prompt_hash": "h",
                            "probs": probs, "score": c["label"], "format_ok": True, "latency_s": TEACHER_PAIR_S,
                            "prompt_tokens": 100, "completion_tokens": 20})
    write_shard(out, records)
    write_manifest(out, {"complete": True, "n_pairs": len(records), "n_done": len(records)})
    return out


def test_bench_cli_writes_results_report_and_plot(tiny_artifact, sample_pairs_file, labels_dir, tmp_path, capsys):
    from r3edge.cli import main

    out = tmp_path / "bench"
    rc = main(["bench", "--artifact", str(tiny_artifact), "--pairs", str(sample_pairs_file), "--labels", str(labels_dir),
               "--requests", "4", "--concurrency", "2", "--pad-to", "100", "--out", str(out)])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert {"cpu", "cpu_flags", "cores_logical", "ram_gib", "os", "python", "versions", "gpus", "timestamp"} <= set(results["machine"])
    # the SIMD extensions decide CPU speed ("AMD EPYC" spans AVX2-only to AVX-512 + native bf16): read, not assumed
    with open("/proc/cpuinfo", encoding="utf-8") as fh:
        flags = set(next(line for line in fh if line.startswith("flags")).split(":", 1)[1].split())
    assert results["machine"]["cpu_flags"] == [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16",
                                                           "amx_bf16", "amx_int8") if f in flags]
    rows = {(r["system"], r["variant"]): r for r in results["systems"]}
    students = [r for r in results["systems"] if r["kind"] == "student"]
    assert sorted(r["variant"] for r in students) == ["fp32", "int8"]
    for r in students:
        assert r["load"]["ok"] == 4 and r["load"]["errors"] == {}
        assert r["load"]["candidates_per_request"] == 100
        assert 0 < r["latency_ms"]["p50"] <= r["latency_ms"]["p95"] <= r["latency_ms"]["p99"]
        assert r["pairs_per_s"] > 0
        gold = r["accuracy"]["vs_gold"]
        assert gold["n"] == 7 and 0 <= gold["accuracy"] <= 1 and gold["ndcg@10"] is not None
        assert r["accuracy"]["vs_teacher"]["n"] == 7
    teacher = rows[("teacher", "tiny-teacher")]
    assert teacher["latency_source"] == "estimated from labeling records"
    assert teacher["latency_ms"]["p50"] == pytest.approx(100 * TEACHER_PAIR_S * 1e3)
    # the teacher's soft labels put their argmax on the gold label
    assert teacher["accuracy"]["vs_gold"]["accuracy"] == 1.0
    report = (out / "report.md").read_text()
    assert f"({' '.join(results['machine']['cpu_flags'])})" in report.splitlines()[2]
    assert "| system | variant | p50 ms" in report and "estimated from labeling records" in report
    main_table, same_pairs = report.split("## Same pairs for every system")
    assert main_table.count("\n| student") == 2 and "| teacher | tiny-teacher |" in main_table
    # every system again, scored on exactly the pairs the teacher labelled
    assert same_pairs.count("\n| student") == 2 and "| teacher | tiny-teacher | 1.000 |" in same_pairs
    for r in students:
        assert r["accuracy"]["on_teacher_pairs"]["n"] == 7
    # the order the candidates arrived in is the baseline a reranker must beat, on the same pairs
    order = results["baselines"]["input_order"]["ndcg@10"]
    assert 0 < order <= 1 and f"nDCG@10 {order:.3f} on the same" in same_pairs
    for r in students:
        got = r["accuracy"]["vs_gold"]["ndcg@10"]
        verdict = "above" if got > order else "not above"
        assert f"{r['variant']}: nDCG@10 {got:.3f}, {verdict} the first-stage order" in same_pairs
    png = (out / "latency_vs_accuracy.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "wrote" in capsys.readouterr().out


def test_request_candidates_only_pads_when_asked():
    from r3edge.benchmarks.load import request_candidates
    from r3edge.core.pairs import Candidate, QueryCandidates

    q = QueryCandidates("q", "query", [Candidate(f"d{i}", f"text {i}") for i in range(3)])
    assert request_candidates(q) == [("d0", "text 0"), ("d1", "text 1"), ("d2", "text 2")]
    padded = request_candidates(q, pad_to=100)
    assert len(padded) == 100 and len({i for i, _ in padded}) == 100
    assert padded[3] == ("d0#1", "text 0")


def test_run_load_counts_failures_by_code(tiny_artifact):
    """An overloaded or rejecting server must show up as errors, not as fast requests."""
    from r3edge.benchmarks.load import run_load
    from r3edge.core.pairs import Candidate, QueryCandidates
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    bad = QueryCandidates("q", "why " * 200, [Candidate("d", "text")])  # over max_query_tokens: refused by policy
    good = QueryCandidates("g", "bank in doha", [Candidate("d", "text")])
    with BackgroundServer(ServeConfig(artifact=str(tiny_artifact), port=0, truncation="reject")) as srv:
        res = run_load(srv.target, [good, bad], requests=4, concurrency=2, progress=False)
    assert res["ok"] == 2 and res["errors"] == {"INVALID_ARGUMENT": 2}


def test_bench_needs_exactly_one_system(sample_pairs_file):
    from r3edge.benchmarks.systems import bench_systems
    from r3edge.core.errors import R3EdgeError
    from r3edge.core.pairs import read_queries

    with pytest.raises(R3EdgeError, match="exactly one"):
        bench_systems(read_queries(sample_pairs_file))


def test_runtime_profiles_the_servers_own_session(tiny_artifact, tmp_path):
    """`profile_prefix` (benchmarks/scripts/ort_profile.py) profiles the session the server runs; scores unchanged."""
    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.scoring import score_pairs

    q = SAMPLE_QUERIES[0]
    queries, docs = [q["query"]] * len(q["candidates"]), [c["text"] for c in q["candidates"]]
    plain = OnnxRuntime(tiny_artifact, variant="fp32")
    profiled = OnnxRuntime(tiny_artifact, variant="fp32", profile_prefix=str(tmp_path / "prof"))
    np.testing.assert_array_equal(score_pairs(plain.scorer, plain.label_logits, queries, docs),
                                  score_pairs(profiled.scorer, profiled.label_logits, queries, docs))
    path = profiled.session.end_profiling()
    assert path.startswith(str(tmp_path / "prof"))
    events = json.loads(open(path).read())
    assert any(e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["args"]["op_name"] == "MatMul"
               for e in events)
