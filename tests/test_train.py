"""Training and evaluation on real parts: the tiny Qwen2 config, real label files, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE_QUERIES, TINY_STUDENT

from r3edge.core.errors import R3EdgeError
from r3edge.core.labels import write_manifest, write_shard

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier

TRAIN_STEPS = 12  # the tiny student memorises the 7 sample pairs well before this


def teacher_probs(gold: int) -> list[float]:
    p = [0.1, 0.1, 0.1]
    p[gold] = 0.8
    return p


def write_labels(directory: Path, *, complete: bool = True, gold: bool = True, probs=teacher_probs,
                 queries=SAMPLE_QUERIES) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    records = []
    for q in queries:
        for c in q["candidates"]:
            records.append(dict(
                qid=q["qid"], docid=c["docid"], query=q["query"], text=c["text"],
                gold=c["label"] if gold else None, judge="r3a", teacher_model="unit-teacher",
                prompt_hash="feedbeef", probs=probs(c["label"]), score=c["label"],
                format_ok=c["docid"] != "d2",  # one malformed teacher output, kept and counted
            ))
    write_shard(directory, records)
    write_manifest(directory, {"judge": "r3a", "teacher_model": "unit-teacher", "prompt_hash": "feedbeef",
                               "n_pairs": len(records), "n_done": len(records) if complete else 3,
                               "complete": complete})
    return directory


@pytest.fixture(scope="module")
def labels_dir(tmp_path_factory) -> Path:
    return write_labels(tmp_path_factory.mktemp("labels") / "labels")


@pytest.fixture(scope="module")
def trained(labels_dir, tmp_path_factory) -> Path:
    """Trained through the CLI, as a user would."""
    from r3edge.cli import main

    out = tmp_path_factory.mktemp("trained") / "student"
    rc = main(["train", str(labels_dir), "--student", str(TINY_STUDENT), "--out", str(out),
               "--max-steps", str(TRAIN_STEPS)])
    assert rc == 0
    return out


def test_training_lowers_the_loss_and_writes_a_report(trained):
    report = json.loads((trained / "train_report.json").read_text())
    assert report["steps"] == TRAIN_STEPS
    assert report["loss_last"] < 0.5 * report["loss_first"]
    assert report["n_examples"] == {"total": 7, "format_ok": 6, "no_teacher_distribution": 0, "trained_on": 7,
                                    "eval_split": 0}
    assert report["labels"] == {"judge": "r3a", "teacher_model": "unit-teacher", "prompt_hash": "feedbeef", "n_pairs": 7}
    assert report["config"]["name"] == "qwen2-tiny"
    assert report["wall_time_s"] > 0


def test_trained_student_agrees_with_the_teacher_more_than_untrained(trained, tiny_student, labels_dir):
    from r3edge.distill.student.evaluate import evaluate, torch_student_score_fn

    before = evaluate(labels_dir, torch_student_score_fn(tiny_student))
    after = evaluate(labels_dir, torch_student_score_fn(trained))
    assert after["student_vs_teacher"]["kl_teacher_student"] < before["student_vs_teacher"]["kl_teacher_student"]
    assert after["student_vs_teacher"]["accuracy_vs_teacher"] > before["student_vs_teacher"]["accuracy_vs_teacher"]
    # The teacher is peaked on gold, so memorising it also fits gold.
    assert after["student_vs_gold"]["accuracy"] > before["student_vs_gold"]["accuracy"]
    assert after["teacher_vs_gold"]["accuracy"] == 1.0


def test_saved_student_reloads_with_the_scorer_training_used(trained, tiny_student):
    from r3edge.model.student import load_student

    lm, scorer = load_student(trained)
    report = json.loads((trained / "train_report.json").read_text())
    assert scorer.spec.fingerprint() == report["scorer_fingerprint"]
    # Same config, so the scorer fixed at the start of training is the one create_student makes.
    assert json.loads((trained / "scorer.json").read_text()) == json.loads((tiny_student / "scorer.json").read_text())
    assert lm.get_output_embeddings().weight.shape[0] == 151936


def test_eval_cli_writes_json(trained, labels_dir, tmp_path, capsys):
    from r3edge.cli import main

    out = tmp_path / "metrics.json"
    assert main(["eval", str(labels_dir), "--student", str(trained), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["n_pairs"] == 7 and result["n_with_gold"] == 7
    assert set(result["student_vs_gold"]) >= {"accuracy", "f1_per_class", "f1_macro", "auc_0_12", "auc_01_2", "ndcg@10"}
    assert "student vs gold" in capsys.readouterr().out


def test_evaluate_without_gold_reports_teacher_agreement_only(tmp_path):
    from r3edge.distill.student.evaluate import evaluate

    labels = write_labels(tmp_path / "nogold", gold=False)

    def echo_teacher(queries, documents):  # a "model" that outputs log teacher probs for every pair
        gold = {c["text"]: c["label"] for q in SAMPLE_QUERIES for c in q["candidates"]}
        return np.log([teacher_probs(gold[d]) for d in documents])

    result = evaluate(labels, echo_teacher)
    assert result["student_vs_gold"] is None and result["teacher_vs_gold"] is None
    agree = result["student_vs_teacher"]
    assert agree["accuracy_vs_teacher"] == 1.0
    assert agree["kl_teacher_student"] == pytest.approx(0.0, abs=1e-9)


def test_drop_unformatted_trains_on_format_ok_only(labels_dir, tmp_path):
    from r3edge.distill.student.train import train_student

    out = train_student(labels_dir, TINY_STUDENT, tmp_path / "s", max_steps=1, drop_unformatted=True)
    report = json.loads((out / "train_report.json").read_text())
    assert report["n_examples"] == {"total": 7, "format_ok": 6, "no_teacher_distribution": 0, "trained_on": 6,
                                    "eval_split": 0}
    assert not (tmp_path / "s.partial").exists()


def test_several_labels_directories_train_one_student_on_all_their_pairs(tmp_path, capsys):
    """`r3edge train A B`: the shards of a labelling run done so far, trained on as one set."""
    from r3edge.cli import main

    halves = [write_labels(tmp_path / f"half{i}", queries=SAMPLE_QUERIES[i::2]) for i in range(2)]
    sizes = [sum(len(q["candidates"]) for q in SAMPLE_QUERIES[i::2]) for i in range(2)]
    assert main(["train", *map(str, halves), "--student", str(TINY_STUDENT), "--out", str(tmp_path / "s"),
                 "--max-steps", "1"]) == 0
    report = json.loads((tmp_path / "s" / "train_report.json").read_text())
    assert report["n_examples"]["total"] == sum(sizes) == 7 and min(sizes) > 0
    assert report["labels_dir"] == [str(h) for h in halves] and report["labels"]["n_pairs"] == 7
    assert main(["train", str(halves[0]), str(halves[0]), "--student", str(TINY_STUDENT),
                 "--out", str(tmp_path / "t")]) == 2
    assert "labels pairs that an earlier directory" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_only_pairs_trains_on_the_labels_of_a_pairs_file_and_refuses_one_not_covered(tmp_path, capsys):
    """`r3edge train LABELS --only-pairs PAIRS`: one judge's labels of a superset cut to the pairs another judge
    labelled, so that both teach the same student on the same pairs."""
    from r3edge.cli import main

    labels = write_labels(tmp_path / "all")
    subset = [{**SAMPLE_QUERIES[0], "candidates": SAMPLE_QUERIES[0]["candidates"][:2]}, SAMPLE_QUERIES[1]]
    pairs = tmp_path / "subset.jsonl"
    pairs.write_text("".join(json.dumps(q) + "\n" for q in subset))
    n = sum(len(q["candidates"]) for q in subset)
    assert 0 < n < 7
    assert main(["train", str(labels), "--only-pairs", str(pairs), "--student", str(TINY_STUDENT),
                 "--out", str(tmp_path / "s"), "--max-steps", "1"]) == 0
    report = json.loads((tmp_path / "s" / "train_report.json").read_text())
    assert report["n_examples"]["total"] == report["n_examples"]["trained_on"] == n
    assert report["only_pairs"]["n_pairs"] == n and report["only_pairs"]["path"] == str(pairs)
    # a pair the labels do not hold: refused, naming the flag and the fix, and nothing is written
    unlabelled = tmp_path / "unlabelled.jsonl"
    unlabelled.write_text(json.dumps({**subset[1], "candidates": [{"docid": "new", "text": "x", "label": 0}]}) + "\n")
    assert main(["train", str(labels), "--only-pairs", str(unlabelled), "--student", str(TINY_STUDENT),
                 "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "--only-pairs" in err and "1 of its 1 pairs have no label" in err and "pass labels that cover" in err
    assert not (tmp_path / "t").exists()


def test_incomplete_labels_are_refused_with_a_fix(tmp_path):
    from r3edge.distill.student.train import train_student

    labels = write_labels(tmp_path / "partial", complete=False)
    with pytest.raises(R3EdgeError, match="incomplete") as err:
        train_student(labels, TINY_STUDENT, tmp_path / "s")
    assert "r3edge label" in err.value.fix
    assert not (tmp_path / "s").exists()


def test_unknown_config_field_is_named(labels_dir, tmp_path):
    from r3edge.distill.student.train import train_student

    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY_STUDENT.read_text().replace("  learning_rate:", "  learning_rat: 0.1\n  learning_rate:"))
    with pytest.raises(R3EdgeError, match="train.learning_rat"):
        train_student(labels_dir, bad, tmp_path / "s")


def test_probs_outside_the_label_space_name_the_record(tmp_path):
    from r3edge.distill.student.train import train_student

    labels = write_labels(tmp_path / "two", probs=lambda g: [0.5, 0.5])
    with pytest.raises(R3EdgeError, match="qid='q1' docid='d1'"):
        train_student(labels, TINY_STUDENT, tmp_path / "s")


def test_a_diverged_student_stops_at_its_first_non_finite_loss_and_saves_nothing(labels_dir, tmp_path):
    from r3edge.core.errors import ErrorKind
    from r3edge.distill.student.train import train_student

    wild = tmp_path / "wild.yaml"  # one Adam step of 1e30 overflows the next forward
    wild.write_text(TINY_STUDENT.read_text().replace("  learning_rate: 0.001", "  learning_rate: 1.0e+30"))
    with pytest.raises(R3EdgeError, match="training diverged at step [2-9]") as err:
        train_student(labels_dir, wild, tmp_path / "s", max_steps=TRAIN_STEPS)
    assert err.value.kind is ErrorKind.QUALITY and not (tmp_path / "s").exists()


def test_interpolate_weights_mixes_a_tied_embedding_once():
    import torch

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.distill.student.train import interpolate_weights
    from r3edge.model.loading import load_model

    lm = load_model(load_yaml(TINY_STUDENT, StudentConfig).model)  # tie_word_embeddings: true
    assert lm.get_output_embeddings().weight is lm.get_input_embeddings().weight
    start = {k: v.clone() for k, v in lm.state_dict().items()}
    with torch.no_grad():
        for p in lm.parameters():
            p.add_(1.0)
    interpolate_weights(lm, start, 0.25)
    for k, v in lm.state_dict().items():
        torch.testing.assert_close(v, start[k] + 0.25, msg=k)


def test_interpolate_weights_remixes_a_student_saved_already_mixed():
    """A student saved with base_interpolation 0.5 is re-mixed at 0.25 and at 1 (unmixed) exactly as its
    trained weights would have been: what the WiSE-FT sweeps of saved students rank."""
    import torch

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.distill.student.train import interpolate_weights
    from r3edge.model.loading import load_model

    lm = load_model(load_yaml(TINY_STUDENT, StudentConfig).model)
    start = {k: v.clone() for k, v in lm.state_dict().items()}
    with torch.no_grad():
        for p in lm.parameters():
            p.add_(2.0)  # "trained": start + 2
    trained = {k: v.clone() for k, v in lm.state_dict().items()}
    interpolate_weights(lm, start, 0.5)  # as train_student saves it
    saved = {k: v.clone() for k, v in lm.state_dict().items()}
    for a in (0.25, 1.0):
        lm.load_state_dict(trained)
        interpolate_weights(lm, start, a)
        expected = {k: v.clone() for k, v in lm.state_dict().items()}
        lm.load_state_dict(saved)
        interpolate_weights(lm, start, a, saved_at=0.5)
        for k, v in lm.state_dict().items():
            torch.testing.assert_close(v, expected[k], msg=f"{k} at {a}")
            torch.testing.assert_close(v, start[k] + 2.0 * a, msg=f"{k} at {a}")


def test_remixed_mixes_each_alpha_from_the_weights_as_saved():
    """base_preservation.py's --interpolations: every mix starts again from the saved weights, never from the last
    mix, and the saved mix itself gives the saved weights back."""
    import torch

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.distill.student.train import remixed
    from r3edge.model.student import create_student

    config = load_yaml(TINY_STUDENT, StudentConfig)
    lm = create_student(config)[0]
    with torch.no_grad():
        for p in lm.parameters():
            p.add_(1.0)  # "trained and saved at 0.5": away from a fresh student's weights
    saved = {k: v.clone() for k, v in lm.state_dict().items()}
    seen = []
    for a in remixed(lm, config, [0.25, 0.5], saved_at=0.5):
        seen.append(a)
        moved = any(not torch.equal(v, saved[k]) for k, v in lm.state_dict().items())
        assert moved == (a == 0.25), a  # 0.25 moves the weights towards a fresh start; 0.5 is the saved mix
    assert seen == [0.25, 0.5]
    assert list(remixed(lm, config, [])) == []


def test_cli_reports_errors_without_a_traceback(tmp_path, capsys):
    from r3edge.cli import main

    rc = main(["train", str(tmp_path / "missing"), "--student", str(TINY_STUDENT), "--out", str(tmp_path / "s")])
    assert rc == 2
    assert "does not exist" in capsys.readouterr().err


def test_eval_gives_the_same_metrics_on_the_student_and_its_onnx_artifact(labels_dir, tiny_student, tiny_artifact):
    """`r3edge eval --student` and `--artifact` go through the same runtimes the server uses."""
    from r3edge.distill.student.evaluate import artifact_score_fn, evaluate, torch_student_score_fn

    torch_m = evaluate(labels_dir, torch_student_score_fn(tiny_student))
    onnx_m = evaluate(labels_dir, artifact_score_fn(tiny_artifact, "fp32"))
    for block in ("student_vs_gold", "student_vs_teacher"):
        for key, value in torch_m[block].items():
            if isinstance(value, float):
                assert onnx_m[block][key] == pytest.approx(value, abs=1e-4), (block, key)


def test_temperature_and_gold_weight_shape_the_loss():
    """T tempers both sides and scales by T²; gold_weight mixes in cross-entropy on rows with a gold label."""
    import torch
    import torch.nn.functional as F

    from r3edge.distill.student.train import distillation_loss

    logits = torch.tensor([[2.0, 0.5, -1.0], [0.0, 1.0, 3.0], [1.0, 1.0, 1.0]])
    teacher = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.2, 0.6]])
    batch = {"input_ids": torch.zeros(3, 1), "attention_mask": torch.ones(3, 1), "teacher_probs": teacher,
             "gold": torch.tensor([0, 2, -1])}

    def model(ids, mask):
        return logits

    plain, _ = distillation_loss(model, batch)
    assert torch.isclose(plain, F.kl_div(F.log_softmax(logits, -1), teacher, reduction="batchmean"))
    t = 2.0
    tempered, _ = distillation_loss(model, batch, temperature=t)
    soft = teacher ** (1 / t) / (teacher ** (1 / t)).sum(-1, keepdim=True)
    assert torch.isclose(tempered, F.kl_div(F.log_softmax(logits / t, -1), soft, reduction="batchmean") * t * t)
    only_gold, _ = distillation_loss(model, batch, gold_weight=1.0)
    assert torch.isclose(only_gold, F.cross_entropy(logits[:2], torch.tensor([0, 2]))), "the row without gold is left out"
    half, _ = distillation_loss(model, batch, gold_weight=0.5)
    assert torch.isclose(half, 0.5 * plain + 0.5 * only_gold)


def test_eval_split_keeps_the_best_epoch_and_stops_early(labels_dir, tmp_path):
    from r3edge.distill.student.train import REPORT_FILE, split_by_query, train_student

    tr, ev = split_by_query(["a", "a", "b", "c", "c"], 0.34, seed=0)
    assert sorted([*tr, *ev]) == [0, 1, 2, 3, 4] and len({("a", "a", "b", "c", "c")[i] for i in ev}) == 1
    cfg = tmp_path / "student.yaml"
    text = TINY_STUDENT.read_text()
    cfg.write_text(text[: text.index("train:")] + "train:\n  epochs: 30\n  learning_rate: 0.05\n  batch_size: 4\n"
                   "  eval_fraction: 0.5\n  early_stopping_patience: 2\n  gold_weight: 0.5\n  temperature: 2.0\n")
    out = train_student(labels_dir, cfg, tmp_path / "s")
    report = json.loads((out / REPORT_FILE).read_text())
    evals = report["eval_loss_per_epoch"]
    assert report["n_examples"]["eval_split"] in (3, 4) and report["n_examples"]["trained_on"] + \
        report["n_examples"]["eval_split"] == 7
    assert len(evals) < 30, "early stopping ends training once the held-out loss stops improving"
    best = report["best_eval_loss"]
    assert best == min(loss for _, loss in evals) and report["best_epoch"] == min(evals, key=lambda e: e[1])[0]
    # The saved weights are the best epoch's: their held-out loss, computed as the Trainer's evaluation
    # does (one batch of the held-out queries, the config's temperature and gold weight), is the best
    # epoch's, not the last epoch's (early stopping means the last one was worse).
    last = evals[-1][1]
    assert last - best > 1e-3, "the last epoch must differ from the best for this check to mean anything"
    saved = held_out_loss(out, labels_dir, cfg)
    assert saved == pytest.approx(best, abs=1e-5), f"saved {saved}, best epoch {best}, last epoch {last}"


def held_out_loss(student_dir: Path, labels_dir: Path, config_path: Path) -> float:
    """The distillation loss of a saved student on the config's held-out queries of ``labels_dir``."""
    import torch

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.core.labels import read_labels
    from r3edge.distill.student.train import (
        DistillCollator,
        build_dataset,
        distillation_loss,
        gold_targets,
        split_by_query,
        teacher_targets,
    )
    from r3edge.model.student import load_student, scoring_module

    tp = load_yaml(config_path, StudentConfig).train
    lm, scorer = load_student(student_dir)
    table = read_labels(labels_dir)
    n = scorer.spec.n_labels
    data = build_dataset(scorer, table.column("query").to_pylist(), table.column("text").to_pylist(),
                         teacher_targets(table, n, labels_dir), gold_targets(table, n, labels_dir))
    _, eval_idx = split_by_query(table.column("qid").to_pylist(), tp.eval_fraction, tp.seed)
    held = data.select(eval_idx)
    batch = DistillCollator(scorer)([held[i] for i in range(len(held))])
    with torch.no_grad():
        loss, _ = distillation_loss(scoring_module(lm, scorer).eval(), batch, temperature=tp.temperature,
                                    gold_weight=tp.gold_weight)
    return float(loss)


def test_early_stopping_without_an_eval_split_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    text = TINY_STUDENT.read_text()
    bad.write_text(text[: text.index("train:")] + "train:\n  early_stopping_patience: 2\n")
    from r3edge.distill.student.train import train_student

    with pytest.raises(R3EdgeError, match="eval_fraction"):
        train_student(tmp_path / "missing", bad, tmp_path / "s")


@pytest.mark.parametrize("native", [True, False])
def test_a_students_bf16_runs_the_trainer_in_bf16_only_where_bf16_is_native(labels_dir, tmp_path, monkeypatch, native):
    """``train.bf16: true`` (minilm-cqa-bi-rank-wise-q1) is bf16 autocast on a bf16-native CPU and fp32 on an AVX2 one:
    the Trainer gets what native_bf16 says, and the report records it."""
    import torch

    from r3edge.distill.student import train as train_mod
    from r3edge.model import loading

    if torch.cuda.is_available():
        pytest.skip("a GPU decides by torch.cuda.is_bf16_supported()")
    monkeypatch.setattr(loading, "cpu_has_bf16", lambda: native)
    seen = []
    real = train_mod.training_arguments

    def spy(*args, **kwargs):
        seen.append(kwargs["bf16"])
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "training_arguments", spy)
    config = tmp_path / "bf16.yaml"
    config.write_text(TINY_STUDENT.read_text().replace("train:\n", "train:\n  bf16: true\n", 1))
    out = train_mod.train_student(labels_dir, config, tmp_path / "s", max_steps=1)
    report = json.loads((out / "train_report.json").read_text())
    assert report["config"]["train"]["bf16"] is True
    assert seen == [native] and report["bf16"] is native
