"""A student in two graphs: the shared prefix once per request, then the candidates.

Every candidate of a request starts with the same tokens, the template head, the query and the
template's mid piece (:meth:`r3edge.core.scoring.Scorer.split`). The single scoring graph
(:class:`r3edge.model.student.LabelScorer`) recomputes them for each of the ~100 candidates; here
they run once:

* :class:`PrefixGraph` — ``input_ids [1, P] -> key_0, value_0, ..., key_{L-1}, value_{L-1}``, each
  ``[1, kv_heads, P, head_dim]`` (the decoder's key/value cache after the prefix);
* :class:`CandidateGraph` — ``input_ids [B, S], attention_mask [B, S], past [1, kv_heads, P, head_dim] x 2L
  -> label_logits [B, n_labels]``: the document + tail suffixes after that cache, padded on either
  side; positions continue from ``P`` and count real tokens only (as in ``LabelScorer``), the mask
  covers the prefix (all real) and the suffix, and the label rows are read at each row's last real
  token. The cache is expanded to the batch inside the graph, so a request sends it once.

The flat key/value tensors (not a ``DynamicCache``) are the graphs' inputs and outputs, so the ONNX
graphs and the torch-free runtime never see transformers' cache classes.

A cosine student (:class:`r3edge.model.student.CosineScorer`) splits the same way, and more
simply: its prefix ``[CLS] query [SEP] [CLS]`` never attends to the document, so the query is
embedded once per request and each candidate graph row embeds only its document:

* :class:`QueryEmbeddingGraph` — ``input_ids [1, P] -> query_embedding [1, hidden]`` (the unit
  mean-pooled embedding of ``[CLS] query [SEP]``; the prefix's last token is the document's
  ``[CLS]``, which the candidate graph puts back);
* :class:`DocumentCosineGraph` — ``input_ids [B, S], attention_mask [B, S], query_embedding
  -> label_logits``: ``[CLS]`` + document + ``[SEP]`` embedded alone, the cosine with the query,
  the label head.

That is the single cosine graph's computation row for row (segments there never attend to each
other, and positions restart at each ``[CLS]``), with the query's tokens computed once instead
of once per candidate. One difference: the single graph finds the segment boundary by counting
``[CLS]`` ids, so a query whose text holds the literal ``[CLS]`` token splits there; the two
graphs split where the template does.
"""

from __future__ import annotations

import torch
from torch import nn

from r3edge.model.kv_cache import cache_kwargs
from r3edge.model.student import mean_unit_embedding

#: the cosine split's state, the prefix graph's output and the candidate graph's third input
QUERY_EMBEDDING = "query_embedding"


def n_layers(lm: nn.Module) -> int:
    return len(lm.get_decoder().layers)


class QueryEmbeddingGraph(nn.Module):
    """``input_ids [1, P] -> query_embedding [1, hidden]`` for a cosine student; ``P`` ends with the
    document segment's ``[CLS]`` (the template's mid piece), which is not part of the query."""

    def __init__(self, student: nn.Module):
        super().__init__()
        self.student = student

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        ids = input_ids[:, :-1]
        mask = torch.ones_like(ids)
        hidden = self.student.encoder(input_ids=ids, attention_mask=mask,
                                      token_type_ids=torch.zeros_like(ids)).last_hidden_state
        return mean_unit_embedding(hidden, mask)


class DocumentCosineGraph(nn.Module):
    """``(input_ids [B, S], attention_mask [B, S], query_embedding [1, hidden]) -> label_logits``.

    The rows are documents + ``[SEP]`` (the pair's suffix); ``[CLS]`` is prepended here. Positions
    count real tokens only, so left padding leaves a row as it is alone. With ``right_padded`` the
    encoder's own positions are those already, and the graph keeps the plain BERT pattern that
    ONNX Runtime's transformer optimizer fuses.
    """

    def __init__(self, student: nn.Module, cls_token_id: int, right_padded: bool):
        super().__init__()
        self.student = student
        self.cls_token_id = int(cls_token_id)
        self.right_padded = right_padded

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, query_embedding: torch.Tensor) -> torch.Tensor:
        ids = torch.cat([torch.full_like(input_ids[:, :1], self.cls_token_id), input_ids], dim=-1)
        mask = torch.cat([torch.ones_like(attention_mask[:, :1]), attention_mask], dim=-1)
        extra = {} if self.right_padded else {"position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
        hidden = self.student.encoder(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids),
                                      **extra).last_hidden_state
        cos = (mean_unit_embedding(hidden, mask) * query_embedding).sum(-1, keepdim=True)
        return self.student.head(cos).float()


def _cache(lm: nn.Module):
    from transformers import DynamicCache

    return DynamicCache(config=lm.config)


class PrefixGraph(nn.Module):
    """``input_ids [1, P] -> (key_0, value_0, ..., key_{L-1}, value_{L-1})``: the prefix's cache."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        cache = _cache(self.lm)
        self.lm.get_decoder()(input_ids=input_ids, position_ids=position_ids, use_cache=True, **cache_kwargs(cache))
        return tuple(t for layer in cache.layers for t in (layer.keys, layer.values))


class CandidateGraph(nn.Module):
    """``(input_ids [B, S], attention_mask [B, S], past) -> label_logits [B, n_labels]`` after a prefix cache.

    ``past`` is :class:`PrefixGraph`'s output (batch 1), flat: ``[key_0, value_0, key_1, ...]``.
    """

    def __init__(self, lm: nn.Module, label_token_ids: tuple[int, ...]):
        super().__init__()
        self.lm = lm
        self.register_buffer("label_ids", torch.tensor(label_token_ids, dtype=torch.long), persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, past: list[torch.Tensor]) -> torch.Tensor:
        batch = input_ids.shape[0]
        prefix_len = past[0].shape[2]
        cache = _cache(self.lm)
        for i in range(len(past) // 2):
            cache.update(past[2 * i].expand(batch, -1, -1, -1), past[2 * i + 1].expand(batch, -1, -1, -1), i)
        # Positions continue after the prefix and count real tokens only, so padding on either side
        # and a row's batchmates leave its positions as they are in the single graph.
        position_ids = prefix_len + (attention_mask.cumsum(-1) - 1).clamp(min=0)
        full_mask = torch.cat([attention_mask.new_ones(batch, prefix_len), attention_mask], dim=-1)
        hidden = self.lm.get_decoder()(
            input_ids=input_ids, attention_mask=full_mask, position_ids=position_ids, use_cache=True,
            **cache_kwargs(cache),
        ).last_hidden_state
        steps = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
        last = (attention_mask * steps).argmax(-1)
        h = hidden[torch.arange(batch, device=hidden.device), last]
        rows = self.lm.get_output_embeddings().weight.index_select(0, self.label_ids)
        return (h @ rows.T).float()

