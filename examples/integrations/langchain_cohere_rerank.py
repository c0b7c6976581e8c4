"""LangChain's Cohere reranker (``langchain_cohere.CohereRerank``) scoring with an r3edge server.

Start a server with its HTTP door, then point the reranker at it::

    r3edge serve runs/demo/artifact --http-port 8080
    python examples/integrations/langchain_cohere_rerank.py http://127.0.0.1:8080 \\
        "how do I renew my residence permit?" "Renew your RP online via Metrash2." "Beach day at Sealine!"

How it reaches the server (langchain-cohere 0.6):

* ``CohereRerank`` builds a ``cohere.ClientV2`` with its ``base_url`` and calls ``POST /v2/rerank``.
  Give ``base_url``: CohereRerank passes ``None`` to the client otherwise, and the client then calls
  Cohere's own API (the SDK's ``CO_API_URL`` variable is not read).
* ``cohere_api_key`` travels as ``Authorization: Bearer``: the server's token when it has one
  (``--auth-token``), any string when it has none. Give it: without one (nor ``COHERE_API_KEY``) the SDK
  looks for ``CO_API_KEY`` and fails when that is unset.
* ``model`` is required by CohereRerank; the server scores with its one model whatever it names
  (``meta.warnings`` says so).
* The documents come back best first, as copies whose ``metadata["relevance_score"]`` is the server's
  ``relevance_score``: the student's expected label value rescaled to [0, 1].

In a retrieval chain it is the ``base_compressor`` of LangChain's ``ContextualCompressionRetriever``.
"""

from __future__ import annotations

import argparse
import json
import os

from langchain_cohere import CohereRerank
from langchain_core.documents import Document


def reranker(url: str, top_n: int | None = 3, token: str | None = None) -> CohereRerank:
    """A CohereRerank that scores with the r3edge server at ``url`` (``top_n=None``: every document)."""
    return CohereRerank(base_url=url, cohere_api_key=token or "no-token", model="r3edge", top_n=top_n)


def rerank(url: str, query: str, texts: list[str], top_n: int | None = 3, token: str | None = None) -> list[Document]:
    """``texts`` reranked by the server, best first; ``metadata["position"]`` is each one's place in ``texts``."""
    documents = [Document(page_content=text, metadata={"position": i}) for i, text in enumerate(texts)]
    return list(reranker(url, top_n, token).compress_documents(documents, query))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", help="the server's HTTP door, e.g. http://127.0.0.1:8080 (r3edge serve --http-port 8080)")
    ap.add_argument("query")
    ap.add_argument("documents", nargs="+")
    ap.add_argument("--top-n", type=int, default=3, help="documents to keep (default 3)")
    ap.add_argument("--token", default=os.environ.get("R3EDGE_AUTH_TOKEN"),
                    help="the server's bearer token (default: $R3EDGE_AUTH_TOKEN; none when the server has none)")
    ap.add_argument("--json", action="store_true", help="print one JSON object per document")
    args = ap.parse_args(argv)
    for doc in rerank(args.url, args.query, args.documents, args.top_n, args.token):
        position, score = doc.metadata["position"], doc.metadata["relevance_score"]
        print(json.dumps({"position": position, "relevance_score": score, "text": doc.page_content}) if args.json
              else f"{score:.4f}  [{position}] {doc.page_content}")


if __name__ == "__main__":
    main()
