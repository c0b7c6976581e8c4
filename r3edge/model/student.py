"""The student as a scoring model: last real token's hidden state against the label rows only.

:class:`LabelScorer` is the one torch implementation of the scoring graph (contract 4). Training
computes its loss on it, export traces it, and the torch reference runtime runs it, so all three
read the same position with the same position ids. The full-vocabulary projection is never made.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from r3edge.core.config import StudentConfig
from r3edge.core.errors import R3EdgeError
from r3edge.core.fileio import partial_dir, publish_dir
from r3edge.core.scoring import DEFAULT_INSTRUCTION, PromptTemplate, Scorer, Scoring, score_pairs
from r3edge.model.loading import load_causal_lm, load_model, load_tokenizer


class LabelScorer(nn.Module):
    """``(input_ids, attention_mask) -> label_logits [batch, n_labels]`` for a causal LM."""

    def __init__(self, lm: nn.Module, label_token_ids: tuple[int, ...]):
        super().__init__()
        self.lm = lm
        self.register_buffer("label_ids", torch.tensor(label_token_ids, dtype=torch.long), persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Positions count real tokens only, so a pair's score does not depend on how much padding
        # its batchmates force on it (left padding would otherwise shift every position).
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        hidden = self.lm.get_decoder()(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        # The last real token, for left or right padding alike.
        steps = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
        last = (attention_mask * steps).argmax(-1)
        h = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        rows = self.lm.get_output_embeddings().weight.index_select(0, self.label_ids)
        return (h @ rows.T).float()


def create_student(config: StudentConfig) -> tuple[nn.Module, Scorer]:
    """A fresh student (pretrained or random init) and the scorer spec it will be trained with."""
    spec = config.model
    hf_tok = load_tokenizer(spec.tokenizer_ref)
    lm = load_model(spec)
    budget = config.scorer
    scorer = Scorer.create(
        hf_tok.backend_tokenizer,
        PromptTemplate.chatml(budget.instruction or DEFAULT_INSTRUCTION),
        max_query_tokens=budget.max_query_tokens,
        max_doc_tokens=budget.max_doc_tokens,
        max_total_tokens=budget.max_total_tokens,
        padding_side=budget.padding_side,
        pad_token_id=hf_tok.pad_token_id,
    )
    vocab = lm.get_output_embeddings().weight.shape[0]
    if max(scorer.spec.label_token_ids) >= vocab:
        raise R3EdgeError(f"label token ids {scorer.spec.label_token_ids} exceed the model's vocabulary ({vocab})",
                          "use a tokenizer that belongs to this model")
    return lm, scorer


def load_student(directory: str | Path, dtype: str = "float32") -> tuple[nn.Module, Scorer]:
    """A trained student directory: HF weights + ``scorer.json`` + ``tokenizer.json``."""
    directory = Path(directory)
    scorer = Scorer.load(directory)  # fails first, with a fix, if scorer.json is missing
    lm = load_causal_lm(str(directory), dtype=dtype)
    return lm, scorer


def save_student(lm: nn.Module, scorer: Scorer, out_dir: str | Path, extra_files: dict[str, str] | None = None) -> Path:
    """Write weights, ``scorer.json`` and ``tokenizer.json`` atomically.

    The directory appears under its final name only once complete, so a killed run never leaves a
    student that a later stage would accept.
    """
    tmp = partial_dir(out_dir)
    lm.save_pretrained(str(tmp))
    scorer.save(tmp)
    for name, text in (extra_files or {}).items():
        (tmp / name).write_text(text)
    return publish_dir(tmp, out_dir)


def lm_score_fn(lm, scorer: Scorer, *, max_batch_tokens: int = 8192, max_batch_size: int = 64,
                name: str = "torch") -> Scoring:
    """Score with an in-memory causal LM through :class:`LabelScorer` (right after training, and
    as the PyTorch reference of export parity)."""
    graph = LabelScorer(lm, scorer.spec.label_token_ids).eval()
    device = next(lm.parameters()).device  # after Trainer, the model may sit on a GPU

    def run_batch(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return graph(torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)).float().cpu().numpy()

    def fn(queries, documents):
        return score_pairs(scorer, run_batch, queries, documents, max_batch_tokens=max_batch_tokens,
                           max_batch_size=max_batch_size)

    return Scoring(name, fn, scorer)
