"""Export a causal or cosine student's prefix-reuse graphs: the shared prefix once per request.

Every candidate of a request shares the template head, the query and the template's mid piece (47%
of each pair's tokens for the demo student). ``r3edge export --prefix-reuse`` adds two graphs to the
artifact next to the single scoring graph (:mod:`r3edge.model.prefix`):

    prefix.fp32.onnx     input_ids [1, P] -> present_key_i / present_value_i [1, kv_heads, P, head_dim]
    candidate.fp32.onnx  input_ids, attention_mask [B, S] (document + tail) + past_key_i / past_value_i
                         -> label_logits [B, n_labels]

and records them under ``prefix_graphs`` in the manifest. They are validated like the single graph:
the two-graph scores must equal the torch single graph to ``atol`` on every validation pair, and a
pair's score must not move between scoring it alone and among candidates of other lengths. The
server uses them when the variant it serves has them.

A cosine student exports the same two files from :class:`r3edge.model.prefix.QueryEmbeddingGraph`
and :class:`r3edge.model.prefix.DocumentCosineGraph` (the query embedded once, each document
alone): for the demo's student that drops the query's tokens from every candidate row.

Each quantized ONNX variant of the artifact gets its own candidate graph, quantized from the fp32
candidate graph by the variant's preset (:func:`quantize_candidate_graph`; calibration rows are the
validation pairs' suffixes after their fp32 prefix state, one pair per row, so no padding reaches the
statistics). The prefix graph stays fp32 in every variant: it runs once per request, and its state
feeds every candidate. A quantized variant's two graphs pass the same checks as its single graph
(``check_variant``: shape, finite, batch invariance where the scheme claims it; logits reported, not
held to ``atol``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from r3edge.core.artifact import OUTPUT_NAME, cache_names
from r3edge.core.errors import require
from r3edge.core.onnx_prefix import OnnxPrefixRunner
from r3edge.core.scoring import Scorer, score_pairs
from r3edge.export.parity import Tolerances, check_variant
from r3edge.export.quantize import QuantPreset, quantize

PREFIX_FILE = "prefix.{variant}.onnx"
CANDIDATE_FILE = "candidate.{variant}.onnx"


def export_prefix_graphs(lm, scorer: Scorer, out_dir: str | Path, queries: Sequence[str], docs: Sequence[str], *,
                         variant: str = "fp32", opset: int | None = None, log=print) -> dict:
    """Export the prefix and candidate graphs of ``lm`` into ``out_dir``; returns the manifest entry."""
    torch = require("torch", "export")
    from r3edge.model.prefix import CandidateGraph, PrefixGraph, n_layers

    if scorer.spec.head == "cosine":
        return _export_cosine_graphs(lm, scorer, Path(out_dir), queries, docs, variant=variant, opset=opset, log=log)

    out_dir = Path(out_dir)
    layers = n_layers(lm)
    kwargs = {"opset_version": opset} if opset else {}
    enc = scorer.encode_batch(list(queries[:2]), list(docs[:2]))
    (pre_ids, idx), *_ = scorer.split(enc)
    prefix_ids = torch.tensor([pre_ids], dtype=torch.long)
    files = {"prefix": PREFIX_FILE.format(variant=variant), "candidate": CANDIDATE_FILE.format(variant=variant)}
    prefix_len = torch.export.Dim("prefix_len")
    with torch.no_grad():
        program = torch.onnx.export(
            PrefixGraph(lm).eval(), (prefix_ids,), input_names=["input_ids"],
            output_names=cache_names("present", layers), dynamic_shapes={"input_ids": {1: prefix_len}},
            dynamo=True, optimize=True, verbose=False, **kwargs,
        )
        program.save(str(out_dir / files["prefix"]))
        del program
        past = list(PrefixGraph(lm).eval()(prefix_ids))
        ids, mask = scorer.collate_ids([enc[i].suffix for i in idx] * 2)
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")
        program = torch.onnx.export(
            CandidateGraph(lm, scorer.spec.label_token_ids).eval(), (torch.from_numpy(ids), torch.from_numpy(mask), past),
            input_names=["input_ids", "attention_mask", *cache_names("past", layers)], output_names=[OUTPUT_NAME],
            dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq},
                            "past": [{2: prefix_len} for _ in past]},
            dynamo=True, optimize=True, verbose=False, **kwargs,
        )
        program.save(str(out_dir / files["candidate"]))
        del program
    return {**files, "layers": layers}


#: How a candidate graph exported without ONNX Runtime's fusion is described in the export report.
PLAIN_EXPORTER = "torch.onnx.export(dynamo=True)"


def _cosine_modules(lm, scorer: Scorer, queries: Sequence[str], docs: Sequence[str]):
    """The cosine split's query and document modules, a prefix's ids and the candidate graph's example
    inputs (``input_ids``, ``attention_mask``, ``query_embedding``)."""
    import torch

    from r3edge.model.prefix import DocumentCosineGraph, QueryEmbeddingGraph
    from r3edge.model.student import scoring_module

    cls_token_id = scoring_module(lm, scorer).cls_token_id  # the single graph's checks of the template
    enc = scorer.encode_batch(list(queries[:2]), list(docs[:2]))
    (pre_ids, _), *_ = scorer.split(enc)
    prefix_ids = torch.tensor([pre_ids], dtype=torch.long)
    query_graph = QueryEmbeddingGraph(lm).eval()
    doc_graph = DocumentCosineGraph(lm, cls_token_id, right_padded=scorer.spec.padding_side == "right").eval()
    ids, mask = scorer.collate_ids([e.suffix for e in enc] * 2)
    with torch.no_grad():
        example = (torch.from_numpy(ids), torch.from_numpy(mask), query_graph(prefix_ids))
    return query_graph, doc_graph, prefix_ids, example


def _export_plain_candidate(doc_graph, example, path: Path, opset: int | None) -> None:
    import torch

    from r3edge.model.prefix import QUERY_EMBEDDING

    kwargs = {"opset_version": opset} if opset else {}
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with torch.no_grad():
        program = torch.onnx.export(
            doc_graph, example, input_names=["input_ids", "attention_mask", QUERY_EMBEDDING],
            output_names=[OUTPUT_NAME],
            dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq},
                            "query_embedding": None},
            dynamo=True, optimize=True, verbose=False, **kwargs,
        )
        program.save(str(path))


def export_plain_cosine_candidate(lm, scorer: Scorer, path: str | Path, queries: Sequence[str], docs: Sequence[str], *,
                                  opset: int | None = None) -> None:
    """A cosine student's candidate graph by the plain export (:data:`PLAIN_EXPORTER`), in standard ONNX
    ops, at ``path``: what an OpenVINO variant is rebuilt from when its IR of the fused graph fails a
    parity check (:func:`r3edge.export.onnx._export_prefix_reuse`)."""
    _, doc_graph, _, example = _cosine_modules(lm, scorer, queries, docs)
    _export_plain_candidate(doc_graph, example, Path(path), opset)


def _export_cosine_graphs(lm, scorer: Scorer, out_dir: Path, queries: Sequence[str], docs: Sequence[str], *,
                          variant: str, opset: int | None, log=print) -> dict:
    """The cosine split; the candidate graph is ONNX Runtime's fused BERT graph where the encoder is
    fusable (:mod:`r3edge.export.fusion`: the fused graph is what the int8 presets were tuned on)."""
    import torch

    from r3edge.export.fusion import export_fused_encoder, fusable
    from r3edge.model.prefix import QUERY_EMBEDDING

    kwargs = {"opset_version": opset} if opset else {}
    files = {"prefix": PREFIX_FILE.format(variant=variant), "candidate": CANDIDATE_FILE.format(variant=variant)}
    query_graph, doc_graph, prefix_ids, example = _cosine_modules(lm, scorer, queries, docs)
    with torch.no_grad():
        program = torch.onnx.export(
            query_graph, (prefix_ids,), input_names=["input_ids"], output_names=[QUERY_EMBEDDING],
            dynamic_shapes={"input_ids": {1: torch.export.Dim("prefix_len")}},
            dynamo=True, optimize=True, verbose=False, **kwargs,
        )
        program.save(str(out_dir / files["prefix"]))
        del program
        names = ("input_ids", "attention_mask", QUERY_EMBEDDING)
        fused = None
        if fusable(lm.config) and doc_graph.right_padded:  # the optimizer's pattern has no position ids
            try:
                fused = export_fused_encoder(lm.encoder, doc_graph, example, out_dir / files["candidate"],
                                             input_names=names)
            except Exception as exc:  # the optional fusion path falls back to the plain export, as for the single graph
                log(f"[export] fused candidate graph unavailable ({exc}); using the dynamo export")
    if fused is None:
        _export_plain_candidate(doc_graph, example, out_dir / files["candidate"], opset)
    return {**files, "layers": 0, "state": [QUERY_EMBEDDING], "candidate_graph": fused or {"exporter": PLAIN_EXPORTER}}


def candidate_calib_feeds(scorer: Scorer, runner: OnnxPrefixRunner, queries: Sequence[str],
                          docs: Sequence[str]) -> list[dict[str, np.ndarray]]:
    """The candidate graph's inputs for the pairs, one pair per feed, after their (fp32) prefix state."""
    enc = scorer.encode_batch(list(queries), list(docs))
    feeds = []
    for pre, idx in scorer.split(enc):
        state = runner.prefix(np.asarray([pre], dtype=np.int64))
        for i in idx:
            ids, mask = scorer.collate_ids([enc[i].suffix])
            feeds.append({"input_ids": ids, "attention_mask": mask, **dict(zip(runner.past, state, strict=True))})
    return feeds


def quantize_candidate_graph(preset: QuantPreset, out_dir: str | Path, fp32_entry: dict, feeds, *, log=print) -> tuple[dict, dict]:
    """Variant ``preset.name``'s entry (the fp32 prefix graph, a candidate graph quantized by ``preset``)
    and the quantization report."""
    out_dir = Path(out_dir)
    entry = {**fp32_entry, "candidate": CANDIDATE_FILE.format(variant=preset.name)}
    info = quantize(preset, out_dir / fp32_entry["candidate"], out_dir / entry["candidate"], feeds, log=log)
    return entry, info


def ort_prefix_runner(artifact_dir: str | Path, entry: dict, n_labels: int, threads: int | None = None,
                      providers: list | None = None) -> OnnxPrefixRunner:
    """The prefix and candidate graphs of ``entry`` in ONNX Runtime sessions on ``providers`` (the CPU's when None)."""
    from r3edge.core.onnx_runtime import open_session

    return OnnxPrefixRunner(artifact_dir, entry, lambda path: open_session(path, threads, providers), n_labels)


def check_prefix_graphs(scorer: Scorer, runner, ref_logits: np.ndarray, queries: Sequence[str], docs: Sequence[str], *,
                        single: Callable | None = None, tol: Tolerances = Tolerances(), variant: str = "prefix",
                        exact: bool = True, batch_invariant: bool = True, max_score_diff: float | None = None,
                        batch_tol: float | None = None) -> dict:
    """Two-graph scores vs the torch single graph (``ref_logits``): raise :class:`ParityError` on a miss
    (:func:`r3edge.export.parity.check_variant`'s checks, through the prefix path).

    ``single``, if given, is the exported single graph's runner (of the same variant); the report then
    also holds the difference to it (what a server switching paths would see). ``max_score_diff``: the
    variant preset's score gate (fp16), and ``batch_tol`` its batch-invariance limit, as for its single graph.
    """
    got = score_pairs(scorer, None, queries, docs, max_batch_size=8, prefix=runner)
    report = check_variant(variant, scorer, None, ref_logits, queries, docs, exact=exact,
                           batch_invariant=batch_invariant, tol=tol, prefix=runner, got=got, max_score_diff=max_score_diff,
                           batch_tol=batch_tol)
    if single is not None:
        report["max_abs_logit_diff_vs_single_graph"] = float(
            np.abs(score_pairs(scorer, single, queries, docs, max_batch_size=8) - got).max())
    return report
