"""The HTTP front door on a real server (127.0.0.1, free ports) with real clients: httpx, the
official cohere SDK, Prometheus' text parser; rankings checked against direct artifact scoring
and against gRPC ``Rerank`` on the same request."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

import httpx
import numpy as np
import pytest
from conftest import SAMPLE_QUERIES

from r3edge.core.errors import ErrorKind

slow = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier

TEXTS = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]
QUERY = SAMPLE_QUERIES[0]["query"]
TOKEN = "s3cret-token"


def docs(n: int) -> list[str]:
    return [f"{TEXTS[i % len(TEXTS)]} (post {i})" * (1 + i % 3) for i in range(n)]


def start_server(artifact, runtime=None, **settings):
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    cfg = ServeConfig(**{"artifact": str(artifact), "port": 0, "http_port": 0, "max_batch_tokens": 4096,
                         "max_batch_size": 32, **settings})
    return BackgroundServer(cfg, runtime=runtime).start()


def base_url(srv) -> str:
    return f"http://127.0.0.1:{srv.server.http_port}"


@pytest.fixture(scope="module")
def server(tiny_artifact):
    srv = start_server(tiny_artifact)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=base_url(server), timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def auth_server(tiny_artifact):
    srv = start_server(tiny_artifact, auth_token=TOKEN, max_message_mb=1)
    yield srv
    srv.stop()


def direct(runtime, query: str, texts: list[str], cfg) -> np.ndarray:
    """The artifact's own scores of the pairs, rescaled to [0, 1] by the label values."""
    from r3edge.core.scoring import score_pairs

    logits = score_pairs(runtime.scorer, runtime.label_logits, [query] * len(texts), texts,
                         max_batch_tokens=cfg.max_batch_tokens, max_batch_size=cfg.max_batch_size)
    _, scores = runtime.scorer.relevance(logits)
    values = runtime.scorer.spec.label_values
    return (scores - min(values)) / (max(values) - min(values))


def ranked(scores: np.ndarray) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def metric(text: str, name: str, **labels) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def wait_for(condition, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not condition() and time.monotonic() < end:
        time.sleep(0.05)


def test_every_error_kind_has_an_http_status():
    from r3edge.serve.http_api import HTTP_STATUS_OF

    assert set(HTTP_STATUS_OF) == set(ErrorKind)
    assert HTTP_STATUS_OF[ErrorKind.INVALID_INPUT] == 400 and HTTP_STATUS_OF[ErrorKind.OVERLOADED] == 429
    assert HTTP_STATUS_OF[ErrorKind.UNAVAILABLE] == 503 and HTTP_STATUS_OF[ErrorKind.DEADLINE] == 504


# -- ranking -----------------------------------------------------------------------------------------
@slow
@pytest.mark.parametrize("version", ["1", "2"])
def test_ranking_equals_direct_scoring_and_grpc(server, http, version):
    from r3edge.api.client import RerankerClient

    texts = docs(40)
    resp = http.post(f"/v{version}/rerank", json={"model": "rerank-v3.5", "query": QUERY, "documents": texts})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["meta"]["api_version"] == {"version": version} and body["meta"]["billed_units"] == {"search_units": 1}
    assert body["model"] == server.server.service.model_name and body["id"]
    want = direct(server.runtime, QUERY, texts, server.cfg)
    got = body["results"]
    assert [r["index"] for r in got] == ranked(want)
    np.testing.assert_allclose([r["relevance_score"] for r in got], want[ranked(want)], atol=1e-5)
    assert all(0.0 <= r["relevance_score"] <= 1.0 for r in got) and "document" not in got[0]
    with RerankerClient(server.target, timeout=120) as grpc_client:
        grpc_resp = grpc_client.rerank_raw(QUERY, [(f"c{i}", t) for i, t in enumerate(texts)], top_k=0)
    assert [r.index for r in grpc_resp.results] == [r["index"] for r in got]
    assert any("rerank-v3.5" in w for w in body["meta"]["warnings"])  # another model's name is served, and said


@slow
def test_v1_documents_as_strings_and_text_objects(server, http):
    texts = docs(6)
    mixed = [t if i % 2 else {"text": t} for i, t in enumerate(texts)]
    a = http.post("/v1/rerank", json={"query": QUERY, "documents": texts}).json()["results"]
    b = http.post("/v1/rerank", json={"query": QUERY, "documents": mixed}).json()["results"]
    assert [r["index"] for r in a] == [r["index"] for r in b] == ranked(direct(server.runtime, QUERY, texts, server.cfg))
    np.testing.assert_allclose([r["relevance_score"] for r in a], [r["relevance_score"] for r in b], atol=1e-6)


@slow
def test_top_n_and_return_documents(http):
    texts = docs(10)
    full = http.post("/v1/rerank", json={"query": QUERY, "documents": texts}).json()["results"]
    top = http.post("/v1/rerank", json={"query": QUERY, "documents": texts, "top_n": 3,
                                        "return_documents": True}).json()["results"]
    assert [r["index"] for r in top] == [r["index"] for r in full[:3]]
    assert [r["document"]["text"] for r in top] == [texts[r["index"]] for r in top]
    v2 = http.post("/v2/rerank", json={"query": QUERY, "documents": texts, "top_n": 3}).json()["results"]
    assert [r["index"] for r in v2] == [r["index"] for r in top] and all("document" not in r for r in v2)
    for top_n in (0, None, 50):  # 0 and null: every document (as vLLM); more than sent: every document
        got = http.post("/v2/rerank", json={"query": QUERY, "documents": texts, "top_n": top_n}).json()["results"]
        assert len(got) == 10


@slow
def test_empty_documents_are_scored(server, http):
    texts = ["", "   ", TEXTS[0]]
    resp = http.post("/v2/rerank", json={"query": QUERY, "documents": texts})
    assert resp.status_code == 200, resp.text
    got = {r["index"]: r["relevance_score"] for r in resp.json()["results"]}
    want = direct(server.runtime, QUERY, texts, server.cfg)
    np.testing.assert_allclose([got[i] for i in range(3)], want, atol=1e-5)


@slow
def test_truncation_is_reported(server, http):
    texts = ["a short post", "word " * 2000, "another short one"]
    resp = http.post("/v2/rerank", json={"query": QUERY, "documents": texts, "max_tokens_per_doc": 4096})
    body = resp.json()
    assert resp.status_code == 200, resp.text
    assert body["meta"]["truncated_documents"] == [1] and body["meta"]["query_truncated"] is False
    assert {r["index"]: r["truncated"] for r in body["results"]} == {0: False, 1: True, 2: False}
    warnings = " ".join(body["meta"]["warnings"])
    assert "1 document(s) were cut" in warnings and "max_tokens_per_doc=4096 is not applied" in warnings
    long_query = http.post("/v1/rerank", json={"query": "why " * 200, "documents": ["x"]}).json()
    assert long_query["meta"]["query_truncated"] is True and long_query["meta"]["truncated_documents"] == []
    assert any("max_query_tokens" in w for w in long_query["meta"]["warnings"])


@slow
def test_unused_cohere_fields_are_ignored_and_named(http):
    resp = http.post("/v1/rerank", json={"query": QUERY, "documents": ["x", "y"], "rank_fields": ["text"],
                                         "max_chunks_per_doc": 10})
    assert resp.status_code == 200
    assert "ignored request fields: max_chunks_per_doc, rank_fields" in " ".join(resp.json()["meta"]["warnings"])


# -- bad input ---------------------------------------------------------------------------------------
@slow
@pytest.mark.parametrize("version,body,field,needle", [
    ("2", b"{not json", "body", "not JSON"),
    ("2", b"[1, 2]", "body", "not an object"),
    ("2", {"documents": ["x"]}, "query", "query: missing"),
    ("2", {"query": 7, "documents": ["x"]}, "query", "valid string"),
    ("2", {"query": "   ", "documents": ["x"]}, "query", "query is empty"),
    ("2", {"query": QUERY}, "documents", "documents: missing"),
    ("2", {"query": QUERY, "documents": "x"}, "documents", "valid list"),
    ("2", {"query": QUERY, "documents": []}, "documents", "documents is empty"),
    ("2", {"query": QUERY, "documents": ["x", 3]}, "documents[1]", "valid string"),
    ("2", {"query": QUERY, "documents": ["x", {"text": "y"}]}, "documents[1]", "valid string"),
    ("1", {"query": QUERY, "documents": ["x", {"txt": "y"}]}, "documents[1]", "valid string"),
    ("2", {"query": QUERY, "documents": ["x"] * 1001}, "documents", "max_candidates=1000"),
    ("1", {"query": QUERY, "documents": ["x"], "top_n": -1}, "top_n", "greater than or equal to 0"),
    ("1", {"query": QUERY, "documents": ["x"], "top_n": "three"}, "top_n", "valid integer"),
    ("1", {"query": QUERY, "documents": ["x"], "return_documents": "maybe"}, "return_documents", "valid boolean"),
    ("2", {"query": QUERY, "documents": ["x"], "max_tokens_per_doc": 0}, "max_tokens_per_doc", "greater than"),
    ("2", b'{"query": "q\\ud800", "documents": ["x"]}', "query", "not valid Unicode"),
    ("1", b'{"query": "q", "documents": ["x", {"text": "\\udfff"}]}', "documents[1]", "not valid Unicode"),
    ("2", b'{"query": "q", "documents": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "body", "nested too deeply"),
], ids=["bad-json", "array", "no-query", "int-query", "blank-query", "no-documents", "documents-str", "documents-empty",
        "doc-int", "v2-doc-object", "v1-doc-no-text", "too-many", "neg-top-n", "str-top-n", "bad-bool", "zero-max-tokens",
        "lone-surrogate-query", "lone-surrogate-doc", "deep-nesting"])
def test_bad_requests_are_400_naming_the_field(http, version, body, field, needle):
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    resp = http.post(f"/v{version}/rerank", **kw)
    assert resp.status_code == 400, resp.text
    err = resp.json()
    assert err["field"] == field and err["code"] == "invalid_input"
    assert needle in err["message"] and "; fix: " in err["message"]


@slow
def test_unknown_path_and_method_answer_json(http):
    resp = http.get("/v2/rerank")
    assert resp.status_code == 405 and resp.json()["code"] == "not_found"
    resp = http.post("/v3/rerank", json={})
    assert resp.status_code == 404 and "POST /v2/rerank" in resp.json()["message"]


# -- metrics, request ids ----------------------------------------------------------------------------
@slow
def test_metrics_count_http_requests_and_echo_request_id(http):
    before = http.get("/metrics").text
    ok = http.post("/v2/rerank", json={"query": QUERY, "documents": docs(5)}, headers={"x-request-id": "abc-123"})
    bad = http.post("/v2/rerank", json={"query": QUERY, "documents": []})
    assert ok.headers["x-request-id"] == "abc-123" and bad.headers["x-request-id"]  # a fresh one when none was sent
    after = http.get("/metrics")
    assert after.status_code == 200 and after.headers["content-type"].startswith("text/plain")
    for name, code, delta in (("r3edge_requests_total", "200", 1), ("r3edge_request_pairs_total", "200", 5),
                              ("r3edge_requests_total", "400", 1)):
        assert (metric(after.text, name, method="http_v2_rerank", code=code)
                - metric(before, name, method="http_v2_rerank", code=code)) == delta


# -- auth and body size ------------------------------------------------------------------------------
@slow
def test_bearer_token_guards_everything_but_health(auth_server):
    body = {"query": QUERY, "documents": docs(3)}
    with httpx.Client(base_url=base_url(auth_server), timeout=120) as c:
        before = c.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"}).text
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}):
            resp = c.post("/v2/rerank", json=body, headers=headers)
            assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"
            assert resp.json()["code"] == "unauthenticated"
            assert c.get("/metrics", headers=headers).status_code == 401
        good = {"authorization": f"Bearer {TOKEN}"}
        assert c.post("/v1/rerank", json=body, headers=good).status_code == 200
        assert c.get("/health").json() == {"status": "SERVING"}
        after = c.get("/metrics", headers=good).text
        assert (metric(after, "r3edge_requests_total", method="http_v2_rerank", code="401")
                - metric(before, "r3edge_requests_total", method="http_v2_rerank", code="401")) == 3


@slow
def test_bodies_over_max_message_mb_are_413(auth_server):
    big = json.dumps({"query": QUERY, "documents": ["word " * 1000] * 300}).encode()  # ~1.5 MB > 1 MiB
    good = {"authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base_url(auth_server), timeout=120, headers=good) as c:
        resp = c.post("/v2/rerank", content=big)
        assert resp.status_code == 413 and resp.json()["field"] == "body", resp.text
        # no Content-Length (chunked): refused while streaming in
        resp = c.post("/v2/rerank", content=(big[i:i + 65536] for i in range(0, len(big), 65536)))
        assert resp.status_code == 413 and "max_message_mb=1" in resp.json()["message"]
        assert c.post("/v2/rerank", json={"query": QUERY, "documents": ["ok"]}).status_code == 200


# -- TLS and mutual TLS (the same PEM files as the gRPC door) ----------------------------------------
@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    trustme = pytest.importorskip("trustme")
    d = tmp_path_factory.mktemp("http-pki")
    ca = trustme.CA()
    files = {"ca": [ca.cert_pem]}
    for who, name in (("server", "127.0.0.1"), ("client", "client.r3edge.test")):
        cert = ca.issue_cert(name)
        files |= {who: cert.cert_chain_pems, f"{who}_key": [cert.private_key_pem]}
    out = {}
    for name, blobs in files.items():
        out[name] = d / f"{name}.pem"
        out[name].write_bytes(b"".join(b.bytes() for b in blobs))
    return out


def tls_context(pki, client_cert: bool = False):
    import ssl

    ctx = ssl.create_default_context(cafile=str(pki["ca"]))
    if client_cert:
        ctx.load_cert_chain(str(pki["client"]), str(pki["client_key"]))
    return ctx


@slow
def test_https_serves_trusting_clients_and_the_cohere_sdk(tiny_artifact, pki):
    import cohere

    srv = start_server(tiny_artifact, tls_cert=str(pki["server"]), tls_key=str(pki["server_key"]))
    try:
        url = f"https://127.0.0.1:{srv.server.http_port}"
        with httpx.Client(verify=tls_context(pki), timeout=120) as c:
            assert c.get(url + "/health").json() == {"status": "SERVING"}
            sdk = cohere.ClientV2(api_key="x", base_url=url, httpx_client=c)
            assert len(sdk.rerank(model="m", query=QUERY, documents=docs(5), top_n=2).results) == 2
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the server's CA
            httpx.get(url + "/health", timeout=60)
        with pytest.raises(httpx.TransportError):  # plain HTTP on the TLS port
            httpx.get(f"http://127.0.0.1:{srv.server.http_port}/health", timeout=60)
    finally:
        srv.stop()


@slow
def test_mutual_tls_needs_a_client_certificate(tiny_artifact, pki):
    srv = start_server(tiny_artifact, tls_cert=str(pki["server"]), tls_key=str(pki["server_key"]),
                       tls_client_ca=str(pki["ca"]))
    try:
        url = f"https://127.0.0.1:{srv.server.http_port}/v2/rerank"
        body = {"query": QUERY, "documents": docs(3)}
        with pytest.raises(httpx.TransportError):
            httpx.post(url, json=body, verify=tls_context(pki), timeout=60)
        resp = httpx.post(url, json=body, verify=tls_context(pki, client_cert=True), timeout=60)
        assert resp.status_code == 200 and len(resp.json()["results"]) == 3
    finally:
        srv.stop()


# -- the official cohere SDK -------------------------------------------------------------------------
@slow
def test_cohere_sdk_v2_and_v1(server):
    import cohere

    texts = docs(12)
    want = direct(server.runtime, QUERY, texts, server.cfg)
    order = ranked(want)[:3]
    client = cohere.ClientV2(api_key="x", base_url=base_url(server))
    resp = client.rerank(model="rerank-v3.5", query=QUERY, documents=texts, top_n=3)
    assert [r.index for r in resp.results] == order
    np.testing.assert_allclose([r.relevance_score for r in resp.results], want[order], atol=1e-5)
    assert resp.meta.api_version.version == "2"
    v1 = cohere.Client(api_key="x", base_url=base_url(server)).rerank(
        model="rerank-english-v3.0", query=QUERY, documents=[{"text": t} for t in texts], top_n=3, return_documents=True)
    assert [r.index for r in v1.results] == order and [r.document.text for r in v1.results] == [texts[i] for i in order]


@slow
def test_cohere_sdk_sends_its_api_key_as_the_bearer_token(auth_server):
    import cohere

    ok = cohere.ClientV2(api_key=TOKEN, base_url=base_url(auth_server)).rerank(
        model="m", query=QUERY, documents=docs(4), top_n=2)
    assert len(ok.results) == 2
    with pytest.raises(cohere.errors.UnauthorizedError):
        cohere.ClientV2(api_key="wrong", base_url=base_url(auth_server)).rerank(model="m", query=QUERY, documents=["x"])


# -- overload, cancellation, drain (a slow real runtime) --------------------------------------------
class SlowRuntime:
    """The artifact's real ONNX runtime, sleeping ``delay_s`` before each micro-batch; counts pairs run."""

    def __init__(self, runtime, delay_s: float):
        self._runtime, self.delay_s = runtime, delay_s
        self.pairs_run = 0
        self._count = threading.Lock()  # the server's workers run micro-batches concurrently
        self.started = threading.Event()
        self.prefix = None  # one pair per micro-batch through the single graph

    def label_logits(self, ids, mask):
        self.started.set()
        time.sleep(self.delay_s)
        out = self._runtime.label_logits(ids, mask)
        with self._count:
            self.pairs_run += len(ids)
        return out

    def __getattr__(self, name):
        return getattr(self._runtime, name)


@contextlib.contextmanager
def slow_server(artifact, delay_s: float, **settings):
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import load_runtime_for

    runtime = SlowRuntime(load_runtime_for(ServeConfig(artifact=str(artifact))), delay_s)
    srv = start_server(artifact, runtime=runtime, max_batch_size=1, **settings)
    runtime.started.clear()  # the engine's warm-up ran it
    runtime.pairs_run = 0
    try:
        yield srv, runtime
    finally:
        srv.stop()


@slow
def test_overload_is_429_with_retry_after(tiny_artifact):
    with slow_server(tiny_artifact, 0.2, max_queue_delay_s=0.001) as (srv, runtime):
        body = {"query": QUERY, "documents": docs(8)}

        async def burst():
            async with httpx.AsyncClient(base_url=base_url(srv), timeout=120) as c:
                first = asyncio.create_task(c.post("/v2/rerank", json=body))
                assert await asyncio.to_thread(runtime.started.wait, 60)  # its pairs hold the queue now
                rest = await asyncio.gather(*(c.post("/v2/rerank", json=body) for _ in range(8)))
                return await first, rest

        first, rest = asyncio.run(burst())
        assert first.status_code == 200
        for resp in rest:
            assert resp.status_code == 429, resp.text
            assert resp.json()["code"] == "overloaded" and "; fix: " in resp.json()["message"]
            assert int(resp.headers["retry-after"]) >= 1 and int(resp.headers["retry-after-ms"]) >= 1
        text = httpx.get(base_url(srv) + "/metrics").text
        assert metric(text, "r3edge_requests_total", method="http_v2_rerank", code="429") == 8
        assert metric(text, "r3edge_shed_requests_total") == 8


@slow
def test_client_disconnect_drops_its_queued_pairs(tiny_artifact):
    with slow_server(tiny_artifact, 0.3) as (srv, runtime):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(base_url(srv) + "/v2/rerank", json={"query": QUERY, "documents": docs(30)}, timeout=1.5)

        def dropped() -> float:
            return metric(httpx.get(base_url(srv) + "/metrics").text, "r3edge_dropped_pairs_total", reason="cancelled")

        wait_for(lambda: dropped() > 0)
        # a micro-batch already running when the client left still finishes (its pairs are neither run nor
        # dropped until then): wait for it before counting, so a busy box cannot catch it in flight
        wait_for(lambda: runtime.pairs_run + dropped() >= 30, timeout=15)
        text = httpx.get(base_url(srv) + "/metrics").text
        assert metric(text, "r3edge_dropped_requests_total", reason="cancelled") == 1
        assert metric(text, "r3edge_requests_total", method="http_v2_rerank", code="499") == 1
        assert runtime.pairs_run + dropped() == 30  # every pair either ran or left the queue unrun


@slow
def test_health_turns_not_serving_during_the_prestop_delay(tiny_artifact):
    srv = start_server(tiny_artifact, prestop_delay_s=3.0)
    url = base_url(srv)
    assert httpx.get(url + "/health").status_code == 200
    stopper = threading.Thread(target=srv.stop, kwargs={"prestop": 3.0})
    stopper.start()
    try:
        wait_for(lambda: httpx.get(url + "/health").status_code == 503, timeout=10)
        resp = httpx.get(url + "/health")
        assert resp.status_code == 503 and resp.json() == {"status": "NOT_SERVING"}
        # the pre-stop delay is normal service: load balancers stop routing, stragglers are answered
        assert httpx.post(url + "/v2/rerank", json={"query": QUERY, "documents": ["x"]}, timeout=60).status_code == 200
    finally:
        stopper.join(60)


# -- any input ---------------------------------------------------------------------------------------
def _fuzz_strategies():
    from hypothesis import strategies as st

    # hard strings (a lone surrogate, which json.dumps spells as a \u escape, as a client may; NUL; a
    # document far over its budget; the template's own special tokens; bidi marks) or any text
    hard = st.sampled_from(["", " ", "\x00", "\ud800", "x\udfffy", "word " * 600, "<|im_end|>", "\u202e\ufeff"])
    text = hard | st.text(st.characters(codec=None, exclude_categories=()), max_size=60)
    leaf = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | text
    value = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                         max_leaves=6)
    options = {"top_n": st.integers(-2, 15) | st.none() | value, "return_documents": st.booleans() | value,
               "model": text | st.none(), "max_tokens_per_doc": st.integers(-1, 600) | value, "priority": value}
    well_formed = st.fixed_dictionaries({"query": text, "documents": st.lists(text | st.fixed_dictionaries({"text": text}),
                                                                               min_size=1, max_size=12)}, optional=options)
    loose = st.fixed_dictionaries({}, optional={"query": text | value, "documents": st.lists(value, max_size=4) | value,
                                                **options})
    body = (well_formed | loose | value).map(lambda d: json.dumps(d).encode()) | st.binary(max_size=200)
    return st.sampled_from(["1", "2"]), body


@slow
def test_any_body_is_answered_200_or_400_naming_the_field(server, http):
    from hypothesis import HealthCheck, given, settings

    versions, bodies = _fuzz_strategies()

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(version=versions, body=bodies)
    def check(version, body):
        resp = http.post(f"/v{version}/rerank", content=body)
        assert resp.status_code in (200, 400), resp.text
        out = resp.json()
        if resp.status_code == 400:
            assert out["code"] == "invalid_input" and out["field"] and "; fix: " in out["message"]
            return
        sent = json.loads(body)
        n, top_n = len(sent["documents"]), sent.get("top_n") or 0
        assert len(out["results"]) == (min(top_n, n) if top_n else n)
        scores = [r["relevance_score"] for r in out["results"]]
        assert scores == sorted(scores, reverse=True) and all(0.0 <= x <= 1.0 for x in scores)
        assert len({r["index"] for r in out["results"]}) == len(scores) <= n

    check()


@slow
def test_503_while_the_model_loads(tiny_artifact):
    """The HTTP port is up before the engine: /health says NOT_SERVING and a rerank is told to retry."""
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer, load_runtime_for

    runtime = SlowRuntime(load_runtime_for(ServeConfig(artifact=str(tiny_artifact))), 1.5)  # warm-up: 4.5 s
    srv = BackgroundServer(ServeConfig(artifact=str(tiny_artifact), port=0, http_port=0, max_batch_size=1),
                           runtime=runtime)
    starter = threading.Thread(target=srv.start)
    starter.start()
    try:
        wait_for(lambda: srv.server is not None and srv.server.http_port is not None, timeout=60)
        url = base_url(srv)
        assert runtime.started.wait(60) and srv.server.engine is None  # still warming up
        health = httpx.get(url + "/health", timeout=60)
        assert health.status_code == 503 and health.json() == {"status": "NOT_SERVING"}
        resp = httpx.post(url + "/v2/rerank", json={"query": QUERY, "documents": ["x"]}, timeout=60)
        assert resp.status_code == 503 and resp.json()["code"] == "unavailable", resp.text
        assert "GET /health" in resp.json()["message"]
        starter.join(120)
        assert httpx.get(url + "/health", timeout=60).status_code == 200
    finally:
        starter.join(120)
        srv.stop()
