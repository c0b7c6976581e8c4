"""`r3edge bench chain` end to end: a teacher by its labels, the tiny artifact served by a real `r3edge serve` child,
a GPU row imported from a student_1p5b results.json, the floors; calibrated ECE fitted on another split."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from conftest import ROOT, SAMPLE_QUERIES

pytestmark = pytest.mark.slow  # a real server on the tiny artifact

WALL_S = 3.0
SMOKE_RESULTS = ROOT / "benchmarks" / "gpu" / "label_100k" / "smoke" / "student" / "results.json"


def _labels(directory, queries, probs_of):
    from r3edge.core.labels import write_manifest, write_shard

    records = [{"qid": q["qid"], "docid": c["docid"], "query": q["query"], "text": c["text"], "gold": c["label"],
                "judge": "score-only", "teacher_model": "tiny-teacher", "prompt_hash": "h", "probs": probs_of(c),
                "score": c["label"], "format_ok": True, "latency_s": 0.1, "prompt_tokens": 10, "completion_tokens": 0}
               for q in queries for c in q["candidates"]]
    directory.mkdir(parents=True)
    write_shard(directory, records)
    write_manifest(directory, {"complete": True, "n_pairs": len(records), "n_done": len(records),
                               "label_values": [0.0, 1.0, 2.0], "summary": {"pairs": len(records), "wall_s": WALL_S}})
    return directory


def _teacher_probs(c):
    # confident and right on grade 0, hesitant elsewhere: a calibration fit has something to move
    return {0: [0.9, 0.07, 0.03], 1: [0.3, 0.5, 0.2], 2: [0.1, 0.3, 0.6]}[c["label"]]


def _fit_probs(c):
    # the calibration split's labels: other probabilities, so a fit on the wrong split gives another number
    return {0: [0.6, 0.3, 0.1], 1: [0.5, 0.4, 0.1], 2: [0.2, 0.2, 0.6]}[c["label"]]


def _fit_queries():
    """The calibration split: other queries and other pairs than the evaluation split's."""
    out = copy.deepcopy(SAMPLE_QUERIES)
    for q in out:
        q["qid"] = "fit-" + q["qid"]
        for c in q["candidates"]:
            c["docid"] = "fit-" + c["docid"]
    return out


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    d = tmp_path_factory.mktemp("chain")
    dev, fit = d / "dev.jsonl", d / "fit.jsonl"
    dev.write_text("".join(json.dumps(q) + "\n" for q in SAMPLE_QUERIES))
    fit.write_text("".join(json.dumps(q) + "\n" for q in _fit_queries()))
    return {"dev": dev, "fit": fit,
            "dev_labels": _labels(d / "labels-dev", SAMPLE_QUERIES, _teacher_probs),
            "fit_labels": _labels(d / "labels-fit", _fit_queries(), _fit_probs)}


def test_chain_report_rows_quality_latency_and_hardware(tiny_artifact, splits, tmp_path, capsys):
    import yaml

    from r3edge.cli import main
    from r3edge.core.calibration import calibrated_ece
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.core.pairs import read_queries
    from r3edge.core.runtime_loader import open_runtime
    from r3edge.model.student import base_cosine_scoring

    gpu = dict(json.loads(SMOKE_RESULTS.read_text()))
    gpu.pop("smoke")
    gpu["machine"] = {**gpu["machine"], "gpu": "NVIDIA H200"}
    (tmp_path / "gpu.json").write_text(json.dumps(gpu))
    config = {"name": "t", "title": "tiny chain", "requests": 3,
              "teachers": [{"name": "judge", "labels": str(splits["dev_labels"]), "fit_labels": str(splits["fit_labels"]),
                            "hardware": "one test GPU"}],
              "students": [{"name": "tiny", "artifact": str(tiny_artifact), "learnt_from": "nothing (random)"}],
              "imported": [{"results": str(tmp_path / "gpu.json"), "name": "gpu student"}],
              "base_students": ["minilm-cqa-bi-rank-wise-q1"],
              "not_run": ["the 100k student"]}
    (tmp_path / "chain.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    assert main(["bench", "chain", str(tmp_path / "chain.yaml"), "--pairs", str(splits["dev"]),
                 "--fit-pairs", str(splits["fit"]), "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    rows = {r["system"]: r for r in res["rows"]}
    assert list(rows)[:3] == ["judge", "tiny", "gpu student"]

    # the teacher: the quality of its labels; calibrated on the fit split's gold, measured on the dev split's
    t = rows["judge"]
    dev_p = np.array([_teacher_probs(c) for q in SAMPLE_QUERIES for c in q["candidates"]])
    gold = np.array([c["label"] for q in SAMPLE_QUERIES for c in q["candidates"]])
    assert t["quality"]["accuracy"] == 1.0 and t["quality"]["n"] == 7
    fit_p = np.array([_fit_probs(c) for q in SAMPLE_QUERIES for c in q["candidates"]])
    want = calibrated_ece(np.log(fit_p), gold, np.log(dev_p), gold)  # the fit split's gold is the dev split's, reordered ids
    assert want["ece"] != pytest.approx(calibrated_ece(np.log(dev_p), gold, np.log(dev_p), gold)["ece"])
    assert t["quality"]["calibration"]["ece"] == pytest.approx(want["ece"])
    assert t["quality"]["calibration"]["fit_pairs"] == 7 and t["quality"]["calibration"]["ece"] < t["quality"]["ece"]
    # its latency: the labelling wall time over the requests it labelled, on the hardware the config names
    assert t["latency"]["p50_ms"] == pytest.approx(1e3 * WALL_S / 2) and t["latency"]["statistic"] == "mean"
    assert t["latency"]["axis"] == "one test GPU"

    # the served student: every pair over gRPC, the same probabilities as its default variant opened here
    s = rows["tiny"]
    runtime = open_runtime(str(tiny_artifact))
    queries = read_queries(splits["dev"])
    probs = {}
    for q in queries:
        enc = runtime.scorer.encode_batch([q.query] * len(q.candidates), [c.text for c in q.candidates])
        p = runtime.scorer.probabilities(runtime.label_logits(*runtime.scorer.collate(enc)))
        probs.update({(q.qid, c.docid): row for c, row in zip(q.candidates, p)})
    from r3edge.benchmarks.chain import quality

    here = quality(queries, probs, None, None, [0.0, 1.0, 2.0])
    for k in ("ndcg@10", "accuracy", "ece"):
        assert s["quality"][k] == pytest.approx(here[k], abs=1e-5), k
    assert s["variant"] == json.loads((tiny_artifact / "manifest.json").read_text())["default"]
    assert s["latency"]["p50_ms"] > 0 and s["latency"]["axis"].startswith(res["machine"]["cpu"])
    assert "calibration" in s["quality"] and s["learnt_from"] == "nothing (random)"

    # the imported GPU row keeps its GPU and its own numbers
    g = rows["gpu student"]
    served = gpu["steps"]["served_fp16"]
    assert g["latency"]["axis"] == "NVIDIA H200"
    assert g["latency"]["p50_ms"] == served["c1"]["latency_ms"]["p50"]
    assert g["quality"]["ndcg@10"] == served["eval"]["student_vs_gold"]["ndcg@10"]

    # the floors: first-stage order, BM25 timed here, the base encoder by cosine (not timed)
    assert rows["first-stage order"]["latency"]["p50_ms"] is None
    assert rows["BM25 (bm25s over each request's candidates)"]["latency"]["p50_ms"] > 0
    base = base_cosine_scoring(load_yaml("minilm-cqa-bi-rank-wise-q1", StudentConfig))
    cos = rows[f"base by cosine: {base.name}"]
    assert cos["quality"]["ndcg@10"] is not None and cos["latency"]["p50_ms"] is None

    report = (out / "report.md").read_text()
    assert report.startswith("# tiny chain")
    # three hardware axes, one letter each: this CPU (student, BM25), the teacher's, the GPU row's
    assert report.count("\n- A: ") + report.count("\n- B: ") + report.count("\n- C: ") == 3
    for axis in ("one test GPU", "NVIDIA H200", s["latency"]["axis"]):
        assert f": {axis}\n" in report
    assert "- the 100k student" in report and "(mean)" in report
    assert f"Reproduce: `r3edge bench chain {tmp_path / 'chain.yaml'} --pairs {splits['dev']}" in report
    png = (out / "chain.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().out


def test_chain_refuses_a_smoke_run_and_a_bad_config_field(tmp_path):
    from r3edge.benchmarks.chain import imported_row
    from r3edge.core.config import ChainConfig, load_yaml
    from r3edge.core.errors import InvalidInput

    with pytest.raises(InvalidInput, match="smoke") as exc:
        imported_row(SMOKE_RESULTS)
    assert exc.value.field == "--imported"
    (tmp_path / "bad.yaml").write_text("name: x\nstudents:\n  - name: s\n    artefact: runs/a\n")
    with pytest.raises(InvalidInput, match=r"field 'students\.0\.artifact'"):
        load_yaml(tmp_path / "bad.yaml", ChainConfig)
    assert load_yaml("chain-semeval-c", ChainConfig).teachers[0].fit_labels.endswith("labels/train")
    # a row whose artifact is missing stops the run before any row runs, naming the field
    from r3edge.commands.bench_chain import _check_inputs

    config = ChainConfig(name="x", students=[{"name": "s", "artifact": str(tmp_path / "nowhere")}])
    with pytest.raises(InvalidInput, match=r"students\[0\]\.artifact .*nowhere is not a labels directory or artifact") as exc:
        _check_inputs("x.yaml", config)
    assert exc.value.field == "students[0].artifact"
    # --fit-pairs without --pairs would be ignored: refused instead
    import argparse

    from r3edge.commands.bench_chain import _splits

    with pytest.raises(InvalidInput, match="--fit-pairs goes with --pairs") as exc:
        _splits(argparse.Namespace(semeval=str(tmp_path), pairs=None, fit_pairs="x.jsonl", max_queries=None))
    assert exc.value.field == "--fit-pairs"
