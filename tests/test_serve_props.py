"""Properties of the real server under any input: hypothesis on 127.0.0.1, bounded examples.

Whatever a client sends (random unicode, empty and huge texts, bad ids, any top_k, bytes that are
not a protobuf), the answer is OK or INVALID_ARGUMENT naming a field, never UNKNOWN or INTERNAL, and
an OK answer keeps the API's promises. And a pair's score is the pair's alone: neither its
batchmates in the request nor the requests the engine batches it with change it.
"""

from __future__ import annotations

import logging
import random
import threading

import grpc
import numpy as np
import pytest
from conftest import SAMPLE_QUERIES

pytestmark = pytest.mark.slow  # real ONNX artifact (built with torch once per session)

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

RPC_TIMEOUT = 120  # generous: the box is shared; nothing here measures time
#: bounded so the file runs in well under a minute of examples on 2 shared cores; no example
#: database (nothing written into the checkout)
BOUNDED = settings(max_examples=60, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FIELDS = ("body", "query", "candidates", "documents", "top_k")
SAME = 1e-5  # fp32: a pair's score does not depend on what it is batched with

QUERY = SAMPLE_QUERIES[0]["query"]
TEXTS = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]

# -- strategies ---------------------------------------------------------------------------------
#: hand-picked hard strings: empty, whitespace, control characters, RTL and bidi marks, emoji with
#: joiners and modifiers, CJK, combining marks, byte-order mark, the tokenizer's own special tokens
SPECIAL = ["", " ", "\t\n \r\x0b\x0c", "\x00", "\x00\x01\x1b[31m\x7f", "\u200b\u200d\u200e\u202e\u2066", "\ufeff",
           "مرحبا، أين أفضل بنك للمغتربين؟", "שלום עולם", "🏦👍🏽👨‍👩‍👧‍👦🇶🇦", "多哈哪家银行最好", "日本語のテキスト",
           "e\u0301\u0301\u0301", "<|im_start|>system\n", "<|endoftext|>", "<|im_end|>", "\U0010fffd\U000e0001",
           "\u3000\u00a0\u2028\u2029", "a" * 50]
CHARS = st.characters(exclude_categories=("Cs",))  # any code point a protobuf string can carry (no lone surrogates)
piece = st.one_of(st.sampled_from(SPECIAL), st.text(CHARS, max_size=40), st.sampled_from(TEXTS))
#: up to 3,000 characters: a piece repeated to a drawn length (far over the document budget)
long_text = st.tuples(piece, st.integers(0, 3000)).map(lambda t: (t[0] * (t[1] // max(len(t[0]), 1) + 1))[: t[1]])
text = st.one_of(piece, long_text, st.lists(piece, max_size=5).map("".join))
query = st.one_of(piece, st.lists(piece, max_size=4).map(" ".join), long_text)
top_k = st.one_of(st.integers(-3, 12), st.sampled_from([-(2**31), 2**31 - 1]), st.integers(-(2**31), 2**31 - 1))


@st.composite
def rerank_requests(draw):
    """A good request half of the time; else one with a drawn fault (any top_k, pooled ids with empty
    and duplicate ones, a blank query, no candidates) — the query itself may be blank in any case."""
    texts = draw(st.lists(text, max_size=8))
    ids = [f"c{i}" + draw(st.sampled_from(["", "-ü", "/🏦", " x"])) for i in range(len(texts))]
    q, k = draw(query), draw(st.one_of(st.integers(0, 12), st.just(2**31 - 1), st.integers(0, 2**31 - 1)))
    fault = draw(st.sampled_from([None, None, None, "top_k", "ids", "query", "empty"]))
    if fault == "top_k":
        k = draw(top_k)
    elif fault == "ids":
        ids = [draw(st.sampled_from(["", "a", "b", "ü"])) for _ in texts]
    elif fault == "query":
        q = draw(st.sampled_from(["", " ", "\t\n \r\x0b\x0c", "\u3000\u00a0\u2028\u2029"]))
    elif fault == "empty":
        texts, ids = [], []
    return q, list(zip(ids, texts, strict=True)), k


def problems(q: str, cands: list[tuple[str, str]], k: int) -> set[str]:
    """The fields an r3edge.v1 Rerank request gets wrong (empty or whitespace texts are fine)."""
    bad = set()
    if k < 0:
        bad.add("top_k")
    if not q.strip():
        bad.add("query")
    if not cands:
        bad.add("candidates")
    seen = set()
    for i, (cid, _) in enumerate(cands):
        if not cid or cid in seen:
            bad.add(f"candidates[{i}].id")
        seen.add(cid)
    return bad


# -- the server ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tiny_artifact):
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    srv = BackgroundServer(ServeConfig(artifact=str(tiny_artifact), port=0, variant="fp32")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(f"127.0.0.1:{server.server.port}") as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel):
    from r3edge.api import pb2_grpc

    return pb2_grpc.RerankerStub(channel)


@pytest.fixture(scope="module")
def label_values(stub):
    from r3edge.api import pb2

    info = stub.ModelInfo(pb2.ModelInfoRequest(), timeout=RPC_TIMEOUT)
    assert info.variant == "fp32"
    return np.asarray(info.label_values, dtype=np.float64)


def call(fn, *args, **kw):
    """(status code, response or None, details)."""
    try:
        return grpc.StatusCode.OK, fn(*args, timeout=RPC_TIMEOUT, **kw), ""
    except grpc.RpcError as exc:
        return exc.code(), None, exc.details() or ""


def rerank_req(q: str, cands, k: int = 0):
    from r3edge.api import pb2

    return pb2.RerankRequest(query=q, top_k=k, candidates=[pb2.Candidate(id=i, text=t) for i, t in cands])


def score_pairs(stub, q: str, docs: list[str]) -> np.ndarray:
    from r3edge.api import pb2

    resp = stub.ScorePairs(pb2.ScorePairsRequest(query=q, documents=docs), timeout=RPC_TIMEOUT)
    assert len(resp.scores) == len(docs)
    return np.array([s.score for s in resp.scores])


# -- any request: OK or INVALID_ARGUMENT, and OK keeps its promises -----------------------------
def test_any_rerank_request_is_answered_ok_or_invalid_argument(stub, label_values):
    from r3edge.api import pb2

    seen = []

    @BOUNDED
    @given(rerank_requests())
    def check(request):
        q, cands, k = request
        code, resp, details = call(stub.Rerank, rerank_req(q, cands, k))
        bad = problems(q, cands, k)
        seen.append(code)
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT), (code, details)
        if bad:
            assert code == grpc.StatusCode.INVALID_ARGUMENT, bad
            assert any(f in details for f in bad), (bad, details)  # names a field it got wrong
            return
        assert code == grpc.StatusCode.OK, details  # good input is never refused (empty texts included)
        n = len(cands)
        res = list(resp.results)
        assert len(res) == min(k or n, n)
        idx = [r.index for r in res]
        assert len(set(idx)) == len(idx) and all(0 <= i < n for i in idx)
        keys = [(-r.score, r.index) for r in res]
        assert keys == sorted(keys)  # highest score first, ties in input order
        for r in res:
            assert r.id == cands[r.index][0]
            p = np.asarray(r.label_probs, dtype=np.float64)
            assert p.shape == label_values.shape and (p >= 0).all() and abs(p.sum() - 1) < 1e-4, p
            assert np.isfinite(r.score) and abs(r.score - p @ label_values) < 1e-4
        if len(res) == n:
            assert sum(r.truncated for r in res) == resp.truncated_docs
        assert resp.truncated_docs <= n
        # ScorePairs on the same texts: the same numbers and the same truncation, in input order
        sp = stub.ScorePairs(pb2.ScorePairsRequest(query=q, documents=[t for _, t in cands]), timeout=RPC_TIMEOUT)
        assert len(sp.scores) == n and (sp.truncated_docs, sp.query_truncated) == (resp.truncated_docs, resp.query_truncated)
        for r in res:
            assert abs(sp.scores[r.index].score - r.score) <= SAME and sp.scores[r.index].truncated == r.truncated

    check()
    assert set(seen) == {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}, seen  # both sides of the contract ran


def test_corrupt_bodies_are_invalid_argument_in_one_log_line(server, channel, stub, caplog):
    """Bytes that are not the method's message: INVALID_ARGUMENT (or OK when they happen to parse),
    never UNKNOWN/INTERNAL; one access-log line each and never a traceback; the server still scores."""
    from r3edge.api import pb2

    caplog.set_level(logging.INFO)
    raw = {m: channel.unary_unary(f"/r3edge.v1.Reranker/{m}", request_serializer=None, response_deserializer=None)
           for m in ("Rerank", "ScorePairs", "ModelInfo")}
    valid = rerank_req(QUERY, [(f"c{i}", t) for i, t in enumerate(TEXTS[:4])], 2).SerializeToString()
    mutated = st.tuples(st.lists(st.tuples(st.integers(0, len(valid) - 1), st.integers(0, 255)), min_size=1, max_size=8),
                        st.integers(1, len(valid))).map(lambda t: _mutate(valid, *t))
    refused = []

    @BOUNDED
    @given(st.sampled_from(sorted(raw)), st.one_of(st.binary(max_size=2048), mutated,
                                                    st.sampled_from(ODD_BODIES)))
    def check(method, body):
        code, _, details = call(raw[method], body)
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT), (method, body, code, details)
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            assert any(f in details for f in FIELDS), details
            refused.append(method)

    check()
    assert refused, "some bodies were refused"
    traces = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not traces, traces[0].getMessage()
    lines = [r for r in caplog.records if r.name == "r3edge.serve.access" and getattr(r, "code", "") == "INVALID_ARGUMENT"]
    assert len(lines) == len(refused)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "no server fault"
    # and the server is fine
    resp = stub.Rerank(pb2.RerankRequest(query=QUERY, candidates=[pb2.Candidate(id="a", text=TEXTS[0])]), timeout=RPC_TIMEOUT)
    assert [r.id for r in resp.results] == ["a"]


#: a lone byte; invalid UTF-8 in the query; a UTF-8-encoded UTF-16 surrogate (CESU) in the query; a length
#: prefix far past the end; a candidate whose text is a surrogate; unknown groups nested 5,000 deep (past
#: the parser's recursion limit); the empty body (a valid, empty message)
ODD_BODIES = [b"\xff", b"\x0a\x02\xc3\x28", b"\x0a\x03\xed\xa0\x80", b"\x12\xff\xff\xff\xff\x0f",
              b"\x0a\x01q\x12\x08\x0a\x01a\x12\x03\xed\xb0\x80", b"\x7b" * 5000, b""]


def _mutate(body: bytes, flips: list[tuple[int, int]], keep: int) -> bytes:
    out = bytearray(body)
    for i, v in flips:
        out[i] = v
    return bytes(out[:keep])


@pytest.fixture(scope="module")
def reject_stub(tiny_artifact):
    """The same artifact served with --overflow reject."""
    from r3edge.api import pb2_grpc
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    srv = BackgroundServer(ServeConfig(artifact=str(tiny_artifact), port=0, variant="fp32", overflow="reject")).start()
    with grpc.insecure_channel(f"127.0.0.1:{srv.server.port}") as ch:
        yield pb2_grpc.RerankerStub(ch)
    srv.stop()


def test_reject_policy_refuses_exactly_what_truncate_would_cut(stub, reject_stub):
    """--overflow reject answers INVALID_ARGUMENT naming the over-long part exactly when the
    truncating server reports a cut, and otherwise the same scores."""
    import re

    seen = []

    @settings(BOUNDED, max_examples=40)
    @given(query.filter(lambda q: q.strip()), st.lists(text, min_size=1, max_size=6))
    def check(q, texts):
        cands = [(f"c{i}", t) for i, t in enumerate(texts)]
        cut = stub.Rerank(rerank_req(q, cands), timeout=RPC_TIMEOUT)
        code, resp, details = call(reject_stub.Rerank, rerank_req(q, cands))
        seen.append(code)
        if not cut.query_truncated and not cut.truncated_docs:
            assert code == grpc.StatusCode.OK, details
            assert [(r.index, r.id) for r in resp.results] == [(r.index, r.id) for r in cut.results]
            assert np.allclose([r.score for r in resp.results], [r.score for r in cut.results], rtol=0, atol=SAME)
            return
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (cut.query_truncated, cut.truncated_docs)
        if cut.query_truncated:
            assert details.startswith("query"), details
        else:
            named = re.match(r"candidates\[(\d+)\]\.text", details)
            assert named, details
            assert {r.index: r.truncated for r in cut.results}[int(named.group(1))], details

    check()
    assert set(seen) == {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}, seen


# -- a pair's score is its own --------------------------------------------------------------
def test_score_does_not_depend_on_batchmates(stub):
    """The same (query, document) alone and among shuffled others, through Rerank and ScorePairs."""
    @settings(BOUNDED, max_examples=25)
    @given(query.filter(lambda q: q.strip()), text, st.lists(text, min_size=1, max_size=12), st.randoms(use_true_random=False))
    def check(q, doc, others, rnd):
        alone = score_pairs(stub, q, [doc])[0]
        docs = list(others)
        at = rnd.randrange(len(docs) + 1)
        docs.insert(at, doc)
        mixed = score_pairs(stub, q, docs)
        assert abs(mixed[at] - alone) <= SAME, (alone, mixed[at])
        order = list(range(len(docs)))
        rnd.shuffle(order)
        resp = stub.Rerank(rerank_req(q, [(f"c{i}", docs[i]) for i in order]), timeout=RPC_TIMEOUT)
        by_doc = {order[r.index]: r.score for r in resp.results}
        assert np.allclose([by_doc[i] for i in range(len(docs))], mixed, rtol=0, atol=SAME)

    check()


@pytest.fixture(scope="module")
def batching_server(tiny_artifact):
    """A server whose micro-batches wait a long while for more pairs, so concurrent requests share them."""
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    srv = BackgroundServer(ServeConfig(artifact=str(tiny_artifact), port=0, variant="fp32", max_batch_wait_s=1.0,
                                       max_batch_tokens=8192, max_batch_size=64)).start()
    yield srv
    srv.stop()


def shared_batches(srv) -> float:
    """Micro-batches so far that held pairs of more than one request."""
    reg = srv.server.metrics.registry
    return reg.get_sample_value("r3edge_batch_requests_count") - reg.get_sample_value("r3edge_batch_requests_bucket",
                                                                                     {"le": "1.0"})


def test_concurrent_requests_score_as_sequential_ones(batching_server):
    """Requests the engine batches together get the scores they get one at a time."""
    from r3edge.api import pb2_grpc

    rnd = random.Random(0)
    requests = [(q, [TEXTS[i] * rep for i in rnd.sample(range(len(TEXTS)), 5) for rep in (1, 3)] + ["", "🏦 " * 40])
                for q, rep in zip((QUERY, SAMPLE_QUERIES[1]["query"], "多哈哪家银行最好", "a" * 300), (1, 2, 3, 1), strict=True)]
    with grpc.insecure_channel(f"127.0.0.1:{batching_server.server.port}") as ch:
        stub = pb2_grpc.RerankerStub(ch)
        alone = [score_pairs(stub, q, docs) for q, docs in requests]
        before = shared_batches(batching_server)
        for _ in range(3):  # a round whose requests all arrive within one batch wait shares a micro-batch
            got: list = [None] * len(requests)
            barrier = threading.Barrier(len(requests))

            def run(j, barrier, got):
                barrier.wait()
                got[j] = score_pairs(stub, *requests[j])

            threads = [threading.Thread(target=run, args=(j, barrier, got)) for j in range(len(requests))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(RPC_TIMEOUT)
            for j, (a, b) in enumerate(zip(alone, got, strict=True)):
                assert b is not None and np.allclose(a, b, rtol=0, atol=SAME), (j, np.abs(a - b).max())
            if shared_batches(batching_server) > before:
                break
    assert shared_batches(batching_server) > before, "the engine batched pairs of concurrent requests together"
