"""Export a causal student's prefix-reuse graphs: the shared prefix once per request.

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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from r3edge.core.artifact import OUTPUT_NAME, cache_names
from r3edge.core.errors import require
from r3edge.core.onnx_prefix import OnnxPrefixRunner
from r3edge.core.scoring import Scorer, score_pairs
from r3edge.export.parity import AtolError, BatchInvarianceError, NonFiniteError, ShapeError, Tolerances, compare

PREFIX_FILE = "prefix.{variant}.onnx"
CANDIDATE_FILE = "candidate.{variant}.onnx"


def export_prefix_graphs(lm, scorer: Scorer, out_dir: str | Path, queries: Sequence[str], docs: Sequence[str], *,
                         variant: str = "fp32", opset: int | None = None) -> dict:
    """Export the prefix and candidate graphs of ``lm`` into ``out_dir``; returns the manifest entry."""
    torch = require("torch", "export")
    from r3edge.model.prefix import CandidateGraph, PrefixGraph, n_layers

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


def ort_prefix_runner(artifact_dir: str | Path, entry: dict, n_labels: int, threads: int | None = None) -> OnnxPrefixRunner:
    from r3edge.core.onnx_runtime import open_session

    return OnnxPrefixRunner(artifact_dir, entry, lambda path: open_session(path, threads), n_labels)


def check_prefix_graphs(scorer: Scorer, runner, ref_logits: np.ndarray, queries: Sequence[str], docs: Sequence[str], *,
                        single: Callable | None = None, tol: Tolerances = Tolerances()) -> dict:
    """Two-graph scores vs the torch single graph (``ref_logits``): raise :class:`ParityError` on a miss.

    ``single``, if given, is the exported single graph's runner; the report then also holds the
    difference to it (what a server switching paths would see).
    """
    got = score_pairs(scorer, None, queries, docs, max_batch_size=8, prefix=runner)
    if got.shape != ref_logits.shape:
        raise ShapeError("prefix", f"label_logits {got.shape} vs torch {ref_logits.shape}",
                         "the prefix-reuse graphs are broken; export without --prefix-reuse")
    if not np.isfinite(got).all():
        raise NonFiniteError("prefix", "non-finite label_logits",
                             "the prefix-reuse graphs are broken; export without --prefix-reuse")
    report = compare(scorer, ref_logits, got)
    alone = score_pairs(scorer, None, queries, docs, max_batch_size=1, prefix=runner)
    together = score_pairs(scorer, None, queries, docs, max_batch_size=len(queries), max_batch_tokens=1 << 30,
                           prefix=runner)
    report["batch_invariance_max_abs_score_diff"] = float(
        np.abs(scorer.relevance(alone)[1] - scorer.relevance(together)[1]).max())
    if single is not None:
        report["max_abs_logit_diff_vs_single_graph"] = float(
            np.abs(score_pairs(scorer, single, queries, docs, max_batch_size=8) - got).max())
    if report["max_abs_logit_diff"] > tol.atol:
        raise AtolError("prefix", f"max |Δlogit| {report['max_abs_logit_diff']:.3g} > atol {tol.atol:g} "
                        f"between the prefix-reuse graphs and the torch single graph",
                        "positions or masks differ between the two paths; report a bug")
    if report["batch_invariance_max_abs_score_diff"] > tol.fp32_batch_tol:
        raise BatchInvarianceError("prefix", f"a candidate's score moves by "
                                   f"{report['batch_invariance_max_abs_score_diff']:.3g} between alone and in a batch",
                                   "padding/position handling is wrong in the candidate graph; do not serve it")
    return report
