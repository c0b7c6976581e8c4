"""The student as a scoring model: ``(input_ids, attention_mask) -> label_logits [batch, n_labels]``.

Two students share that signature, picked by the scorer spec's ``head``:

* ``label_rows`` — a causal LM (:class:`LabelScorer`): the last real token's hidden state against
  the label-token rows of the LM head only; the full-vocabulary projection is never made;
* ``classifier`` — an encoder cross-encoder (:class:`EncoderScorer`): a BERT-style
  ``AutoModelForSequenceClassification`` reading ``[CLS] query [SEP] document [SEP]`` with an
  n-label head.

:func:`scoring_module` is the one factory of the torch scoring graph (contract 4). Training computes
its loss on it, export traces it, and the torch reference runtime runs it, so all three run the same
graph on the same ids. The ONNX graph has the same input and output names for both, so the server
needs no change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from r3edge.core.config import StudentConfig
from r3edge.core.errors import FormatError, InvalidInput
from r3edge.core.fileio import partial_dir, publish_dir
from r3edge.core.scoring import (
    DEFAULT_INSTRUCTION,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_BATCH_TOKENS,
    PromptTemplate,
    Scorer,
    Scoring,
    score_pairs,
)
from r3edge.model.loading import load_causal_lm, load_encoder, load_model, load_tokenizer

#: ModelSpec.kind -> the ScorerSpec.head that scores it
HEAD_OF_KIND = {"causal": "label_rows", "encoder": "classifier"}


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


class EncoderScorer(nn.Module):
    """``(input_ids, attention_mask) -> label_logits [batch, n_labels]`` for a sequence-classification encoder.

    The scorer's ids are BERT's pair encoding, ``[CLS] query [SEP] document [SEP]``, without its
    ``token_type_ids``; the graph derives them from ``input_ids`` instead of taking a third input,
    so the ONNX inputs stay ``(input_ids, attention_mask)``: segment 0 up to and including the first
    ``[SEP]``, segment 1 after it, 0 on padding, exactly what the tokenizer's pair encoding gives.
    (Fed no ``token_type_ids``, BERT would use all zeros, and the pretrained segment-B embedding
    would go unused.) A query whose text contains the literal ``[SEP]`` token moves that boundary,
    as it would in BERT's own pair encoding. Models without a second segment embedding
    (``type_vocab_size < 2``) get none. Padding must be on the right: the head reads position 0.
    """

    def __init__(self, model: nn.Module, sep_token_id: int):
        super().__init__()
        self.model = model
        self.sep_token_id = int(sep_token_id)
        self.segments = getattr(model.config, "type_vocab_size", 0) >= 2

    def token_type_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        is_sep = (input_ids == self.sep_token_id).long()
        seps_before = is_sep.cumsum(-1) - is_sep  # [SEP]s strictly before each position
        return (seps_before > 0).long() * attention_mask

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        extra = {"token_type_ids": self.token_type_ids(input_ids, attention_mask)} if self.segments else {}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).logits.float()


def scoring_module(model: nn.Module, scorer: Scorer) -> nn.Module:
    """The torch scoring graph for ``model`` as ``scorer.spec.head`` says: the one factory that
    training, export and the torch runtime use."""
    spec = scorer.spec
    if spec.head == "label_rows":
        return LabelScorer(model, spec.label_token_ids)
    if spec.head == "classifier":
        if model.config.num_labels != spec.n_labels:
            raise FormatError(f"the encoder has {model.config.num_labels} outputs but scorer.json has {spec.n_labels} labels",
                              "the student directory mixes files from two models; re-run `r3edge train`")
        if spec.padding_side != "right":
            raise InvalidInput("a classifier-head scorer pads on the left, so position 0 would be a pad, not [CLS]",
                              "set scorer.padding_side: right in the student config and retrain")
        sep = scorer.tokenizer.encode(spec.template.mid, add_special_tokens=False).ids
        if len(sep) != 1:
            raise InvalidInput(f"the encoder's template separator {spec.template.mid!r} is {len(sep)} tokens, not one",
                              "build the template with PromptTemplate.pair(cls_token, sep_token)")
        return EncoderScorer(model, sep[0])
    raise FormatError(f"scorer.json head {spec.head!r} has no scoring graph", "re-run `r3edge train`")


def vocab_size(model: nn.Module) -> int:
    """The width a ``[..., vocab]`` tensor would have: the LM head's rows, or an encoder's input vocabulary."""
    emb = model.get_output_embeddings()
    return (model.get_input_embeddings() if emb is None else emb).weight.shape[0]


def create_student(config: StudentConfig) -> tuple[nn.Module, Scorer]:
    """A fresh student (pretrained or random init) and the scorer spec it will be trained with."""
    spec = config.model
    hf_tok = load_tokenizer(spec.tokenizer_ref)
    budget = config.scorer
    head = HEAD_OF_KIND[spec.kind]
    if head == "classifier":
        if not (hf_tok.cls_token and hf_tok.sep_token):
            raise InvalidInput(f"tokenizer {spec.tokenizer_ref} has no [CLS]/[SEP] tokens", "use the encoder's own tokenizer")
        template = PromptTemplate.pair(hf_tok.cls_token, hf_tok.sep_token)
    else:
        template = PromptTemplate.chatml(budget.instruction or DEFAULT_INSTRUCTION)
    scorer = Scorer.create(
        hf_tok.backend_tokenizer,
        template,
        max_query_tokens=budget.max_query_tokens,
        max_doc_tokens=budget.max_doc_tokens,
        max_total_tokens=budget.max_total_tokens,
        padding_side=budget.padding_side,
        pad_token_id=hf_tok.pad_token_id,
        head=head,
    )
    if head == "classifier":
        lm = load_model(spec, num_labels=scorer.spec.n_labels, id2label=dict(enumerate(scorer.spec.label_tokens)))
        positions = getattr(lm.config, "max_position_embeddings", None)
        if positions is not None and budget.max_total_tokens > positions:
            raise InvalidInput(f"max_total_tokens={budget.max_total_tokens} exceeds the encoder's {positions} positions",
                              f"set scorer.max_total_tokens to at most {positions}")
        return lm, scorer
    lm = load_model(spec)
    vocab = vocab_size(lm)
    if max(scorer.spec.label_token_ids) >= vocab:
        raise InvalidInput(f"label token ids {scorer.spec.label_token_ids} exceed the model's vocabulary ({vocab})",
                          "use a tokenizer that belongs to this model")
    return lm, scorer


def load_student(directory: str | Path, dtype: str = "float32") -> tuple[nn.Module, Scorer]:
    """A trained student directory: HF weights + ``scorer.json`` + ``tokenizer.json``.

    The scorer's ``head`` says which model class the weights are (a causal LM or an encoder).
    """
    directory = Path(directory)
    scorer = Scorer.load(directory)  # fails first, with a fix, if scorer.json is missing
    if scorer.spec.head == "classifier":
        lm = load_encoder(str(directory), scorer.spec.n_labels, dtype=dtype)
    else:
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


def lm_score_fn(lm, scorer: Scorer, *, max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
                max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                name: str = "torch") -> Scoring:
    """Score with an in-memory student through :func:`scoring_module` (right after training, and
    as the PyTorch reference of export parity)."""
    graph = scoring_module(lm, scorer).eval()
    device = next(lm.parameters()).device  # after Trainer, the model may sit on a GPU

    def run_batch(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return graph(torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)).float().cpu().numpy()

    def fn(queries, documents):
        return score_pairs(scorer, run_batch, queries, documents, max_batch_tokens=max_batch_tokens,
                           max_batch_size=max_batch_size)

    return Scoring(name, fn, scorer)
