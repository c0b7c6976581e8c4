"""The gRPC server on a real ONNX artifact: API, validation, load shedding, no torch, CLI."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest
from conftest import ROOT, SAMPLE_QUERIES, free_port

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier

TEXTS = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]
QUERY = SAMPLE_QUERIES[0]["query"]


def candidates(n: int, long: bool = False) -> list[tuple[str, str]]:
    rep = 12 if long else 1
    return [(f"c{i}", f"{TEXTS[i % len(TEXTS)]} (post {i})" * (1 + (i % 3) * rep)) for i in range(n)]


@pytest.fixture(scope="module")
def server(tiny_artifact):
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    # fp32 named: the tests below compare with fp32 scoring, and the manifest's default is whichever of the tiny
    # student's fp32 and int8 the export timed faster, a near tie that went either way between runs
    cfg = ServeConfig(artifact=str(tiny_artifact), port=free_port(), variant="fp32", max_batch_tokens=4096,
                      max_batch_size=32)
    srv = BackgroundServer(cfg).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    from r3edge.api.client import RerankerClient

    c = RerankerClient(server.target, timeout=120)
    c.wait_ready(60)
    yield c
    c.close()


def direct(runtime, query: str, docs: list[str], cfg):
    from r3edge.core.scoring import score_pairs

    logits = score_pairs(runtime.scorer, runtime.label_logits, [query] * len(docs), docs,
                         max_batch_tokens=cfg.max_batch_tokens, max_batch_size=cfg.max_batch_size)
    return runtime.scorer.relevance(logits)


def test_health_and_reflection(server, client):
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    assert client.is_serving()
    services = ProtoReflectionDescriptorDatabase(client.channel).get_services()
    assert "r3edge.v1.Reranker" in services and "grpc.health.v1.Health" in services


def test_rerank_top100_sorted_and_equal_to_direct_scoring(server, client):
    cands = candidates(100)
    resp = client.rerank_raw(QUERY, cands, top_k=10)
    assert len(resp.results) == 10
    scores = [r.score for r in resp.results]
    assert scores == sorted(scores, reverse=True)
    for r in resp.results:
        assert r.id == cands[r.index][0]
        assert sum(r.label_probs) == pytest.approx(1.0, abs=1e-5)
        assert r.score == pytest.approx(float(np.dot(r.label_probs, [0, 1, 2])), abs=1e-5)
    assert resp.model.endswith(":fp32") and resp.timing.total_ms > 0 and resp.timing.inference_ms > 0
    # No skew: the server's numbers are score_pairs on the same runtime.
    probs, score = direct(server.runtime, QUERY, [t for _, t in cands], server.cfg)
    order = sorted(range(100), key=lambda i: (-score[i], i))[:10]
    assert [r.index for r in resp.results] == order
    np.testing.assert_allclose([r.score for r in resp.results], score[order], atol=1e-6)
    np.testing.assert_allclose([list(r.label_probs) for r in resp.results], probs[order], atol=1e-6)
    # top_k=0 returns everything
    assert len(client.rerank(QUERY, cands, top_k=0)) == 100


def test_truncated_docs_are_counted(client):
    resp = client.rerank_raw(QUERY, [("short", "tiny post"), ("long", "word " * 2000)], top_k=0)
    assert resp.truncated_docs == 1


def test_score_pairs_keeps_input_order(server, client):
    docs = [t for _, t in candidates(7)]
    resp = client.score_pairs(QUERY, docs)
    probs, score = direct(server.runtime, QUERY, docs, server.cfg)
    np.testing.assert_allclose([s.score for s in resp.scores], score, atol=1e-6)
    np.testing.assert_allclose([list(s.label_probs) for s in resp.scores], probs, atol=1e-6)


def test_model_info(server, client):
    info = client.model_info()
    spec = server.runtime.scorer.spec
    assert list(info.label_tokens) == ["0", "1", "2"] and list(info.label_values) == [0, 1, 2]
    assert info.scorer_fingerprint == spec.fingerprint()
    assert info.variant == "fp32" and "onnxruntime" in info.runtime
    assert info.max_query_tokens == spec.max_query_tokens
    assert info.limits.max_candidates == 1000
    assert info.limits.max_batch_tokens == 4096  # a configured budget wins over the device's default


@pytest.mark.parametrize(
    "query,cands,top_k,needle",
    [
        ("   ", [("a", "x")], 10, "query is empty"),
        (QUERY, [], 10, "candidates is empty"),
        (QUERY, [(f"c{i}", "x") for i in range(1001)], 10, "max_candidates=1000"),
        (QUERY, [("a", "x"), ("", "y")], 10, "candidates[1].id is empty"),
        (QUERY, [("a", "x"), ("b", "y"), ("a", "z")], 10, "candidates[2].id 'a' duplicates candidates[0].id"),
        (QUERY, [("a", "x")], -1, "top_k"),
    ],
    ids=["empty-query", "no-candidates", "too-many", "empty-id", "dup-id", "neg-topk"],
)
def test_rerank_validation(client, query, cands, top_k, needle):
    with pytest.raises(grpc.RpcError) as err:
        client.rerank_raw(query, cands, top_k=top_k)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in err.value.details()


def test_score_pairs_validation(client):
    with pytest.raises(grpc.RpcError) as err:
        client.score_pairs(QUERY, [])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "documents is empty" in err.value.details()


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda c: c.rerank(QUERY, [("a", "x"), ("b", None)]), "candidates[1].text"),
        (lambda c: c.rerank(None, [("a", "x")]), "query"),
        (lambda c: c.rerank(QUERY, [("a", "x"), "y"]), "candidates[1]"),
        (lambda c: c.score_pairs(QUERY, ["x", 3]), "documents[1]"),
    ],
    ids=["none-text", "none-query", "not-a-pair", "int-doc"],
)
def test_client_names_a_wrong_typed_text_before_sending(server, client, call, field):
    # protobuf would send a None text as "" (scored as an empty candidate, silently); the client refuses it
    from r3edge.core.errors import InvalidInput

    def answered():  # every request the server answered, whatever its method and code
        return sum(s.value for m in server.server.metrics.registry.collect() if m.name == "r3edge_requests"
                   for s in m.samples if s.name == "r3edge_requests_total")

    before = answered()
    with pytest.raises(InvalidInput) as err:
        call(client)
    assert err.value.field == field
    assert answered() == before  # refused here: nothing reached the server


def test_empty_and_whitespace_candidates_are_scored_like_any_text(server, client):
    """Good input is never refused: an empty or whitespace-only candidate in a top-100 gets a score,
    the one the artifact gives that text, and the rest of the request is unaffected."""
    cands = candidates(98) + [("empty", ""), ("blank", "  \n\t ")]
    resp = client.rerank_raw(QUERY, cands, top_k=0)
    assert len(resp.results) == 100
    probs, score = direct(server.runtime, QUERY, [t for _, t in cands], server.cfg)
    got = {r.index: r.score for r in resp.results}
    np.testing.assert_allclose([got[i] for i in range(100)], score, atol=1e-5)


def test_long_query_gets_the_one_default_in_process_and_served(server, client):
    """One overflow default for the library and the server: a query over max_query_tokens, sent to a
    server started with no overflow setting, is cut to its first tokens and the response says so, and
    the scores equal the artifact's on the pairs the library encodes by default (no overflow argument)."""
    spec = server.runtime.scorer.spec
    tok = server.runtime.scorer.tokenizer
    long_query = " ".join(["why does my sourdough starter smell"] * 60)
    ids = tok.encode(long_query, add_special_tokens=False).ids
    assert len(ids) > spec.max_query_tokens
    cands = candidates(5)
    resp = client.rerank_raw(long_query, cands, top_k=0)
    assert resp.query_truncated and not client.rerank_raw(QUERY, cands, top_k=0).query_truncated
    from r3edge.core.scoring import score_encoded

    enc = server.runtime.scorer.encode_batch([long_query] * 5, [t for _, t in cands])  # the library's default
    assert enc[0].query_tokens_dropped == len(ids) - spec.max_query_tokens
    head = tok.encode(spec.template.head, add_special_tokens=False).ids
    assert enc[0].prefix[len(head): len(head) + spec.max_query_tokens] == ids[: spec.max_query_tokens]  # its first tokens
    _, score = server.runtime.scorer.relevance(score_encoded(server.runtime.scorer, server.runtime.label_logits, enc))
    np.testing.assert_allclose([r.score for r in sorted(resp.results, key=lambda r: r.index)], score, atol=1e-5)


def test_truncated_candidates_are_named(client):
    resp = client.rerank_raw(QUERY, [("short", "tiny post"), ("long", "word " * 2000)], top_k=0)
    assert {r.id: r.truncated for r in resp.results} == {"short": False, "long": True}
    pairs = client.score_pairs(QUERY, ["tiny post", "word " * 2000])
    assert [s.truncated for s in pairs.scores] == [False, True] and pairs.truncated_docs == 1


def test_reject_policy_names_the_field(tiny_artifact):
    from r3edge.api.client import RerankerClient
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    cfg = ServeConfig(artifact=str(tiny_artifact), port=0, overflow="reject")
    with BackgroundServer(cfg) as srv, RerankerClient(srv.target, timeout=120) as c:
        c.wait_ready(60)
        with pytest.raises(grpc.RpcError) as err:
            c.rerank_raw("why " * 200, [("a", "x")], top_k=0)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "max_query_tokens" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            c.rerank_raw(QUERY, [("a", "x"), ("b", "word " * 2000)], top_k=0)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("candidates[1].text is ") and "--overflow truncate" in err.value.details()


def test_corrupt_body_is_invalid_argument_in_one_log_line(server, client, caplog):
    """Bytes that are not a RerankRequest: INVALID_ARGUMENT naming the body, one log line, no traceback."""
    import logging

    raw = client.channel.unary_unary("/r3edge.v1.Reranker/Rerank", request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
    with caplog.at_level(logging.INFO, logger="r3edge.serve"):
        with pytest.raises(grpc.RpcError) as err:
            raw(b"\x0a\xff\xff\xff\xff\x0f garbage", timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid r3edge.v1.RerankRequest" in err.value.details() and "fix:" in err.value.details()
    lines = [r for r in caplog.records if "INVALID_ARGUMENT" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert client.is_serving()


def metric_values(port: int) -> dict[tuple[str, tuple], float]:
    """The server's /metrics, parsed by prometheus-client: ``{(sample name, sorted labels): value}``."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def metric(values: dict, name: str, **labels) -> float:
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


class SlowRuntime:
    """The artifact's real ONNX runtime, sleeping ``delay_s`` in each micro-batch once armed (the
    engine's warm-up runs at full speed), so that a request is still queued or being scored when its
    deadline passes or its client cancels; counts the pairs handed to it."""

    def __init__(self, runtime, delay_s: float):
        self._runtime, self.delay_s = runtime, delay_s
        self.armed = False
        self.pairs_started = 0
        self.pairs_run = 0
        self.started = threading.Event()  # the first armed micro-batch reached the runtime
        self.label_logits = self._slow(runtime.label_logits)

    def _slow(self, fn):
        def run(*args):
            if self.armed:
                self.pairs_started += len(args[-1])
                self.started.set()
                time.sleep(self.delay_s)
            out = fn(*args)
            if self.armed:
                self.pairs_run += len(args[-1])
            return out
        return run

    def __getattr__(self, name):
        return getattr(self._runtime, name)


@contextlib.contextmanager
def slow_server(artifact, delay_s: float = 1.0, **settings):
    """A real server on a free port whose runtime is a :class:`SlowRuntime`; one pair per micro-batch;
    its metrics on a port of their own."""
    from r3edge.api.client import RerankerClient, Retry
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer, load_runtime_for

    cfg = ServeConfig(**{"artifact": str(artifact), "port": free_port(), "metrics_port": 0, "max_batch_size": 1,
                         **settings})
    runtime = SlowRuntime(load_runtime_for(cfg), delay_s)
    with BackgroundServer(cfg, runtime=runtime) as srv, RerankerClient(srv.target, timeout=300, retry=Retry(1)) as c:
        c.wait_ready(120)
        runtime.armed = True
        yield srv, c, runtime, lambda: metric_values(srv.server.metrics_port)


def wait_for(condition, timeout: float = 120.0) -> None:
    """Poll until ``condition()`` holds (generous: the box may be loaded); the caller asserts after."""
    end = time.monotonic() + timeout
    while not condition() and time.monotonic() < end:
        time.sleep(0.05)


def rerank_request(n: int):
    from r3edge.api import pb2

    return pb2.RerankRequest(query=QUERY, top_k=0, candidates=[pb2.Candidate(id=i, text=t) for i, t in candidates(n)])


def dropped(values: dict, reason: str) -> tuple[float, float]:
    return (metric(values, "r3edge_dropped_requests_total", reason=reason),
            metric(values, "r3edge_dropped_pairs_total", reason=reason))


def test_expired_deadline_drops_the_queued_pairs_and_server_stays_healthy(tiny_artifact):
    """The deadline passes on the server while it scores: the request's pairs still queued leave the
    queue without running (r3edge_dropped_pairs_total{reason="deadline"}), DEADLINE_EXCEEDED is
    reported, and the next request is scored."""
    n = 20  # 20 micro-batches of 1 s: the 5 s deadline passes well before the last one
    with slow_server(tiny_artifact) as (_, c, runtime, metrics):
        with pytest.raises(grpc.RpcError) as err:
            c.stub.Rerank(rerank_request(n), timeout=5.0)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_for(lambda: dropped(metrics(), "deadline")[0] or runtime.pairs_run == n)
        time.sleep(1.5)  # the micro-batch in flight at the deadline finishes
        got = metrics()
        assert runtime.started.is_set(), "the server began scoring before the deadline"
        assert dropped(got, "deadline") == (1, n - runtime.pairs_started), (got, runtime.pairs_started)
        assert 0 < runtime.pairs_started < n and runtime.pairs_run == runtime.pairs_started
        assert dropped(got, "cancelled") == (0, 0)
        assert c.is_serving() and len(c.rerank(QUERY, candidates(2), top_k=0)) == 2
        assert dropped(metrics(), "deadline") == dropped(got, "deadline"), "a request within its deadline drops nothing"


def test_request_whose_deadline_passes_in_the_queue_is_never_scored(tiny_artifact):
    """Behind a busy request, a request whose deadline passes is dropped from the queue before any of
    its pairs runs (admitted: the rate the engine plans with was measured before the slow-down; the
    busy request's first micro-batch takes 4 s, so the late one arrives before that rate changes even
    on a loaded machine)."""
    busy_n, late_n = 4, 3
    with slow_server(tiny_artifact, delay_s=4.0) as (_, c, runtime, metrics):
        busy = c.stub.Rerank.future(rerank_request(busy_n), timeout=300)
        assert runtime.started.wait(120), "the busy request reached the runtime"
        with pytest.raises(grpc.RpcError) as err:
            c.stub.Rerank(rerank_request(late_n), timeout=2.0)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert len(busy.result(300).results) == busy_n
        got = metrics()
        assert dropped(got, "deadline") == (1, late_n), got
        assert runtime.pairs_run == busy_n, "none of the expired request's pairs reached the runtime"


def test_cancelled_request_leaves_the_queue(tiny_artifact):
    """A client cancel removes the request's queued pairs: counted by the server, never run; the
    server goes on with the next request (a cancelled request waiting behind another runs nothing)."""
    n = 20
    with slow_server(tiny_artifact) as (_, c, runtime, metrics):
        fut = c.stub.Rerank.future(rerank_request(n), timeout=300)
        assert runtime.started.wait(120), "the request reached the runtime"
        queued = c.stub.Rerank.future(rerank_request(4), timeout=300)  # waits behind the first one
        wait_for(lambda: metric(metrics(), "r3edge_queue_requests") == 2)
        assert fut.cancel() and queued.cancel()
        wait_for(lambda: dropped(metrics(), "cancelled")[0] == 2)
        time.sleep(1.5)  # the micro-batch in flight at the cancel finishes
        got = metrics()
        assert dropped(got, "cancelled") == (2, n - runtime.pairs_started + 4), (got, runtime.pairs_started)
        assert runtime.pairs_run == runtime.pairs_started < n
        assert metric(got, "r3edge_queue_pairs") == 0 and metric(got, "r3edge_queue_requests") == 0
        assert len(c.rerank(QUERY, candidates(2), top_k=0, timeout=120)) == 2


def test_a_request_that_cannot_meet_its_deadline_is_refused_at_once(tiny_artifact):
    """Admission by expected wait: once the engine has measured its (slow) rate, a request that could
    not finish before its deadline is refused with RESOURCE_EXHAUSTED at once, with a retry push-back."""
    with slow_server(tiny_artifact, delay_s=0.5, max_queue_delay_s=60) as (_, c, runtime, metrics):
        busy = c.stub.Rerank.future(rerank_request(12), timeout=300)
        wait_for(lambda: runtime.pairs_run >= 4)  # the rate the engine plans with is now the slow one
        t = time.perf_counter()
        with pytest.raises(grpc.RpcError) as err:
            c.stub.Rerank(rerank_request(6), timeout=1.0)
        answered_s = time.perf_counter() - t
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value.details()
        assert "deadline" in err.value.details() and answered_s < 1.0
        assert int(dict(err.value.trailing_metadata())["grpc-retry-pushback-ms"]) > 0
        assert metric(metrics(), "r3edge_shed_requests_total", reason="deadline") == 1
        assert len(busy.result(300).results) == 12


def test_timing_splits_queue_tokenize_and_inference(tiny_artifact):
    """tokenize_ms is text to ids only; inference_ms the runtime calls; collation counts in total_ms only."""
    from r3edge.core.scoring import Scorer

    collate_s = 1.0

    class SlowCollate(Scorer):  # the same scorer, whose collation takes a known second per micro-batch
        def collate_ids(self, rows, width=None):
            time.sleep(collate_s)
            return super().collate_ids(rows, width)

    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer, load_runtime_for

    # one worker: the three micro-batches are collated one after another
    cfg = ServeConfig(artifact=str(tiny_artifact), port=0, max_batch_size=1, workers=1)
    runtime = load_runtime_for(cfg)
    from r3edge.api.client import RerankerClient

    with BackgroundServer(cfg, runtime=runtime) as srv, RerankerClient(srv.target, timeout=300) as c:
        c.wait_ready(120)
        real = runtime.scorer
        srv.server.engine.scorer = SlowCollate(real.spec, real.tokenizer)
        t = c.rerank_raw(QUERY, candidates(3), top_k=0).timing
    assert 0 < t.tokenize_ms and 0 < t.inference_ms
    # three micro-batches, each collated in >= 1 s: counted in total_ms, in neither part
    assert t.total_ms - t.tokenize_ms - t.inference_ms >= 3 * collate_s * 1e3 - t.queue_ms, t


def test_requests_share_micro_batches(tiny_artifact):
    """Pairs of concurrent requests are batched together (r3edge_batch_requests > 1), and each request
    still gets exactly the scores it gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    from r3edge.api.client import RerankerClient
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    cfg = ServeConfig(artifact=str(tiny_artifact), port=0, metrics_port=0, max_batch_wait_s=0.05)
    queries = [f"{QUERY} {k}" for k in range(8)]
    with BackgroundServer(cfg) as srv, RerankerClient(srv.target, timeout=300) as c:
        c.wait_ready(60)
        alone = [[r.score for r in c.rerank(q, candidates(6), top_k=0)] for q in queries]
        with ThreadPoolExecutor(8) as ex:
            together = list(ex.map(lambda q: [r.score for r in c.rerank(q, candidates(6), top_k=0)], queries))
        hist = metric_values(srv.server.metrics_port)
    np.testing.assert_allclose(together, alone, atol=1e-5)
    shared = sum(v for (name, labels), v in hist.items() if name == "r3edge_batch_requests_bucket"
                 and dict(labels)["le"] == "1.0")
    total = metric(hist, "r3edge_batch_requests_count")
    assert total > shared, "some micro-batch held pairs of more than one request"


class OverlapRuntime(SlowRuntime):
    """A :class:`SlowRuntime` that records how many micro-batches ran at the same time at most."""

    def __init__(self, runtime, delay_s: float):
        super().__init__(runtime, delay_s)
        self._lock = threading.Lock()
        self.running = self.most_running = 0
        slow = self.label_logits

        def counted(*args):
            with self._lock:
                self.running += 1
                self.most_running = max(self.most_running, self.running)
            try:
                return slow(*args)
            finally:
                with self._lock:
                    self.running -= 1
        self.label_logits = counted


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_run_micro_batches_concurrently_with_the_same_scores(tiny_artifact, workers):
    """``--workers 2``: two micro-batches run on the runtime at once (one worker: never), ModelInfo says
    how many workers there are, and the ranking still equals direct scoring."""
    from r3edge.api.client import RerankerClient
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer, load_runtime_for

    cfg = ServeConfig(artifact=str(tiny_artifact), port=0, max_batch_tokens=512, max_batch_size=4, workers=workers)
    runtime = OverlapRuntime(load_runtime_for(cfg), 0.2)  # long enough to overlap on a loaded box
    docs = candidates(24)
    with BackgroundServer(cfg, runtime=runtime) as srv, RerankerClient(srv.target, timeout=300) as c:
        c.wait_ready(60)
        runtime.armed = True
        got = {r.id: r.score for r in c.rerank(QUERY, docs, top_k=0)}
        info = c.model_info()
    assert runtime.most_running == workers
    assert info.limits.workers == workers
    _, want = direct(runtime, QUERY, [t for _, t in docs], cfg)
    np.testing.assert_allclose([got[i] for i, _ in docs], want, atol=1e-5)


@pytest.mark.parametrize("workers", [1, 2])
def test_warm_up_runs_the_longest_pairs_on_every_worker_at_once(tiny_artifact, workers):
    """Before SERVING, each worker scores a budget of the longest pairs the contract admits, all workers
    at the same time, so the runtime's buffers for concurrent micro-batches of the largest shape are
    allocated then and not by the first burst of traffic (which would show as RSS growth under load)."""
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.engine import Engine
    from r3edge.serve.metrics import ServeMetrics
    from r3edge.serve.server import load_runtime_for

    cfg = ServeConfig(artifact=str(tiny_artifact), port=0, workers=workers)
    runtime = load_runtime_for(cfg)
    widths, lock = [], threading.Lock()
    # The first `workers` calls meet at a barrier before scoring: it opens only if they are all in flight
    # at once, however loaded the machine (a warm-up running them one after another breaks it).
    together = threading.Barrier(workers, timeout=60)
    run = runtime.label_logits

    def record(*args):
        with lock:
            widths.append(args[0].shape[1])
            first = len(widths) <= workers
        if first:
            together.wait()
        return run(*args)
    runtime.label_logits = record
    engine = Engine(runtime, ServeMetrics(), max_batch_tokens=512, max_batch_size=64, max_batch_wait_s=0.0,
                    max_queue_delay_s=2.0, max_concurrent_requests=8, max_candidates=100, overflow="truncate",
                    workers=workers)
    engine._warm_up()
    spec = runtime.scorer.spec
    longest = min(spec.max_total_tokens, runtime.scorer.fixed_tokens + spec.max_query_tokens + spec.max_doc_tokens)
    assert widths[:workers] == [longest] * workers, widths
    assert not together.broken
    assert engine.s_per_token > 0


def test_the_engine_reads_the_runtimes_batch_budget_unless_one_is_configured(tiny_artifact):
    """One home for the micro-batch limits: the runtime's own (default_batch_limits of the providers its
    session opened); the engine takes them when --max-batch-tokens / --max-batch-size are unset, and
    configured ones win."""
    from r3edge.core.runtime_loader import open_runtime
    from r3edge.core.scoring import (
        DEFAULT_MAX_BATCH_SIZE,
        DEFAULT_MAX_BATCH_TOKENS,
        GPU_MAX_BATCH_SIZE,
        GPU_MAX_BATCH_TOKENS,
        default_batch_limits,
    )
    from r3edge.serve.engine import Engine
    from r3edge.serve.metrics import ServeMetrics

    runtime = open_runtime(tiny_artifact, "fp32", threads=1)
    assert runtime.providers == ["CPUExecutionProvider"]
    assert (runtime.max_batch_tokens, runtime.max_batch_size) == (DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_BATCH_SIZE)

    def engine(budget, size=None):
        e = Engine(runtime, ServeMetrics(), max_batch_tokens=budget, max_batch_size=size, max_batch_wait_s=0.0,
                   max_queue_delay_s=1.0, max_concurrent_requests=8, max_candidates=10, overflow="truncate")
        return e.max_batch_tokens, e.max_batch_size

    assert engine(None) == (DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_BATCH_SIZE)
    runtime.max_batch_tokens, runtime.max_batch_size = default_batch_limits(["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert engine(None) == (GPU_MAX_BATCH_TOKENS, GPU_MAX_BATCH_SIZE)  # what a session on a GPU provider prefers
    assert engine(1000, 8) == (1000, 8)
    runtime.close()


def test_a_packed_runtimes_budget_counts_real_tokens_not_batch_times_longest(tiny_artifact, tmp_path):
    """A runtime whose graph removes padding itself (``packed``, the fp16-packed variant on a GPU) pays for
    its real tokens, so the engine fills a micro-batch up to the budget in real tokens; a padded runtime's
    budget counts batch x longest. Shown on a copy of the CPU artifact whose manifest lists its graph in
    ``packed_graphs`` (what the runtime reads the flag from): one request, a budget between the two counts,
    and the micro-batches the runtime is handed."""
    import json
    import shutil

    from r3edge.core.artifact import PACKED_GRAPHS
    from r3edge.core.runtime_loader import open_runtime
    from r3edge.serve.engine import Engine
    from r3edge.serve.metrics import ServeMetrics

    art = tmp_path / "artifact"
    shutil.copytree(tiny_artifact, art)
    manifest = json.loads((art / "manifest.json").read_text())
    docs = ["ok", "a short reply " * 3, "a longer reply that goes on " * 4, "the longest reply of them all " * 8]
    calls = []
    for packed in (False, True):
        manifest[PACKED_GRAPHS] = ["model.fp32.onnx"] if packed else []
        (art / "manifest.json").write_text(json.dumps(manifest))
        runtime = open_runtime(art, "fp32", threads=1)
        assert runtime.packed is packed
        lengths = [len(e.input_ids) for e in runtime.scorer.encode_batch([QUERY] * len(docs), docs)]
        budget = sum(lengths) + 1
        assert len(docs) * max(lengths) > budget  # padded, the four cannot share one micro-batch
        engine = Engine(runtime, ServeMetrics(), max_batch_tokens=budget, max_batch_size=64, max_batch_wait_s=0.0,
                        max_queue_delay_s=5.0, max_concurrent_requests=8, max_candidates=10, overflow="truncate",
                        workers=1)
        engine.start()
        seen = []
        run = runtime.label_logits
        runtime.label_logits = lambda ids, mask, run=run, seen=seen: seen.append(len(ids)) or run(ids, mask)
        try:
            scored = asyncio.run(engine.score(QUERY, docs))
        finally:
            engine.stop()
            runtime.close()
        assert len(scored.scores) == len(docs)
        calls.append(seen)
    padded, packed = calls
    assert len(padded) >= 2 and sum(padded) == len(docs)
    assert packed == [len(docs)]


def test_two_workers_by_default_and_never_more_than_the_cpus(tiny_artifact, monkeypatch):
    from r3edge.serve import loading
    from r3edge.serve.config import ServeConfig

    cfg = ServeConfig(artifact=str(tiny_artifact))
    for cpus, want in ((1, 1), (2, 2), (16, 2)):
        monkeypatch.setattr(loading, "usable_cores", lambda cpus=cpus: cpus)
        assert loading.workers_for(cfg) == want
    assert loading.workers_for(cfg.model_copy(update={"workers": 3})) == 3


def test_a_refused_request_costs_no_per_document_work(tiny_artifact):
    """Admission comes first: a request refused for load has none of its documents read and its
    per-document checks (``validate``) never run, so an overload burst is answered without touching
    the candidates; an admitted request has both."""
    from collections.abc import Sequence

    from r3edge.core.errors import Overloaded
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.engine import Engine
    from r3edge.serve.metrics import ServeMetrics
    from r3edge.serve.server import load_runtime_for

    class Docs(Sequence):
        reads = 0

        def __len__(self):
            return 3

        def __getitem__(self, i):
            if not 0 <= i < 3:
                raise IndexError(i)
            Docs.reads += 1
            return TEXTS[i]

    checks = []
    cfg = ServeConfig(artifact=str(tiny_artifact), port=0)
    engine = Engine(load_runtime_for(cfg), ServeMetrics(), max_batch_tokens=512, max_batch_size=8, max_batch_wait_s=0,
                    max_queue_delay_s=1.0, max_concurrent_requests=8, max_candidates=10, overflow="truncate")
    engine.start()
    try:
        engine._reserved_tokens = 10 * engine.token_rate  # ~10 s of work ahead of the next request
        with pytest.raises(Overloaded):
            asyncio.run(engine.score(QUERY, Docs(), validate=lambda: checks.append(1)))
        assert Docs.reads == 0 and not checks
        engine._reserved_tokens = 0
        scored = asyncio.run(engine.score(QUERY, Docs(), validate=lambda: checks.append(1)))
        assert Docs.reads == 3 and checks == [1] and len(scored.scores) == 3
    finally:
        engine.stop()


def test_overload_sheds_with_resource_exhausted(tiny_artifact):
    """Far more work than max_queue_delay_s can drain: refusals come at once with a push-back,
    admitted requests finish, every call is answered, and the server takes work again."""
    from r3edge.api import pb2
    from r3edge.api.client import RerankerClient, Retry
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    cfg = ServeConfig(artifact=str(tiny_artifact), port=0, metrics_port=0, max_queue_delay_s=0.2)
    with BackgroundServer(cfg) as srv, RerankerClient(srv.target, timeout=300, retry=Retry(1)) as c:
        c.wait_ready(60)
        req = pb2.RerankRequest(query=QUERY, top_k=10,
                                candidates=[pb2.Candidate(id=i, text=t) for i, t in candidates(400, long=True)])
        futures = [c.stub.Rerank.future(req, timeout=300) for _ in range(8)]
        codes = []
        for f in futures:
            try:
                f.result()
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                codes.append(exc.code())
                if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    assert "max_queue_delay_s=0.2" in exc.details()
                    assert int(dict(exc.trailing_metadata())["grpc-retry-pushback-ms"]) > 0
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes and grpc.StatusCode.OK in codes
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
        got = metric_values(srv.server.metrics_port)
        shed = codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert metric(got, "r3edge_shed_requests_total", reason="queue_delay") == shed
        assert metric(got, "r3edge_requests_total", method="Rerank", code="RESOURCE_EXHAUSTED") == shed
        assert metric(got, "r3edge_requests_total", method="Rerank", code="OK") == codes.count(grpc.StatusCode.OK)
        # admission is released: the server takes work again
        assert len(c.rerank(QUERY, candidates(5), top_k=3)) == 3


def test_client_retries_after_the_servers_push_back(tiny_artifact):
    """A refused call is retried by the client's gRPC retry policy after the server's push-back, and
    succeeds once the queue has room; the server counted the refusal. The async client agrees."""
    import asyncio

    from r3edge.api.client import AsyncRerankerClient, RerankerClient

    with slow_server(tiny_artifact, delay_s=0.3, max_queue_delay_s=0.5) as (srv, _, runtime, metrics):
        busy_client = RerankerClient(srv.target, timeout=300)
        busy = busy_client.stub.Rerank.future(rerank_request(10), timeout=300)  # ~3 s of work
        wait_for(lambda: runtime.pairs_run >= 3)  # the engine now plans with the slow rate
        with RerankerClient(srv.target, timeout=120) as retrying:
            got = retrying.rerank(QUERY, candidates(2), top_k=0)
        assert len(got) == 2 and len(busy.result(300).results) == 10
        values = metrics()
        assert metric(values, "r3edge_shed_requests_total", reason="queue_delay") >= 1
        assert metric(values, "r3edge_requests_total", method="Rerank", code="OK") == 2
        busy_client.close()
        runtime.armed = False

        async def both():
            async with AsyncRerankerClient(srv.target, timeout=120) as c:
                await c.wait_ready(30)
                return await c.rerank(QUERY, candidates(5), top_k=3)

        with RerankerClient(srv.target, timeout=120) as c:
            assert asyncio.run(both()) == c.rerank(QUERY, candidates(5), top_k=3)


def test_drain_keeps_serving_through_the_prestop_delay(tiny_artifact):
    """On stop: health says NOT_SERVING at once, requests are still answered during the pre-stop delay,
    then the server closes."""
    from r3edge.api.client import RerankerClient
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    cfg = ServeConfig(artifact=str(tiny_artifact), port=0)
    srv = BackgroundServer(cfg).start()
    stopper = threading.Thread(target=srv.stop, kwargs={"grace": 5.0, "prestop": 3.0})
    with RerankerClient(srv.target, timeout=60) as c:
        c.wait_ready(60)
        stopper.start()
        wait_for(lambda: not c.is_serving(), timeout=10)
        assert not c.is_serving()
        assert len(c.rerank(QUERY, candidates(3), top_k=0)) == 3, "answered during the pre-stop delay"
        stopper.join(60)
        with pytest.raises(grpc.RpcError):
            c.rerank(QUERY, candidates(3), top_k=0, timeout=5)


def test_config_flags_env_and_file(tmp_path):
    from r3edge.core.errors import InvalidInput, R3EdgeError
    from r3edge.serve.config import ServeConfig

    yml = tmp_path / "r3edge.serve.yaml"
    yml.write_text("port: 6000\nmax_candidates: 50\nmax_batch_size: 8\n")
    env = {"R3EDGE_MAX_CANDIDATES": "200", "R3EDGE_ARTIFACT": "/a", "R3EDGE_PORT": "7000"}
    cfg = ServeConfig.resolve({"port": 8000, "threads": None}, env=env, config_file=yml)
    assert (cfg.artifact, cfg.port, cfg.max_candidates, cfg.max_batch_size) == ("/a", 8000, 200, 8)
    assert ServeConfig.resolve({"artifact": "/b"}, env={}).max_candidates == 1000
    with pytest.raises(R3EdgeError, match="max_queue_delay_s"):
        ServeConfig.resolve({"artifact": "/b"}, env={"R3EDGE_MAX_QUEUE_DELAY_S": "lots"})
    with pytest.raises(R3EdgeError, match="overflow"):
        ServeConfig.resolve({"artifact": "/b", "overflow": "shorten"}, env={})
    # the old name of the overflow setting, from a flag, the environment or the file: an error naming the new one
    yml.write_text("truncation: reject\n")
    for flags, env, file in (({"truncation": "reject"}, {}, None), ({}, {"R3EDGE_TRUNCATION": "reject"}, None),
                             ({}, {}, yml)):
        with pytest.raises(InvalidInput, match="now called 'overflow'") as err:
            ServeConfig.resolve({"artifact": "/b", **flags}, env=env, config_file=file)
        assert err.value.field == "overflow" and "R3EDGE_OVERFLOW" in err.value.fix


def test_cli_serve_subprocess_is_torch_free_and_stops_gracefully(tiny_artifact, sample_pairs_file, capsys):
    """The real `r3edge serve` process: no torch, SIGTERM drains and exits 0; `r3edge rerank` talks to it."""
    from r3edge.api.client import RerankerClient
    from r3edge.cli import main

    port = free_port()
    env = dict(os.environ, R3EDGE_MAX_CANDIDATES="500", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "r3edge.cli", "serve", str(tiny_artifact), "--port", str(port),
                             "--variant", "int8", "--grace-period-s", "2"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with RerankerClient(f"127.0.0.1:{port}") as c:
            c.wait_ready(120)
            info = c.model_info()
            assert info.torch_loaded is False
            assert info.variant == "int8" and info.limits.max_candidates == 500
            assert info.limits.max_batch_tokens == 512  # unset: the runtime's, a CPU session's (a GPU one's is larger)
            assert info.limits.overflow == "truncate"  # unset: the library's default
        assert main(["rerank", "--target", f"127.0.0.1:{port}", "--pairs", str(sample_pairs_file),
                     "--qid", "q2", "--top-k", "2"]) == 0
        out = capsys.readouterr().out
        assert "how to renew residence permit qatar" in out and out.count("\n") >= 5
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert f"serving {tiny_artifact} int8 on 127.0.0.1:{port}" in output


@pytest.mark.parametrize("command", ["serve", "rerank", "bench"])
def test_cli_help(command, capsys):
    from r3edge.cli import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert {"serve": "--max-queue-delay-s", "rerank": "--candidates", "bench": "--concurrency"}[command] in out
