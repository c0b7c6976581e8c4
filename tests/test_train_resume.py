"""A student run longer than one sitting: `r3edge train --checkpoints DIR --max-seconds S`, then the same
command with `--resume`, through the real CLI and the transformers Trainer's own checkpoints, on a tiny
random BERT as a cosine student with query-group batches (the MiniLM recipe's shape)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_bi_config
from safetensors.torch import load_file
from test_train import teacher_probs, write_labels

from r3edge.cli import main

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier

STEPS = 6  # 7 pairs in batches of 4: two steps an epoch, so the sittings below end mid-epoch and on an epoch's edge
TRAIN = dict(batch_size=4, query_group_size=2, listwise_weight=0.5, margin_mse_weight=0.5, logging_steps=1)


def dropout_config(tmp: Path, **train) -> Path:
    """The tiny cosine student with BERT's dropout (0.1, as all-MiniLM-L6-v2 trains), so that the resumed
    sittings must also draw the unbroken run's dropout masks."""
    path = tiny_bi_config(tmp, **train)
    raw = yaml.safe_load(path.read_text())
    raw["model"]["architecture"].update(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    path.write_text(yaml.safe_dump(raw))
    return path


def train(labels: Path, cfg: Path, out: Path, *extra: str) -> int:
    return main(["train", str(labels), "--student", str(cfg), "--out", str(out), "--max-steps", str(STEPS), *extra])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One run in one sitting, and the same run in four: three cut by a time limit after their first step
    (steps 1, 2 and 3: mid-epoch, an epoch's edge, mid-epoch again), then one to the end."""
    tmp = tmp_path_factory.mktemp("resume")
    labels = write_labels(tmp / "labels")
    cfg = dropout_config(tmp, **TRAIN)
    assert train(labels, cfg, tmp / "whole") == 0
    ckpt = tmp / "ckpt"
    assert train(labels, cfg, tmp / "cut", "--checkpoints", str(ckpt), "--max-seconds", "0.001") == 0
    for _ in range(2):
        assert train(labels, cfg, tmp / "cut", "--checkpoints", str(ckpt), "--max-seconds", "0.001", "--resume") == 0
    assert train(labels, cfg, tmp / "cut", "--checkpoints", str(ckpt), "--resume") == 0
    return {"labels": labels, "cfg": cfg, "whole": tmp / "whole", "cut": tmp / "cut", "ckpt": ckpt, "tmp": tmp}


def test_a_run_resumed_over_four_sittings_saves_the_weights_of_one_sitting(runs):
    whole, cut = (load_file(runs[k] / "model.safetensors") for k in ("whole", "cut"))
    assert whole.keys() == cut.keys()
    for k in whole:
        torch.testing.assert_close(cut[k], whole[k], rtol=0, atol=1e-6, msg=f"{k} differs after resuming")
    a, b = (json.loads((runs[k] / "train_report.json").read_text()) for k in ("whole", "cut"))
    assert [s for s, _ in a["loss_log"]] == [s for s, _ in b["loss_log"]] == list(range(1, STEPS + 1))
    for (_, la), (_, lb) in zip(a["loss_log"], b["loss_log"]):
        assert la == pytest.approx(lb, abs=1e-6)
    assert b["cosine_head_fit"] == a["cosine_head_fit"]  # fitted in the first sitting, reported by the last


def test_the_run_records_its_sittings_and_refuses_a_second_ending(runs, capsys):
    record = json.loads((runs["ckpt"] / "run.json").read_text())
    assert [(s["from_step"], s["to_step"], s["stopped_by_time"]) for s in record["sittings"]] == [
        (0, 1, True), (1, 2, True), (2, 3, True), (3, STEPS, False)]
    assert record["finished_at_step"] == STEPS and record["out"] == str(runs["cut"])
    report = json.loads((runs["cut"] / "train_report.json").read_text())
    assert report["resumed_from_step"] == 3 and len(report["sittings"]) == 4
    capsys.readouterr()
    assert train(runs["labels"], runs["cfg"], runs["tmp"] / "again", "--checkpoints", str(runs["ckpt"]), "--resume") == 2
    assert "finished at step 6" in capsys.readouterr().err
    assert not (runs["tmp"] / "again").exists()


def test_resuming_another_runs_checkpoint_or_starting_over_one_is_refused(runs, tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    assert train(runs["labels"], runs["cfg"], tmp_path / "s", "--checkpoints", str(ckpt), "--max-seconds", "0.001") == 0
    capsys.readouterr()
    # a fresh start would overwrite the run
    assert train(runs["labels"], runs["cfg"], tmp_path / "s", "--checkpoints", str(ckpt)) == 2
    assert "already holds a run (checkpoint-1)" in capsys.readouterr().err
    # other teacher labels
    other = write_labels(tmp_path / "other", probs=lambda g: teacher_probs(2 - g))
    assert train(other, runs["cfg"], tmp_path / "s", "--checkpoints", str(ckpt), "--resume") == 2
    assert "started with another labels" in capsys.readouterr().err
    # another recipe; a sitting limit alone (max_seconds, checkpoint_seconds) is the same run
    assert train(runs["labels"], dropout_config(tmp_path, **{**TRAIN, "learning_rate": 1e-3}), tmp_path / "s",
                 "--checkpoints", str(ckpt), "--resume") == 2
    assert "started with another config" in capsys.readouterr().err
    assert train(runs["labels"], dropout_config(tmp_path, **TRAIN, checkpoint_seconds=5), tmp_path / "s",
                 "--checkpoints", str(ckpt), "--resume", "--max-seconds", "0.001") == 0
    # --resume without a run
    assert train(runs["labels"], runs["cfg"], tmp_path / "s", "--checkpoints", str(tmp_path / "none"), "--resume") == 2
    assert "holds no run" in capsys.readouterr().err


def test_the_cosine_head_is_fitted_on_a_seeded_sample_above_head_fit_pairs(tmp_path):
    from r3edge.distill.student.train import head_fit_rows

    labels = write_labels(tmp_path / "labels")
    cfg = tiny_bi_config(tmp_path, **TRAIN, head_fit_pairs=4)
    assert main(["train", str(labels), "--student", str(cfg), "--out", str(tmp_path / "s"), "--max-steps", "1"]) == 0
    fit = json.loads((tmp_path / "s" / "train_report.json").read_text())["cosine_head_fit"]
    assert (fit["pairs"], fit["of"]) == (4, 7)
    rows = head_fit_rows(100_357, 8192, 0)
    assert len(set(rows)) == 8192 and rows == sorted(rows) == head_fit_rows(100_357, 8192, 0)
    assert head_fit_rows(6_700, 8192, 0) == list(range(6_700))  # the 6.7k recipe fits on every pair, as before


def test_a_causal_student_whose_embeddings_are_tied_resumes_to_the_same_weights(tmp_path):
    """The tiny Qwen2 student ties its input and output embeddings; its checkpoint keeps one name of the
    tie and the resumed sitting ends on the weights of one sitting."""
    from conftest import TINY_STUDENT

    labels = write_labels(tmp_path / "labels")
    run = ["train", str(labels), "--student", str(TINY_STUDENT), "--max-steps", "4"]
    assert main([*run, "--out", str(tmp_path / "whole")]) == 0
    ckpt = ["--checkpoints", str(tmp_path / "ckpt")]
    assert main([*run, "--out", str(tmp_path / "cut"), *ckpt, "--max-seconds", "0.001"]) == 0
    assert main([*run, "--out", str(tmp_path / "cut"), *ckpt, "--resume"]) == 0
    whole, cut = (load_file(tmp_path / k / "model.safetensors") for k in ("whole", "cut"))
    for k in whole:
        torch.testing.assert_close(cut[k], whole[k], rtol=0, atol=1e-6, msg=f"{k} differs after resuming")


def test_a_query_once_run_resumes_to_the_same_weights(tmp_path):
    """train.query_once trains through two graphs that share the student's weights; its checkpoint keeps
    them once, and the resumed sitting ends on the unbroken run's weights."""
    labels = write_labels(tmp_path / "labels")
    cfg = dropout_config(tmp_path, **TRAIN, query_once=True)
    assert train(labels, cfg, tmp_path / "whole") == 0
    ckpt = ["--checkpoints", str(tmp_path / "ckpt")]
    assert train(labels, cfg, tmp_path / "cut", *ckpt, "--max-seconds", "0.001") == 0
    assert train(labels, cfg, tmp_path / "cut", *ckpt, "--resume") == 0
    whole, cut = (load_file(tmp_path / k / "model.safetensors") for k in ("whole", "cut"))
    for k in whole:
        torch.testing.assert_close(cut[k], whole[k], rtol=0, atol=1e-6, msg=f"{k} differs after resuming")
