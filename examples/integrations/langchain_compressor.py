"""r3edge's Python API inside LangChain: a ``BaseDocumentCompressor`` that reranks in-process, no server.

    python examples/integrations/langchain_compressor.py runs/demo/artifact \\
        "how do I renew my residence permit?" "Renew your RP online via Metrash2." "Beach day at Sealine!"

``R3edgeCompressor`` scores with an :class:`r3edge.Reranker` (torch-free, on the artifact's exported model:
the server's engine and scoring contract), keeps the ``top_n`` best documents, best first, and returns
copies whose metadata says how each was scored:

* ``relevance_score`` — the student's score: its expected label value, in the range of the artifact's label
  values (0..2 for the default graded labels). The server's HTTP door rescales the same score to [0, 1]
  for Cohere's ``relevance_score``; the order is the same.
* ``label_probabilities`` — the probability of each label value, the score's parts.
* ``truncated`` — the document was cut to the scoring contract's token budget before it was scored.

The caller owns the Reranker (open it once, close it when done: it holds the model's sessions). In a
retrieval chain the compressor is the ``base_compressor`` of LangChain's ``ContextualCompressionRetriever``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, Field

from r3edge import Reranker


class R3edgeCompressor(BaseDocumentCompressor):
    """Keeps the ``top_n`` documents an r3edge :class:`~r3edge.Reranker` ranks best for the query."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    reranker: Reranker
    top_n: int = Field(3, ge=1)

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        if not documents:
            return []
        ranked = self.reranker.rank(query, [d.page_content for d in documents], top_k=self.top_n)
        return [Document(page_content=documents[r.index].page_content, id=documents[r.index].id,
                         metadata={**documents[r.index].metadata, "relevance_score": float(r.score),
                                   "label_probabilities": list(r.probabilities), "truncated": bool(r.truncated)})
                for r in ranked]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("artifact", help="an artifact directory from `r3edge export` (e.g. runs/demo/artifact)")
    ap.add_argument("query")
    ap.add_argument("documents", nargs="+")
    ap.add_argument("--top-n", type=int, default=3, help="documents to keep (default 3)")
    ap.add_argument("--variant", help="the artifact's variant to score with (default: as r3edge serve picks)")
    ap.add_argument("--json", action="store_true", help="print one JSON object per document")
    args = ap.parse_args(argv)
    with Reranker(args.artifact, variant=args.variant) as reranker:
        documents = [Document(page_content=text, metadata={"position": i}) for i, text in enumerate(args.documents)]
        kept = R3edgeCompressor(reranker=reranker, top_n=args.top_n).compress_documents(documents, args.query)
    for doc in kept:
        meta = doc.metadata
        print(json.dumps({**meta, "text": doc.page_content}) if args.json
              else f"{meta['relevance_score']:.4f}  [{meta['position']}] {doc.page_content}")


if __name__ == "__main__":
    main()
