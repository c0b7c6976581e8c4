"""Benchmark systems side by side: each student variant (served by a real `r3edge serve` process on
a free port) or an external server, plus the teacher as estimated from its labelling records.

Every student number comes through the real gRPC path (a separate server process, serialisation,
validation, the server's micro-batching), so what is reported is what a client gets, and the
benchmark never shares an interpreter (or a GIL) with the server it measures. Accuracy is measured on the held-back pairs
against gold labels and, where teacher labels exist, against the teacher.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from r3edge.benchmarks.load import collect_probs, percentiles, run_load
from r3edge.core.errors import InvalidInput
from r3edge.core.pairs import QueryCandidates
from r3edge.core.scoring import SPEC_DEFAULTS, Scoring, softmax

REQUEST_SIZE = 100  # the teacher estimate is scaled to a top-100 request


def _metrics():
    from r3edge.core import metrics  # lazily: sklearn/scipy are only needed when reporting

    return metrics


def teacher_probs(labels_dir: str | Path) -> tuple[dict[tuple[str, str], list[float]], object]:
    from r3edge.core.labels import read_labels

    table = read_labels(labels_dir)
    cols = table.to_pydict()
    probs = {}
    for qid, docid, p in zip(cols["qid"], cols["docid"], cols["probs"]):
        if p is not None:
            probs[(qid, docid)] = list(p)
    return probs, cols


def accuracy_block(queries: Sequence[QueryCandidates], probs: dict[tuple[str, str], list[float]],
                   label_values: Sequence[float], teacher: dict[tuple[str, str], list[float]] | None) -> dict:
    """Metrics vs gold (pairs with a label) and vs the teacher (pairs the teacher labelled)."""
    m = _metrics()
    keys = [(q.qid, c.docid, c.label) for q in queries for c in q.candidates if (q.qid, c.docid) in probs]
    gold_keys = [(qid, d, lab) for qid, d, lab in keys if lab is not None and 0 <= lab < len(label_values)]
    out: dict = {"n_scored": len(keys)}
    if gold_keys:
        out["vs_gold"] = m.relevance_metrics([lab for _, _, lab in gold_keys],
                                             np.array([probs[(q, d)] for q, d, _ in gold_keys]),
                                             [q for q, _, _ in gold_keys], label_values=label_values)
    if teacher:
        both = [(q, d) for q, d, _ in keys if (q, d) in teacher]
        if both:
            out["vs_teacher"] = m.agreement_metrics(np.array([teacher[k] for k in both]),
                                                    np.array([probs[k] for k in both]), label_values=label_values)
            # The same pairs the teacher was judged on, so student and teacher rows compare like with like.
            shared = [(q, d, lab) for q, d, lab in gold_keys if (q, d) in teacher]
            if shared:
                out["on_teacher_pairs"] = m.relevance_metrics(
                    [lab for _, _, lab in shared], np.array([probs[(q, d)] for q, d, _ in shared]),
                    [q for q, _, _ in shared], label_values=label_values)
    return out


def teacher_row(queries: Sequence[QueryCandidates], labels_dir: str | Path, label_values: Sequence[float]) -> dict:
    """The teacher as a system: accuracy of its labels, latency estimated from its records.

    A top-100 request would cost 100 x the mean per-pair latency plus the query's intent round
    (distill/teacher.py adds ``intent latency / pairs of the query`` to every record's
    ``latency_s``, so the mean already holds it; a separate ``intent_latency_s`` column, if a
    labeller writes one, is added once per query). Nothing here is measured over gRPC.
    """
    probs, cols = teacher_probs(labels_dir)
    wanted = {(q.qid, c.docid) for q in queries for c in q.candidates}
    per_q: dict[str, list[float]] = {}
    intent: dict[str, float] = {}
    for i, (qid, docid) in enumerate(zip(cols["qid"], cols["docid"])):
        if (qid, docid) not in wanted or cols["latency_s"][i] is None:
            continue
        per_q.setdefault(qid, []).append(float(cols["latency_s"][i]))
        if "intent_latency_s" in cols and cols["intent_latency_s"][i] is not None:
            intent[qid] = float(cols["intent_latency_s"][i])
    est_ms = [(REQUEST_SIZE * float(np.mean(v)) + intent.get(q, 0.0)) * 1e3 for q, v in per_q.items()]
    mean_pair_s = float(np.mean([x for v in per_q.values() for x in v])) if per_q else None
    sub = {k: v for k, v in probs.items() if k in wanted}
    n_bad = sum(1 for i, (q, d) in enumerate(zip(cols["qid"], cols["docid"])) if (q, d) in wanted and not cols["format_ok"][i])
    acc = accuracy_block(queries, sub, label_values, sub)
    acc.pop("vs_teacher", None)  # agreement with itself says nothing
    return {
        "system": "teacher",
        "variant": str(cols["teacher_model"][0]) if cols["qid"] else "",
        "kind": "teacher",
        "latency_source": "estimated from labeling records",
        "latency_ms": percentiles(est_ms),
        "pairs_per_s": (1.0 / mean_pair_s) if mean_pair_s else None,
        "mean_pair_latency_s": mean_pair_s,
        "intent_round_recorded": bool(intent),
        "format_failures": n_bad,
        "accuracy": acc,
    }


@contextmanager
def serve_artifact(artifact: str, variant: str | None, threads: int | None, **limits) -> Iterator[str]:
    """Run `r3edge serve` in a child process on a free port; yield its address; stop it (SIGTERM).

    ``limits`` become flags (``max_batch_tokens=512`` -> ``--max-batch-tokens 512``); None is left out.
    """
    import re
    import subprocess
    import sys
    import threading

    cmd = [sys.executable, "-m", "r3edge", "serve", str(artifact), "--host", "127.0.0.1", "--port", "0",
           "--grace-period-s", "1"]
    for name, value in {"variant": variant, "threads": threads, **limits}.items():
        if value is not None:
            cmd += [f"--{name.replace('_', '-')}", str(value)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        for line in proc.stdout:  # the server prints "serving ... on HOST:PORT" once it is SERVING
            seen.append(line)
            m = re.match(r"serving .* on (\S+:\d+)$", line.strip())
            if m:
                break
        else:
            raise InvalidInput(f"`r3edge serve {artifact}` exited before serving:\n{''.join(seen[-20:])}",
                              "run the same `r3edge serve` command by hand to see the error")
        # keep draining its output so a chatty server never blocks on a full pipe
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield m.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _variants_of(artifact: str) -> list[str | None]:
    from r3edge.core.artifact import read_manifest

    return list(read_manifest(artifact)["variants"])


def student_row(target: str, queries: Sequence[QueryCandidates], teacher: dict | None, *, requests: int,
                concurrency: int, top_k: int, pad_to: int | None, system: str) -> dict:
    from r3edge.api.client import RerankerClient

    with RerankerClient(target) as client:
        client.wait_ready(300)
        info = client.model_info()
    probs = collect_probs(target, queries)
    load = run_load(target, queries, requests, concurrency, top_k=top_k, pad_to=pad_to)
    return {
        "system": system,
        "variant": info.variant,
        "kind": "student",
        "runtime": info.runtime,
        "scorer_fingerprint": info.scorer_fingerprint,
        "label_values": list(info.label_values),
        "latency_source": "measured over gRPC",
        "latency_ms": load["latency_ms"],
        "pairs_per_s": load["pairs_per_s"],
        "load": load,
        "accuracy": accuracy_block(queries, probs, list(info.label_values), teacher),
    }


def bench_systems(queries: Sequence[QueryCandidates], *, artifact: str | None = None,
                  variants: Sequence[str] | None = None, threads: int | None = None,
                  target: str | None = None, labels_dir: str | None = None, requests: int = 20,
                  concurrency: int = 1, top_k: int = 10, pad_to: int | None = None, serve_limits: dict | None = None) -> dict:
    """Rows for every system plus the machine description; the caller writes the report."""
    from r3edge.benchmarks.machine import machine_info

    if (artifact is None) == (target is None):
        raise InvalidInput("give exactly one of --artifact (served by a child process) or --target (a running server)",
                          "e.g. r3edge bench --artifact runs/demo/artifact --pairs heldout.jsonl")
    teacher = teacher_probs(labels_dir)[0] if labels_dir else None
    kw = dict(requests=requests, concurrency=concurrency, top_k=top_k, pad_to=pad_to)
    rows = []
    if target:
        rows.append(student_row(target, queries, teacher, system=f"server@{target}", **kw))
    else:
        for variant in (list(variants) if variants else _variants_of(artifact)):
            with serve_artifact(artifact, variant, threads, **(serve_limits or {})) as tgt:
                rows.append(student_row(tgt, queries, teacher, system="student (onnxruntime)", **kw))
    label_values = rows[0].get("label_values") or SPEC_DEFAULTS["label_values"]
    if labels_dir:
        rows.append(teacher_row(queries, labels_dir, label_values))
    gold = any(c.label is not None for q in queries for c in q.candidates)
    return {
        "machine": machine_info(),
        "settings": {"artifact": artifact, "target": target, "threads": threads,
                     "labels_dir": labels_dir, "label_values": list(label_values), "n_queries": len(queries),
                     "n_pairs": sum(len(q.candidates) for q in queries), **kw},
        "systems": rows,
        # what the reranker must beat: the order it was handed, on the same held-back pairs
        "baselines": baselines(queries, label_values) if gold else None,
    }


def scored_floor(queries: Sequence[QueryCandidates], scoring: Scoring, label_values: Sequence[float]) -> dict:
    """nDCG@10 of any score function (e.g. the student's base encoder by cosine) on the gold-labelled
    candidates, the same computation as the input order's in :func:`baselines`."""
    from r3edge.core.metrics import ndcg_at_k

    pairs = [(q.qid, q.query, c) for q in queries for c in q.candidates if c.label is not None]
    logits = scoring([query for _, query, _ in pairs], [c.text for _, _, c in pairs])
    probs = scoring.scorer.probabilities(logits) if scoring.scorer is not None else softmax(logits)
    values = np.asarray(label_values, dtype=np.float64)
    gains = values[np.asarray([c.label for _, _, c in pairs], dtype=np.int64)]
    got = ndcg_at_k(gains, probs @ values, [qid for qid, _, _ in pairs])
    return {"system": scoring.name, "ndcg@10": got["ndcg@10"], "ndcg_queries": got["ndcg_queries"]}


def baselines(queries: Sequence[QueryCandidates], label_values: Sequence[float]) -> dict:
    """The input order (nDCG@10 of the given ranks) and the majority class (accuracy, macro-F1)."""
    from r3edge.core.metrics import ndcg_at_k, relevance_metrics

    pairs = [(q.qid, c) for q in queries for c in q.candidates if c.label is not None]
    gold = np.asarray([c.label for _, c in pairs], dtype=np.int64)
    qids = [qid for qid, _ in pairs]
    values = np.asarray(label_values, dtype=np.float64)
    ranks = np.asarray([c.rank if c.rank is not None else 10**9 for _, c in pairs], dtype=np.float64)
    order = ndcg_at_k(values[gold], -ranks, qids)
    majority = int(np.bincount(gold, minlength=len(values)).argmax())
    onehot = np.zeros((len(gold), len(values)))
    onehot[:, majority] = 1.0
    maj = relevance_metrics(gold, onehot, qids, label_values)
    return {
        "input_order": {"ndcg@10": order["ndcg@10"], "ndcg_queries": order["ndcg_queries"]},
        "majority": {"label": majority, "accuracy": maj["accuracy"], "macro_f1": maj["f1_macro"], "n": maj["n"]},
    }
