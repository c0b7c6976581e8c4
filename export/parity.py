"""Validate an exported scoring graph against the PyTorch label scorer, on real formatted pairs.

Like optimum's exporters, every export is checked before it is accepted, with a typed error
saying what failed (shape, tolerance, output names). Beyond optimum, we check what a reranker
needs: the ranking the scores induce (Spearman/Kendall, argmax agreement) and batch invariance
(a pair's score alone vs. inside a length-mixed batch), because the server batches unrelated
requests and a score that moves with its batchmates is a bug, not noise.

Thresholds (why they differ):
* fp32 must match torch to ``atol`` on logits and be batch invariant to ``fp32_batch_tol`` on
  the score; a miss is a :class:`ParityError` and the artifact is not finalised.
* quantized/fp16 variants are recorded, not judged by ranking metrics: on untrained random
  weights the label logits are nearly tied, so argmax agreement says little. They fail on
  gross breakage (wrong shape, NaN/inf, or a batch-invariance miss for a scheme that claims it),
  and a scheme whose only error is float rounding (fp16) also on max |Δ expected score| beyond its
  preset's ``max_score_diff`` (r3edge.export.quantize.FP16_MAX_SCORE_DIFF says why 0.02).
  ``degraded`` is set in the report when argmax agreement < ``min_argmax_agreement``.

Each report names the execution provider the check ran on (``validated_on``; ONNX Runtime's provider,
or ``OpenVINO:CPU``): the export checks on the CPU, and a GPU run (benchmarks/gpu) adds its own record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau, spearmanr

from r3edge.core.errors import ErrorKind, InvalidInput, R3EdgeError
from r3edge.core.fidelity import Tolerances, batch_invariance
from r3edge.core.scoring import Scorer, score_pairs

RunBatch = Callable[[np.ndarray, np.ndarray], np.ndarray]

# Varied lengths, emoji, hashtags and a long document that gets truncated: the padding and
# truncation paths must all be exercised even without a calibration file.
BUILTIN_PAIRS: list[tuple[str, str]] = [
    ("best bank in doha for expats?", "Commercial Bank is great for expats, no minimum balance 👍 #banking"),
    ("best bank in doha for expats?", "lol my cat just knocked over my coffee ☕😹 #mondays"),
    ("best bank in doha for expats?", "I opened an account at QNB last year, the app is ok but fees are high."),
    ("how to renew residence permit qatar", "Renew your RP online via Metrash2: upload passport, pay 500 QR, done in 2 days ✅"),
    ("how to renew residence permit qatar", "My company PRO handled my RP, no idea how it works tbh"),
    ("how to renew residence permit qatar", "Beach day at Sealine 🌊☀️ #weekend #qatar " * 12),
    ("cheap flights to manila", "ok"),
    ("cheap flights to manila", "Cebu Pacific has promo fares from Doha to Manila every month, book 6 weeks ahead for ~900 QR."),
    ("where to buy a used car", "Check QatarLiving classifieds or Qatar Sale; always get the car inspected at Fahes first. " * 3),
    ("where to buy a used car", "anyone watching the match tonight?? ⚽🔥"),
    ("is tap water safe to drink", "Yes, it is desalinated and treated; most people still buy bottled for taste."),
    ("is tap water safe to drink", "My landlord refuses to fix the AC, what can I do? " * 4),
    ("good dentist", "Dr. Smith at the Al Sadd clinic was gentle and affordable, highly recommend."),
    ("good dentist", "x"),
    ("weekend activities for kids in doha", "Kidzania at Doha Festival City, Aspire Park playground, the MIA park on Fridays 🧒🎈"),
    ("weekend activities for kids in doha", "Selling my sofa, 300 QR, pickup only #sale"),
]


class ParityCheck(StrEnum):
    """Which parity check an exported variant failed."""

    SHAPE = "shape"                          # label_logits is not [batch, n_labels]
    NON_FINITE = "non_finite"                # NaN or inf in label_logits
    ATOL = "atol"                            # fp32 logits further than atol from torch
    BATCH_INVARIANCE = "batch_invariance"    # a pair's score moves with its batchmates
    SCORE_DIFF = "score_diff"                # an fp16 variant's scores further than its preset allows


class ParityError(R3EdgeError):
    """An exported variant disagrees with PyTorch (kind QUALITY); ``check`` says which check failed.

    One subclass per check, as optimum's exporters have ``ShapeError`` and ``AtolError``, so a
    caller can catch the one it handles; ``check`` is what reports record.
    """

    kind = ErrorKind.QUALITY
    check: ParityCheck

    def __init__(self, variant: str, what: str, fix: str):
        self.variant = variant
        super().__init__(f"export parity failed for variant {variant!r} ({self.check}): {what}", fix)


class ShapeError(ParityError):
    check = ParityCheck.SHAPE


class NonFiniteError(ParityError):
    check = ParityCheck.NON_FINITE


class AtolError(ParityError):
    check = ParityCheck.ATOL


class BatchInvarianceError(ParityError):
    check = ParityCheck.BATCH_INVARIANCE


class ScoreDiffError(ParityError):
    check = ParityCheck.SCORE_DIFF


def validated_on(run=None, prefix=None) -> str | None:
    """The provider a parity check ran on: the ONNX Runtime provider of the session behind ``prefix``
    (its candidate graph) or ``run`` (a callable with a ``providers`` list), ``OpenVINO:CPU`` for an
    OpenVINO runner, None when unknown."""
    session = getattr(prefix, "candidate_session", None)
    providers = session.get_providers() if hasattr(session, "get_providers") else getattr(run, "providers", None)
    if providers:
        return str(providers[0])
    if "openvino" in type(prefix if prefix is not None else run).__module__:
        return "OpenVINO:CPU"  # r3edge compiles IR for the CPU device only
    return None


def load_pairs(calib_pairs: str | Path | None, limit: int) -> tuple[list[str], list[str], str]:
    """``(queries, documents, source)`` from a pairs file, or the built-in set."""
    if calib_pairs is None:
        pairs = BUILTIN_PAIRS[:limit]
        source = "builtin"
    else:
        from r3edge.core.pairs import read_queries

        pairs = [(q.query, c.text) for q in read_queries(calib_pairs) for c in q.candidates][:limit]
        source = Path(calib_pairs).name  # a name, not a path: artifacts hold no local paths
        if not pairs:
            raise InvalidInput(f"{calib_pairs} holds no pairs", "pass a pairs file with candidates")
    return [p[0] for p in pairs], [p[1] for p in pairs], source


def _rank_corr(fn, a: np.ndarray, b: np.ndarray) -> float:
    """scipy's rank correlation, NaN (not a warning) when either side is constant."""
    a, b = np.asarray(a), np.asarray(b)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(fn(a, b)[0])


def compare(scorer: Scorer, ref: np.ndarray, got: np.ndarray) -> dict:
    """Agreement of two ``[n, n_labels]`` logit arrays, in logit, score and ranking terms."""
    _, s_ref = scorer.relevance(ref)
    _, s_got = scorer.relevance(got)
    return {
        "n_pairs": int(len(ref)),
        "max_abs_logit_diff": float(np.abs(ref - got).max()),
        "max_abs_score_diff": float(np.abs(s_ref - s_got).max()),
        "argmax_agreement": float((ref.argmax(-1) == got.argmax(-1)).mean()),
        "spearman": _rank_corr(spearmanr, s_ref, s_got),
        "kendall_tau": _rank_corr(kendalltau, s_ref, s_got),  # tau-b, scipy's default
    }


def check_variant(
    variant: str,
    scorer: Scorer,
    run: RunBatch,
    ref_logits: np.ndarray,
    queries: Sequence[str],
    docs: Sequence[str],
    *,
    exact: bool,
    batch_invariant: bool,
    tol: Tolerances = Tolerances(),
    prefix=None,
    got: np.ndarray | None = None,
    max_score_diff: float | None = None,
    batch_tol: float | None = None,
) -> dict:
    """Score the pairs with ``run`` (or the prefix-reuse graphs of ``prefix``), compare with the
    torch reference, raise on a hard failure.

    ``exact`` (fp32): logits must match to ``tol.atol``. ``batch_invariant``: the scheme claims
    a pair's score does not depend on its batchmates, so that is enforced too. ``got``: the same
    scoring, when the caller already has it (micro-batches of 8). ``max_score_diff`` (the preset's, for
    fp16): max |Δ expected score| allowed vs torch. ``batch_tol`` (the preset's, for a variant checked on a
    GPU): the batch-invariance limit instead of ``tol.quant_batch_tol``.
    """
    if got is None:
        got = score_pairs(scorer, run, queries, docs, max_batch_size=8, prefix=prefix)
    if got.shape != ref_logits.shape:
        raise ShapeError(variant, f"label_logits {got.shape} vs torch {ref_logits.shape}",
                          "the graph's output is not [batch, n_labels]; re-export")
    if not np.isfinite(got).all():
        raise NonFiniteError(variant, "non-finite label_logits", "the variant is broken (overflow?); drop it")
    report = compare(scorer, ref_logits, got)
    report["batch_invariance_max_abs_score_diff"] = batch_invariance(scorer, run, queries, docs, prefix)
    report["tolerances"] = asdict(tol) | ({"max_score_diff": max_score_diff} if max_score_diff is not None else {})
    report["validated_on"] = validated_on(run, prefix)
    if exact and report["max_abs_logit_diff"] > tol.atol:
        raise AtolError(
            variant,
            f"max |Δlogit| {report['max_abs_logit_diff']:.3g} > atol {tol.atol:g} over {len(got)} pairs",
            "raise --atol only if the model is large and the difference is float noise; otherwise report a bug",
        )
    if max_score_diff is not None and report["max_abs_score_diff"] > max_score_diff:
        raise ScoreDiffError(
            variant,
            f"max |Δ expected score| {report['max_abs_score_diff']:.3g} vs torch fp32 > {max_score_diff:g} over {len(got)} "
            f"pairs (on {report['validated_on']})",
            "the variant's graph is broken (an overflow, a misplaced cast); do not serve it",
        )
    limit = tol.fp32_batch_tol if exact else batch_tol if batch_tol is not None else tol.quant_batch_tol
    if batch_invariant and report["batch_invariance_max_abs_score_diff"] > limit:
        raise BatchInvarianceError(
            variant,
            f"a pair's score moves by {report['batch_invariance_max_abs_score_diff']:.3g} between scoring it alone "
            f"and in a batch (limit {limit:g})",
            "padding/position handling is wrong in the graph; do not serve it",
        )
    report["degraded"] = bool(report["argmax_agreement"] < tol.min_argmax_agreement)
    return report
