"""Train/serve skew: the trainer and the server must feed the model the same tokens.

The trainer formats pairs with the scorer of the student it creates (`r3edge.distill.student.train.build_dataset`
+ `DistillCollator`); the server formats them with the scorer it reads from the export artifact
(`r3edge.model.runtimes.load_runtime(...).scorer`). Both must give identical token ids, and the scores the
real gRPC server returns must equal PyTorch run on the trainer's own batch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import SAMPLE_QUERIES, free_port

from r3edge.core.scoring import Scorer
from r3edge.distill.student.train import DistillCollator, build_dataset
from r3edge.model.student import load_student, scoring_module

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier

# Real-looking text with emoji, hashtags, non-Latin script and a document long enough to be cut.
QUERY = SAMPLE_QUERIES[0]["query"]
DOCS = [c["text"] for c in SAMPLE_QUERIES[0]["candidates"]] + [
    "مرحبا! QNB أفضل بنك 🏦 #doha", "Beach day 🌊 " * 80, "  leading and trailing spaces  ",
]


@pytest.fixture(scope="module")
def runtime(tiny_artifact):
    from r3edge.model.runtimes import load_runtime

    rt = load_runtime(tiny_artifact, variant="fp32")
    yield rt
    rt.close()


def _trainer_batch(student_dir):
    scorer = Scorer.load(student_dir)
    ds = build_dataset(scorer, [QUERY] * len(DOCS), DOCS, np.full((len(DOCS), 3), 1 / 3))
    return ds, DistillCollator(scorer)([ds[i] for i in range(len(ds))])


def test_trainer_and_server_token_ids_are_identical(tiny_student, runtime):
    ds, batch = _trainer_batch(tiny_student)
    served = runtime.scorer.encode_batch([QUERY] * len(DOCS), DOCS)
    assert ds["input_ids"] == [e.input_ids for e in served]
    assert any(e.doc_tokens_dropped for e in served), "the long document must exercise truncation"
    ids, mask = runtime.scorer.collate(served)
    assert np.array_equal(batch["input_ids"].numpy(), ids)
    assert np.array_equal(batch["attention_mask"].numpy(), mask)
    assert runtime.scorer.spec == Scorer.load(tiny_student).spec


def test_server_scores_equal_torch_on_the_trainer_batch(tiny_student, tiny_artifact):
    from r3edge.api.client import RerankerClient
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    _, batch = _trainer_batch(tiny_student)
    lm, scorer = load_student(tiny_student)
    with torch.no_grad():
        logits = scoring_module(lm, scorer).eval()(batch["input_ids"], batch["attention_mask"])
    probs, scores = scorer.relevance(logits.numpy())

    srv = BackgroundServer(ServeConfig(artifact=str(tiny_artifact), variant="fp32", port=free_port())).start()
    try:
        client = RerankerClient(srv.target, timeout=120)
        client.wait_ready(60)
        resp = client.score_pairs(QUERY, DOCS)
        client.close()
    finally:
        srv.stop()
    served_probs = np.array([list(s.label_probs) for s in resp.scores])
    np.testing.assert_allclose(served_probs, probs, atol=1e-4)
    np.testing.assert_allclose([s.score for s in resp.scores], scores, atol=1e-4)
    assert resp.truncated_docs >= 1
