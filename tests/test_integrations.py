"""The re-rank stages of examples/integrations/ against a real server (127.0.0.1, free ports): LangChain's and
LlamaIndex's Cohere rerankers, unmodified, through the examples' own code and as scripts; each ranking must
equal the server's own ``/v2/rerank`` answer to the same request (order and scores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
from conftest import ROOT, SAMPLE_QUERIES, load_script

slow = pytest.mark.slow  # the tiny artifact is built with torch: see `make test-fast` for the torch-free tier

EXAMPLES = ROOT / "examples" / "integrations"
QUERY = SAMPLE_QUERIES[1]["query"]
TEXTS = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]
TOKEN = "integr4tion-token"
STAGES = ["langchain_cohere_rerank", "llamaindex_cohere_rerank"]


def example(name: str):
    """An example script imported from its file (examples/ is not a package)."""
    return load_script(EXAMPLES / f"{name}.py", f"r3edge_example_{name}")  # pydantic resolves its annotations there


def start_server(artifact, **settings):
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    return BackgroundServer(ServeConfig(artifact=str(artifact), port=0, http_port=0, **settings)).start()


def url(srv) -> str:
    return f"http://127.0.0.1:{srv.server.http_port}"


def served(srv, texts: list[str], top_n: int | None, token: str | None = None) -> list[tuple[int, float]]:
    """(index, relevance_score) of the server's own /v2/rerank answer, best first."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    resp = httpx.post(url(srv) + "/v2/rerank", json={"query": QUERY, "documents": texts, "top_n": top_n},
                      headers=headers, timeout=120)
    assert resp.status_code == 200, resp.text
    return [(r["index"], r["relevance_score"]) for r in resp.json()["results"]]


def ranking(stage: str, hits) -> list[tuple[int, float]]:
    """(position, score) of what a stage returned, in its order."""
    if stage == "langchain_cohere_rerank":
        return [(d.metadata["position"], d.metadata["relevance_score"]) for d in hits]
    return [(h.node.metadata["position"], h.score) for h in hits]


def assert_same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    assert [i for i, _ in got] == [i for i, _ in want]
    # one request scored twice in the same micro-batches: equal up to float printing
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-9)


@pytest.fixture(scope="module")
def server(tiny_artifact):
    srv = start_server(tiny_artifact)
    yield srv
    srv.stop()


@slow
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("top_n", [2, len(TEXTS)])
def test_stage_ranks_as_the_server_does(server, stage, top_n):
    want = served(server, TEXTS, top_n)
    assert len({s for _, s in want}) > 1, "the tiny student scores every text alike: the order would prove nothing"
    hits = example(stage).rerank(url(server), QUERY, TEXTS, top_n=top_n)
    assert_same(ranking(stage, hits), want)
    text_of = (lambda h: h.page_content) if stage == "langchain_cohere_rerank" else (lambda h: h.node.get_content())
    assert [text_of(h) for h in hits] == [TEXTS[i] for i, _ in want]


@slow
@pytest.mark.parametrize("stage", STAGES)
def test_example_script_prints_the_servers_ranking(server, stage):
    done = subprocess.run([sys.executable, str(EXAMPLES / f"{stage}.py"), url(server), QUERY, *TEXTS, "--top-n", "3",
                           "--json"], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "R3EDGE_AUTH_TOKEN"})
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    assert_same([(p["position"], p["relevance_score"]) for p in printed], served(server, TEXTS, 3))
    assert [p["text"] for p in printed] == [TEXTS[p["position"]] for p in printed]


@slow
def test_stages_send_the_servers_token(tiny_artifact):
    import cohere

    srv = start_server(tiny_artifact, auth_token=TOKEN)
    try:
        want = served(srv, TEXTS, 2, token=TOKEN)
        for stage in STAGES:
            assert_same(ranking(stage, example(stage).rerank(url(srv), QUERY, TEXTS, top_n=2, token=TOKEN)), want)
            with pytest.raises(cohere.errors.UnauthorizedError):
                example(stage).rerank(url(srv), QUERY, TEXTS, top_n=2, token="wrong")
        # the scripts take the server's own variable as their token
        done = subprocess.run([sys.executable, str(EXAMPLES / f"{STAGES[0]}.py"), url(srv), QUERY, *TEXTS, "--top-n", "2",
                               "--json"], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "R3EDGE_AUTH_TOKEN": TOKEN})
        assert done.returncode == 0, done.stderr
        assert [json.loads(line)["position"] for line in done.stdout.splitlines()] == [i for i, _ in want]
    finally:
        srv.stop()


# -- the Python API inside LangChain: examples/integrations/langchain_compressor.py -------------------------
try:
    from r3edge import Reranker
except ImportError:
    Reranker = None
needs_reranker = pytest.mark.skipif(Reranker is None, reason="r3edge.Reranker not available")


@slow
@needs_reranker
def test_compressor_ranks_as_the_server_does(server, tiny_artifact):
    """R3edgeCompressor in-process keeps the server's top 3 in its order; its score is the one the server
    rescales to [0, 1], its label probabilities the score's parts; the documents' own metadata stays."""
    from langchain_core.documents import Document

    from r3edge.serve.http_api import relevance_01

    variant = server.runtime.info()["variant"]
    label_values = server.runtime.scorer.spec.label_values
    want = served(server, TEXTS, 3)
    documents = [Document(page_content=t, id=f"d{i}", metadata={"position": i}) for i, t in enumerate(TEXTS)]
    with Reranker(tiny_artifact, variant=variant) as reranker:
        kept = example("langchain_compressor").R3edgeCompressor(reranker=reranker, top_n=3).compress_documents(documents, QUERY)
    got = [(d.metadata["position"], float(relevance_01([d.metadata["relevance_score"]], label_values)[0])) for d in kept]
    assert [i for i, _ in got] == [i for i, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-5)  # in-process vs served micro-batches
    for d in kept:
        p = d.metadata["label_probabilities"]
        assert sum(p) == pytest.approx(1.0, abs=1e-5)
        assert sum(pi * v for pi, v in zip(p, label_values)) == pytest.approx(d.metadata["relevance_score"], abs=1e-5)
        assert d.metadata["truncated"] is False and d.id == f"d{d.metadata['position']}"
        assert d.page_content == TEXTS[d.metadata["position"]]
    assert documents[0].metadata == {"position": 0}  # the caller's documents are not changed

    done = subprocess.run([sys.executable, str(EXAMPLES / "langchain_compressor.py"), str(tiny_artifact), QUERY, *TEXTS,
                           "--top-n", "3", "--variant", variant, "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["position"] for line in done.stdout.splitlines()] == [i for i, _ in want]
