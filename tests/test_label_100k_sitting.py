"""benchmarks/gpu/label_100k's CPU sittings (label_cpu.sh): a sitting labels only with the cold start's judge, and its
record refuses a shard that `r3edge label --merge` would refuse, so hours of CPU labelling cannot go to waste unseen."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "label_100k" / "label_100k.py"
H200 = ROOT / "benchmarks" / "results" / "label-100k-h200"


@pytest.fixture(scope="module")
def mod():
    return load_script(SCRIPT, "label_100k_sitting")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


def _verify(tmp_path: Path, sha: str) -> Path:
    p = tmp_path / "verify.json"
    p.write_text(json.dumps({"judge_sha256": sha, "argmax_agreement": 1.0}))
    return p


def test_same_judge_passes_the_cold_starts_weights_and_refuses_others(tmp_path):
    cold = next(H200.glob("run-*-cold-start.json"))
    want = json.loads(cold.read_text())["steps"]["cold_start"]["judge_sha256"]
    ok = _run("same-judge", "--verify", str(_verify(tmp_path, want)), "--cold-start", str(cold))
    assert ok.returncode == 0, ok.stderr
    bad = _run("same-judge", "--verify", str(_verify(tmp_path, "0" * 64)), "--cold-start", str(cold))
    assert bad.returncode != 0
    assert "0" * 64 in bad.stderr and want in bad.stderr and "another judge" in bad.stderr


def test_sitting_records_the_shard_and_refuses_another_teacher_config(tmp_path):
    labels = tmp_path / "dev"
    shutil.copytree(H200 / "labels" / "dev", labels)  # 5,000 C dev pairs, complete
    verify = _verify(tmp_path, "ab" * 32)
    log = tmp_path / "sittings.jsonl"
    args = ["sitting", "--labels", str(labels), "--reference", str(H200 / "labels" / "shard-00-of-05"),
            "--verify", str(verify), "--log", str(log), "--before", "1000", "--wall", "100", "--exit", "0"]
    r = _run(*args)
    assert r.returncode == 0, r.stderr
    rec = json.loads(log.read_text())
    # the judge's C dev labels 0/1/2 as labelling.md's judge check counts them (the committed table)
    assert rec["labels_0_1_2"] == [4029, 585, 386]
    assert (rec["pairs_before"], rec["pairs_after"], rec["of"], rec["complete"]) == (1000, 5000, 5000, True)
    assert rec["pairs_per_s"] == 40.0 and rec["judge_sha256"] == "ab" * 32 and rec["exit"] == 0

    man = json.loads((labels / "manifest.json").read_text())
    man["teacher_config_sha256"] = "f" * 64  # the judge was at another path: another teacher config
    (labels / "manifest.json").write_text(json.dumps(man))
    r = _run(*args)
    assert r.returncode != 0
    assert "f" * 64 in r.stderr and "--merge" in r.stderr
    assert len(log.read_text().splitlines()) == 1  # nothing recorded for the refused shard


def test_sitting_counts_a_partial_shard(mod, tmp_path):
    labels = tmp_path / "shard"
    shutil.copytree(H200 / "labels" / "dev", labels)
    for p in sorted(labels.glob("part-*.parquet"))[1:]:
        p.unlink()  # a sitting cut after its first chunk
    man = json.loads((labels / "manifest.json").read_text())
    man["complete"] = False
    (labels / "manifest.json").write_text(json.dumps(man))
    import pyarrow.parquet as pq

    first = pq.read_table(next(labels.glob("part-*.parquet")), columns=["score"]).column("score").to_pylist()
    log = tmp_path / "s.jsonl"
    ns = type("A", (), dict(labels=str(labels), reference=str(H200 / "labels" / "shard-00-of-05"),
                            verify=str(_verify(tmp_path, "cd" * 32)), log=str(log), before=0, wall=10, exit=124))
    assert mod.sitting(ns) == 0
    rec = json.loads(log.read_text())
    assert rec["pairs_after"] == len(first) < 5000 and rec["complete"] is False
    assert rec["labels_0_1_2"] == [first.count(k) for k in (0, 1, 2)]


def test_report_sets_the_cpu_shards_beside_the_gpu_shards_with_their_sittings(tmp_path):
    gpu, cpu = tmp_path / "gpu" / "labels", tmp_path / "cpu" / "labels"
    shutil.copytree(H200 / "labels" / "shard-02-of-05", gpu / "shard-02-of-05")
    for run in H200.glob("run-*.json"):
        shutil.copy(run, gpu.parent)
    for name, complete in (("shard-02-of-05", True), ("shard-03-of-05", True), ("shard-04-of-05", False)):
        shutil.copytree(H200 / "labels" / "dev", cpu / name)  # 5,000 pairs each
        man = json.loads((cpu / name / "manifest.json").read_text())
        man["complete"] = complete
        man["summary"]["wall_s"] = 1000.0  # the read-out, summed over resumes
        (cpu / name / "manifest.json").write_text(json.dumps(man))
    sits = [{"shard": "shard-03-of-05", "cpu": "Some CPU", "cores": 2, "pairs_before": 500, "pairs_after": 3000,
             "wall_s": 150}, {"shard": "shard-03-of-05", "cpu": "Some CPU", "cores": 2, "pairs_before": 3000,
                              "pairs_after": 5000, "wall_s": 50}]
    (cpu.parent / "sittings.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sits))
    r = _run("report", "--labels", str(gpu), "--cpu-labels", str(cpu))
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| shard-") or line.startswith("| all")]
    assert rows[0].startswith("| shard-02-of-05 | NVIDIA H200 | 20,655 | 18,341/1,593/721 | 50.2 | 411 | 2.43 | 60.5 "
                              "| 341 | 2.93 |")
    # 5,000 pairs in 1,000 s of read-out; the sittings added 4,500 pairs in 200 s with the judge's loading
    assert rows[1] == ("| shard-03-of-05 | Some CPU, 2 cores | 5,000 | 4,029/585/386 | 1,000.0 | 5 | 200 | 200.0 | 22.5 "
                       "| 44.4 |")
    # a total per device class, then the labels of every complete shard (the incomplete shard 4 left out)
    assert [row.split(" | ")[1] for row in rows[2:]] == ["NVIDIA H200", "2-core CPUs", "–"]
    assert rows[-1].startswith("| all shards | – | 25,655 | 22,370/2,178/1,107 |")
    assert "15,000" not in r.stdout and "# Issue 47's labels: 25,655 pairs in 2 complete shards" in r.stdout
