"""Benchmark systems side by side, on the same requests: each student variant (served by a real
`r3edge serve` process on a free port) or an external server, teacher judges served as rerankers
(measured by :mod:`r3edge.distill.label.rerank`; rows built here by :func:`judge_row`), and floors
(the first-stage order, BM25, the student's base encoder by cosine, the majority class).

Every served student number comes through the real gRPC path (a separate server process, serialisation,
validation, the server's micro-batching), so what is reported is what a client gets, and the
benchmark never shares an interpreter (or a GIL) with the server it measures. The one exception is
the peer without a server (:func:`in_process_row`, e.g. the student's naive PyTorch forward), timed
in this process after every server has stopped. Every latency is
measured per request, from its start to its last answer; nothing is scaled from per-pair records.
Each row names the hardware its latency was measured on (``axis``): rows of different hardware are
never compared on one latency axis. Accuracy is measured on the held-back pairs against gold labels
and, where teacher probabilities exist, against the teacher.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from r3edge.benchmarks.load import collect_probs, run_load
from r3edge.core.artifact import Runtime
from r3edge.core.errors import InvalidInput
from r3edge.core.pairs import QueryCandidates
from r3edge.core.scoring import SPEC_DEFAULTS, Scorer, Scoring, softmax
from r3edge.core.timing import percentiles

#: closed-loop concurrencies of every measured system: latency at the first, throughput at each
CONCURRENCY = (1, 4)


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


def gold_pairs(queries: Sequence[QueryCandidates], probs: dict[tuple[str, str], Sequence[float]], n_labels: int
               ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The gold-labelled pairs that ``probs`` scored: their probabilities ``[n, n_labels]``, gold class indices
    and query ids, in the queries' order."""
    keys = [(q.qid, c) for q in queries for c in q.candidates
            if c.label is not None and 0 <= c.label < n_labels and (q.qid, c.docid) in probs]
    p = np.asarray([probs[(qid, c.docid)] for qid, c in keys], dtype=np.float64).reshape(len(keys), n_labels)
    return p, np.asarray([c.label for _, c in keys], dtype=np.int64), [qid for qid, _ in keys]


def accuracy_block(queries: Sequence[QueryCandidates], probs: dict[tuple[str, str], list[float]],
                   label_values: Sequence[float], teacher: dict[tuple[str, str], list[float]] | None) -> dict:
    """Metrics vs gold (pairs with a label) and vs the teacher (pairs the teacher labelled)."""
    m = _metrics()
    keys = [(q.qid, c.docid) for q in queries for c in q.candidates if (q.qid, c.docid) in probs]
    out: dict = {"n_scored": len(keys)}
    p, gold, qids = gold_pairs(queries, probs, len(label_values))
    if len(gold):
        out["vs_gold"] = m.relevance_metrics(gold, p, qids, label_values=label_values)
    if teacher:
        both = [k for k in keys if k in teacher]
        if both:
            out["vs_teacher"] = m.agreement_metrics(np.array([teacher[k] for k in both]),
                                                    np.array([probs[k] for k in both]), label_values=label_values)
            # The same pairs the teacher was judged on, so student and teacher rows compare like with like.
            p, gold, qids = gold_pairs(queries, {k: probs[k] for k in both}, len(label_values))
            if len(gold):
                out["on_teacher_pairs"] = m.relevance_metrics(gold, p, qids, label_values=label_values)
    return out


def labels_row(queries: Sequence[QueryCandidates], labels_dir: str | Path, label_values: Sequence[float]) -> dict:
    """A teacher's label files as a row: the accuracy of its labels on these pairs. Not timed: labels
    were computed at labelling time, in batches, possibly elsewhere; a judge's latency is measured by
    serving it (:func:`judge_row`)."""
    probs, cols = teacher_probs(labels_dir)
    wanted = {(q.qid, c.docid) for q in queries for c in q.candidates}
    sub = {k: v for k, v in probs.items() if k in wanted}
    n_bad = sum(1 for i, (q, d) in enumerate(zip(cols["qid"], cols["docid"])) if (q, d) in wanted and not cols["format_ok"][i])
    acc = accuracy_block(queries, sub, label_values, sub)
    acc.pop("vs_teacher", None)  # agreement with itself says nothing
    return {
        "system": "teacher labels",
        "variant": str(cols["teacher_model"][0]) if cols["qid"] else "",
        "kind": "labels",
        "latency_source": f"not timed: labels read from {labels_dir}",
        "latency_ms": {},
        "pairs_per_s": None,
        "format_failures": n_bad,
        "accuracy": acc,
    }


@contextmanager
def serve_artifact(artifact: str, variant: str | None, threads: int | None, *, env: dict[str, str] | None = None,
                   log: Path | None = None, **limits) -> Iterator[str]:
    """Run `r3edge serve` in a child process on a free port; yield its address; stop it (SIGTERM).

    ``limits`` become flags (``max_batch_tokens=512`` -> ``--max-batch-tokens 512``, ``log_level="DEBUG"``); None is
    left out. ``env`` is laid over this process's environment for the child (e.g. ``TOKENIZERS_PARALLELISM``).
    ``log``: the server's whole output is written there, complete once the context has exited (else it is dropped).
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
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=None if env is None else {**os.environ, **env})
    drainer = None
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
        def drain() -> None:
            if log is None:
                proc.stdout.read()
                return
            with open(log, "w") as fh:
                fh.writelines(seen)
                for line in proc.stdout:
                    fh.write(line)
        drainer = threading.Thread(target=drain, daemon=True)
        drainer.start()
        yield m.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if drainer is not None:
            drainer.join(30)


def _variants_of(artifact: str) -> list[str | None]:
    from r3edge.core.artifact import read_manifest

    return list(read_manifest(artifact)["variants"])


def hardware_axis(machine: dict, where: str | None = None) -> str:
    """The hardware a latency was measured on, as a row names it: this machine's CPU, cores and GPUs,
    or ``where`` (e.g. a remote server's address) when the work ran elsewhere."""
    if where:
        return where
    gpus = "; ".join(machine.get("gpus") or []) or "no GPU"
    return f"{machine['cpu']}, {machine['cores_usable']} cores, {gpus}"


def student_row(target: str, queries: Sequence[QueryCandidates], teacher: dict | None, *, requests: int,
                concurrency: int | Sequence[int], top_k: int, pad_to: int | None, system: str) -> dict:
    """A served student: latency at the first concurrency, throughput at each, accuracy of every pair."""
    from r3edge.api.client import RerankerClient

    levels = [concurrency] if isinstance(concurrency, int) else list(concurrency)
    with RerankerClient(target) as client:
        client.wait_ready(300)
        info = client.model_info()
    probs = collect_probs(target, queries)
    loads = {c: run_load(target, queries, max(requests, c), c, top_k=top_k, pad_to=pad_to) for c in levels}
    load = loads[levels[0]]
    return {
        "system": system,
        "variant": info.variant,
        "kind": "student",
        "runtime": info.runtime,
        "scorer_fingerprint": info.scorer_fingerprint,
        "label_values": list(info.label_values),
        "latency_source": f"measured over gRPC, concurrency {levels[0]}",
        "latency_ms": load["latency_ms"],
        "pairs_per_s": load["pairs_per_s"],
        "throughput": {str(c): {"pairs_per_s": r["pairs_per_s"], "requests_per_s": r["requests_per_s"],
                                "latency_ms": r["latency_ms"], "errors": r["errors"]} for c, r in loads.items()},
        "load": load,
        "accuracy": accuracy_block(queries, probs, list(info.label_values), teacher),
    }


def in_process_row(runtime: Runtime, queries: Sequence[QueryCandidates], teacher: dict | None, *, system: str,
                   requests: int, concurrency: int | Sequence[int] = 1) -> dict:
    """A runtime scored in this process the naive way, e.g. the trained student's own PyTorch forward
    (the peer a user has without r3edge; the caller opens it, since torch lives in the model layer):
    each request's pairs formatted by the scoring contract and padded into one batch, with no
    length-sorted micro-batches and no server. Timed per request from its text to its label logits,
    ``requests`` requests (the queries in turn) after one untimed warm-up; concurrency 1 only (one
    interpreter: concurrent callers would share its threads)."""
    import time

    scorer = runtime.scorer

    def rerank(q: QueryCandidates) -> np.ndarray:
        # the default overflow (r3edge.core.scoring.DEFAULT_OVERFLOW), the server's too
        encoded = scorer.encode_batch([q.query] * len(q.candidates), [c.text for c in q.candidates])
        return runtime.label_logits(*scorer.collate(encoded))

    rerank(queries[0])
    probs: dict[tuple[str, str], list[float]] = {}
    latencies = []
    started = time.perf_counter()
    for i in range(max(requests, len(queries))):
        q = queries[i % len(queries)]
        t0 = time.perf_counter()
        logits = rerank(q)
        latencies.append((time.perf_counter() - t0) * 1e3)
        if i < len(queries):
            probs.update({(q.qid, c.docid): p.tolist() for c, p in zip(q.candidates, scorer.probabilities(logits))})
    wall = time.perf_counter() - started
    pairs = sum(len(queries[i % len(queries)].candidates) for i in range(len(latencies)))
    info = runtime.info()
    getattr(runtime, "close", lambda: None)()
    latency = percentiles(latencies)
    pairs_per_s = pairs / wall if wall > 0 else None
    device = str(info.get("device") or "cpu")  # a torch runtime runs on the GPU when there is one
    on = f"{info.get('threads')} threads" if device == "cpu" else f"on {device}"
    return {
        "system": system,
        "variant": f"{info['runtime']} {info['variant']}" + ("" if device == "cpu" else f" on {device}") + ", one padded batch",
        "kind": "student",
        "runtime": info["runtime"],
        "device": device,
        "head": scorer.spec.head,
        "scorer_fingerprint": scorer.spec.fingerprint(),
        "label_values": list(scorer.spec.label_values),
        "latency_source": f"measured in-process ({info['runtime']}, {on}): text to label logits, "
                          "one padded batch per request, concurrency 1",
        "latency_ms": latency,
        "pairs_per_s": pairs_per_s,
        "throughput": {"1": {"pairs_per_s": pairs_per_s, "requests_per_s": len(latencies) / wall if wall > 0 else None,
                             "latency_ms": latency, "requests": len(latencies)}},
        "concurrency_not_run": [c for c in ([concurrency] if isinstance(concurrency, int) else concurrency) if c != 1],
        "accuracy": accuracy_block(queries, probs, list(scorer.spec.label_values), teacher),
    }


def judge_row(measured: dict, queries: Sequence[QueryCandidates], label_values: Sequence[float],
              teacher: dict | None, axis: str) -> dict:
    """A judge served as a reranker (:func:`r3edge.distill.label.rerank.measure_judge`'s output) as a row:
    latency percentiles at concurrency 1, pairs/s at each concurrency, generated tokens per pair, format
    failures, and the accuracy of its verdicts (pairs with no verdict are left out and counted)."""
    phases = {int(c): p for c, p in measured["phases"].items()}
    first = phases[min(phases)]
    probs = {k: v for k, v in measured["probs"].items() if v is not None}
    acc = accuracy_block(queries, probs, label_values, teacher)
    return {
        "system": measured["name"],
        "variant": f"{measured['model']} · {measured['engine']}"
                   + (f", batch {b}" if (b := measured.get("batch_size")) else ""),
        "kind": "judge",
        "judge": measured["judge"],
        "model": measured["model"],
        "samples": measured["samples"],
        "axis": axis,
        "latency_source": f"measured per request ({measured['engine']}): wall time from its first call to its "
                          f"last verdict, concurrency {min(phases)}"
                          + (f" (over {runs} resumed runs)" if (runs := measured.get("first_phase_runs", 1)) > 1 else ""),
        "latency_ms": percentiles([1e3 * s for s in first["latency_s"]]),
        "pairs_per_s": first["pairs"] / first["wall_s"] if first["wall_s"] > 0 else None,
        "throughput": {str(c): {"pairs_per_s": p["pairs"] / p["wall_s"] if p["wall_s"] > 0 else None,
                                "requests_per_s": p["requests"] / p["wall_s"] if p["wall_s"] > 0 else None,
                                "latency_ms": percentiles([1e3 * s for s in p["latency_s"]]), "requests": p["requests"]}
                       for c, p in sorted(phases.items())},
        "concurrency_not_run": measured.get("concurrency_not_run") or [],
        "generated_tokens_per_pair": first["generated_tokens"] / first["pairs"] if first["pairs"] else None,
        "format_failures": first["format_failures"],
        "no_label": first["no_label"],
        "n_pairs_served": first["pairs"],
        "accuracy": acc,
    }


def ranking_row(system: str, queries: Sequence[QueryCandidates], scores: dict[tuple[str, str], float],
                label_values: Sequence[float], *, latencies_ms: Sequence[float] | None = None,
                latency_source: str, axis: str | None = None, variant: str | None = None,
                per_query: bool = False) -> dict:
    """A floor that ranks without label probabilities (BM25, a base encoder's cosine, the first-stage
    order): nDCG@10 of its scores on the gold-labelled candidates; accuracy and F1 do not apply.
    ``per_query`` adds each question's nDCG@10 (``ndcg@10_per_query``)."""
    from r3edge.core.metrics import ndcg_at_k

    pairs = [(q.qid, c) for q in queries for c in q.candidates if c.label is not None and (q.qid, c.docid) in scores]
    values = np.asarray(label_values, dtype=np.float64)
    gains = values[np.asarray([c.label for _, c in pairs], dtype=np.int64)]
    got = ndcg_at_k(gains, np.asarray([scores[(qid, c.docid)] for qid, c in pairs], dtype=np.float64),
                    [qid for qid, _ in pairs], per_query=per_query)
    lat = percentiles(list(latencies_ms)) if latencies_ms else None
    n_pairs = sum(len(q.candidates) for q in queries)
    return {
        "system": system, "variant": variant, "kind": "floor", "axis": axis if lat else None,
        "latency_source": latency_source,
        "latency_ms": lat or {},
        "pairs_per_s": (n_pairs / (sum(latencies_ms) / 1e3)) if lat and sum(latencies_ms) > 0 else None,
        "accuracy": {"n_scored": len(pairs), "vs_gold": {"ndcg@10": got["ndcg@10"], "ndcg_queries": got["ndcg_queries"],
                                                         "n": len(pairs),
                                                         **{k: v for k, v in got.items() if k.endswith("_per_query")}}},
    }


def first_stage_row(queries: Sequence[QueryCandidates], label_values: Sequence[float]) -> dict:
    """The order the candidates arrived in (their ``rank``; unranked ones last, in file order)."""
    scores = {(q.qid, c.docid): -float(c.rank if c.rank is not None else 10**9 + i)
              for q in queries for i, c in enumerate(q.candidates)}
    return ranking_row("first-stage order", queries, scores, label_values,
                       latency_source="not timed: the order the candidates came with")


def bm25_row(queries: Sequence[QueryCandidates], label_values: Sequence[float], axis: str,
             scores: Callable[[str, list[str]], Sequence[float]]) -> dict:
    """BM25 as a reranker, timed in-process per request: ``scores(query, texts)`` indexes that request's
    candidates and scores the query (the pairs stage's index, :func:`r3edge.distill.data.pooling.bm25_scores`,
    handed in by the caller: this package never imports another stage)."""
    import time

    by_pair, latencies = {}, []
    for q in queries:
        t0 = time.perf_counter()
        got = scores(q.query, [c.text for c in q.candidates])
        latencies.append((time.perf_counter() - t0) * 1e3)
        by_pair.update({(q.qid, c.docid): float(s) for c, s in zip(q.candidates, got)})
    return ranking_row("BM25", queries, by_pair, label_values, latencies_ms=latencies, axis=axis, variant="bm25s",
                       latency_source="measured in-process: index the request's candidates, score the query")


def bench_systems(queries: Sequence[QueryCandidates], *, artifact: str | Sequence[str] | None = None,
                  variants: Sequence[str] | None = None, threads: int | None = None,
                  target: str | None = None, labels_dir: str | None = None, requests: int = 20,
                  concurrency: int | Sequence[int] = 1, top_k: int = 10, pad_to: int | None = None,
                  serve_limits: dict | None = None, teacher: dict | None = None, allow_none: bool = False,
                  in_process: Sequence[tuple[str, Callable[[], Runtime]]] = ()) -> dict:
    """Student rows (every variant of every artifact, or one running server, then each ``(system,
    open_runtime)`` of ``in_process`` opened and timed here, :func:`in_process_row`) plus the machine
    description and the model-free baselines; the caller adds judge and floor rows and writes the report.

    Agreement is measured against ``teacher`` (probabilities by (qid, docid), e.g. a measured judge's)
    or else the labels in ``labels_dir``, whose accuracy is a row of its own (:func:`labels_row`, not timed)."""
    from r3edge.benchmarks.machine import machine_info
    from r3edge.core.artifact import read_manifest, variant_runtime

    artifacts = [artifact] if isinstance(artifact, str) else list(artifact or [])
    if artifacts and target is not None or not (artifacts or target or in_process or allow_none):
        raise InvalidInput("give exactly one of --artifact (served by a child process) or --target (a running server)",
                          "e.g. r3edge bench --artifact runs/demo/artifact --pairs heldout.jsonl")
    if teacher is None and labels_dir:
        teacher = teacher_probs(labels_dir)[0]
    machine = machine_info()
    axis = hardware_axis(machine)
    kw = dict(requests=requests, concurrency=concurrency, top_k=top_k, pad_to=pad_to)
    rows = []
    if target:
        rows.append({**student_row(target, queries, teacher, system=f"server@{target}", **kw),
                     "axis": hardware_axis(machine, None if _is_local(target) else f"server at {target}")})
    for art in artifacts:
        manifest = read_manifest(art)
        head = Scorer.load(art).spec.head  # the report holds only encoder students against the base-encoder floor
        for variant in (list(variants) if variants else _variants_of(art)):
            # one artifact: the row names the runtime that scores the variant (ov-* run on OpenVINO)
            runtime = variant_runtime(manifest, variant or manifest.get("default") or "fp32")
            name = f"student {Path(art).name}" if len(artifacts) > 1 else f"student ({runtime})"
            with serve_artifact(art, variant, threads, **(serve_limits or {})) as tgt:
                rows.append({**student_row(tgt, queries, teacher, system=name, **kw), "axis": axis, "head": head})
    for system, open_runtime in in_process:  # opened after the servers stopped: nothing else runs on the cores
        rows.append({**in_process_row(open_runtime(), queries, teacher, system=system, requests=requests,
                                      concurrency=concurrency), "axis": axis})
    label_values = (rows[0].get("label_values") if rows else None) or SPEC_DEFAULTS["label_values"]
    if labels_dir:
        rows.append(labels_row(queries, labels_dir, label_values))
    gold = any(c.label is not None for q in queries for c in q.candidates)
    return {
        "machine": machine,
        "settings": {"artifact": artifacts[0] if len(artifacts) == 1 else (artifacts or None), "target": target,
                     "threads": threads, "labels_dir": labels_dir, "label_values": list(label_values),
                     "n_queries": len(queries), "n_pairs": sum(len(q.candidates) for q in queries), **kw},
        "systems": rows,
        # what the reranker must beat: the order it was handed, on the same held-back pairs
        "baselines": baselines(queries, label_values) if gold else None,
    }


def _is_local(target: str) -> bool:
    from r3edge.core.net import is_loopback

    return is_loopback(target.rsplit(":", 1)[0])


def scored_floor(queries: Sequence[QueryCandidates], scoring: Scoring, label_values: Sequence[float], *,
                 per_query: bool = False) -> dict:
    """nDCG@10 of any score function (e.g. the student's base encoder by cosine) on the gold-labelled
    candidates, the same computation as the input order's in :func:`baselines`. ``per_query`` adds each
    question's nDCG@10 from the same scores (``ndcg@10_per_query``), for a paired comparison with another system."""
    pairs = [(q.qid, q.query, c) for q in queries for c in q.candidates if c.label is not None]
    logits = scoring([query for _, query, _ in pairs], [c.text for _, _, c in pairs])
    probs = scoring.scorer.probabilities(logits) if scoring.scorer is not None else softmax(logits)
    expected = probs @ np.asarray(label_values, dtype=np.float64)
    row = ranking_row(scoring.name, queries, {(qid, c.docid): float(e) for (qid, _, c), e in zip(pairs, expected)},
                      label_values, latency_source="not timed: a floor", per_query=per_query)
    got = row["accuracy"]["vs_gold"]
    return {"system": scoring.name, "ndcg@10": got["ndcg@10"], "ndcg_queries": got["ndcg_queries"],
            **({"ndcg@10_per_query": got["ndcg@10_per_query"]} if per_query else {})}


def baselines(queries: Sequence[QueryCandidates], label_values: Sequence[float]) -> dict:
    """The input order (nDCG@10 of the given ranks, :func:`first_stage_row`) and the majority class
    (accuracy, macro-F1)."""
    from r3edge.core.metrics import relevance_metrics

    pairs = [(q.qid, c) for q in queries for c in q.candidates if c.label is not None]
    gold = np.asarray([c.label for _, c in pairs], dtype=np.int64)
    qids = [qid for qid, _ in pairs]
    order = first_stage_row(queries, label_values)["accuracy"]["vs_gold"]
    majority = int(np.bincount(gold, minlength=len(label_values)).argmax())
    onehot = np.zeros((len(gold), len(label_values)))
    onehot[:, majority] = 1.0
    maj = relevance_metrics(gold, onehot, qids, label_values)
    return {
        "input_order": {"ndcg@10": order["ndcg@10"], "ndcg_queries": order["ndcg_queries"]},
        "majority": {"label": majority, "accuracy": maj["accuracy"], "macro_f1": maj["f1_macro"], "n": maj["n"]},
    }
