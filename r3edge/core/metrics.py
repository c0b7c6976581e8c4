"""Relevance metrics in the R³A paper's terms (torch-free: the benchmarks and the server side use it).

Table 1 of the paper reports per-class F1, AUC 0/12 (is the document relevant at all?), AUC 01/2
(does it contain the exact answer?) and accuracy; a reranker that keeps the top 10 of 100 is also
judged by nDCG@10. Metrics that a label set cannot define (an AUC with one class absent, nDCG of a
query with no relevant candidate) come back as ``None`` and are counted, never silently zero.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import accuracy_score, f1_score, ndcg_score, roc_auc_score

from r3edge.core.calibration import reliability

EPS = 1e-12


def _probs(probs, n: int | None = None) -> np.ndarray:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"probabilities must be [n, n_labels], got shape {p.shape}")
    if n is not None and p.shape[0] != n:
        raise ValueError(f"{p.shape[0]} probability rows for {n} labels")
    return p


def _auc(positive: np.ndarray, score: np.ndarray) -> float | None:
    # Undefined with one class only; None keeps a missing class visible in the report.
    if positive.all() or not positive.any():
        return None
    return float(roc_auc_score(positive.astype(int), score))


def ndcg_at_k(gains: np.ndarray, scores: np.ndarray, qids: Sequence[str], k: int = 10, *,
              per_query: bool = False) -> dict:
    """Mean per-query nDCG@k over the queries where it is defined, with the others counted.

    A query with one candidate has nothing to rank, and one whose gains are all zero has an ideal
    DCG of zero (sklearn would return 0 and drag the mean down); both are left out of the mean.
    ``per_query`` also returns each defined query's value (``ndcg@k_per_query``, qid -> nDCG), the
    numbers the mean is made of, for paired comparisons of two systems (:func:`paired_bootstrap`).
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(qids):
        groups[q].append(i)
    values, by_query = [], {}
    single = all_zero = 0
    for qid, idx in groups.items():
        if len(idx) < 2:
            single += 1
            continue
        g = gains[idx]
        if not (g > 0).any():
            all_zero += 1
            continue
        values.append(float(ndcg_score(g[None, :], scores[idx][None, :], k=k)))
        by_query[qid] = values[-1]
    return {
        f"ndcg@{k}": float(np.mean(values)) if values else None,
        "ndcg_queries": len(values),
        "ndcg_skipped_single_candidate": single,
        "ndcg_skipped_no_relevant": all_zero,
        **({f"ndcg@{k}_per_query": by_query} if per_query else {}),
    }


def paired_bootstrap(system: dict[str, float], base: dict[str, float], *, boot: int = 10000, seed: int = 0,
                     margin: float = 0.01) -> dict:
    """How far apart two systems are, question by question: the mean of ``system - base`` over the
    questions both define, a 95% percentile-bootstrap interval over questions, and the share of
    resamples whose mean falls below ``-margin`` (the bar "within ``margin`` of the base").

    A difference of 0.01 on a set of ten questions is a few of them moving; the interval says how much a
    set can resolve, so a reading against a bar is not a single number's accident.
    """
    qids = sorted(set(system) & set(base))
    if len(qids) < 2:
        raise ValueError(f"paired_bootstrap needs >= 2 questions defined in both systems, got {len(qids)}")
    d = np.asarray([system[q] - base[q] for q in qids], dtype=np.float64)
    means = d[np.random.default_rng(seed).integers(0, len(d), size=(boot, len(d)))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {"mean_diff": float(d.mean()), "ci95": [float(lo), float(hi)], "sd": float(d.std(ddof=1)),
            "queries": len(d), "better": int((d > EPS).sum()), "worse": int((d < -EPS).sum()),
            "same": int((np.abs(d) <= EPS).sum()), f"p_below_minus_{margin:g}": float((means < -margin).mean())}


def seed_mean(per_seed: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per question, a metric's mean over an arm's seeds, on the questions every seed defines: one arm read as one
    system for :func:`paired_bootstrap`, so a reading against a bar does not ride on one seed's draw."""
    if not per_seed:
        raise ValueError("seed_mean needs at least one seed's per-question values")
    qids = sorted(set.intersection(*(set(p) for p in per_seed)))
    return {q: float(np.mean([p[q] for p in per_seed])) for q in qids}


def relevance_metrics(
    gold: Sequence[int],
    probs,
    qids: Sequence[str],
    label_values: Sequence[float] = (0, 1, 2),
    k: int = 10,
) -> dict:
    """Predicted label distributions against graded gold labels (class indices into ``label_values``)."""
    gold = np.asarray(gold, dtype=np.int64)
    p = _probs(probs, len(gold))
    values = np.asarray(label_values, dtype=np.float64)
    n_labels = len(values)
    if p.shape[1] != n_labels:
        raise ValueError(f"probabilities have {p.shape[1]} columns for {n_labels} label values")
    if len(qids) != len(gold):
        raise ValueError(f"{len(qids)} qids for {len(gold)} labels")
    if len(gold) and (gold.min() < 0 or gold.max() >= n_labels):
        raise ValueError(f"gold labels must be class indices in 0..{n_labels - 1}")
    out: dict = {"n": int(len(gold))}
    if not len(gold):
        return out
    pred = p.argmax(axis=1)
    classes = list(range(n_labels))
    per_class = f1_score(gold, pred, labels=classes, average=None, zero_division=0.0)
    out["accuracy"] = float(accuracy_score(gold, pred))
    out["f1_per_class"] = {str(c): float(f) for c, f in zip(classes, per_class)}
    # Macro over classes present in gold or predictions (sklearn's convention with labels=None).
    out["f1_macro"] = float(f1_score(gold, pred, average="macro", zero_division=0.0))
    out["gold_counts"] = {str(c): int((gold == c).sum()) for c in classes}
    expected = p @ values
    if n_labels >= 2:
        out["auc_0_12"] = _auc(gold > 0, 1.0 - p[:, 0])
        out["auc_01_2"] = _auc(gold == n_labels - 1, p[:, -1])
    out.update(ndcg_at_k(values[gold], expected, qids, k=k))
    out["ece"] = reliability(p, gold)["ece"]  # top-label expected calibration error
    return out


def agreement_metrics(teacher_probs, student_probs, label_values: Sequence[float] = (0, 1, 2)) -> dict:
    """How closely the student reproduces the teacher: the quantity distillation optimises."""
    t = _probs(teacher_probs)
    s = _probs(student_probs, t.shape[0])
    if t.shape != s.shape:
        raise ValueError(f"teacher probabilities {t.shape} and student probabilities {s.shape} differ")
    out: dict = {"n": int(t.shape[0])}
    if not t.shape[0]:
        return out
    values = np.asarray(label_values, dtype=np.float64)
    out["accuracy_vs_teacher"] = float((t.argmax(1) == s.argmax(1)).mean())
    # KL(t || s) with 0·log 0 = 0; the student side is clipped so a hard zero is finite.
    kl = np.where(t > 0, t * (np.log(np.clip(t, EPS, None)) - np.log(np.clip(s, EPS, None))), 0.0).sum(1)
    out["kl_teacher_student"] = float(kl.mean())
    te, se = t @ values, s @ values
    # Undefined when either side is constant (e.g. an untrained student that always says 0).
    defined = t.shape[0] > 1 and np.ptp(te) > 0 and np.ptp(se) > 0
    rho = float(spearmanr(te, se).statistic) if defined else math.nan
    out["spearman_expected_score"] = None if math.isnan(rho) else rho
    return out
