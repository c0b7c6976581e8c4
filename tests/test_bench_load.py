"""`r3edge bench load` against real servers on 127.0.0.1 serving the tiny artifact: an in-process server with a tiny
admission limit (--target), and a child `r3edge serve` the tool starts itself (--artifact)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import SAMPLE_QUERIES

pytestmark = pytest.mark.slow  # the tiny artifact is exported with torch once per session


@pytest.fixture(scope="module")
def top100_file(tmp_path_factory):
    """One query with 100 candidates (the sample's texts in turn): a request big enough to keep the server busy."""
    q = SAMPLE_QUERIES[0]
    texts = [c["text"] for qq in SAMPLE_QUERIES for c in qq["candidates"]]
    cands = [{"docid": f"d{i}", "text": texts[i % len(texts)]} for i in range(100)]
    path = tmp_path_factory.mktemp("load") / "top100.jsonl"
    path.write_text(json.dumps({"qid": q["qid"], "query": q["query"], "candidates": cands}) + "\n")
    return path


def test_overload_answers_every_call_and_counts_the_refused(tiny_artifact, top100_file, tmp_path):
    """With one request admitted at a time, a burst of 12 top-100s: every call gets an answer (none lost), the ones
    not admitted come back RESOURCE_EXHAUSTED, and the counts add up to the calls sent; the report says so."""
    from r3edge.cli import main
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    out = tmp_path / "load"
    cfg = ServeConfig(artifact=str(tiny_artifact), port=0, max_concurrent_requests=1)
    with BackgroundServer(cfg) as srv:
        assert main(["bench", "load", "--target", srv.target, "--pairs", str(top100_file), "--out", str(out),
                     "--phases", "overload", "--overload-concurrent", "12", "--service-requests", "2",
                     "--settle-s", "0"]) == 0
    results = json.loads((out / "results.json").read_text())
    o = results["phases"]["overload"]
    assert set(o["codes"]) <= {"OK", "RESOURCE_EXHAUSTED"}
    assert sum(o["codes"].values()) == 12 and o["lost"] == 0 and o["answered"] == 12
    assert o["codes"]["RESOURCE_EXHAUSTED"] >= 1 and o["codes"]["OK"] >= 1
    assert o["refused_ms"]["n"] == o["codes"]["RESOURCE_EXHAUSTED"] and o["admitted_ms"]["n"] == o["codes"]["OK"]
    assert o["call_after"] == "OK"
    assert results["server"]["pid"] == os.getpid()  # the in-process server's port is found listening in this process
    report = (out / "report.md").read_text()
    assert (f"12 calls left at one instant (client deadline 300 s): every call was answered; status codes {o['codes']} "
            "(adding up to the 12 sent)") in report
    assert o["admitted_p99_bound_ms"] == pytest.approx(cfg.max_queue_delay_s * 1e3 + 2 * o["service_time_ms"]["p50"])
    assert f"the admission bound of {o['admitted_p99_bound_ms']:.0f} ms" in report


def test_child_server_phases_measure_its_own_process(tiny_artifact, sample_pairs_file, tmp_path):
    """--artifact starts `r3edge serve` on a free port; batching, one at a time, the sweep and a short soak run against
    it, the RSS read is the child's, soak windows hold every request sent, and the server is stopped afterwards."""
    import psutil

    from r3edge.cli import main

    out = tmp_path / "load"
    assert main(["bench", "load", "--artifact", str(tiny_artifact), "--variant", "int8", "--pairs", str(sample_pairs_file),
                 "--serve-flag", "max_batch_size=8", "--out", str(out), "--phases", "batching,single,sweep,soak",
                 "--batching-clients", "4", "--batching-requests", "8", "--rounds", "1", "--single-requests", "3",
                 "--sweep-concurrency", "1,2", "--sweep-requests", "4", "--sweep-open-s", "1",
                 "--capacity-concurrency", "2", "--capacity-requests", "6", "--soak-s", "2", "--soak-window-s", "1"]) == 0
    results = json.loads((out / "results.json").read_text())
    srv, ph = results["server"], results["phases"]
    assert srv["child"] and srv["pid"] != os.getpid() and srv["model_info"]["variant"] == "int8"
    assert srv["model_info"]["limits"]["max_batch_size"] == 8
    assert srv["rss_mb_ready"] > 0 and not psutil.pid_exists(srv["pid"])  # measured, then stopped
    assert ph["batching"]["4 clients"]["ok"] == 8 and ph["batching"]["1 client"]["ok"] == 8
    assert ph["single"]["ok"] == 3 and [r["concurrency"] for r in ph["sweep"]["closed_loop"]] == [1, 2]
    soak = ph["soak"]
    assert len(soak["windows"]) == 2 and sum(w["requests"] for w in soak["windows"]) == soak["result"]["requests"]
    assert all(w["rss_mb_end"] > 0 for w in soak["windows"])
    assert soak["rss_growth_pct"] == pytest.approx(100 * (soak["rss_mb_end"] - soak["rss_mb_start"]) / soak["rss_mb_start"])
    assert all(r["server_alive_after"] for r in ph.values())
    report = (out / "report.md").read_text()
    assert f"= {soak['rate_per_s']:.2f}/s for 2 s: {soak['result']['requests']} requests" in report
    assert "| closed loop, concurrency 2 | 4 |" in report


@pytest.mark.parametrize(("flags", "named"), [(["--phases", "overload,warmup"], "phases"),
                                              (["--sweep-concurrency", "1,0"], "sweep_concurrency"),
                                              (["--soak-s", "-1"], "soak_s")])
def test_a_bad_plan_is_refused_before_any_call(flags, named, tmp_path, capsys):
    from r3edge.cli import main

    assert main(["bench", "load", "--target", "127.0.0.1:9", "--pairs", str(tmp_path / "absent.jsonl"), *flags]) == 2
    err = capsys.readouterr().err
    assert named in err and "fix:" in err
