"""The student as a scoring model: ``(input_ids, attention_mask) -> label_logits [batch, n_labels]``.

Three students share that signature, picked by the scorer spec's ``head``:

* ``label_rows`` — a causal LM (:class:`LabelScorer`): the last real token's hidden state against
  the label-token rows of the LM head only; the full-vocabulary projection is never made;
* ``classifier`` — an encoder cross-encoder (:class:`EncoderScorer`): a BERT-style
  ``AutoModelForSequenceClassification`` reading ``[CLS] query [SEP] document [SEP]`` with an
  n-label head;
* ``cosine`` — a bi-encoder (:class:`CosineScorer` around a :class:`CosineStudent`): a sentence
  encoder embeds the query and the document each on its own (one graph, two segments that never
  attend to each other), and the label logits are an affine function of their cosine. Before any
  training it ranks exactly as its base model does by cosine, so distillation starts from what the
  base knew instead of from a fresh random head.

:func:`scoring_module` is the one factory of the torch scoring graph (contract 4). Training computes
its loss on it, export traces it, and the torch reference runtime runs it, so all three run the same
graph on the same ids. The ONNX graph has the same input and output names for both, so the server
needs no change.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from r3edge.core.config import StudentConfig
from r3edge.core.errors import FormatError, InvalidInput, NotFound
from r3edge.core.fileio import partial_dir, publish_dir
from r3edge.core.scoring import (
    DEFAULT_INSTRUCTION,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_BATCH_TOKENS,
    DEFAULT_OVERFLOW,
    Overflow,
    PromptTemplate,
    Scorer,
    Scoring,
    score_pairs,
)
from r3edge.model.loading import load_causal_lm, load_encoder, load_model, load_sentence_encoder, load_tokenizer

#: ModelSpec.kind -> the ScorerSpec.head that scores it
HEAD_OF_KIND = {"causal": "label_rows", "encoder": "classifier", "biencoder": "cosine"}
#: the cosine student's label head (its 2 x n_labels numbers), saved beside the encoder's weights
COSINE_HEAD_FILE = "cosine_head.json"


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
        weight = self.lm.get_output_embeddings().weight
        # the ids follow the weights: a graph built around a model already on a GPU keeps its buffer on the CPU
        rows = weight.index_select(0, self.label_ids.to(weight.device))
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


class CosineStudent(nn.Module):
    """A sentence encoder plus an affine label head on the query–document cosine.

    ``label_logits = weight · cos + bias`` (``weight``, ``bias``: one number per label). The
    initial head (``weight`` ∝ the centred label values, ``bias`` 0) makes the expected score an
    increasing function of the cosine, so the untrained student ranks like its base model;
    ``r3edge train`` then fits the head to the teacher before it touches the encoder
    (:func:`r3edge.distill.student.train.fit_cosine_head`). Embeddings are the mean of a segment's token
    states (all-MiniLM-L6-v2's pooling). Saved as the encoder's HF directory plus
    :data:`COSINE_HEAD_FILE`.
    """

    def __init__(self, encoder: nn.Module, label_values: tuple[float, ...], scale: float = 10.0):
        super().__init__()
        self.encoder = encoder
        self.config = encoder.config
        values = torch.tensor(label_values, dtype=torch.float32)
        self.head = nn.Linear(1, len(label_values))
        with torch.no_grad():
            self.head.weight.copy_(scale * (values - values.mean()).unsqueeze(-1))
            self.head.bias.zero_()

    def get_input_embeddings(self) -> nn.Module:
        return self.encoder.get_input_embeddings()

    def pretrained_state(self) -> dict[str, torch.Tensor]:
        """The weights that came from the pretrained checkpoint: the encoder's (the head is fitted anew)."""
        return {k: v for k, v in self.state_dict().items() if k.startswith("encoder.")}

    def get_output_embeddings(self) -> None:
        return None

    def set_attn_implementation(self, name: str) -> None:
        self.encoder.set_attn_implementation(name)

    def save_pretrained(self, directory: str | Path) -> None:
        self.encoder.save_pretrained(str(directory))
        head = {"weight": self.head.weight.detach().float().squeeze(-1).tolist(),
                "bias": self.head.bias.detach().float().tolist(), "pooling": "mean"}
        (Path(directory) / COSINE_HEAD_FILE).write_text(json.dumps(head, indent=2) + "\n")

    @classmethod
    def from_pretrained(cls, directory: str | Path, label_values: tuple[float, ...], dtype: str = "float32") -> CosineStudent:
        path = Path(directory) / COSINE_HEAD_FILE
        if not path.is_file():
            raise NotFound(f"{directory} has no {COSINE_HEAD_FILE}, the cosine student's label head",
                           "point at a directory written by `r3edge train` with a biencoder student config")
        head = json.loads(path.read_text())
        if len(head["weight"]) != len(label_values) or len(head["bias"]) != len(label_values):
            raise FormatError(f"{path} has {len(head['weight'])} labels; scorer.json has {len(label_values)}",
                              "the student directory mixes files from two models; re-run `r3edge train`")
        student = cls(load_sentence_encoder(str(directory), dtype=dtype), label_values)
        with torch.no_grad():
            student.head.weight.copy_(torch.tensor(head["weight"]).unsqueeze(-1))
            student.head.bias.copy_(torch.tensor(head["bias"]))
        return student


def mean_unit_embedding(hidden: torch.Tensor, member: torch.Tensor) -> torch.Tensor:
    """The cosine student's embedding: the mean of the member tokens' states (``member`` [B, S], 1 for a
    token of the text), at unit length. The one definition both the single cosine graph and the
    prefix-reuse graphs (:mod:`r3edge.model.prefix`) use. The norm is spelt as a sum of squares, not
    ``F.normalize``: opset 17's ``ReduceL2`` (axes as an attribute) is invalid in the opset 21 that the
    int8 rewrite raises a graph to, while ``ReduceSum`` takes axes as an input from opset 13 on."""
    weight = member.unsqueeze(-1).float()
    mean = (hidden.float() * weight).sum(1) / weight.sum(1).clamp_min(1.0)
    return mean / mean.pow(2).sum(-1, keepdim=True).sqrt().clamp_min(1e-12)


class CosineScorer(nn.Module):
    """``(input_ids, attention_mask) -> label_logits`` for a :class:`CosineStudent`.

    The ids are ``[CLS] query [SEP] [CLS] document [SEP]`` (:meth:`PromptTemplate.biencoder`). The
    graph numbers the segments by counting ``[CLS]`` tokens (1: query, 2: document, 0: padding),
    lets each token attend only within its own segment, restarts positions at each segment's
    ``[CLS]`` and uses token type 0 throughout, so each text is embedded exactly as a bi-encoder
    embeds it alone, in either padding side. A query whose text holds the literal ``[CLS]`` token
    moves the boundary. One encoder pass costs no more than the cross-encoder's (fewer attention
    scores), and the inputs and output are the contract's, so export and serving do not change.
    """

    def __init__(self, student: CosineStudent, cls_token_id: int):
        super().__init__()
        self.student = student
        self.cls_token_id = int(cls_token_id)

    def cosines(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The query–document cosine of each row, ``[batch, 1]`` float32."""
        segment = (input_ids == self.cls_token_id).long().cumsum(-1) * attention_mask
        query, doc = (segment == 1).long(), (segment == 2).long()
        positions = (query.cumsum(-1) - 1) * query + (doc.cumsum(-1) - 1) * doc
        encoder = self.student.encoder
        dtype = next(encoder.parameters()).dtype
        same = (segment.unsqueeze(-1) == segment.unsqueeze(-2)).unsqueeze(1)
        mask = torch.zeros(same.shape, dtype=dtype, device=same.device).masked_fill(~same, torch.finfo(dtype).min)
        hidden = encoder(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                         token_type_ids=torch.zeros_like(input_ids)).last_hidden_state.float()

        return (mean_unit_embedding(hidden, query) * mean_unit_embedding(hidden, doc)).sum(-1, keepdim=True)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.student.head(self.cosines(input_ids, attention_mask)).float()


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
    if spec.head == "cosine":
        if not isinstance(model, CosineStudent):
            raise FormatError(f"scorer.json head 'cosine' needs a CosineStudent, not {type(model).__name__}",
                              "load the student with r3edge.model.student.load_student")
        cls = scorer.tokenizer.encode(spec.template.head, add_special_tokens=False).ids
        if len(cls) != 1 or scorer.tokenizer.encode(spec.template.mid, add_special_tokens=False).ids[-1:] != cls:
            raise InvalidInput(f"the cosine template {spec.template.head!r} ... {spec.template.mid!r} does not open "
                               "each segment with one [CLS] token",
                               "build the template with PromptTemplate.biencoder(cls_token, sep_token)")
        return CosineScorer(model, cls[0])
    raise FormatError(f"scorer.json head {spec.head!r} has no scoring graph", "re-run `r3edge train`")


def base_cosine_scoring(config: StudentConfig, *, overflow: Overflow = DEFAULT_OVERFLOW) -> Scoring | None:
    """The floor every encoder student must clear: its own pretrained weights, untrained, ranking by the
    query–document cosine (a :class:`CosineStudent` before any training, under the config's token
    budgets and ``overflow``, as its student is scored). None for a causal or randomly initialised
    student, which has no such base."""
    spec = config.model
    if spec.kind not in ("encoder", "biencoder") or spec.pretrained is None:
        return None
    extra = 1 if spec.kind == "encoder" else 0  # the bi-encoder template has one token more ([CLS] twice)
    base = config.model_copy(update={
        "model": spec.model_copy(update={"kind": "biencoder"}),
        "scorer": config.scorer.model_copy(update={"max_total_tokens": config.scorer.max_total_tokens + extra}),
    })
    lm, scorer = create_student(base)
    return lm_score_fn(lm.eval(), scorer, name=str(spec.pretrained), overflow=overflow)


def vocab_size(model: nn.Module) -> int:
    """The width a ``[..., vocab]`` tensor would have: the LM head's rows, or an encoder's input vocabulary."""
    emb = model.get_output_embeddings()
    return (model.get_input_embeddings() if emb is None else emb).weight.shape[0]


def student_scorer(config: StudentConfig) -> Scorer:
    """The scorer a student of ``config`` is trained, exported and served with (its tokenizer, template and token
    budget), without building the model: what counting its tokens needs (benchmarks/scripts/padding.py)."""
    spec = config.model
    hf_tok = load_tokenizer(spec.tokenizer_ref)
    budget = config.scorer
    head = HEAD_OF_KIND[spec.kind]
    if head in ("classifier", "cosine"):
        if not (hf_tok.cls_token and hf_tok.sep_token):
            raise InvalidInput(f"tokenizer {spec.tokenizer_ref} has no [CLS]/[SEP] tokens", "use the encoder's own tokenizer")
        build = PromptTemplate.pair if head == "classifier" else PromptTemplate.biencoder
        template = build(hf_tok.cls_token, hf_tok.sep_token)
    else:
        template = PromptTemplate.chatml(budget.instruction or DEFAULT_INSTRUCTION)
    return Scorer.create(
        hf_tok.backend_tokenizer,
        template,
        max_query_tokens=budget.max_query_tokens,
        max_doc_tokens=budget.max_doc_tokens,
        max_total_tokens=budget.max_total_tokens,
        padding_side=budget.padding_side,
        pad_token_id=hf_tok.pad_token_id,
        head=head,
    )


def create_student(config: StudentConfig) -> tuple[nn.Module, Scorer]:
    """A fresh student (pretrained or random init) and the scorer spec it will be trained with."""
    scorer = student_scorer(config)
    spec, budget, head = config.model, config.scorer, scorer.spec.head
    if head == "classifier":
        lm = load_model(spec, num_labels=scorer.spec.n_labels, id2label=dict(enumerate(scorer.spec.label_tokens)))
        positions = getattr(lm.config, "max_position_embeddings", None)
        if positions is not None and budget.max_total_tokens > positions:
            raise InvalidInput(f"max_total_tokens={budget.max_total_tokens} exceeds the encoder's {positions} positions",
                              f"set scorer.max_total_tokens to at most {positions}")
        return lm, scorer
    if head == "cosine":
        lm = CosineStudent(load_model(spec), scorer.spec.label_values)
        positions = getattr(lm.config, "max_position_embeddings", None)
        longest = max(budget.max_query_tokens, budget.max_doc_tokens) + 2  # each segment: [CLS] text [SEP]
        if positions is not None and longest > positions:
            raise InvalidInput(f"a segment of up to {longest} tokens exceeds the encoder's {positions} positions",
                              f"keep max_query_tokens and max_doc_tokens at most {positions - 2}")
        return lm, scorer
    lm = load_model(spec)
    vocab = vocab_size(lm)
    if max(scorer.spec.label_token_ids) >= vocab:
        raise InvalidInput(f"label token ids {scorer.spec.label_token_ids} exceed the model's vocabulary ({vocab})",
                          "use a tokenizer that belongs to this model")
    return lm, scorer


def load_student(directory: str | Path, dtype: str = "float32") -> tuple[nn.Module, Scorer]:
    """A trained student directory: HF weights + ``scorer.json`` + ``tokenizer.json``.

    The scorer's ``head`` says which model class the weights are (a causal LM, a classification
    encoder, or a sentence encoder with its cosine head).
    """
    directory = Path(directory)
    scorer = Scorer.load(directory)  # fails first, with a fix, if scorer.json is missing
    if scorer.spec.head == "classifier":
        lm = load_encoder(str(directory), scorer.spec.n_labels, dtype=dtype)
    elif scorer.spec.head == "cosine":
        lm = CosineStudent.from_pretrained(directory, scorer.spec.label_values, dtype=dtype)
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
                name: str = "torch", overflow: Overflow = DEFAULT_OVERFLOW) -> Scoring:
    """Score with an in-memory student through :func:`scoring_module` (right after training, and
    as the PyTorch reference of export parity); over-long input follows ``overflow``, as in
    :meth:`Scorer.encode_batch`."""
    graph = scoring_module(lm, scorer).eval()
    device = next(lm.parameters()).device  # after Trainer, the model may sit on a GPU

    def run_batch(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return graph(torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)).float().cpu().numpy()

    def fn(queries, documents):
        return score_pairs(scorer, run_batch, queries, documents, max_batch_tokens=max_batch_tokens,
                           max_batch_size=max_batch_size, overflow=overflow)

    return Scoring(name, fn, scorer)
