"""LlamaIndex's Cohere reranker (``llama_index.postprocessor.cohere_rerank.CohereRerank``) scoring with an
r3edge server.

Start a server with its HTTP door, then point the postprocessor at it::

    r3edge serve runs/demo/artifact --http-port 8080
    python examples/integrations/llamaindex_cohere_rerank.py http://127.0.0.1:8080 \\
        "how do I renew my residence permit?" "Renew your RP online via Metrash2." "Beach day at Sealine!"

How it reaches the server (llama-index-postprocessor-cohere-rerank 0.10):

* ``CohereRerank`` builds a ``cohere.ClientV2`` with its ``base_url`` and calls ``POST /v2/rerank``.
  Give ``base_url``: it passes ``None`` to the client otherwise, and the client then calls Cohere's own
  API (the SDK's ``CO_API_URL`` variable is not read).
* ``api_key`` travels as ``Authorization: Bearer``: the server's token when it has one
  (``--auth-token``), any string when it has none. Give it: without it CohereRerank reads
  ``COHERE_API_KEY`` and fails when that is unset.
* ``model`` may name anything: the server scores with its one model (``meta.warnings`` says so).
* It retries 500, 503 and 504 answers (``max_retries``, 4-10 s apart): a server still loading its model
  answers 503, so a pipeline started beside the server waits for it.
* What is scored is ``node.get_content(MetadataMode.EMBED)``: metadata not excluded from embedding is
  sent with the text. The nodes here exclude their ``position`` so the server scores the text alone.
* The nodes come back best first, each ``score`` the server's ``relevance_score`` (the student's
  expected label value rescaled to [0, 1]).

In a query engine it is one of the ``node_postprocessors``.
"""

from __future__ import annotations

import argparse
import json
import os

from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.postprocessor.cohere_rerank import CohereRerank


def reranker(url: str, top_n: int = 3, token: str | None = None) -> CohereRerank:
    """A CohereRerank postprocessor that scores with the r3edge server at ``url``."""
    return CohereRerank(base_url=url, api_key=token or "no-token", model="r3edge", top_n=top_n)


def rerank(url: str, query: str, texts: list[str], top_n: int = 3, token: str | None = None) -> list[NodeWithScore]:
    """``texts`` reranked by the server, best first; ``node.metadata["position"]`` is each one's place in ``texts``."""
    nodes = [NodeWithScore(node=TextNode(text=text, metadata={"position": i}, excluded_embed_metadata_keys=["position"]))
             for i, text in enumerate(texts)]
    return reranker(url, top_n, token).postprocess_nodes(nodes, query_str=query)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", help="the server's HTTP door, e.g. http://127.0.0.1:8080 (r3edge serve --http-port 8080)")
    ap.add_argument("query")
    ap.add_argument("documents", nargs="+")
    ap.add_argument("--top-n", type=int, default=3, help="nodes to keep (default 3)")
    ap.add_argument("--token", default=os.environ.get("R3EDGE_AUTH_TOKEN"),
                    help="the server's bearer token (default: $R3EDGE_AUTH_TOKEN; none when the server has none)")
    ap.add_argument("--json", action="store_true", help="print one JSON object per node")
    args = ap.parse_args(argv)
    for hit in rerank(args.url, args.query, args.documents, args.top_n, args.token):
        position = hit.node.metadata["position"]
        print(json.dumps({"position": position, "relevance_score": hit.score, "text": hit.node.get_content()}) if args.json
              else f"{hit.score:.4f}  [{position}] {hit.node.get_content()}")


if __name__ == "__main__":
    main()
