"""The score-only judge on the packaged SmolLM2-135M-Instruct through the in-process transformers
backend: the batched, length-sorted, shared-prefix read-out gives what one plain forward per pair
gives, and `r3edge label` writes the same record shape as every other judge, with nothing generated."""

from __future__ import annotations

import pytest
from conftest import CONFIGS, SAMPLE_QUERIES

from r3edge.core.labels import read_labels, read_manifest
from r3edge.distill.label.driver import load_teacher_config
from r3edge.distill.label.judges import PairContext, get_judge

pytestmark = pytest.mark.slow
SCORE_ONLY_SMOLLM2 = CONFIGS / "teacher" / "score-only-smollm2.yaml"


@pytest.fixture(scope="module")
def backend():
    from r3edge.distill.label.backends.transformers_backend import TransformersBackend

    cfg = load_teacher_config(SCORE_ONLY_SMOLLM2)
    # 3 rows a batch: padded batches whose rows share the prompt's head (prefilled once), and a last short batch.
    # fp32, so that the comparison checks batching alone: the config's `dtype: auto` is bf16 on CPUs with
    # native bf16, where a padded batch and a single forward round differently (up to 0.03 in p here)
    return TransformersBackend(cfg.model.model_copy(update={"dtype": "float32"}),
                               cfg.generation.model_copy(update={"batch_size": 3}))


def _convs():
    judge = get_judge("score-only")
    return [(judge.assess_messages(PairContext(q["query"], c["text"]), None), judge.reply_prefix)
            for q in SAMPLE_QUERIES for c in q["candidates"]]


def test_batched_read_out_equals_one_plain_forward_per_pair(backend):
    import numpy as np
    import torch

    judge = get_judge("score-only")
    convs = _convs()
    gens, probs = backend.read_scores(convs, judge.score_tokens)
    tok = backend.tokenizer
    label_ids = [tok.encode(t, add_special_tokens=False)[0] for t in judge.score_tokens]
    ref = []
    for messages, prefix in convs:
        ids = tok.encode(backend.render(messages) + prefix, add_special_tokens=False)
        with torch.inference_mode():
            logits = backend.model(input_ids=torch.tensor([ids])).logits[0, -1]
        ref.append(torch.softmax(logits[label_ids].double(), -1).numpy())
        assert gens[len(ref) - 1].prompt_tokens == len(ids)
    np.testing.assert_allclose(probs, np.array(ref), atol=2e-5)
    assert all(g.text == "" and g.completion_tokens == 0 and g.latency_s > 0 for g in gens)
    # the read-out is not constant: the model's grade moves with the document
    assert np.ptp(probs[:, 2]) > 0.01


def test_label_run_writes_the_common_record_shape(sample_pairs_file, tmp_path, capsys):
    from r3edge.cli import main

    out = tmp_path / "labels"
    assert main(["label", str(sample_pairs_file), "--teacher", str(SCORE_ONLY_SMOLLM2), "--out", str(out)]) == 0
    rows = read_labels(out).to_pylist()
    assert len(rows) == sum(len(q["candidates"]) for q in SAMPLE_QUERIES)
    for r in rows:
        assert r["judge"] == "score-only" and r["native_scale"] == "0..2" and len(r["probs"]) == 3
        assert abs(sum(r["probs"]) - 1) < 1e-9 and r["score"] == max(range(3), key=r["probs"].__getitem__)
        assert r["native_score"] == float(r["score"])  # label_map is the identity
        assert r["format_ok"] and not r["repaired"] and r["raw_assessment"] == "<score>"
        assert r["completion_tokens"] == 0 and r["prompt_tokens"] > 100 and r["intent"] is None
    m = read_manifest(out)
    assert m["complete"] and m["judge"] == "score-only" and m.get("intent_calls", 0) == 0
    assert m["summary"]["completion_tokens"] == 0
