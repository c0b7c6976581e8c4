"""Models without a hub: local directories, the shipped packages, and hub ids that fail clearly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from r3edge.core.errors import R3EdgeError
from r3edge.model.loading import load_causal_lm

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier


def test_hub_id_fails_offline_with_a_fix():
    # Same code path as a local directory (from_pretrained); HF_HUB_OFFLINE only skips the retries.
    code = (
        "from r3edge.model.loading import load_tokenizer\n"
        "from r3edge.core.errors import R3EdgeError\n"
        "try:\n    load_tokenizer('Qwen/Qwen2.5-1.5B-Instruct')\n"
        "except R3EdgeError as e:\n    print('WHAT', e.what); print('FIX', e.fix)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    assert "WHAT could not load 'Qwen/Qwen2.5-1.5B-Instruct': not a local directory" in out
    assert "FIX pass a local directory" in out


def test_local_directory_without_config_is_named(tmp_path):
    with pytest.raises(R3EdgeError, match="holds no config.json"):
        load_causal_lm(str(tmp_path))


def test_saved_student_loads_from_its_directory(tiny_student):
    lm = load_causal_lm(str(tiny_student))
    assert lm.config.model_type == "qwen2" and lm.config.num_hidden_layers == 2


def test_keep_layers_truncates_and_the_saved_student_reloads(tmp_path):
    import torch
    from conftest import TINY_STUDENT

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.model.student import create_student, load_student, save_student, scoring_module

    base = load_yaml(TINY_STUDENT, StudentConfig)
    cfg = base.model_copy(update={"model": base.model.model_copy(update={"keep_layers": 1})})
    lm, scorer = create_student(cfg)
    assert len(lm.get_decoder().layers) == 1 and lm.config.num_hidden_layers == 1
    out = save_student(lm, scorer, tmp_path / "s")
    lm2, _ = load_student(out)
    assert len(lm2.get_decoder().layers) == 1
    ids, mask = (torch.from_numpy(a) for a in scorer.collate(scorer.encode_batch(["q"], ["a document"])))
    with torch.no_grad():
        torch.testing.assert_close(scoring_module(lm, scorer).eval()(ids, mask), scoring_module(lm2, scorer).eval()(ids, mask))
    too_many = base.model_copy(update={"model": base.model.model_copy(update={"keep_layers": 5})})
    with pytest.raises(R3EdgeError, match="keep_layers=5"):
        create_student(too_many)


@pytest.mark.parametrize("native", [True, False])
def test_bf16_auto_is_one_decision_for_loading_sft_and_student_training(monkeypatch, native):
    """``dtype: auto`` (loading), ``bf16: auto`` (SFT, GRPO) and a student's ``bf16: true`` all ask
    native_bf16: bf16 only where the CPU (here, no GPU) has it natively."""
    import torch

    from r3edge.distill.teacher.sft import use_bf16
    from r3edge.model import loading

    if torch.cuda.is_available():
        pytest.skip("a GPU decides by torch.cuda.is_bf16_supported()")
    monkeypatch.setattr(loading, "cpu_has_bf16", lambda: native)
    assert loading.native_bf16() is native
    assert loading.torch_dtype("auto") == (torch.bfloat16 if native else torch.float32)
    assert use_bf16("auto") is native and use_bf16(True) is True and use_bf16(False) is False


@pytest.mark.parametrize("config", ["qwen2-tiny", "minilm-cqa-bi-rank-wise", "bert-tiny"])
def test_student_scorer_is_the_trained_students_scorer_without_building_a_model(config, monkeypatch):
    """Counting a student's tokens (benchmarks/scripts/padding.py) reads the scorer that training, export and
    serving use, so the counts are the served student's; and it builds no model (a 1.5B one takes GBs)."""
    from conftest import CONFIGS

    import r3edge.model.student as student
    from r3edge.core.config import StudentConfig, load_yaml

    cfg = load_yaml(CONFIGS / "student" / f"{config}.yaml", StudentConfig)
    _, trained = student.create_student(cfg)

    def no_model(*a, **k):
        raise AssertionError("student_scorer built a model")

    monkeypatch.setattr(student, "load_model", no_model)
    scorer = student.student_scorer(cfg)
    assert scorer.spec == trained.spec and scorer.spec.fingerprint() == trained.spec.fingerprint()
    pairs = (["a question about banks in Doha"] * 2, ["Commercial bank", "a longer comment " * 20])
    assert [e.input_ids for e in scorer.encode_batch(*pairs)] == [e.input_ids for e in trained.encode_batch(*pairs)]
