"""A causal student in two graphs: the shared prefix once per request, then the candidates.

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
"""

from __future__ import annotations

import torch
from torch import nn


def n_layers(lm: nn.Module) -> int:
    return len(lm.get_decoder().layers)


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
        self.lm.get_decoder()(input_ids=input_ids, position_ids=position_ids, past_key_values=cache, use_cache=True)
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
            input_ids=input_ids, attention_mask=full_mask, position_ids=position_ids, past_key_values=cache,
            use_cache=True,
        ).last_hidden_state
        steps = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
        last = (attention_mask * steps).argmax(-1)
        h = hidden[torch.arange(batch, device=hidden.device), last]
        rows = self.lm.get_output_embeddings().weight.index_select(0, self.label_ids)
        return (h @ rows.T).float()

