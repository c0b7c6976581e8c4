"""How far a variant of an artifact may stray from its reference, and which variant to serve.

One home for what both ``r3edge export`` (its parity gate, against PyTorch) and ``r3edge bench variants``
(every variant timed beside its fidelity to fp32) hold a variant to, so the two never disagree about what a
faithful variant is: the :class:`Tolerances`, :func:`batch_invariance`, and :func:`recommend_variant`, the
choice of the fastest variant that keeps its fidelity. Torch-free: the export stage, the benchmarks and a
server's startup can all import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from r3edge.core.scoring import Scorer, score_pairs

#: max |Δ label logit| allowed between the ONNX fp32 graph and PyTorch
DEFAULT_ATOL = 1e-3
#: the share of fp32's top 10 a variant must keep to be recommended: on a top-100 request, at most one
#: of the ten results in every five requests may differ
MIN_TOP10_OVERLAP = 0.98

#: keys of a variant's row that :func:`recommend_variant` reads
P50_KEY = "p50_ms"
OVERLAP_KEY = "top10_overlap"
BATCH_INVARIANCE_KEY = "batch_invariance_max_abs_score_diff"


@dataclass(frozen=True)
class Tolerances:
    """The export's parity gate (``r3edge.export.parity.check_variant``), and the batch invariance
    :func:`recommend_variant` asks of a variant."""

    atol: float = DEFAULT_ATOL  # fp32 logits vs torch
    fp32_batch_tol: float = 1e-3  # fp32 |Δ score| alone vs in a batch
    quant_batch_tol: float = 1e-3  # for schemes that claim batch invariance
    min_argmax_agreement: float = 0.9  # below this a quantized variant is flagged ``degraded``


def batch_invariance(scorer: Scorer, run, queries: Sequence[str], docs: Sequence[str], prefix=None) -> float:
    """Max |Δ score| between each pair scored alone and all pairs in one length-mixed batch (through
    ``run``, or through the prefix-reuse graphs of ``prefix``): the server batches unrelated pairs, so a
    score that moves with its batchmates is a bug, not noise."""
    alone = score_pairs(scorer, run, queries, docs, max_batch_size=1, prefix=prefix)
    together = score_pairs(scorer, run, queries, docs, max_batch_size=len(queries), max_batch_tokens=1 << 30,
                           prefix=prefix)
    return float(np.abs(scorer.relevance(alone)[1] - scorer.relevance(together)[1]).max())


def fidelity_failures(row: Mapping[str, Any], *, min_overlap: float = MIN_TOP10_OVERLAP,
                      batch_tol: float = Tolerances().quant_batch_tol, overlap_measured: bool = True) -> list[str]:
    """Why a variant's measured row fails its fidelity to fp32 (empty: it passes).

    ``row[OVERLAP_KEY]`` (mean top-10 overlap with fp32) must be at least ``min_overlap`` and
    ``row[BATCH_INVARIANCE_KEY]`` at most ``batch_tol``; a missing or NaN value fails, except the overlap
    when ``overlap_measured`` is False: requests of 10 candidates or fewer have no top-10 to compare
    (the export's calibration requests), and then only batch invariance is held here.
    """
    def number(key: str) -> float:
        value = row.get(key)
        return float("nan") if value is None else float(value)

    failures = []
    overlap, drift = number(OVERLAP_KEY), number(BATCH_INVARIANCE_KEY)
    if overlap_measured and not overlap >= min_overlap:
        failures.append(f"top-10 overlap {overlap:.3f} < {min_overlap:g}")
    if not drift <= batch_tol:
        failures.append(f"batch invariance {drift:.2g} > {batch_tol:g}")
    return failures


def recommend_variant(rows: Mapping[str, Mapping[str, Any]], *, min_overlap: float = MIN_TOP10_OVERLAP,
                      batch_tol: float = Tolerances().quant_batch_tol, overlap_measured: bool = True) -> str | None:
    """The variant to serve: the fastest (lowest ``row[P50_KEY]``) among ``rows`` (``{variant: row}``) whose
    fidelity passes (:func:`fidelity_failures`); the first listed wins a tie; None when none passes."""
    passing = [v for v, row in rows.items() if not fidelity_failures(row, min_overlap=min_overlap, batch_tol=batch_tol,
                                                                     overlap_measured=overlap_measured)
               and row.get(P50_KEY) is not None and np.isfinite(row[P50_KEY])]
    return min(passing, key=lambda v: rows[v][P50_KEY]) if passing else None
