"""`r3edge bench`'s comparison: judges, served students and floors on the same requests, one results dict.

The pieces that need another stage or torch are handed in by the caller (the command), because this
package never imports torch, transformers or another stage: the judges as a call that measures them
(:func:`r3edge.distill.label.rerank.measure_judges`), BM25 as a score function
(:func:`r3edge.distill.data.pooling.bm25_scores`), the base encoder as a call that builds its
:class:`~r3edge.core.scoring.Scoring` (:func:`r3edge.model.student.base_cosine_scoring`) and the naive
PyTorch forward as a call that opens a student directory (:func:`r3edge.model.runtimes.load_runtime`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from r3edge.benchmarks.systems import bench_systems, bm25_row, hardware_axis, judge_row, scored_floor, teacher_probs
from r3edge.core.artifact import Runtime
from r3edge.core.errors import InvalidInput
from r3edge.core.pairs import QueryCandidates
from r3edge.core.scoring import SPEC_DEFAULTS, Scoring


def concurrency_levels(text: str) -> list[int]:
    """``"1,4"`` -> ``[1, 4]``: closed-loop callers, latency at the first, throughput at each."""
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise InvalidInput(f"--concurrency {text!r} is not a list of positive integers", "write e.g. --concurrency 1,4",
                           field="--concurrency")
    return levels


def first_by_rank(queries: Sequence[QueryCandidates], n: int | None) -> list[QueryCandidates]:
    """Each query cut to its first ``n`` candidates by first-stage rank (unranked ones last); all when None."""
    if n is not None:
        for q in queries:
            q.candidates = sorted(q.candidates, key=lambda c: (c.rank is None, c.rank or 0))[:n]
    return list(queries)


def naive_forward_systems(student_dirs: Sequence[str], open_torch: Callable[[str], Runtime]
                          ) -> list[tuple[str, Callable[[], Runtime]]]:
    """``(system, open)`` per student directory: its own PyTorch forward (``open_torch``), opened when timed."""
    return [(f"naive transformers forward {Path(d).name}", lambda d=d: open_torch(d)) for d in student_dirs]


def compare(queries: Sequence[QueryCandidates], *, concurrency: Sequence[int], requests: int = 20, top_k: int = 10,
            artifacts: Sequence[str] | None = None, target: str | None = None, variants: Sequence[str] | None = None,
            threads: int | None = None, pad_to: int | None = None, serve_limits: dict | None = None,
            labels_dir: str | None = None, judges: Callable[[], list[dict]] | None = None,
            in_process: Sequence[tuple[str, Callable[[], Runtime]]] = (),
            bm25: Callable[[str, list[str]], Sequence[float]] | None = None,
            base: Callable[[], Scoring | None] | None = None) -> dict:
    """Judges, then students (the judges' engine is stopped first), then floors, on ``queries``.

    ``judges()`` returns the measured judges (the first is the teacher the others and the students are
    compared with; else the labels in ``labels_dir`` are); ``bm25`` and ``base`` (the students' base
    encoder by cosine) are floors, left out when None or when no candidate has a gold label.
    """
    if requests < 1 or top_k < 0:
        raise InvalidInput("--requests must be >= 1 and --top-k >= 0", "fix the numbers", field="--requests")
    if not (artifacts or target or in_process or judges):
        raise InvalidInput("nothing to benchmark", "give --artifact DIR (or --target HOST:PORT), --torch-student DIR "
                           "and/or --judges CONFIGS")
    gold = any(c.label is not None for q in queries for c in q.candidates)
    # the base encoder's floor first: a config that cannot score these queries fails before the long runs
    scoring = base() if gold and base is not None else None
    if gold and base is not None and scoring is None:
        raise InvalidInput("--base-student's config has no pretrained encoder to rank by cosine",
                           "pass an encoder or bi-encoder config with 'pretrained' weights", field="--base-student")
    floor = scored_floor(queries, scoring, SPEC_DEFAULTS["label_values"]) if scoring is not None else None
    measured = judges() if judges is not None else []
    teacher = measured[0]["probs"] if measured else (teacher_probs(labels_dir)[0] if labels_dir else None)
    results = bench_systems(
        queries, artifact=artifacts, target=target, variants=variants, threads=threads, labels_dir=labels_dir,
        requests=requests, concurrency=concurrency, top_k=top_k, pad_to=pad_to, serve_limits=serve_limits,
        teacher=teacher, allow_none=True, in_process=in_process)
    values = results["settings"]["label_values"]
    local = hardware_axis(results["machine"])
    for k, m in enumerate(measured):
        remote = m["base_url"] and not _loopback_url(m["base_url"])
        row = judge_row(m, queries, values, None if k == 0 else teacher, f"server at {m['base_url']}" if remote else local)
        results["systems"].insert(k, row)
    if gold and bm25 is not None:
        results["systems"].append(bm25_row(queries, values, local, bm25))
    if floor is not None and results.get("baselines") is not None:
        if list(values) != list(SPEC_DEFAULTS["label_values"]):  # the students grade on another scale
            floor = scored_floor(queries, scoring, values)
        results["baselines"]["base_cosine"] = floor
    results["settings"]["teacher"] = measured[0]["name"] if measured else ("labels" if labels_dir else None)
    return results


def _loopback_url(url: str) -> bool:
    from urllib.parse import urlparse

    from r3edge.core.net import is_loopback

    return is_loopback(urlparse(url).hostname or "")
