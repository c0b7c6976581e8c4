"""A cosine student's training step with each query embedded once per batch (``train.query_once``).

The single cosine graph (:class:`r3edge.model.student.CosineScorer`) packs ``[CLS] query [SEP] [CLS]
document [SEP]`` into every row, so a batch of query groups embeds each query once per candidate: on
SemEval's C train pairs the query is about half of a row's tokens. Here a batch is cut where
:meth:`r3edge.core.scoring.Scorer.split` cuts a request for prefix reuse, and it runs through the
two graphs that `r3edge export --prefix-reuse` exports and serves (:mod:`r3edge.model.prefix`):
:class:`~r3edge.model.prefix.QueryEmbeddingGraph` once per distinct query of the batch, and
:class:`~r3edge.model.prefix.DocumentCosineGraph` on every row's document. So the step still optimises
a graph that is served, and in eval mode it gives the single graph's logits
(``tests/test_train_resume.py``). It differs in training only: a query's dropout mask is drawn once per
step for all its rows, not once per row.
"""

from __future__ import annotations

import torch
from torch import nn

from r3edge.core.scoring import Encoded, Scorer
from r3edge.model.prefix import DocumentCosineGraph, QueryEmbeddingGraph

#: the collated batch's extra inputs, beside the rows' suffix ``input_ids`` / ``attention_mask``
QUERY_ONCE_INPUTS = ("query_prefixes", "row_query")


def collate_query_once(scorer: Scorer, features: list[dict]) -> dict:
    """The rows' suffixes (document + ``[SEP]``) padded as the candidate graph reads them, each distinct
    prefix (``[CLS] query [SEP] [CLS]``) as a ``[1, P]`` tensor, and each row's index into those."""
    encoded = [Encoded(f["input_ids"], f["doc_tokens"], f["doc_tokens_dropped"], f["prefix_len"]) for f in features]
    groups = scorer.split(encoded)
    row_query = torch.empty(len(encoded), dtype=torch.long)
    for g, (_, rows) in enumerate(groups):
        row_query[rows] = g
    ids, mask = scorer.collate_ids([e.suffix for e in encoded])
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
            "query_prefixes": [torch.tensor([p], dtype=torch.long) for p, _ in groups], "row_query": row_query}


class QueryOnceCosine(nn.Module):
    """The training graph: ``(suffix ids, suffix mask, prefixes, row_query) -> label_logits``, on the
    weights of ``graph`` (a :class:`~r3edge.model.student.CosineScorer`), shared, not copied."""

    def __init__(self, graph: nn.Module, right_padded: bool):
        super().__init__()
        self.query = QueryEmbeddingGraph(graph.student)
        self.documents = DocumentCosineGraph(graph.student, graph.cls_token_id, right_padded)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, query_prefixes: list[torch.Tensor],
                row_query: torch.Tensor) -> torch.Tensor:
        queries = torch.cat([self.query(p) for p in query_prefixes])
        return self.documents(input_ids, attention_mask, queries[row_query])
