"""Temperature scaling: the fit, the ECE, the scorer.json field every scorer applies, and `r3edge calibrate`."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest


def _overconfident(n: int = 4000, true_t: float = 3.0, seed: int = 0):
    """Gold labels drawn from softmax(z); the model reports z * true_t (too sharp by that factor)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1.2, size=(n, 3))
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    gold = np.array([rng.choice(3, p=row) for row in p])
    return z * true_t, gold


def test_fit_temperature_recovers_the_sharpening_and_lowers_ece():
    from r3edge.core.calibration import fit_temperature, reliability
    from r3edge.core.scoring import softmax

    logits, gold = _overconfident()
    t = fit_temperature(logits, gold)
    assert t == pytest.approx(3.0, rel=0.1)
    before = reliability(softmax(logits), gold)
    after = reliability(softmax(logits / t), gold)
    assert before["ece"] > 0.1 and after["ece"] < 0.03 and after["ece"] < before["ece"] / 4
    assert sum(b["n"] for b in after["bins"]) == len(gold)
    # an already calibrated model keeps T near 1
    assert fit_temperature(logits / 3.0, gold) == pytest.approx(1.0, rel=0.1)


def test_reliability_bins_hold_what_they_say():
    from r3edge.core.calibration import reliability

    probs = np.array([[0.9, 0.05, 0.05], [0.9, 0.05, 0.05], [0.2, 0.7, 0.1], [0.2, 0.7, 0.1]])
    rel = reliability(probs, np.array([0, 1, 1, 1]))
    by_conf = {round(b["confidence"], 2): b for b in rel["bins"]}
    assert by_conf[0.9]["accuracy"] == 0.5 and by_conf[0.7]["accuracy"] == 1.0
    assert rel["ece"] == pytest.approx(0.5 * 0.4 + 0.5 * 0.3)


def test_temperature_lives_in_the_scorer_spec_and_changes_no_input(tiny_artifact):
    from r3edge.core.errors import InvalidInput
    from r3edge.core.scoring import Scorer, ScorerSpec

    scorer = Scorer.load(tiny_artifact)
    hot = Scorer(dataclasses.replace(scorer.spec, temperature=2.0), scorer.tokenizer)
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 1.0, 0.5]])
    p1, s1 = scorer.relevance(logits)
    p2, s2 = hot.relevance(logits)
    assert np.allclose(p2, scorer.probabilities(logits / 2.0)) and not np.allclose(p1, p2)
    assert (np.argsort(s1) == np.argsort(s2)).all() and (p1.argmax(1) == p2.argmax(1)).all()
    assert hot.spec.fingerprint() == scorer.spec.fingerprint()  # an artifact can be calibrated after export
    assert ScorerSpec.from_json(hot.spec.to_json()).temperature == 2.0
    legacy = scorer.spec.to_json()
    del legacy["temperature"]  # scorer.json files written before the field
    assert ScorerSpec.from_json(legacy).temperature == 1.0
    with pytest.raises(InvalidInput, match="temperature"):
        dataclasses.replace(scorer.spec, temperature=0.0)


@pytest.mark.slow
def test_calibrate_cli_writes_the_temperature_the_runtime_then_applies(tiny_artifact, tmp_path, capsys):
    from test_train import write_labels

    from r3edge.cli import main
    from r3edge.core.scoring import Scorer
    from r3edge.distill.student.evaluate import artifact_score_fn, evaluate

    art = tmp_path / "art"
    shutil.copytree(tiny_artifact, art)
    labels = write_labels(tmp_path / "labels")
    assert main(["calibrate", str(labels), "--artifact", str(art), "--plot", str(tmp_path / "rel.png")]) == 0
    out = capsys.readouterr().out
    t = json.loads((art / "scorer.json").read_text())["temperature"]
    assert t != 1.0 and f"temperature {t:.3f}" in out and "ECE" in out
    assert (tmp_path / "rel.png").stat().st_size > 1000
    assert Scorer.load(art).spec.temperature == t
    # the artifact still loads (fingerprint unchanged) and evaluation applies the temperature
    fn = artifact_score_fn(art)
    try:
        result = evaluate(labels, fn, return_logits=True)
    finally:
        fn.close()
    assert result["temperature"] == t
    logits, gold = result["_logits"], result["_gold"]
    z = logits / t
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    from r3edge.core.calibration import reliability
    assert result["student_vs_gold"]["ece"] == pytest.approx(reliability(p, gold)["ece"])
    # `r3edge eval` draws the diagram of the bins behind that ECE, at the calibrated temperature
    assert main(["eval", str(labels), "--artifact", str(art), "--json", str(tmp_path / "m.json"),
                 "--reliability", str(tmp_path / "eval.png")]) == 0
    assert (tmp_path / "eval.png").stat().st_size > 1000
    rel = json.loads((tmp_path / "m.json").read_text())["student_reliability"]
    assert rel["ece"] == pytest.approx(reliability(p, gold)["ece"]) and sum(b["n"] for b in rel["bins"]) == rel["n"] == len(gold)


def test_a_wrong_label_prior_needs_the_bias_that_fit_temperature_and_bias_recovers():
    """Gold drawn from softmax(z + prior), mostly label 0; the model reports 2z (too sharp, prior
    lost). A temperature cannot move an argmax; the fitted bias returns the prior."""
    from r3edge.core.calibration import fit_temperature, fit_temperature_and_bias, reliability
    from r3edge.core.scoring import softmax

    rng = np.random.default_rng(1)
    z = rng.normal(0, 1.5, size=(6000, 3))
    prior = np.array([0.0, -2.5, -3.0])
    gold = np.array([rng.choice(3, p=row) for row in softmax(z + prior)])
    t, bias = fit_temperature_and_bias(z * 2.0, gold)
    assert t == pytest.approx(2.0, rel=0.1) and bias[0] == 0.0
    assert np.allclose(bias[1:], prior[1:], atol=0.25)
    with_bias = reliability(softmax(z * 2.0 / t + np.asarray(bias)), gold)["ece"]
    temperature_only = reliability(softmax(z * 2.0 / fit_temperature(z * 2.0, gold)), gold)["ece"]
    assert with_bias < 0.02 and with_bias < temperature_only / 2


def test_calibrated_ece_fits_on_one_set_and_measures_on_another():
    """The reported figure: fitted on a calibration set, measured on held-out pairs of the same distribution; from
    label probabilities too (a log is a logit up to a constant the bias absorbs)."""
    from r3edge.core.calibration import calibrated_ece, reliability
    from r3edge.core.scoring import softmax

    logits, gold = _overconfident(n=6000, seed=2)
    fit, held = slice(0, 3000), slice(3000, None)
    got = calibrated_ece(logits[fit], gold[fit], logits[held], gold[held])
    assert got["temperature"] == pytest.approx(3.0, rel=0.1) and got["fit_pairs"] == 3000 and got["n"] == 3000
    assert got["ece"] < 0.03 < reliability(softmax(logits[held]), gold[held])["ece"]
    logp = np.log(softmax(logits))
    assert calibrated_ece(logp[fit], gold[fit], logp[held], gold[held])["ece"] == pytest.approx(got["ece"], abs=1e-6)
    # measured on the held-out pairs, not on the fitting ones
    assert got["ece"] != pytest.approx(calibrated_ece(logits[fit], gold[fit], logits[fit], gold[fit])["ece"])


def test_label_bias_lives_in_the_scorer_spec_and_changes_no_input(tiny_artifact):
    from r3edge.core.errors import InvalidInput
    from r3edge.core.scoring import Scorer, ScorerSpec

    scorer = Scorer.load(tiny_artifact)
    assert "label_bias" not in scorer.spec.to_json()  # scorer.json stays as it was until a bias is fitted
    biased = Scorer(dataclasses.replace(scorer.spec, temperature=2.0, label_bias=(0.0, -1.0, 0.5)), scorer.tokenizer)
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 1.0, 0.5]])
    z = logits / 2.0 + np.array([0.0, -1.0, 0.5])
    assert np.allclose(biased.probabilities(logits), np.exp(z) / np.exp(z).sum(1, keepdims=True))
    assert biased.spec.fingerprint() == scorer.spec.fingerprint()
    assert ScorerSpec.from_json(biased.spec.to_json()).label_bias == (0.0, -1.0, 0.5)
    with pytest.raises(InvalidInput, match="label_bias has 2 entries for 3 labels"):
        dataclasses.replace(scorer.spec, label_bias=(0.0, 1.0))


@pytest.mark.slow
def test_calibrate_bias_writes_temperature_and_bias_that_the_artifact_then_applies(tiny_artifact, tmp_path, capsys):
    from test_train import write_labels

    from r3edge.cli import main
    from r3edge.core.calibration import fit_temperature_and_bias, reliability
    from r3edge.core.labels import read_labels, read_manifest, write_manifest, write_shard
    from r3edge.core.scoring import softmax
    from r3edge.distill.student.evaluate import artifact_score_fn, evaluate

    art = tmp_path / "art"
    shutil.copytree(tiny_artifact, art)
    # the random tiny artifact ranks the sample's gold at random: gold from its own argmax (the second label
    # where the first is argmax, every other time), so the fit has a positive temperature and a bias to find
    sample = write_labels(tmp_path / "sample")
    fn = artifact_score_fn(art)
    try:
        argmax = evaluate(sample, fn, return_logits=True)["_logits"].argmax(1)
    finally:
        fn.close()
    rows = read_labels(sample).to_pylist()
    for i, (r, a) in enumerate(zip(rows, argmax)):
        r["gold"] = int(a if i % 2 or a else 1)
    labels = tmp_path / "labels"
    labels.mkdir()
    write_shard(labels, rows)
    write_manifest(labels, read_manifest(sample))
    assert main(["calibrate", str(labels), "--artifact", str(art), "--bias"]) == 0
    spec = json.loads((art / "scorer.json").read_text())
    assert "label bias" in capsys.readouterr().out and len(spec["label_bias"]) == 3
    fn = artifact_score_fn(art)
    try:
        result = evaluate(labels, fn, return_logits=True)
    finally:
        fn.close()
    t, bias = fit_temperature_and_bias(result["_logits"], result["_gold"])
    assert spec["temperature"] == pytest.approx(t) and spec["label_bias"] == pytest.approx(list(bias))
    gold = result["_gold"]
    assert len(gold) > 0
    p = softmax(result["_logits"] / t + np.asarray(bias))
    assert result["student_vs_gold"]["ece"] == pytest.approx(reliability(p, gold)["ece"])
