"""The in-process transformers backend: prefilling a batch's shared prefix once changes nothing."""

from __future__ import annotations

import pytest
from conftest import SAMPLE_QUERIES, TINY_TEACHER

from r3edge.distill.label.driver import load_teacher_config
from r3edge.distill.label.judges import PairContext, get_judge


def _convs(judge):
    convs = []
    for q in SAMPLE_QUERIES:
        history = [*judge.intent_messages(q["query"], q.get("aux", [])),
                   {"role": "assistant", "content": "<think>short</think><intent>find it</intent>"}]
        for c in q["candidates"]:
            convs.append((judge.assess_messages(PairContext(q["query"], c["text"]), history), judge.reply_prefix))
    return convs


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [3, 8])
def test_shared_prefix_prefill_matches_the_full_prefill(batch_size):
    """Same generations and score read-out with each group's shared prefix prefilled once per batch as
    with every row prefilled whole (random weights at std 0.2: the default 0.02 attends near-uniformly
    and would hide a position or mask error). Batch 3 splits each query's 4 candidates; batch 8 packs
    two queries, whose prefixes differ in length, into one batch."""
    import numpy as np
    import torch

    from r3edge.distill.label.backends.transformers_backend import TransformersBackend

    cfg = load_teacher_config(TINY_TEACHER)
    judge = get_judge("r3a")
    backend = TransformersBackend(cfg.model, cfg.generation.model_copy(update={"batch_size": batch_size}))
    torch.manual_seed(0)
    for w in backend.model.parameters():
        w.data.normal_(0, 0.2)
    convs = _convs(judge)
    batches = backend._batches(backend._prompts(convs), backend._groups(convs))
    assert sorted(i for idx, _, _ in batches for i in idx) == list(range(len(convs)))
    assert all(len(idx) <= batch_size and sum(sizes) == len(idx) for idx, _, sizes in batches)
    _, rows, sizes = batches[0]
    assert (sizes == [3]) if batch_size == 3 else (len(sizes) == 2)
    ids, mask, cache = backend._prefill(rows, sizes)
    assert cache is not None and cache.get_seq_length() < ids.shape[1] and mask.sum(-1).tolist() == list(map(len, rows))

    runs = {}
    for min_shared in (16, 10**9):
        backend.MIN_SHARED = min_shared
        gens, probs = backend.generate_and_score(convs, 12, judge.score_open, judge.repair, judge.score_tokens)
        intents = backend.generate(convs[:3], 8, ["</intent>"])
        runs[min_shared] = ([g.text for g in gens], probs, [g.text for g in intents])
    (texts, probs, intents), (texts_ref, probs_ref, intents_ref) = runs[16], runs[10**9]
    assert texts == texts_ref and intents == intents_ref
    np.testing.assert_allclose(probs, probs_ref, atol=1e-5)
