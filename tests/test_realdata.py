"""The contracts on real user-generated text (SemEval-2016 CQA, Qatar Living forum).

Runs only where ../shared/data exists (this team's machines and CI); skips cleanly elsewhere.
The project never copies that data.
"""

from __future__ import annotations

import pytest
from conftest import SHARED_DATA

from r3edge.core.pairs import read_queries
from r3edge.core.scoring import Scorer, ScorerSpec

CQA = SHARED_DATA / "semeval2016-cqa"
pytestmark = [
    pytest.mark.realdata,
    pytest.mark.slow,
    pytest.mark.skipif(not (CQA / "subtaskB_dev.jsonl").is_file(), reason="../shared/data/semeval2016-cqa is absent"),
]


@pytest.mark.parametrize("name", ["subtaskA_dev.jsonl", "subtaskB_dev.jsonl"])
def test_real_files_read_as_pairs(name):
    queries = read_queries(CQA / name)
    assert queries and all(q.candidates for q in queries)
    labels = {c.label for q in queries for c in q.candidates}
    assert labels == {0, 1, 2}


def test_real_pairs_fit_the_budget_with_whole_queries(tiny_student):
    base = Scorer.load(tiny_student)
    # Forum questions are subject + body: a real deployment raises the query budget, it never cuts queries.
    spec = ScorerSpec(**{**base.spec.__dict__, "max_query_tokens": 384, "max_doc_tokens": 64, "max_total_tokens": 768})
    scorer = Scorer(spec, base.tokenizer)
    queries = read_queries(CQA / "subtaskB_dev.jsonl")
    qs = [q.query for q in queries for _ in q.candidates]
    ds = [c.text for q in queries for c in q.candidates]
    fits = [i for i, q in enumerate(qs) if len(base.tokenizer.encode(q, add_special_tokens=False).ids) <= 384]
    encoded = scorer.encode_batch([qs[i] for i in fits], [ds[i] for i in fits])
    assert len(fits) > 0.9 * len(qs)
    tail = base.tokenizer.encode(spec.template.tail, add_special_tokens=False).ids
    for _, enc in zip(fits, encoded):
        assert len(enc.input_ids) <= spec.max_total_tokens
        assert enc.input_ids[-len(tail):] == tail
        assert enc.doc_tokens <= spec.max_doc_tokens
    assert sum(e.doc_tokens_dropped > 0 for e in encoded) > 0, "some real posts are long enough to be cut"


def test_real_forum_thread_reranked_over_grpc(tiny_artifact):
    """Real posts (long, noisy, non-ASCII) through a real server: ids kept, sorted, long posts cut and
    counted, an over-long question cut and reported."""
    from conftest import free_port

    from r3edge.api.client import RerankerClient
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    queries = read_queries(CQA / "subtaskA_dev.jsonl")
    q = max(queries[:50], key=lambda q: sum(len(c.text) for c in q.candidates))
    subject = q.query.split("\n")[0]
    srv = BackgroundServer(ServeConfig(artifact=str(tiny_artifact), port=free_port())).start()
    try:
        with RerankerClient(srv.target, timeout=120) as client:
            client.wait_ready(60)
            resp = client.rerank_raw(subject, [(c.docid, c.text) for c in q.candidates], top_k=5)
            long = client.rerank_raw(q.query * 20, [(c.docid, c.text) for c in q.candidates], top_k=5)
    finally:
        srv.stop()
    ids = [r.id for r in resp.results]
    assert len(ids) == 5 and set(ids) <= {c.docid for c in q.candidates}
    scores = [r.score for r in resp.results]
    assert scores == sorted(scores, reverse=True)
    encoded = Scorer.load(tiny_artifact).encode_batch([subject] * len(q.candidates), [c.text for c in q.candidates])
    assert resp.truncated_docs == sum(e.doc_tokens_dropped > 0 for e in encoded) > 0
    # a forum question far over the query budget is cut to it and scored, and the response says so
    assert long.query_truncated and len(long.results) == 5 and not resp.query_truncated
