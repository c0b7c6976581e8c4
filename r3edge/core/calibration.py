"""Calibration of the student's label probabilities: temperature scaling (with an optional per-label
bias) and its measurement.

Users threshold ``score`` and ``label_probs`` ("drop below 0.5"), so a probability should mean what
it says. Temperature scaling (Guo et al., 2017) divides the label logits by one scalar ``T`` fitted
on held-out gold labels: it changes no ranking and no argmax, only how confident the probabilities
are. ``T`` is stored in ``scorer.json`` (:attr:`r3edge.core.scoring.ScorerSpec.temperature`), so
every scorer that reads the spec (training-time evaluation, the ONNX runtimes, the server) applies it.

Calibration error is the top-label ECE: pairs binned by their highest label probability, the
gap between that confidence and the bin's accuracy, weighted by the bin's share of pairs.
"""

from __future__ import annotations

import numpy as np

from r3edge.core.errors import InvalidInput

#: bins of the expected calibration error and of the reliability diagram
ECE_BINS = 15


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _nll(logits: np.ndarray, gold: np.ndarray, temperature: float) -> float:
    return float(-_log_softmax(logits / temperature)[np.arange(len(gold)), gold].mean())


def _checked(logits, gold) -> tuple[np.ndarray, np.ndarray]:
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(gold, dtype=np.int64)
    if z.ndim != 2 or len(z) != len(y) or not len(y):
        raise InvalidInput(f"calibration needs logits [n, n_labels] and n gold labels; got {z.shape} and {y.shape}",
                           "calibrate on labelled pairs that have gold labels", field="gold")
    if y.min() < 0 or y.max() >= z.shape[1]:
        raise InvalidInput(f"gold labels must be class indices in 0..{z.shape[1] - 1}", "map the gold labels first",
                           field="gold")
    return z, y


def fit_temperature(logits, gold, *, bounds: tuple[float, float] = (0.05, 20.0), iterations: int = 80) -> float:
    """The temperature that minimises the negative log-likelihood of ``gold`` (class indices) under
    ``softmax(logits / T)``; golden-section search on log T (the NLL is unimodal in it)."""
    z, y = _checked(logits, gold)
    lo, hi = np.log(bounds[0]), np.log(bounds[1])
    ratio = (np.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = _nll(z, y, np.exp(a)), _nll(z, y, np.exp(b))
    for _ in range(iterations):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = _nll(z, y, np.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = _nll(z, y, np.exp(b))
    return float(np.exp((lo + hi) / 2))


def fit_temperature_and_bias(logits, gold, *, iterations: int = 100) -> tuple[float, tuple[float, ...]]:
    """``(T, bias)`` minimising the NLL of ``gold`` under ``softmax(logits / T + bias)``, bias[0] = 0.

    Temperature scaling keeps every argmax, so where the student's label prior is wrong (a
    grade-balanced teacher on candidates that are mostly irrelevant) no ``T`` calibrates its top-label
    confidence; a per-label bias (vector scaling with one shared scale, Guo et al., 2017) can. The NLL
    is convex in ``(1/T, bias)``, a multinomial logistic regression on fixed logits: damped Newton steps.
    """
    z, y = _checked(logits, gold)
    n, k = z.shape
    onehot = np.eye(k)[y]
    theta = np.zeros(k)  # [1/T, bias_1 .. bias_{k-1}]
    theta[0] = 1.0
    # d zz / d theta: zz is linear in theta, so this is the same at every step
    jac = np.concatenate([z[:, :, None], np.broadcast_to(np.eye(k)[:, 1:], (n, k, k - 1))], axis=2)

    def log_probs(t):
        return _log_softmax(z * t[0] + np.concatenate([[0.0], t[1:]]))

    def nll(t):
        return float(-log_probs(t)[np.arange(n), y].mean())

    for _ in range(iterations):
        p = np.exp(log_probs(theta))
        grad = np.einsum("nk,nkp->p", p - onehot, jac) / n
        cov = p[:, :, None] * np.eye(k)[None] - p[:, :, None] * p[:, None, :]
        hess = np.einsum("nkp,nkl,nlq->pq", jac, cov, jac) / n + 1e-9 * np.eye(k)
        step, f0 = np.linalg.solve(hess, grad), nll(theta)
        t = 1.0
        while nll(theta - t * step) > f0 and t > 1e-6:
            t /= 2
        theta = theta - t * step
        if np.abs(t * step).max() < 1e-10:
            break
    if not theta[0] > 0:
        raise InvalidInput("the fitted temperature is not positive: these logits rank the gold labels backwards",
                           "calibrate on held-out pairs of the task the student was trained for", field="gold")
    return float(1.0 / theta[0]), (0.0, *map(float, theta[1:]))


def calibrated_ece(fit_logits, fit_gold, logits, gold) -> dict:
    """``r3edge calibrate --bias``'s fit (temperature + per-label bias) on one gold-labelled set, applied to
    another: the calibrated top-label ECE and accuracy a user gets on the second after calibrating on the first
    (a reported figure, so fit and measure never share pairs). Label probabilities work as ``logits`` after a
    log: the fit absorbs any temperature they were made with."""
    from r3edge.core.scoring import softmax

    t, bias = fit_temperature_and_bias(fit_logits, fit_gold)
    z, y = _checked(logits, gold)
    p = softmax(z / t + np.asarray(bias))
    return {"temperature": t, "bias": list(bias), "ece": reliability(p, y)["ece"],
            "accuracy": float((p.argmax(1) == y).mean()), "fit_pairs": len(fit_gold), "n": len(y)}


def reliability(probs, gold, bins: int = ECE_BINS) -> dict:
    """Top-label ECE and the per-bin points of a reliability diagram.

    Bins are equal-width over confidence (the highest label probability); empty bins are left out.
    """
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(gold, dtype=np.int64)
    conf, correct = p.max(axis=1), (p.argmax(axis=1) == y).astype(np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(conf, edges[1:-1], right=True), 0, bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        in_bin = which == b
        if not in_bin.any():
            continue
        c, a, share = float(conf[in_bin].mean()), float(correct[in_bin].mean()), float(in_bin.mean())
        ece += share * abs(c - a)
        rows.append({"lo": float(edges[b]), "hi": float(edges[b + 1]), "n": int(in_bin.sum()), "confidence": c, "accuracy": a})
    return {"ece": float(ece), "bins": rows, "n": int(len(y))}


def plot_reliability(rows: dict[str, dict], path, title: str) -> None:
    """Reliability diagram: per confidence bin, accuracy against mean confidence (the diagonal is
    perfect calibration), one line per entry of ``rows`` (a name -> :func:`reliability`'s output)."""
    from r3edge.core.errors import require

    require("matplotlib", "bench").use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfectly calibrated")
    for (name, rel), marker in zip(rows.items(), "os^Dv"):
        ax.plot([b["confidence"] for b in rel["bins"]], [b["accuracy"] for b in rel["bins"]], marker=marker,
                label=f"{name}: ECE {rel['ece']:.3f}")
    ax.set_xlabel("confidence (highest label probability)")
    ax.set_ylabel("accuracy")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
