"""The gRPC server on a real ONNX artifact: API, validation, load shedding, no torch, CLI."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

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

    cfg = ServeConfig(artifact=str(tiny_artifact), port=free_port(), max_batch_tokens=4096, max_batch_size=32)
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
        (QUERY, [("a", "x"), ("b", "y"), ("c", "z"), ("d", " ")], 10, "candidates[3].text is empty"),
        (QUERY, [("a", "x")], -1, "top_k"),
        ("why " * 200, [("a", "x")], 10, "max_query_tokens"),
    ],
    ids=["empty-query", "no-candidates", "too-many", "empty-id", "dup-id", "empty-text", "neg-topk", "long-query"],
)
def test_rerank_validation(client, query, cands, top_k, needle):
    with pytest.raises(grpc.RpcError) as err:
        client.rerank_raw(query, cands, top_k=top_k)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in err.value.details()


def test_score_pairs_validation(client):
    with pytest.raises(grpc.RpcError) as err:
        client.score_pairs(QUERY, ["fine", ""])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "documents[1] is empty" in err.value.details()


class SlowRuntime:
    """The artifact's real ONNX runtime, sleeping ``delay_s`` before each micro-batch so that a request
    is still being scored when its deadline passes or its client cancels; counts the pairs it ran."""

    def __init__(self, runtime, delay_s: float):
        self._runtime, self.delay_s = runtime, delay_s
        self.pairs_run = 0
        self.started = threading.Event()  # the first micro-batch reached the runtime
        runner = getattr(runtime, "prefix", None)
        self.prefix = None if runner is None else SimpleNamespace(prefix=runner.prefix,
                                                                  candidates=self._slow(runner.candidates))
        self.label_logits = self._slow(runtime.label_logits)

    def _slow(self, fn):
        def run(*args):
            self.started.set()
            time.sleep(self.delay_s)
            out = fn(*args)
            self.pairs_run += len(args[-1])
            return out
        return run

    def __getattr__(self, name):
        return getattr(self._runtime, name)


@contextlib.contextmanager
def slow_server(artifact, delay_s: float = 1.0, **settings):
    """A real server on a free port whose runtime is a :class:`SlowRuntime`; one pair per micro-batch."""
    from r3edge.api.client import RerankerClient
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer, load_runtime_for

    cfg = ServeConfig(**{"artifact": str(artifact), "port": free_port(), "max_batch_size": 1, **settings})
    runtime = SlowRuntime(load_runtime_for(cfg), delay_s)
    with BackgroundServer(cfg, runtime=runtime) as srv, RerankerClient(srv.target, timeout=300) as c:
        c.wait_ready(120)
        yield srv, c, runtime, srv.server.service.drops


def wait_for(condition, timeout: float = 120.0) -> None:
    """Poll until ``condition()`` holds (generous: the box may be loaded); the caller asserts after."""
    end = time.monotonic() + timeout
    while not condition() and time.monotonic() < end:
        time.sleep(0.05)


def rerank_request(n: int):
    from r3edge.api import pb2

    return pb2.RerankRequest(query=QUERY, top_k=0, candidates=[pb2.Candidate(id=i, text=t) for i, t in candidates(n)])


def test_expired_deadline_is_reported_and_server_stays_healthy(tiny_artifact):
    """The deadline passes on the server while it scores: it stops between micro-batches, drops the
    rest and says DEADLINE_EXCEEDED; the slot is freed and the next request is scored."""
    n = 20  # 20 micro-batches of 1 s: the 5 s deadline passes well before the last one
    with slow_server(tiny_artifact, max_concurrent_requests=1) as (_, c, runtime, drops):
        with pytest.raises(grpc.RpcError) as err:
            c.stub.Rerank(rerank_request(n), timeout=5.0)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_for(lambda: drops.requests["deadline"] or runtime.pairs_run == n)
        got = drops.snapshot()
        assert runtime.started.is_set(), "the server began scoring before the deadline"
        assert got["requests"] == {"cancelled": 0, "deadline": 1}, (got, runtime.pairs_run)
        assert got["queued_requests"]["deadline"] == 0, "dropped while scoring, not while queued"
        assert 0 < got["pairs"]["deadline"] == n - runtime.pairs_run
        assert got["micro_batches"]["deadline"] == n - runtime.pairs_run  # one pair per micro-batch
        assert c.is_serving() and len(c.rerank(QUERY, candidates(2), top_k=0)) == 2
        assert drops.snapshot() == got, "a request within its deadline drops nothing"


def test_request_whose_deadline_passes_in_the_queue_is_never_scored(tiny_artifact):
    """Behind a busy slot, a request whose deadline passes is dropped before any micro-batch runs."""
    busy_n, late_n = 8, 3
    with slow_server(tiny_artifact, max_concurrent_requests=1, max_queued_requests=4) as (_, c, runtime, drops):
        busy = c.stub.Rerank.future(rerank_request(busy_n), timeout=300)
        assert runtime.started.wait(120), "the busy request reached the runtime"
        with pytest.raises(grpc.RpcError) as err:
            c.stub.Rerank(rerank_request(late_n), timeout=2.0)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert len(busy.result(300).results) == busy_n
        wait_for(lambda: drops.requests["deadline"])
        got = drops.snapshot()
        assert got["requests"] == got["queued_requests"] == {"cancelled": 0, "deadline": 1}, got
        assert got["pairs"]["deadline"] == late_n and got["micro_batches"]["deadline"] == 0, got
        assert runtime.pairs_run == busy_n, "none of the expired request's pairs reached the runtime"


def test_cancelled_request_stops_scoring_and_frees_its_slot(tiny_artifact):
    """A client cancel stops the server between micro-batches; the rest is never run and the slot is freed."""
    n = 20
    with slow_server(tiny_artifact, max_concurrent_requests=1, max_queued_requests=1) as (_, c, runtime, drops):
        fut = c.stub.Rerank.future(rerank_request(n), timeout=300)
        assert runtime.started.wait(120), "the request reached the runtime"
        assert fut.cancel()
        wait_for(lambda: drops.requests["cancelled"] or runtime.pairs_run == n)
        got = drops.snapshot()
        assert got["requests"] == {"cancelled": 1, "deadline": 0}, (got, runtime.pairs_run)
        assert got["queued_requests"]["cancelled"] == 0
        assert 0 < got["pairs"]["cancelled"] == n - runtime.pairs_run
        assert got["micro_batches"]["cancelled"] == n - runtime.pairs_run
        assert len(c.rerank(QUERY, candidates(2), top_k=0, timeout=120)) == 2


def test_timing_tokenize_ms_is_text_to_ids_only(tiny_artifact):
    """tokenize_ms is score_pairs' text-to-ids time: batching and collation count in total_ms only."""
    from r3edge.core.scoring import Scorer

    collate_s = 1.0

    class SlowCollate(Scorer):  # the same scorer, whose collation takes a known second per micro-batch
        def collate_ids(self, rows):
            time.sleep(collate_s)
            return super().collate_ids(rows)

    with slow_server(tiny_artifact, delay_s=0.0) as (srv, c, runtime, _):
        real = runtime.scorer
        runtime.scorer = SlowCollate(real.spec, real.tokenizer)
        t = c.rerank_raw(QUERY, candidates(3), top_k=0).timing
    assert 0 < t.tokenize_ms and 0 < t.inference_ms
    # three micro-batches, each collated in >= 1 s: counted in total_ms, in neither part
    assert t.total_ms - t.tokenize_ms - t.inference_ms >= 3 * collate_s * 1e3, t


def test_overload_sheds_with_resource_exhausted(tiny_artifact):
    from r3edge.api import pb2
    from r3edge.api.client import RerankerClient
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    cfg = ServeConfig(artifact=str(tiny_artifact), port=0, max_concurrent_requests=1, max_queued_requests=0)
    with BackgroundServer(cfg) as srv, RerankerClient(srv.target, timeout=300) as c:
        c.wait_ready(60)
        req = pb2.RerankRequest(query=QUERY, top_k=10,
                                candidates=[pb2.Candidate(id=i, text=t) for i, t in candidates(400, long=True)])
        futures = [c.stub.Rerank.future(req, timeout=300) for _ in range(5)]
        codes = []
        for f in futures:
            try:
                f.result()
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                codes.append(exc.code())
                if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    assert "max_concurrent_requests=1" in exc.details()
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes and grpc.StatusCode.OK in codes
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
        # the admission count is released: the server takes work again
        assert len(c.rerank(QUERY, candidates(5), top_k=3)) == 3


def test_config_flags_env_and_file(tmp_path):
    from r3edge.core.errors import R3EdgeError
    from r3edge.serve.config import ServeConfig

    yml = tmp_path / "r3edge.serve.yaml"
    yml.write_text("port: 6000\nmax_candidates: 50\nmax_batch_size: 8\n")
    env = {"R3EDGE_MAX_CANDIDATES": "200", "R3EDGE_ARTIFACT": "/a", "R3EDGE_PORT": "7000"}
    cfg = ServeConfig.resolve({"port": 8000, "threads": None}, env=env, config_file=yml)
    assert (cfg.artifact, cfg.port, cfg.max_candidates, cfg.max_batch_size) == ("/a", 8000, 200, 8)
    assert ServeConfig.resolve({"artifact": "/b"}, env={}).max_candidates == 1000
    with pytest.raises(R3EdgeError, match="max_queued_requests"):
        ServeConfig.resolve({"artifact": "/b"}, env={"R3EDGE_MAX_QUEUED_REQUESTS": "lots"})


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
            assert info.limits.max_batch_tokens == 512  # unset: the CPU budget (a GPU provider would get 8192)
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
    assert {"serve": "--max-queued-requests", "rerank": "--candidates", "bench": "--concurrency"}[command] in out
