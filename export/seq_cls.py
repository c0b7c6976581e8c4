"""``r3edge export --format hf-seq-cls``: the student as an HF ``*ForSequenceClassification`` checkpoint.

What engines that serve classifiers load (vLLM ``--runner pooling`` on ``/classify``, Hugging Face
TEI): a causal student becomes ``<Arch>ForSequenceClassification`` whose ``score.weight`` is the
label-token rows of its LM head (the conversion vLLM applies to Qwen3-Reranker), with
``pad_token_id`` set so a padded batch pools at the last real token; an encoder cross-encoder is
already a ``BertForSequenceClassification`` and keeps its classifier head. The scorer's calibration
temperature is folded into the head (weights and bias divided by it), so an engine's plain softmax
gives the calibrated probabilities the ONNX artifact's scorer gives. A bi-encoder (``cosine``)
student has no such form and is refused.

The directory holds the weights, the tokenizer (``tokenizer.json`` + ``tokenizer_config.json``),
r3edge's ``scorer.json`` (the scoring contract) and ``r3edge_seq_cls.json`` + ``README.md`` telling
an engine how to build the input: the ids of :meth:`r3edge.core.scoring.Scorer.encode_batch`
where the engine takes token ids (vLLM does), or the text of
:meth:`r3edge.core.scoring.Scorer.render_batch` where it takes text only. The export checks the
checkpoint against the student's own scoring graph on the calibration pairs before it publishes
the directory.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from r3edge.core.errors import InvalidInput, NotFound, R3EdgeError, require
from r3edge.core.fileio import partial_dir, publish_dir
from r3edge.core.scoring import DEFAULT_OVERFLOW, SCORER_FILE, Scorer
from r3edge.export.parity import load_pairs

#: what the engine needs beyond the HF files: the scoring contract, restated for it
ENGINE_FILE = "r3edge_seq_cls.json"
#: max |Δ label logit| between the seq-cls checkpoint (torch fp32) and the student's scoring graph
SEQ_CLS_ATOL = 1e-4


def export_seq_cls(student_dir: str | Path, out_dir: str | Path, *, calib_pairs: str | None = None,
                   max_calib: int = 64, atol: float = SEQ_CLS_ATOL, log=print) -> Path:
    """Write the sequence-classification checkpoint of ``student_dir`` to ``out_dir`` (atomically);
    returns ``out_dir``. Raises :class:`InvalidInput` for a bi-encoder student."""
    torch = require("torch", "export")
    transformers = require("transformers", "export")
    from r3edge.model.student import load_student, scoring_module

    t0 = time.perf_counter()
    student_dir, out = Path(student_dir), Path(out_dir)
    if not (student_dir / SCORER_FILE).is_file():
        raise NotFound(f"student directory {student_dir} has no {SCORER_FILE}",
                       "export a directory written by `r3edge train` (it holds weights + scorer.json + tokenizer.json)")
    scorer = Scorer.load(student_dir)
    spec = scorer.spec
    if spec.head == "cosine":
        raise InvalidInput(
            f"{student_dir} is a biencoder student (scorer head 'cosine': label_logits = weight·cos(query, document) + "
            "bias over two separate embeddings); a sequence-classification model reads one joint input and cannot "
            "express it",
            "export it with --format onnx (the default) and serve the artifact with `r3edge serve`, or train an "
            "encoder (cross-encoder) or causal student for --format hf-seq-cls", field="format")
    if spec.label_bias is not None:
        raise InvalidInput(f"{student_dir} is calibrated with a per-label bias (scorer.json label_bias), which an "
                           "engine's plain softmax over a bias-free head cannot apply",
                           "export with --format onnx (the artifact's scorer applies it), or calibrate with the "
                           "temperature alone (r3edge calibrate without --bias)", field="label_bias")
    lm, scorer = load_student(student_dir)
    graph = scoring_module(lm, scorer).eval()
    t = float(spec.temperature)
    if spec.head == "label_rows":
        model = _causal_to_seq_cls(transformers, torch, lm, spec)
    else:  # classifier: already a *ForSequenceClassification (a copy: the check compares it with `graph`)
        model = copy.deepcopy(lm)
        head = _classifier_linear(model)
        with torch.no_grad():
            head.weight.div_(t)
            if head.bias is not None:
                head.bias.div_(t)
    model.config.pad_token_id = spec.pad_token_id
    model.config.id2label = dict(enumerate(spec.label_tokens))
    model.config.label2id = {v: k for k, v in enumerate(spec.label_tokens)}
    model.eval()

    queries, docs, source = load_pairs(calib_pairs, max_calib)
    check = _check(torch, model, graph, scorer, queries, docs, atol)
    tmp = partial_dir(out)
    model.save_pretrained(str(tmp))
    _hf_tokenizer(transformers, scorer).save_pretrained(str(tmp))
    scorer.save(tmp)  # scorer.json + the very tokenizer.json the contract was written against
    engine = {
        "format": "r3edge-hf-seq-cls/1",
        "architecture": model.config.architectures[0],
        "head": spec.head,
        "num_labels": spec.n_labels,
        "label_tokens": list(spec.label_tokens),
        "label_values": list(spec.label_values),
        "temperature_folded_into_head": t,
        "scorer_fingerprint": spec.fingerprint(),
        "input": {
            "token_ids": "preferred: r3edge.core.scoring.Scorer.encode_batch(queries, documents) ids, sent as they are "
                         "(no special tokens added)",
            "text": "engines that take text only: Scorer.render_batch(queries, documents), tokenised with "
                    "add_special_tokens=False; re-tokenising the joined text can differ from the contract's "
                    "piecewise ids at the template's seams (see README.md)",
            "template": {"head": spec.template.head, "mid": spec.template.mid, "tail": spec.template.tail},
            "max_query_tokens": spec.max_query_tokens, "max_doc_tokens": spec.max_doc_tokens,
            "max_total_tokens": spec.max_total_tokens,
            "overflow": f"{DEFAULT_OVERFLOW} (encode_batch's and render_batch's default; overflow='reject' refuses "
                        "instead): the query is cut to its first max_query_tokens tokens; the document to its first "
                        "min(max_doc_tokens, max_total_tokens - template - query) tokens; the template is never cut",
        },
        "output": "probs = softmax(logits) (temperature already folded in); relevance = sum(probs * label_values)",
        "check": {**check, "pairs_source": source},
    }
    (tmp / ENGINE_FILE).write_text(json.dumps(engine, indent=2) + "\n")
    (tmp / "README.md").write_text(_readme(engine))
    publish_dir(tmp, out)
    log(f"[export] hf-seq-cls {engine['architecture']} -> {out}: max|Δlogit| {check['max_abs_logit_diff']:.2e} vs the "
        f"student's scoring graph on {check['pairs']} pairs ({time.perf_counter() - t0:.1f} s)")
    return out


def _causal_to_seq_cls(transformers, torch, lm, spec):
    """``<Arch>ForSequenceClassification`` with the causal LM's body and ``score.weight`` = its label rows / T."""
    config = lm.config.__class__.from_dict(lm.config.to_dict())
    base = lm.config.architectures[0] if lm.config.architectures else type(lm).__name__
    config.architectures = [base.replace("ForCausalLM", "ForSequenceClassification")]
    config.num_labels = spec.n_labels
    config.tie_word_embeddings = False  # no LM head left to tie
    try:
        model = transformers.AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
    except ValueError as exc:
        raise InvalidInput(f"transformers has no sequence-classification class for {base} ({exc})",
                           "export this student with --format onnx (the default)", field="format") from exc
    body = getattr(model, model.base_model_prefix)
    missing, unexpected = body.load_state_dict(lm.get_decoder().state_dict(), strict=False)
    if missing or unexpected:
        raise R3EdgeError(f"the seq-cls body of {base} does not take the student's weights (missing {missing[:3]}, "
                          f"unexpected {unexpected[:3]})", "report a bug with the student's config.json")
    rows = lm.get_output_embeddings().weight.detach().float()[list(spec.label_token_ids)]
    with torch.no_grad():
        model.score.weight.copy_(rows / float(spec.temperature))
    return model


def _classifier_linear(model):
    """The last linear layer of an encoder's classification head (BERT: ``classifier``)."""
    head = getattr(model, "classifier", None)
    head = getattr(head, "out_proj", head)  # RoBERTa-style heads end in out_proj
    if head is None or not hasattr(head, "weight"):
        raise InvalidInput(f"{type(model).__name__} has no linear classifier head r3edge can fold the temperature into",
                           "export this student with --format onnx (the default)", field="format")
    return head


def _hf_tokenizer(transformers, scorer: Scorer):
    """The scorer's tokenizer as a transformers fast tokenizer with its special tokens named (an engine's
    ``AutoTokenizer`` reads tokenizer_config.json)."""
    # a classifier reads a pair encoding's segment ids too (BERT; see EncoderScorer)
    names = ["input_ids", "token_type_ids", "attention_mask"] if scorer.spec.head == "classifier" else None
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=scorer.tokenizer,
                                               **({"model_input_names": names} if names else {}))
    pad = scorer.tokenizer.id_to_token(scorer.spec.pad_token_id)
    special = {"pad_token": pad}
    for name, cand in (("cls_token", "[CLS]"), ("sep_token", "[SEP]"), ("unk_token", "[UNK]"), ("mask_token", "[MASK]")):
        if scorer.tokenizer.token_to_id(cand) is not None:
            special[name] = cand
    tok.add_special_tokens({k: v for k, v in special.items() if v is not None})
    tok.model_max_length = scorer.spec.max_total_tokens
    return tok


def _check(torch, model, graph, scorer: Scorer, queries, docs, atol: float) -> dict:
    """The checkpoint, fed one unpadded pair at a time as an engine feeds it, against the student's
    scoring graph / T; raises when they differ by more than ``atol``."""
    import numpy as np

    enc = scorer.encode_batch(queries, docs)
    worst = 0.0
    with torch.no_grad():
        for e in enc:
            ids = torch.tensor([e.input_ids])
            mask = torch.ones_like(ids)
            ref = graph(ids, mask).float().numpy() / scorer.spec.temperature
            kw = {"token_type_ids": graph.token_type_ids(ids, mask)} if getattr(graph, "segments", False) else {}
            got = model(input_ids=ids, attention_mask=mask, **kw).logits.float().numpy()
            worst = max(worst, float(np.abs(got - ref).max()))
    if worst > atol:
        raise R3EdgeError(f"the seq-cls checkpoint differs from the student's scoring graph by {worst:.2e} in label "
                          f"logits (allowed {atol:.0e})", "report a bug with the student's config.json")
    return {"pairs": len(enc), "max_abs_logit_diff": worst, "atol": atol}


def _readme(engine: dict) -> str:
    inp = engine["input"]
    return f"""# r3edge student as a sequence-classification model

`{engine['architecture']}`, {engine['num_labels']} labels {engine['label_tokens']} with values
{engine['label_values']}; scorer fingerprint `{engine['scorer_fingerprint']}`. Written by
`r3edge export --format hf-seq-cls`. Checked at export against the student's own scoring graph:
max |Δ label logit| {engine['check']['max_abs_logit_diff']:.1e} on {engine['check']['pairs']} pairs.

## The input (the scoring contract, `scorer.json`)

The model was trained on `head + query + mid + document + tail`, each piece tokenised on its own
(no special tokens added) and the ids concatenated; with the default `overflow: {DEFAULT_OVERFLOW}` the query
is cut to its first {inp['max_query_tokens']} tokens, the document to its first min({inp['max_doc_tokens']},
{inp['max_total_tokens']} - template - query) tokens; the template is never cut. Template pieces:

```json
{json.dumps(inp['template'], indent=2, ensure_ascii=False)}
```

* **Token ids (exact, preferred):** `Scorer.load(this_dir).encode_batch(queries, documents)` gives
  each pair's `input_ids`; send them as they are. vLLM's `/classify` takes them
  (`{{"model": NAME, "input": [[ids...], ...]}}`).
* **Text:** `Scorer.load(this_dir).render_batch(queries, documents)` gives the same pieces joined as
  text after the same cuts; tokenise with `add_special_tokens=False`. A byte-level BPE tokeniser
  may join tokens across a seam (`"Query: " + "best"` becomes `" best"`), so text input can differ
  slightly from what the student was trained on; user text that contains a special-token string
  (`<|im_end|>`, `[SEP]`) is read as that token by an engine, where r3edge reads it as plain text.

## The output

`probs = softmax(logits)`: the calibration temperature ({engine['temperature_folded_into_head']}) is
already folded into the head. Relevance (0..{max(engine['label_values']):g}) is
`sum(probs * label_values)`; rank by it.

## vLLM (tested in r3edge's test suite, CPU)

```
python -m vllm.entrypoints.openai.api_server --model THIS_DIR --runner pooling --served-model-name r3edge
curl -s localhost:8000/classify -d '{{"model": "r3edge", "input": [[...ids...]]}}'
```

An encoder (BERT) checkpoint loads in vLLM's CPU pooling runner too, but `/classify` gives it no
`token_type_ids` (every token in segment 0) and vLLM enables `/score`, which encodes pairs, only for
one-label models: measured on r3edge's tiny BERT student, max |Δprob| 0.49 against the student.
Serve an encoder export with TEI (pairs) or with `r3edge serve`, not with vLLM.

## Hugging Face TEI (not runnable on r3edge's machines; not tested)

TEI serves `*ForSequenceClassification` checkpoints as rerankers/classifiers:

```
docker run -p 8080:80 -v THIS_DIR:/data ghcr.io/huggingface/text-embeddings-inference:<tag> --model-id /data
curl -s localhost:8080/predict -d '{{"inputs": ["<rendered text>"], "raw_scores": true}}'
```

Causal students: send the text of `Scorer.render_batch` to `/predict` (one string per pair; not
TEI's `/rerank`, which builds its own pair input and knows nothing of this template). Encoder
students: send `[query, document]` pairs to `/predict` (`{{"inputs": [["q", "d"], ...]}}`), which
TEI encodes as the tokenizer's pair encoding, `[CLS] q [SEP] d [SEP]` with segment ids: the
contract's input exactly, except that TEI truncates the pair by its own rule (cut the document to
the contract's budget first, e.g. with the document part of `render_batch`). Apply softmax to the
raw scores (or let TEI do it) and take `sum(probs * label_values)`. Whether TEI supports the
decoder architecture `{engine['architecture']}` as a classifier depends on its version: check
TEI's supported-models list before deploying.
"""
