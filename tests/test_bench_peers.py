"""`r3edge bench peers` on a tiny cosine student: r3edge's fp32 served by a real `r3edge serve` child over gRPC, and
sentence-transformers (torch) on the same weights in the peer worker process, run by this interpreter."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
import yaml
from conftest import CONFIGS
from test_bench_variants import write_heldout

pytestmark = pytest.mark.slow  # the student is exported with torch; the peer runs torch in its worker

pytest.importorskip("sentence_transformers")


@pytest.fixture(scope="module")
def cosine_student_and_artifact(tmp_path_factory):
    """bert-tiny (random weights, the real MiniLM tokenizer) as an untrained cosine student, exported fp32."""
    from r3edge.core.config import StudentConfig
    from r3edge.export.onnx import export_artifact
    from r3edge.model.student import create_student, save_student

    raw = yaml.safe_load((CONFIGS / "student" / "bert-tiny.yaml").read_text())
    raw["model"]["kind"] = "biencoder"
    raw["scorer"]["max_total_tokens"] = 180  # [CLS] q [SEP] [CLS] d [SEP]: 4 fixed tokens
    tmp = tmp_path_factory.mktemp("peers")
    student = save_student(*create_student(StudentConfig.model_validate(raw)), tmp / "student")
    artifact = export_artifact(student, tmp / "artifact", variants=("fp32",), calib_pairs=None, log=lambda *a, **k: None)
    return student, artifact


def test_peer_ranks_as_r3edge_fp32_and_the_report_reads_the_results(cosine_student_and_artifact, tmp_path, capsys):
    from r3edge.cli import main

    student, artifact = cosine_student_and_artifact
    out = tmp_path / "peers"
    peers = "st-torch-fp32,st-onnx-fp32"
    assert main(["bench", "peers", "--student", str(student), "--artifact", str(artifact), "--peers-python", sys.executable,
                 "--pairs", str(write_heldout(tmp_path / "heldout.jsonl")), "--peers", peers, "--reps", "1",
                 "--pause", "0", "--threads", "1", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    rows = {r["system"]: r for r in results["rows"]}
    reference = "r3edge served fp32"
    assert results["reference"] == reference and list(rows)[0] == reference
    # the same weights, pooling and label head: the same ten best candidates in the same order, on every request
    assert results["tops"]["st-torch-fp32"] == results["tops"][reference]
    assert all(len(top) == 10 for top in results["tops"][reference])  # 24 candidates: the top 10 can differ
    assert rows["st-torch-fp32"]["top10_overlap_with_reference"] == rows["st-torch-fp32"]["top10_same_order"] == 1.0
    if importlib.util.find_spec("optimum") is None:  # this interpreter cannot build the ONNX peer: named, with why
        assert "st-onnx-fp32" not in rows and "optimum" in results["peers_skipped"]["st-onnx-fp32"]
    assert results["best_r3edge"] == reference and results["best_peer"] == min(
        (r for r in results["rows"] if r["kind"] == "peer"), key=lambda r: r["p50_ms"])["system"]
    best, peer = rows[results["best_r3edge"]], rows[results["best_peer"]]
    assert results["ratio_best_peer_over_best_r3edge"] == pytest.approx(peer["p50_ms"] / best["p50_ms"])
    assert all(r["n"] == results["requests"] * results["reps"] == 2 for r in results["rows"])
    report = (out / "report.md").read_text()
    assert report in capsys.readouterr().out
    for r in results["rows"]:
        assert (f"| {r['system']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['top10_overlap_with_reference']:.3f} | "
                f"{r['top10_same_order']:.3f} |") in report
    assert f"ratio (peer / r3edge) **{results['ratio_best_peer_over_best_r3edge']:.2f}x**" in report


def test_peers_need_a_cosine_student_and_labelled_targets(tiny_student, sample_pairs_file, tmp_path, capsys):
    from r3edge.cli import main

    assert main(["bench", "peers", "--student", str(tiny_student), "--heldout", str(sample_pairs_file),
                 "--target", "fp32=127.0.0.1:1", "--out", str(tmp_path)]) == 2
    assert "a label_rows student" in capsys.readouterr().err
    assert main(["bench", "peers", "--student", str(tiny_student), "--heldout", str(sample_pairs_file),
                 "--target", "127.0.0.1:1"]) == 2
    assert "LABEL=HOST:PORT" in capsys.readouterr().err


def test_an_interpreter_that_cannot_run_the_peers_is_named(cosine_student_and_artifact, tmp_path, capsys):
    from r3edge.cli import main

    student, _ = cosine_student_and_artifact
    assert main(["bench", "peers", "--student", str(student), "--heldout", str(write_heldout(tmp_path / "h.jsonl")),
                 "--target", "fp32=127.0.0.1:1", "--peers-python", "/bin/false", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--peers-python /bin/false could not start the peers: " in err and "exited (code 1)" in err
