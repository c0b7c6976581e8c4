"""The scoring contract: the one definition of the student's input and output.

Training, export calibration, the server and the benchmarks all build student inputs through
:class:`Scorer` and nothing else, so train/serve skew cannot creep in through a second formatter.
The module depends on ``tokenizers`` and ``numpy`` only (the server must not need torch).

A student input is ``head + query + mid + document + tail``. For a causal student (``head:
label_rows``) the tail ends exactly where the score token would be generated; for an encoder
cross-encoder (``head: classifier``) the pieces are ``[CLS]``, ``[SEP]`` and ``[SEP]``, which gives
the ids of BERT's own pair encoding; for a bi-encoder student (``head: cosine``) they are ``[CLS]``,
``[SEP][CLS]`` and ``[SEP]``, two single-text encodings side by side. Each piece is tokenised on its
own and the ids are concatenated, so the document (or an over-long query) can be cut on a token
boundary while the template pieces stay whole. What
happens to input over its budget is one policy, ``overflow`` (:data:`DEFAULT_OVERFLOW`, which says
why it cuts by default), the same for the library and the server; a cut keeps the first tokens, on a
token boundary.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from r3edge.core.errors import FormatError, InvalidInput, NotFound

SCORER_FILE = "scorer.json"
TOKENIZER_FILE = "tokenizer.json"
SPEC_VERSION = 1
#: Which scoring graph reads the ids: the label-token rows of a causal LM's head at the last real
#: token, an encoder's n-label classification head (whose labels are outputs, not vocabulary tokens),
#: or an affine function of the cosine between the query's and the document's embeddings, each
#: encoded on its own inside the one graph (a bi-encoder student; see r3edge.model.student).
HEADS = ("label_rows", "classifier", "cosine")
#: the heads whose shared prefix (template head + query + mid) can run once per request: a causal
#: student's key/value cache, a cosine student's query embedding (:meth:`Scorer.split`)
PREFIX_HEADS = ("label_rows", "cosine")
#: the heads whose weights are an encoder (a cross-encoder's classifier, a bi-encoder's cosine): the
#: students a base encoder's zero-shot cosine ranking is the floor of
ENCODER_HEADS = ("classifier", "cosine")


@dataclass(frozen=True)
class PromptTemplate:
    """Fixed text around the query and the document.

    For a causal student ``tail`` must end where the label token is generated; its last token's
    hidden state is the one the scoring graph reads.
    """

    head: str
    mid: str
    tail: str

    @staticmethod
    def chatml(instruction: str) -> PromptTemplate:
        """The ChatML framing shared by Qwen2.5 and SmolLM2 instruct models."""
        return PromptTemplate(
            head=f"<|im_start|>system\n{instruction}<|im_end|>\n<|im_start|>user\nQuery: ",
            mid="\nDocument: ",
            tail="<|im_end|>\n<|im_start|>assistant\n<score>",
        )

    @staticmethod
    def pair(cls_token: str = "[CLS]", sep_token: str = "[SEP]") -> PromptTemplate:
        """``[CLS] query [SEP] document [SEP]``: a BERT-style cross-encoder's pair input.

        Each piece is tokenised alone, so the special tokens map to their own ids and the result
        equals the tokenizer's pair encoding (``input_ids`` only; see
        :class:`r3edge.model.student.EncoderScorer` for ``token_type_ids``).
        """
        return PromptTemplate(head=cls_token, mid=sep_token, tail=sep_token)

    @staticmethod
    def biencoder(cls_token: str = "[CLS]", sep_token: str = "[SEP]") -> PromptTemplate:
        """``[CLS] query [SEP] [CLS] document [SEP]``: two single-text encodings side by side.

        Each segment is what a sentence-transformers bi-encoder reads for one text; the cosine
        scoring graph keeps the segments from attending to each other and restarts positions at
        the second ``[CLS]``, so each is embedded exactly as if encoded alone.
        """
        return PromptTemplate(head=cls_token, mid=sep_token + cls_token, tail=sep_token)


DEFAULT_INSTRUCTION = (
    "Judge how relevant the document is to the query. "
    "Answer with one digit: 0 = unrelated, 1 = relevant but only partly answers, "
    "2 = dedicated to the query and contains the exact answer."
)


@dataclass(frozen=True)
class ScorerSpec:
    """Everything needed to turn a (query, document) pair into token ids and back into a score.

    Serialised as ``scorer.json`` next to every student checkpoint and in every export artifact.
    ``head`` names the scoring graph (see :data:`HEADS`); ``label_rows`` is the default so that
    scorer.json files written before the field existed still load as what they are. With the
    ``classifier`` and ``cosine`` heads, ``label_tokens`` only name the labels and ``label_token_ids`` is empty.
    """

    template: PromptTemplate
    label_tokens: tuple[str, ...] = ("0", "1", "2")
    label_token_ids: tuple[int, ...] = ()
    label_values: tuple[float, ...] = (0.0, 1.0, 2.0)
    max_query_tokens: int = 64
    max_doc_tokens: int = 192
    max_total_tokens: int = 320
    padding_side: str = "left"
    pad_token_id: int = 0
    version: int = SPEC_VERSION
    extra: dict = field(default_factory=dict)
    head: str = "label_rows"
    #: label logits are divided by it before the softmax (temperature scaling, fitted by
    #: ``r3edge calibrate`` on held-out gold labels; r3edge.core.calibration). It changes no ranking
    #: and no input, so it is not part of the fingerprint.
    temperature: float = 1.0
    #: added to the tempered label logits before the softmax (vector scaling's per-label bias, fitted
    #: with the temperature by ``r3edge calibrate --bias``): it corrects a label prior the student did
    #: not learn (a grade-balanced teacher on mostly irrelevant candidates). None: no bias. It changes no
    #: input, so it is not part of the fingerprint either.
    label_bias: tuple[float, ...] | None = None

    def __post_init__(self):
        if len(self.label_tokens) != len(self.label_values):
            raise InvalidInput(
                f"scorer spec: label_tokens has {len(self.label_tokens)} entries but label_values has "
                f"{len(self.label_values)}",
                "give one value per label token",
            )
        if self.head not in HEADS:
            raise InvalidInput(f"scorer spec: head={self.head!r}", f"use one of {', '.join(HEADS)}")
        if self.head != "label_rows" and self.label_token_ids:
            raise InvalidInput(
                f"scorer spec: a {self.head} head has no label token ids (its labels are head outputs)",
                "drop label_token_ids, or use head: label_rows",
            )
        if self.padding_side not in ("left", "right"):
            raise InvalidInput(
                f"scorer spec: padding_side={self.padding_side!r}", "use 'left' or 'right'"
            )
        if not self.temperature > 0:
            raise InvalidInput(f"scorer spec: temperature={self.temperature}", "use a positive temperature",
                               field="temperature")
        if self.label_bias is not None and len(self.label_bias) != len(self.label_values):
            raise InvalidInput(f"scorer spec: label_bias has {len(self.label_bias)} entries for {len(self.label_values)} labels",
                               "give one bias per label, or drop label_bias", field="label_bias")
        for name in ("max_query_tokens", "max_doc_tokens", "max_total_tokens"):
            if getattr(self, name) <= 0:
                raise InvalidInput(f"scorer spec: {name} must be positive", f"set {name} > 0")

    @property
    def n_labels(self) -> int:
        return len(self.label_tokens)

    def to_json(self) -> dict:
        d = asdict(self)
        d["label_tokens"] = list(self.label_tokens)
        d["label_token_ids"] = list(self.label_token_ids)
        d["label_values"] = list(self.label_values)
        if self.label_bias is None:
            del d["label_bias"]  # scorer.json files stay as they were until a bias is fitted
        else:
            d["label_bias"] = list(self.label_bias)
        return d

    @staticmethod
    def from_json(d: dict) -> ScorerSpec:
        d = dict(d)
        if d.get("version") != SPEC_VERSION:
            raise FormatError(
                f"scorer.json has version {d.get('version')!r}; this r3edge reads version {SPEC_VERSION}",
                "re-export the student with this r3edge version",
            )
        d["template"] = PromptTemplate(**d["template"])
        for key in ("label_tokens", "label_token_ids", "label_values"):
            d[key] = tuple(d[key])
        if d.get("label_bias") is not None:
            d["label_bias"] = tuple(d["label_bias"])
        return ScorerSpec(**d)

    def fingerprint(self) -> str:
        """A short hash that changes whenever any input-affecting field changes.

        The default ``head`` is left out of the hash, so artifacts exported before the field existed
        keep the fingerprint their manifest records; so are ``temperature`` and ``label_bias``, which
        change no input (an artifact can be calibrated after export).
        """
        d = self.to_json()
        del d["temperature"]
        d.pop("label_bias", None)
        if d["head"] == "label_rows":
            del d["head"]
        blob = json.dumps(d, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


#: The scoring contract's defaults (label tokens and values, token budgets, padding side), read
#: from :class:`ScorerSpec`'s own fields: the one place they are stated. :meth:`Scorer.create`, the
#: student config (:class:`r3edge.core.config.ScorerBudget`) and the benchmarks take them from here.
SPEC_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ScorerSpec) if f.default is not MISSING}


@dataclass(frozen=True)
class Encoded:
    """One pair's token ids and what truncation did to it.

    ``input_ids[:prefix_len]`` (template head + query + mid) is the same for every document of the
    query; ``input_ids[prefix_len:]`` (document + tail) is the pair's own part. A causal student
    computes the shared prefix once per request (see :meth:`Scorer.split`).
    """

    input_ids: list[int]
    doc_tokens: int
    doc_tokens_dropped: int
    prefix_len: int = 0
    query_tokens_dropped: int = 0

    @property
    def prefix(self) -> list[int]:
        return self.input_ids[: self.prefix_len]

    @property
    def suffix(self) -> list[int]:
        return self.input_ids[self.prefix_len :]


#: What to do with a query or document over its token budget: cut it (keep its first tokens) or
#: refuse it with an :class:`InvalidInput` naming the field. One policy, ``overflow``, for both parts.
Overflow = Literal["truncate", "reject"]
OVERFLOW: tuple[Overflow, ...] = ("truncate", "reject")
#: The one default of ``overflow``: :meth:`Scorer.encode_batch`, :func:`score_pairs`, training,
#: evaluation, export parity, the benchmarks, ``r3edge serve --overflow`` and the Triton tokenizer all
#: take it from here, so a long pair is formatted the same way in every one of them (no train/serve
#: skew through the policy).
#:
#: Why cut rather than refuse: a reranker sits behind a first stage that has already accepted the
#: query (a RAG pipeline, a search box); refusing it fails the user's whole request, while cutting keeps
#: the query's first ``max_query_tokens`` tokens and says so in every answer (``query_truncated``,
#: each result's ``truncated``, ``r3edge_truncated_total``), so nothing is cut silently. Real queries
#: run past the budget: the demo student's is 48 tokens and SemEval questions are longer
#: (benchmarks/results/base-preservation-demo-xeon-2core/README.md). The order of
#: contract 3 holds either way: the document gives way to the query (it gets what the query leaves of
#: ``max_total_tokens``) and the template's scoring tail is never cut. Training takes the same
#: default, so a student learns on the cut query it will be served; the cost is that the teacher's
#: label was given for the whole query. ``"reject"`` is for callers that must not score a cut text
#: (training or an evaluation that wants whole queries, a client that splits documents itself).
DEFAULT_OVERFLOW: Overflow = "truncate"


def _load_tokenizer(path: Path):
    from tokenizers import Tokenizer

    if not path.is_file():
        raise NotFound(
            f"no {TOKENIZER_FILE} at {path}",
            "every student directory and artifact holds tokenizer.json; re-run `r3edge train` or `r3edge export`",
        )
    return Tokenizer.from_file(str(path))


class Scorer:
    """A :class:`ScorerSpec` bound to its tokenizer: the only student-input formatter."""

    def __init__(self, spec: ScorerSpec, tokenizer):
        if tokenizer.padding is not None or tokenizer.truncation is not None:
            # Its own padding or truncation would change ids behind the scorer's back.
            raise FormatError(
                "the scorer's tokenizer pads or truncates by itself "
                f"(padding={tokenizer.padding}, truncation={tokenizer.truncation})",
                "build the scorer with Scorer.create, which switches both off, or re-run `r3edge train`",
            )
        self.spec = spec
        self.tokenizer = tokenizer
        # User text (queries, documents) is encoded with special-token strings taken as plain text: a
        # post containing "<|im_end|>" or "[SEP]" must not close the template's turn or segment and
        # write the answer itself. The template pieces keep their special tokens.
        from tokenizers import Tokenizer

        self._text_tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self._text_tokenizer.encode_special_tokens = True
        self._head = self._ids(spec.template.head)
        self._mid = self._ids(spec.template.mid)
        self._tail = self._ids(spec.template.tail)
        self.fixed_tokens = len(self._head) + len(self._mid) + len(self._tail)
        if self.fixed_tokens + spec.max_query_tokens + 1 > spec.max_total_tokens:
            raise InvalidInput(
                f"scorer spec: max_total_tokens={spec.max_total_tokens} leaves no room for a document "
                f"(template {self.fixed_tokens} + query {spec.max_query_tokens} tokens)",
                "raise max_total_tokens or lower max_query_tokens",
            )
        self.verify_label_tokens()

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def create(
        tokenizer,
        template: PromptTemplate,
        *,
        label_tokens: Sequence[str] = SPEC_DEFAULTS["label_tokens"],
        label_values: Sequence[float] = SPEC_DEFAULTS["label_values"],
        max_query_tokens: int = SPEC_DEFAULTS["max_query_tokens"],
        max_doc_tokens: int = SPEC_DEFAULTS["max_doc_tokens"],
        max_total_tokens: int = SPEC_DEFAULTS["max_total_tokens"],
        padding_side: str = SPEC_DEFAULTS["padding_side"],
        pad_token_id: int | None = None,
        head: str = SPEC_DEFAULTS["head"],
    ) -> Scorer:
        """Resolve label token ids from the tokenizer and build a spec (used when training starts).

        The scorer gets its own copy of ``tokenizer`` with padding and truncation switched off: a
        tokenizer.json may carry them (all-MiniLM-L6-v2's pads and cuts every encoding to 128), and
        the scorer alone decides where a pair is cut and how a batch is padded.
        """
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_str(tokenizer.to_str())
        tokenizer.no_padding()
        tokenizer.no_truncation()
        ids = []
        for tok in label_tokens if head == "label_rows" else ():
            enc = tokenizer.encode(tok, add_special_tokens=False).ids
            if len(enc) != 1:
                raise InvalidInput(
                    f"label token {tok!r} is {len(enc)} tokens in this tokenizer, not one",
                    "choose label_tokens that are single tokens (digits are in Qwen and SmolLM2)",
                )
            ids.append(enc[0])
        if pad_token_id is None:
            pad_token_id = _guess_pad_id(tokenizer)
        spec = ScorerSpec(
            template=template,
            label_tokens=tuple(label_tokens),
            label_token_ids=tuple(ids),
            label_values=tuple(float(v) for v in label_values),
            max_query_tokens=max_query_tokens,
            max_doc_tokens=max_doc_tokens,
            max_total_tokens=max_total_tokens,
            padding_side=padding_side,
            pad_token_id=pad_token_id,
            head=head,
        )
        return Scorer(spec, tokenizer)

    @staticmethod
    def load(directory: str | Path) -> Scorer:
        """Read ``scorer.json`` and ``tokenizer.json`` from a student checkpoint or an artifact."""
        directory = Path(directory)
        spec_path = directory / SCORER_FILE
        if not spec_path.is_file():
            raise NotFound(
                f"{directory} has no {SCORER_FILE}, so r3edge cannot know how to format inputs for it",
                "point at a directory written by `r3edge train` or `r3edge export`",
            )
        try:
            spec = ScorerSpec.from_json(json.loads(spec_path.read_text()))
        except (json.JSONDecodeError, TypeError, KeyError) as exc:
            raise FormatError(f"{spec_path} is not a valid scorer spec ({exc})", "re-run `r3edge train`") from exc
        return Scorer(spec, _load_tokenizer(directory / TOKENIZER_FILE))

    def save(self, directory: str | Path) -> None:
        """Write ``scorer.json`` and ``tokenizer.json`` (the pair that defines the input)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(str(directory / TOKENIZER_FILE))
        (directory / SCORER_FILE).write_text(json.dumps(self.spec.to_json(), indent=2) + "\n")

    def verify_label_tokens(self) -> None:
        """Fail loudly when the spec's label ids do not belong to this tokenizer (label_rows head only)."""
        if self.spec.head != "label_rows":
            return
        for tok, tid in zip(self.spec.label_tokens, self.spec.label_token_ids, strict=True):
            got = self.tokenizer.encode(tok, add_special_tokens=False).ids
            if got != [tid]:
                raise InvalidInput(
                    f"label token {tok!r} has id {tid} in scorer.json but encodes to {got} with this tokenizer",
                    "the artifact mixes files from different models; re-export it from one student directory",
                )

    # -- encoding -----------------------------------------------------------------------------
    def _ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode(self, query: str, document: str) -> Encoded:
        return self.encode_batch([query], [document])[0]

    def encode_batch(self, queries: Sequence[str], documents: Sequence[str], *, overflow: Overflow = DEFAULT_OVERFLOW,
                     doc_field: str = "documents[{}]") -> list[Encoded]:
        """Token ids for each pair; the tail is never cut.

        A query over ``max_query_tokens``, or a document over what the query leaves of the budget, is
        cut to it (``overflow="truncate"``, :data:`DEFAULT_OVERFLOW`) or refused (``"reject"``: an
        :class:`InvalidInput` naming ``query`` or ``doc_field.format(i)``).
        :attr:`Encoded.query_tokens_dropped` / ``doc_tokens_dropped`` say what a cut removed.
        """
        if overflow not in OVERFLOW:
            raise InvalidInput(f"overflow={overflow!r}", f"use one of {', '.join(OVERFLOW)}", field="overflow")
        if len(queries) != len(documents):
            raise ValueError("queries and documents differ in length")
        spec = self.spec
        uniq = list(dict.fromkeys(queries))
        # per query once: its prefix ids, what it drops, the budget it leaves a document
        per_query = {}
        for q, e in zip(uniq, self._encode_texts(uniq)):
            q_ids = e.ids
            if len(q_ids) > spec.max_query_tokens and overflow == "reject":
                raise InvalidInput(
                    f"query is {len(q_ids)} tokens, over max_query_tokens={spec.max_query_tokens} "
                    f"(query starts {q[:60]!r})",
                    "shorten the query, raise max_query_tokens in the student config and retrain, "
                    "or let it be cut (overflow truncate, the default; r3edge serve --overflow truncate)",
                    field="query",
                )
            qi = q_ids[: spec.max_query_tokens]
            per_query[q] = (self._head + qi + self._mid, len(q_ids) - len(qi),
                            min(spec.max_doc_tokens, spec.max_total_tokens - self.fixed_tokens - len(qi)))
        out = []
        for i, (q, d) in enumerate(zip(queries, self._encode_texts(documents))):
            prefix, q_dropped, budget = per_query[q]
            d_ids = d.ids  # a new Python list on every read of .ids: read once
            if len(d_ids) > budget and overflow == "reject":
                raise InvalidInput(
                    f"{doc_field.format(i)} is {len(d_ids)} tokens, over the {budget} this query leaves it "
                    f"(max_doc_tokens={spec.max_doc_tokens}, max_total_tokens={spec.max_total_tokens})",
                    "shorten or split the document, or let it be cut (overflow truncate, the default; "
                    "r3edge serve --overflow truncate)",
                    field=doc_field.format(i),
                )
            di = d_ids[:budget]
            out.append(
                Encoded(
                    input_ids=prefix + di + self._tail,
                    doc_tokens=len(di),
                    doc_tokens_dropped=len(d_ids) - len(di),
                    prefix_len=len(prefix),
                    query_tokens_dropped=q_dropped,
                )
            )
        return out

    def _encode_texts(self, texts: Sequence[str]) -> list:
        """User texts to token ids (special-token strings as plain text), without character offsets:
        ``encode_batch_fast`` skips computing them (with the reads below, a fifth of a SemEval top-100's
        tokenising on 2 cores; a tokenizers release without it falls back to ``encode_batch``).
        :meth:`render_batch`, which needs offsets, encodes its own."""
        tok = self._text_tokenizer
        return getattr(tok, "encode_batch_fast", tok.encode_batch)(list(texts), add_special_tokens=False)

    def render_batch(self, queries: Sequence[str], documents: Sequence[str], **encode_kw) -> list[str]:
        """Each pair's input as text, for engines that take text only (TEI, a vLLM client without ids):
        ``head + query + mid + document + tail`` with the query and the document cut where
        :meth:`encode_batch` (called with ``encode_kw``) cuts them, at the end of the last kept
        token's characters in the original text.

        The engine re-tokenises the joined text, which can merge tokens across a seam of the
        template (a byte-level BPE reads ``"Query: " + "best"`` as ``" best"``) and reads special-token
        strings in user text as special tokens; :meth:`encode_batch`'s ids are the exact input.
        """
        encoded = self.encode_batch(queries, documents, **encode_kw)
        t = self.spec.template

        def cut(text: str, dropped: int) -> str:
            if not dropped:
                return text
            enc = self._text_tokenizer.encode(text, add_special_tokens=False)
            keep = len(enc.ids) - dropped
            return text[: enc.offsets[keep - 1][1]] if keep else ""

        return [t.head + cut(q, e.query_tokens_dropped) + t.mid + cut(d, e.doc_tokens_dropped) + t.tail
                for q, d, e in zip(queries, documents, encoded, strict=True)]

    def split(self, encoded: Sequence[Encoded]) -> list[tuple[list[int], list[int]]]:
        """Group encoded pairs by their shared prefix: ``[(prefix_ids, [index, ...]), ...]`` in first-seen order.

        The prefix is the template head, the (whole, never cut) query and the template's mid piece;
        the rest of each pair (``Encoded.suffix``: its cut document and the tail) is what the
        candidate graph reads after a prefix's key/value cache. ``prefix + suffix`` is the
        single-graph input exactly, since both come from :meth:`encode_batch`. A causal student
        reuses the prefix's key/value cache, a cosine student its query embedding; a cross-encoder
        cannot (its prefix tokens attend to the document).
        """
        if self.spec.head not in PREFIX_HEADS:
            raise InvalidInput(f"prefix reuse needs a causal or cosine student (head {' or '.join(PREFIX_HEADS)}), "
                              f"not head {self.spec.head!r}", "score this artifact through its single graph")
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, e in enumerate(encoded):
            groups.setdefault(tuple(e.prefix), []).append(i)
        return [(list(p), idx) for p, idx in groups.items()]

    def collate(self, encoded: Sequence[Encoded], width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Pad to the longest sequence (or to ``width``, e.g. ``max_total_tokens`` for an engine that
        batches only equal shapes) on the spec's side: int64 ``input_ids`` and ``attention_mask``."""
        return self.collate_ids([e.input_ids for e in encoded], width)

    def collate_ids(self, rows: Sequence[Sequence[int]], width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`collate` for bare id lists (the candidate suffixes of the prefix path use it)."""
        longest = max(len(r) for r in rows)
        if width is not None and width < longest:
            raise InvalidInput(f"a row of {longest} tokens does not fit the padded width {width}",
                               "pad to at least the longest row (max_total_tokens holds every encoded pair)")
        width = width or longest
        ids = np.full((len(rows), width), self.spec.pad_token_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, r in enumerate(rows):
            n = len(r)
            sl = slice(width - n, width) if self.spec.padding_side == "left" else slice(0, n)
            ids[i, sl] = r
            mask[i, sl] = 1
        return ids, mask

    # -- output -------------------------------------------------------------------------------
    def probabilities(self, label_logits: np.ndarray) -> np.ndarray:
        """``softmax(label_logits / temperature + label_bias)``: the spec's calibration applied (1.0 and no
        bias: none)."""
        z = np.asarray(label_logits, dtype=np.float64) / self.spec.temperature
        return softmax(z if self.spec.label_bias is None else z + np.asarray(self.spec.label_bias))

    def relevance(self, label_logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(probs [n, n_labels], score [n])`` with score = Σ p·label_value (monotone, 0..2)."""
        probs = self.probabilities(label_logits)
        return probs, probs @ np.asarray(self.spec.label_values, dtype=np.float64)


def softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


#: Padded tokens per micro-batch on a CPU, the default of every scorer (server, benchmarks, evaluation).
#: Measured on the demo's MiniLM student (top-100s of ~42 tokens a pair, 2 AVX-512 cores) in four
#: interleaved sweeps over 256-8,192: 512 was the int8 artifact's fastest in three and within noise
#: in the fourth (the last one, 8 top-100s x 4 reps, p50: 256 tokens 296 ms, 384 266, 512 255, 768 260,
#: 1,024 280); torch bf16 was flat from 384 to 1,024 (454-466 ms) and torch fp32 from 512 to 1,024;
#: 8,192 (the old default) was 1.1-1.6x slower for every runtime (smaller batches keep activations in
#: cache and pad attention less). benchmarks/scripts/cpu_speed.py sweeps it again. A GPU wants
#: more (:data:`GPU_MAX_BATCH_TOKENS`); :func:`default_batch_limits` picks between the two.
DEFAULT_MAX_BATCH_TOKENS = 512
#: The budget of a session led by a GPU provider (CUDA, TensorRT). Served fp16 over gRPC on an H200, 8,192 padded
#: tokens and 64 pairs a micro-batch (about three micro-batches for a SemEval top-100) beat a whole top-100 in one
#: (32,768 and 128) for both MiniLM students, at concurrency 1 (p50 11.7 against 14.3 ms per top-100; demo student
#: 9.1 against 10.7) and at 16 (15,975 against 11,710 pairs/s): benchmarks/results/gpu-students-h200-second-run.
#: The third run confirmed both students' order (fp16: 10.8 against 13.9 ms, demo 8.9 against 11.0) and served the
#: 1.5B-shape causal student under these limits in 139.9 ms against 245.9 per top-100 (4,096 tokens: 127.1 ms, at
#: concurrency 1 only): benchmarks/results/gpu-students-h200-third-run. benchmarks/gpu serves a whole top-100 in
#: one micro-batch beside them (GPU_WHOLE_TOP100_LIMITS there).
GPU_MAX_BATCH_TOKENS = 8192
#: Pairs in one micro-batch at most, on a CPU (:data:`DEFAULT_MAX_BATCH_TOKENS` caps it first on real pairs) and
#: on a GPU provider (the second run above).
DEFAULT_MAX_BATCH_SIZE = 64
GPU_MAX_BATCH_SIZE = 64
#: Providers that run a session on a GPU.
GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider", "ROCMExecutionProvider", "MIGraphXExecutionProvider")


def default_batch_limits(providers: Sequence[str]) -> tuple[int, int]:
    """``(max_batch_tokens, max_batch_size)`` of one micro-batch on ``providers`` (a runtime's active
    providers, in priority order): :data:`GPU_MAX_BATCH_TOKENS` and :data:`GPU_MAX_BATCH_SIZE` when a GPU
    provider leads, else :data:`DEFAULT_MAX_BATCH_TOKENS` and :data:`DEFAULT_MAX_BATCH_SIZE`. The one place
    the limits are chosen: each runtime's ``max_batch_tokens`` and ``max_batch_size``
    (:class:`r3edge.core.artifact.Runtime`) are these, and the server's engine reads the runtime's unless
    ``--max-batch-tokens`` / ``--max-batch-size`` are set."""
    if providers and providers[0] in GPU_PROVIDERS:
        return GPU_MAX_BATCH_TOKENS, GPU_MAX_BATCH_SIZE
    return DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_BATCH_SIZE


def plan_batches(
    lengths: Sequence[int], max_batch_tokens: int, max_batch_size: int, *, padded: bool = True
) -> list[list[int]]:
    """Group indices into length-sorted micro-batches under a token budget.

    Sorting by length removes most padding (measured 2.4x on a top-100 here); the budget counts
    padded tokens (batch size x longest member), which is what the kernels pay for, or with
    ``padded=False`` the real tokens, which is what a packed graph pays for (``Runtime.packed``).
    A single pair longer than the budget still gets a batch of its own.
    """
    if max_batch_tokens <= 0 or max_batch_size <= 0:
        raise InvalidInput("max_batch_tokens and max_batch_size must be positive", "set both > 0")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    real = 0
    for i in order:
        # sorted ascending, so the newcomer is the longest member
        cost = real + lengths[i] if not padded else (len(cur) + 1) * lengths[i]
        if cur and (cost > max_batch_tokens or len(cur) >= max_batch_size):
            batches.append(cur)
            cur, real = [], 0
        cur.append(i)
        real += lengths[i]
    if cur:
        batches.append(cur)
    return batches


def _guess_pad_id(tokenizer) -> int:
    for tok in ("<|endoftext|>", "<|pad|>", "<pad>", "[PAD]", "</s>"):
        tid = tokenizer.token_to_id(tok)
        if tid is not None:
            return tid
    return 0



class PrefixRunner(Protocol):
    """A runtime that scores a student in two graphs (the shared prefix once per query).

    ``prefix(input_ids [1, P]) -> cache`` runs the template head + query once (a causal student's
    key/value cache, a cosine student's query embedding); ``candidates(cache,
    input_ids [B, S], attention_mask [B, S]) -> label_logits [B, n_labels]`` scores document +
    tail suffixes (padded by :meth:`Scorer.collate_ids`) after that cache.
    """

    def prefix(self, input_ids: np.ndarray) -> Any: ...

    def candidates(self, cache: Any, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray: ...


def score_pairs(
    scorer: Scorer,
    run_batch,
    queries: Sequence[str],
    documents: Sequence[str],
    *,
    max_batch_tokens: int | None = None,
    max_batch_size: int | None = None,
    stats: dict | None = None,
    prefix: PrefixRunner | None = None,
    overflow: Overflow = DEFAULT_OVERFLOW,
) -> np.ndarray:
    """Label logits ``[n, n_labels]`` for pairs, in input order, via length-sorted micro-batches.

    ``run_batch(input_ids, attention_mask) -> label_logits`` is any runtime (torch, onnxruntime,
    ...). ``stats``, if given, receives ``truncated_docs``, ``doc_tokens_dropped``, ``n_batches`` and
    ``tokenize_ms`` (the time spent turning text into ids, nothing else). ``max_batch_tokens`` and
    ``max_batch_size`` unset: the runtime's own limits (``run_batch.max_batch_tokens`` and
    ``.max_batch_size``, larger on a GPU provider), else :data:`DEFAULT_MAX_BATCH_TOKENS` and
    :data:`DEFAULT_MAX_BATCH_SIZE`.
    Every caller that scores pairs goes through here, so formatting, truncation, batching
    and reordering are the same in training-time evaluation, export parity, serving and benchmarks.

    With ``prefix`` (a :class:`PrefixRunner`), ``run_batch`` is not used: each distinct prefix
    (template head + query) runs once and its documents' suffixes are micro-batched by suffix
    length after its cache (:meth:`Scorer.split`). Over-long input follows ``overflow``, as in
    :meth:`Scorer.encode_batch`.
    """
    t_tok = time.perf_counter()
    encoded = scorer.encode_batch(queries, documents, overflow=overflow)
    tokenize_ms = (time.perf_counter() - t_tok) * 1e3
    if stats is not None:
        stats["tokenize_ms"] = tokenize_ms
    owner = getattr(run_batch, "__self__", run_batch)  # a runtime, or its bound label_logits
    budget = max_batch_tokens or getattr(owner, "max_batch_tokens", None) or DEFAULT_MAX_BATCH_TOKENS
    size = max_batch_size or getattr(owner, "max_batch_size", None) or DEFAULT_MAX_BATCH_SIZE
    return score_encoded(scorer, run_batch, encoded, max_batch_tokens=budget,
                         max_batch_size=size, stats=stats, prefix=prefix)


def score_encoded(
    scorer: Scorer,
    run_batch,
    encoded: Sequence[Encoded],
    *,
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    stats: dict | None = None,
    prefix: PrefixRunner | None = None,
) -> np.ndarray:
    """:func:`score_pairs` after tokenisation: label logits for pairs already encoded by ``scorer``
    (the server's engine tokenises on arrival and scores a prefix-reuse request through here)."""
    out = np.empty((len(encoded), scorer.spec.n_labels), dtype=np.float32)
    if prefix is None:
        groups = [(None, list(range(len(encoded))))]
    else:
        groups = scorer.split(encoded)
    lengths = [len(e.input_ids) if prefix is None else len(e.suffix) for e in encoded]
    plans = [(pre, [[idx[j] for j in b] for b in plan_batches([lengths[i] for i in idx], max_batch_tokens,
                                                               max_batch_size)]) for pre, idx in groups]
    if stats is not None:
        # What truncation and batching did, for callers that report it (the server, benchmarks).
        stats["truncated_docs"] = sum(1 for e in encoded if e.doc_tokens_dropped)
        stats["doc_tokens_dropped"] = sum(e.doc_tokens_dropped for e in encoded)
        stats["n_batches"] = sum(len(b) for _, b in plans)
        stats["n_prefixes"] = 0 if prefix is None else len(plans)
    for pre, batches in plans:
        cache = None if prefix is None else prefix.prefix(np.asarray([pre], dtype=np.int64))
        for idx in batches:
            if prefix is None:
                ids, mask = scorer.collate([encoded[i] for i in idx])
                got = run_batch(ids, mask)
            else:
                ids, mask = scorer.collate_ids([encoded[i].suffix for i in idx])
                got = prefix.candidates(cache, ids, mask)
            out[idx] = np.asarray(got, dtype=np.float32)
    return out


ScoreFn = Callable[[Sequence[str], Sequence[str]], np.ndarray]


@dataclass
class Scoring:
    """A score function ``(queries, documents) -> label_logits`` with what is needed to read its
    logits (label values) and to name it: a torch student, an artifact and a server all look alike."""

    name: str
    fn: ScoreFn
    scorer: Scorer | None = None
    label_values: tuple[float, ...] | None = None
    close: Callable[[], None] = field(default=lambda: None)

    def __call__(self, queries: Sequence[str], documents: Sequence[str]) -> np.ndarray:
        return self.fn(queries, documents)
