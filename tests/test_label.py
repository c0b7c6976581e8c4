"""The label stage end to end on the tiny random teacher: records, manifest, resume after SIGKILL, errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import CONFIGS, ROOT, SAMPLE_QUERIES, TINY_TEACHER

from r3edge.core.errors import R3EdgeError
from r3edge.core.labels import read_labels, read_manifest, shard_paths
from r3edge.distill.label.driver import label_pairs, parse_shard, shard_of

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier

ALL_PAIRS = {(q["qid"], c["docid"]) for q in SAMPLE_QUERIES for c in q["candidates"]}
GOLD = {(q["qid"], c["docid"]): c["label"] for q in SAMPLE_QUERIES for c in q["candidates"]}


@pytest.fixture(scope="module")
def labelled(sample_pairs_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("labels") / "tiny"
    label_pairs(sample_pairs_file, TINY_TEACHER, out, shard_size=3)
    return out


def test_every_record_is_a_complete_soft_label(labelled):
    rows = read_labels(labelled).to_pylist()
    assert {(r["qid"], r["docid"]) for r in rows} == ALL_PAIRS and len(rows) == len(ALL_PAIRS)
    assert len(shard_paths(labelled)) == 3  # 7 pairs in shards of 3
    for r in rows:
        assert len(r["probs"]) == 3 and abs(sum(r["probs"]) - 1) < 1e-9
        assert r["score"] == max(range(3), key=lambda i: r["probs"][i])
        assert r["native_score"] == r["score"] and r["native_scale"] == "0..2"
        assert r["gold"] == GOLD[(r["qid"], r["docid"])]
        assert r["format_ok"] is False  # random weights never write the tags
        assert r["raw_intent"] is not None and r["raw_assessment"] is not None
        assert r["prompt_tokens"] > 0 and 0 < r["completion_tokens"] <= 8 and r["latency_s"] > 0
        assert r["judge"] == "r3a" and len(r["prompt_hash"]) == 64


def test_manifest_is_complete(labelled, sample_pairs_file):
    m = read_manifest(labelled)
    assert m["complete"] is True and m["n_done"] == m["n_pairs"] == len(ALL_PAIRS)
    assert m["judge"] == "r3a" and m["teacher"] == "r3a-tiny" and m["teacher_model"].startswith("random-init:qwen2")
    assert m["label_values"] == [0, 1, 2] and m["n_labels"] == 3
    assert m["intent_calls"] == len(SAMPLE_QUERIES)  # round 1 once per query, not per pair


def test_rerun_of_a_finished_run_changes_nothing(labelled, sample_pairs_file):
    before = [p.stat().st_mtime_ns for p in shard_paths(labelled)]
    label_pairs(sample_pairs_file, TINY_TEACHER, labelled, shard_size=3)
    assert [p.stat().st_mtime_ns for p in shard_paths(labelled)] == before


def test_different_pairs_file_is_refused(labelled, tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(SAMPLE_QUERIES[0]) + "\n")
    with pytest.raises(R3EdgeError) as err:
        label_pairs(other, TINY_TEACHER, labelled, shard_size=3)
    assert "pairs_sha256" in err.value.what and "--overwrite" in err.value.fix


def test_different_teacher_config_is_refused(labelled, sample_pairs_file, tmp_path):
    cfg = tmp_path / "teacher.yaml"
    cfg.write_text(TINY_TEACHER.read_text().replace("assess_max_new_tokens: 8", "assess_max_new_tokens: 9"))
    with pytest.raises(R3EdgeError) as err:
        label_pairs(sample_pairs_file, cfg, labelled, shard_size=3)
    assert "teacher_config_sha256" in err.value.what and "--overwrite" in err.value.fix


def test_malformed_pairs_line_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(SAMPLE_QUERIES[0]) + "\n" + '{"qid": "q9", "query": "x", "docid": "d"}\n')
    with pytest.raises(R3EdgeError, match=r"bad\.jsonl(:| line )2: missing field 'text'"):
        label_pairs(bad, TINY_TEACHER, tmp_path / "out")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_shard_split_is_a_partition():
    qids = [f"q{i}" for i in range(200)]
    parts = [[q for q in qids if shard_of(q, 3) == i] for i in range(3)]
    assert sorted(sum(parts, [])) == sorted(qids) and all(parts)
    assert parse_shard("2/3") == (2, 3)
    for bad in ("3/3", "x", "1/0", "-1/2"):
        with pytest.raises(R3EdgeError, match="--shard"):
            parse_shard(bad)


def test_resume_after_sigkill_labels_each_pair_once(sample_pairs_file, tmp_path):
    out = tmp_path / "resume"
    cmd = [sys.executable, "-m", "r3edge.cli", "label", str(sample_pairs_file), "--teacher", str(TINY_TEACHER),
           "--out", str(out), "--shard-size", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while not shard_paths(out) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, proc.stdout.read().decode()
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    killed_at = len(shard_paths(out))
    assert 1 <= killed_at < len(ALL_PAIRS)
    assert read_manifest(out)["complete"] is False
    with pytest.raises(R3EdgeError, match="incomplete"):
        read_labels(out)

    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"({killed_at} already done)" in done.stderr
    keys = [(r["qid"], r["docid"]) for r in read_labels(out).to_pylist()]
    assert len(keys) == len(set(keys)) == len(ALL_PAIRS) and set(keys) == ALL_PAIRS
    assert "format failures 7/7" in done.stderr and "student labels" in done.stderr and "tokens in" in done.stderr

    mismatch = subprocess.run([*cmd, "--limit", "3"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert mismatch.returncode == 2 and "--overwrite" in mismatch.stderr and "Traceback" not in mismatch.stderr


def test_damaged_labels_dir_is_refused_and_shards_never_overwritten(labelled, tmp_path):
    import shutil

    from r3edge.core.labels import write_shard

    copy = tmp_path / "labels"
    shutil.copytree(labelled, copy)
    rows = read_labels(copy).to_pylist()
    shards = shard_paths(copy)
    assert len(shards) >= 3  # shard_size=3 over 7 pairs
    # a shard lost after the run finished: "complete" must not be believed
    shards[0].unlink()
    with pytest.raises(R3EdgeError, match="claim to be complete"):
        read_labels(copy)
    # the next shard is numbered after the highest one, so nothing existing is replaced
    before = {p.name: p.read_bytes() for p in shard_paths(copy)}
    new = write_shard(copy, rows[:1])
    assert new.name not in before
    assert all((copy / name).read_bytes() == data for name, data in before.items())


def test_a_second_run_on_the_same_directory_is_refused_at_once(sample_pairs_file, tmp_path):
    from r3edge.core.errors import Conflict
    from r3edge.distill.label.driver import RunLock

    out = tmp_path / "locked"
    with RunLock(out):
        with pytest.raises(Conflict, match="is being labelled by pid"):
            label_pairs(sample_pairs_file, TINY_TEACHER, out, shard_size=3)
    assert not shard_paths(out)  # nothing interleaved


@pytest.fixture(scope="module")
def two_shards(sample_pairs_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("shards")
    return [label_pairs(sample_pairs_file, TINY_TEACHER, out / f"s{i}", shard=f"{i}/2") for i in range(2)]


def test_shards_merge_only_when_complete_and_disjoint(sample_pairs_file, two_shards, tmp_path, capsys):
    from r3edge.distill.label.driver import merge_shards

    dirs = two_shards
    with pytest.raises(R3EdgeError, match="not exactly 0/2"):
        merge_shards(sample_pairs_file, dirs[:1], tmp_path / "one")
    with pytest.raises(R3EdgeError, match="not exactly 0/2"):
        merge_shards(sample_pairs_file, [dirs[0], dirs[0], dirs[1]], tmp_path / "twice")
    merged = merge_shards(sample_pairs_file, dirs, tmp_path / "merged")
    keys = [(r["qid"], r["docid"]) for r in read_labels(merged).to_pylist()]
    assert sorted(keys) == sorted(ALL_PAIRS) and len(keys) == len(set(keys))
    m = read_manifest(merged)
    assert m["complete"] and m["merged_from"] == ["0/2", "1/2"] and m["summary"]["pairs"] == len(ALL_PAIRS)


def test_the_shards_done_so_far_are_read_as_one_set_of_one_teacher(two_shards, tmp_path):
    """`r3edge train` on shards before `--merge`: their union, each pair once, refused across teachers."""
    import shutil

    from r3edge.core.labels import read_labels_union, write_manifest

    table, m = read_labels_union(two_shards)
    keys = list(zip(table.column("qid").to_pylist(), table.column("docid").to_pylist()))
    assert sorted(keys) == sorted(ALL_PAIRS) and m["n_pairs"] == len(ALL_PAIRS) and m["complete"]
    assert m["shard"] == ["0/2", "1/2"] and m["union_of"] == [str(d) for d in two_shards]
    assert m["teacher"] == "r3a-tiny" and "summary" not in m  # the first shard's summary is not the union's
    assert read_labels_union(two_shards, columns=["qid"])[0].column_names == ["qid", "docid"]  # docid: the check
    one, m1 = read_labels_union(two_shards[:1])
    assert m1 == read_manifest(two_shards[0]) and one.num_rows == m1["n_pairs"] < len(ALL_PAIRS)
    with pytest.raises(R3EdgeError, match="labels pairs that an earlier directory") as err:
        read_labels_union([two_shards[0], two_shards[1], two_shards[0]])
    assert "once" in err.value.fix
    other = tmp_path / "other-teacher"
    shutil.copytree(two_shards[1], other)
    write_manifest(other, {**read_manifest(other), "prompt_hash": "0" * 64})
    with pytest.raises(R3EdgeError, match=r"another teacher .*\(prompt_hash differ\)"):
        read_labels_union([two_shards[0], other])


def test_rank1_labels_are_p_true_on_the_two_ends_of_the_scale(sample_pairs_file, tmp_path):
    """Rank1 through the transformers backend (the Qwen2.5 tokenizer, tiny random weights): the
    verdict read after ``</think>`` is p(" true") against p(" false"), mapped to labels 0 and 2."""
    text = (CONFIGS / "teacher" / "umbrela-tiny.yaml").read_text()
    cfg = tmp_path / "rank1-tiny.yaml"
    cfg.write_text(text.replace("name: umbrela-tiny", "name: rank1-tiny").replace("judge: umbrela", "judge: rank1")
                   .replace("label_map: {0: 0, 1: 1, 2: 2}", "label_map: {0: 0, 1: 2}"))
    out = label_pairs(sample_pairs_file, cfg, tmp_path / "labels")
    rows = read_labels(out).to_pylist()
    assert {(r["qid"], r["docid"]) for r in rows} == ALL_PAIRS
    for r in rows:
        assert r["judge"] == "rank1" and r["native_scale"] == "0..1" and r["native_score"] in (0.0, 1.0)
        assert len(r["probs"]) == 3 and r["probs"][1] == 0 and abs(sum(r["probs"]) - 1) < 1e-9
        assert r["score"] == 2 * int(r["native_score"]) and r["raw_assessment"].startswith("<think>")
        assert 0 < r["probs"][2] < 1  # a read distribution, not a parsed word
    assert read_manifest(out)["label_values"] == [0, 1, 2]
