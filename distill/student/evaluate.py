"""Score labelled pairs with any runtime and compare against gold labels and the teacher.

The same labels file is read through three lenses: the teacher against gold (the ceiling the
student is distilled from), the student against gold, and the student against the teacher (what
distillation optimises). A runtime is just ``score_fn(queries, documents) -> label_logits``, so a
torch student, an exported ONNX artifact and a running gRPC server are judged by one code path.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import numpy as np

from r3edge.core.calibration import reliability
from r3edge.core.errors import InvalidInput
from r3edge.core.labels import read_labels, read_manifest
from r3edge.core.metrics import agreement_metrics, relevance_metrics
from r3edge.core.progress import Progress
from r3edge.core.scoring import SPEC_DEFAULTS, ScoreFn, Scorer, Scoring, score_pairs, softmax

CHUNK = 256  # pairs per score_fn call: large enough to batch well, small enough for progress lines


def torch_student_score_fn(student_dir: str | Path, *, dtype: str = "float32") -> Scoring:
    """A trained student directory scored in PyTorch: the reference every export is checked against."""
    return _runtime_score_fn(student_dir, "bf16" if dtype == "bfloat16" else "fp32", backend="torch")


def artifact_score_fn(artifact_dir: str | Path, variant: str | None = None) -> Scoring:
    """An exported artifact scored in this process by the runtime its manifest names for ``variant``
    (ONNX Runtime or OpenVINO; :func:`r3edge.core.runtime_loader.open_runtime`)."""
    return _runtime_score_fn(artifact_dir, variant, backend="artifact")


def _runtime_score_fn(directory: str | Path, variant: str | None, backend: str) -> Scoring:
    """Any runtime of the artifact contract (ONNX artifact or torch student) as a score function."""
    from r3edge.model.runtimes import load_runtime

    runtime = load_runtime(directory, variant, backend=backend)
    scorer = runtime.scorer

    def fn(queries, documents):
        return score_pairs(scorer, runtime.label_logits, queries, documents)

    return Scoring(f"{backend}:{directory}:{variant or 'default'}", fn, scorer,
                   close=getattr(runtime, "close", lambda: None))


def server_score_fn(address: str, *, timeout: float = 120.0) -> Scoring:
    """A running ``r3edge serve`` scored over gRPC: what clients get, including the server's micro-batching.

    The server returns label probabilities, not logits; their logs are logits up to a per-row
    constant, which softmax ignores, so every metric is unchanged.
    """
    try:
        from r3edge.api.client import RerankerClient
    except ImportError as exc:
        raise InvalidInput(f"scoring through a server needs r3edge.api.client, which failed to import ({exc})",
                          "install r3edge with the 'serve' extra, or evaluate with --student / --artifact") from exc
    client = RerankerClient(address, timeout=timeout)
    client.wait_ready(timeout=timeout)
    info = client.model_info()

    def fn(queries, documents):
        out = []
        start = 0
        while start < len(queries):  # one ScorePairs call per run of pairs sharing a query
            end = start
            while end < len(queries) and queries[end] == queries[start]:
                end += 1
            resp = client.score_pairs(queries[start], list(documents[start:end]))
            out.extend(list(s.label_probs) for s in resp.scores)
            start = end
        return np.log(np.clip(np.asarray(out, dtype=np.float64), 1e-30, None))

    return Scoring(f"server:{address}:{info.variant or info.artifact}", fn, None,
                   label_values=tuple(info.label_values), close=client.close)


def evaluate(
    labels_dir: str | Path,
    score_fn: ScoreFn,
    *,
    scorer: Scorer | None = None,
    label_values: Sequence[float] | None = None,
    stream: TextIO | None = None,
    return_logits: bool = False,
) -> dict:
    """Metrics of ``score_fn`` on a complete labels directory: vs gold, vs the teacher, and the teacher vs gold.

    ``return_logits`` adds the raw label logits and the gold labels (``_logits``, ``_gold``,
    ``_has_gold``; not JSON) for callers that fit on them (``r3edge calibrate``).

    Label values come from ``label_values``, else the scorer, else the labels manifest, else 0,1,2.
    """
    table = read_labels(labels_dir)
    if table.num_rows == 0:
        raise InvalidInput(f"{labels_dir} holds no labelled pairs", "run `r3edge label` on a non-empty pairs file")
    if isinstance(score_fn, Scoring):
        scorer = scorer or score_fn.scorer  # its temperature turns the logits into probabilities below
    if label_values is None and isinstance(score_fn, Scoring):
        label_values = score_fn.label_values
    if label_values is None and scorer is not None:
        label_values = scorer.spec.label_values
    if label_values is None:
        label_values = read_manifest(labels_dir).get("label_values") or SPEC_DEFAULTS["label_values"]
    values = tuple(float(v) for v in label_values)
    n_labels = len(values)

    queries = table.column("query").to_pylist()
    docs = table.column("text").to_pylist()
    qids = table.column("qid").to_pylist()
    n = len(queries)
    logits = np.empty((n, n_labels), dtype=np.float64)
    progress = Progress(n, "eval: pairs scored", stream=stream)
    t0 = time.perf_counter()
    for start in range(0, n, CHUNK):
        out = np.asarray(score_fn(queries[start:start + CHUNK], docs[start:start + CHUNK]), dtype=np.float64)
        if out.shape != (min(CHUNK, n - start), n_labels):
            raise InvalidInput(f"the scorer returned label logits of shape {out.shape} for "
                              f"{min(CHUNK, n - start)} pairs and {n_labels} labels",
                              "the model's label space must match the labels' (scorer.json label_tokens)")
        logits[start:start + CHUNK] = out
        progress.update(len(out))
    progress.close()
    seconds = time.perf_counter() - t0
    # the scorer's calibration (scorer.json temperature), as the server applies it; a server's own
    # log-probabilities come back calibrated already
    student = scorer.probabilities(logits) if scorer is not None else softmax(logits)
    result_logits = logits

    teacher_rows = table.column("probs").to_pylist()
    has_teacher = np.asarray([p is not None and len(p) == n_labels for p in teacher_rows])
    teacher = np.asarray([p if ok else [np.nan] * n_labels for p, ok in zip(teacher_rows, has_teacher)], dtype=np.float64)
    gold_col = table.column("gold").to_pylist()
    has_gold = np.asarray([g is not None and 0 <= g < n_labels for g in gold_col])
    gold = np.asarray([g if ok else 0 for g, ok in zip(gold_col, has_gold)], dtype=np.int64)
    gold_qids = [q for q, ok in zip(qids, has_gold) if ok]

    result: dict = {
        "labels_dir": str(labels_dir),
        "scored_by": getattr(score_fn, "name", "score_fn"),
        "n_pairs": n,
        "n_with_gold": int(has_gold.sum()),
        "n_with_teacher": int(has_teacher.sum()),
        "scoring_seconds": round(seconds, 3),
        "pairs_per_second": round(n / seconds, 2) if seconds > 0 else None,
        "student_vs_gold": relevance_metrics(gold[has_gold], student[has_gold], gold_qids, values) if has_gold.any() else None,
        "teacher_vs_gold": (relevance_metrics(gold[has_gold & has_teacher], teacher[has_gold & has_teacher],
                                              [q for q, ok in zip(qids, has_gold & has_teacher) if ok], values)
                            if (has_gold & has_teacher).any() else None),
        "student_vs_teacher": agreement_metrics(teacher[has_teacher], student[has_teacher], values) if has_teacher.any() else None,
        "temperature": scorer.spec.temperature if scorer is not None else None,
        "student_reliability": reliability(student[has_gold], gold[has_gold]) if has_gold.any() else None,
    }
    if return_logits:
        result["_logits"], result["_gold"], result["_has_gold"] = result_logits, gold, has_gold
    return result


def format_table(result: dict) -> str:
    """A plain-text table in the paper's column order (F1 0/1/2, AUC 0/12, AUC 01/2, accuracy) plus nDCG@10."""

    def cell(x, pct: bool = True) -> str:
        if x is None:
            return "—"
        return f"{100 * x:.1f}" if pct else f"{x:.3f}"

    head = (f"{'':18} {'n':>6} {'F1-0':>6} {'F1-1':>6} {'F1-2':>6} {'AUC0/12':>8} {'AUC01/2':>8} {'Acc':>6} {'nDCG@10':>8}"
            f" {'ECE':>6}")
    lines = [f"{result['labels_dir']} scored by {result['scored_by']} "
             f"({result['n_pairs']} pairs, {result['pairs_per_second']} pairs/s)", head]
    for key, label in (("teacher_vs_gold", "teacher vs gold"), ("student_vs_gold", "student vs gold")):
        m = result.get(key)
        if not m:
            lines.append(f"{label:18} {'(no gold labels)':>40}")
            continue
        f1 = m.get("f1_per_class", {})
        lines.append(
            f"{label:18} {m['n']:>6} {cell(f1.get('0')):>6} {cell(f1.get('1')):>6} {cell(f1.get('2')):>6} "
            f"{cell(m.get('auc_0_12')):>8} {cell(m.get('auc_01_2')):>8} {cell(m.get('accuracy')):>6} "
            f"{cell(m.get('ndcg@10')):>8} {cell(m.get('ece'), pct=False):>6}"
        )
    a = result.get("student_vs_teacher")
    if a:
        lines.append(
            f"student vs teacher: n={a['n']}  argmax agreement {cell(a.get('accuracy_vs_teacher'))}%  "
            f"KL(teacher‖student) {cell(a.get('kl_teacher_student'), pct=False)}  "
            f"Spearman(expected score) {cell(a.get('spearman_expected_score'), pct=False)}"
        )
    return "\n".join(lines)


def print_table(result: dict, stream: TextIO | None = None) -> None:
    print(format_table(result), file=stream or sys.stdout)
