"""``from r3edge import Reranker``: in-process scores equal the served ones, concurrent callers share
micro-batches, bad input names the field, and importing r3edge stays light and torch-free."""

from __future__ import annotations

import random
import subprocess
import sys
import threading

import grpc
import numpy as np
import pytest
from conftest import SAMPLE_QUERIES

from r3edge.core.errors import InvalidInput

WORDS = "bank doha expat visa permit renew fees account beach cat vet metrash qnb salary rent villa".split()


def docs_for(seed: int, n: int = 30) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 40))) for _ in range(n)]


@pytest.fixture(scope="module")
def reranker(tiny_artifact):
    from r3edge import Reranker

    with Reranker(tiny_artifact, device="cpu", threads=1, workers=1) as rr:
        yield rr


def test_rank_equals_the_served_rerank(reranker, tiny_artifact):
    from r3edge.api import pb2, pb2_grpc
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    cfg = ServeConfig(artifact=str(tiny_artifact), port=0, device="cpu", threads=1, workers=1)
    queries = [(q["query"], [c["text"] for c in q["candidates"]]) for q in SAMPLE_QUERIES]
    queries += [("best bank in doha", docs_for(1)), ("renew residence permit", docs_for(2))]
    with BackgroundServer(cfg) as bg, grpc.insecure_channel(bg.target) as ch:
        stub = pb2_grpc.RerankerStub(ch)
        info = stub.ModelInfo(pb2.ModelInfoRequest(), timeout=30)
        assert (reranker.variant, reranker.device, reranker.variant_reason) == (info.variant, info.device, info.variant_reason)
        for query, docs in queries:
            served = stub.Rerank(pb2.RerankRequest(query=query, top_k=5, candidates=[
                pb2.Candidate(id=str(i), text=t) for i, t in enumerate(docs)]), timeout=60).results
            mine = reranker.rank(query, docs, top_k=5)
            assert [r.index for r in mine] == [r.index for r in served]
            np.testing.assert_allclose([r.score for r in mine], [r.score for r in served], rtol=0, atol=1e-6)
            np.testing.assert_allclose([r.probabilities for r in mine], [list(r.label_probs) for r in served],
                                       rtol=0, atol=1e-6)
            assert [r.truncated for r in mine] == [r.truncated for r in served]
    assert len(reranker.rank(queries[2][0], queries[2][1], top_k=None)) == len(queries[2][1])


def test_score_keeps_the_pairs_order_across_queries_and_chunks(tiny_artifact, reranker):
    from r3edge import Reranker

    a, b = docs_for(3, 7), docs_for(4, 5)
    pairs = [("visa fees", d) for d in a] + [("rent a villa", d) for d in b]
    random.Random(0).shuffle(pairs)
    want = {(q, d): r.score for q, ds in (("visa fees", a), ("rent a villa", b))
            for r, d in ((r, ds[r.index]) for r in reranker.rank(q, ds, top_k=None))}
    with Reranker(tiny_artifact, device="cpu", threads=1, workers=1, max_candidates=3) as small:  # 5 requests
        got = small.score(pairs)
    np.testing.assert_allclose(got, [want[p] for p in pairs], rtol=0, atol=1e-6)
    assert reranker.score([]).shape == (0,)


def test_concurrent_callers_share_micro_batches_and_get_their_own_scores(reranker):
    jobs = [("best bank in doha", docs_for(10 + k, 60)) for k in range(12)]
    alone = [[r.score for r in reranker.rank(q, d, top_k=None)] for q, d in jobs]
    before = reranker.metrics.registry.get_sample_value("r3edge_batch_requests_count") or 0.0
    single_before = reranker.metrics.registry.get_sample_value("r3edge_batch_requests_bucket", {"le": "1.0"}) or 0.0
    got: dict[int, list[float]] = {}
    start = threading.Barrier(len(jobs))

    def call(k: int) -> None:
        start.wait()
        got[k] = [r.score for r in reranker.rank(*jobs[k], top_k=None)]

    threads = [threading.Thread(target=call, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for k in range(len(jobs)):
        np.testing.assert_allclose(got[k], alone[k], rtol=0, atol=1e-5)
    batches = reranker.metrics.registry.get_sample_value("r3edge_batch_requests_count") - before
    single = reranker.metrics.registry.get_sample_value("r3edge_batch_requests_bucket", {"le": "1.0"}) - single_before
    assert batches > single, "no micro-batch held pairs of two callers"


def test_bad_input_names_the_field(reranker, tiny_artifact):
    from r3edge import Reranker

    with pytest.raises(InvalidInput) as exc:
        reranker.rank("q", "one string")
    assert exc.value.field == "documents"
    with pytest.raises(InvalidInput) as exc:
        reranker.rank("q", ["a"], top_k=-1)
    assert exc.value.field == "top_k"
    with pytest.raises(InvalidInput) as exc:
        reranker.rank("q", ["a"], top_k="3")
    assert exc.value.field == "top_k"
    # types a Python caller can pass and no server door can: named, not a tokenizer TypeError
    with pytest.raises(InvalidInput) as exc:
        reranker.rank(None, ["a"])
    assert exc.value.field == "query" and "NoneType" in exc.value.what
    with pytest.raises(InvalidInput) as exc:
        reranker.rank("q", (d for d in ["a", "b", 3]))
    assert exc.value.field == "documents[2]" and "int" in exc.value.what
    with pytest.raises(InvalidInput) as exc:
        reranker.score([("q", "a"), ("q",)])
    assert exc.value.field == "pairs[1]"
    with pytest.raises(InvalidInput) as exc:
        reranker.score([("q", "a"), (["q"], "b")])
    assert exc.value.field == "pairs[1][0]"
    with pytest.raises(InvalidInput) as exc:
        reranker.score([("q", "a"), ("q", None)])
    assert exc.value.field == "pairs[1][1]"
    assert len(reranker.rank("q", ("a", "b"), top_k=np.int64(1))) == 1  # any sequence of strings, a numpy int
    with pytest.raises(InvalidInput) as exc:
        Reranker(tiny_artifact, device="cpu", thread=1)
    assert exc.value.field == "thread"
    with Reranker(tiny_artifact, device="cpu", threads=1, workers=1, overflow="reject", max_candidates=2) as strict:
        long = "word " * 5000
        with pytest.raises(InvalidInput) as exc:
            strict.score([("q", "a"), ("r", "b"), ("q", "c"), ("q", long)])
        assert exc.value.field == "pairs[3][1]" and "pairs[3][1]" in exc.value.what
        # the engine's query checks name the caller's pair too, and the call's other requests leave the queue
        # (the empty query fails on arrival, while q's and r's requests still wait for the tokenizer)
        dropped = lambda: strict.metrics.registry.get_sample_value(  # noqa: E731
            "r3edge_dropped_requests_total", {"reason": "cancelled"}) or 0
        before = dropped()
        with pytest.raises(InvalidInput) as exc:
            strict.score([("q", "a"), ("q", "b"), ("r", "c"), (" ", "d")])
        assert exc.value.field == "pairs[3][0]" and "query is empty" in exc.value.what
        assert dropped() - before == 2
        with pytest.raises(InvalidInput) as exc:
            strict.score([("q", "a"), ("word " * 500, "b")])
        assert exc.value.field == "pairs[1][0]"


def test_import_is_light_and_the_reranker_torch_free(tiny_artifact):
    code = ("import sys, r3edge\n"
            "assert 'r3edge.serve.reranker' not in sys.modules and 'grpc' not in sys.modules\n"
            "from r3edge import Reranker\n"
            f"with Reranker({str(tiny_artifact)!r}, device='cpu', threads=1) as rr:\n"
            "    assert rr.rank('q', ['a', 'b'], top_k=1)[0].index in (0, 1)\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
