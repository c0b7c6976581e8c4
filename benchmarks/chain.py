"""The distillation chain in one report (`r3edge bench chain`): the teachers, the students they taught and the floors a
user already has, on one gold-labelled split, each with quality (nDCG@10, accuracy, calibrated ECE) and its latency
per request on the hardware it was measured on.

Why one more report: every other benchmark here measures one link (a judge's labels, a student's fidelity, a
variant's speed). Whether a bigger teacher run, or more labels, bought anything is only visible when the teacher,
each student and the floors sit in one table, scored the same way on the same pairs. Rows come from three places:

* a teacher's labels directories (``dev`` and the calibration split): its quality is that of its labels; its latency
  is the labelling wall time of the split divided by its requests, on the hardware the caller names (labels carry
  no machine description);
* a student artifact, served here by a real ``r3edge serve`` child process: every pair of both splits scored over
  gRPC, then ``requests`` top-N requests timed one at a time;
* a row measured on another machine and written to its own ``results.json`` (the GPU student call,
  ``benchmarks/gpu/label_100k/student_1p5b.py``): imported with the hardware it names.

Calibrated ECE is ``r3edge calibrate --bias``'s fit on the calibration split's gold labels, applied to the
evaluation split (:func:`r3edge.core.calibration.calibrated_ece`), so every row is calibrated the same way and
never on the pairs it is measured on. Floors (the first-stage order, BM25, a base encoder by cosine) rank only:
they have no label probabilities, so accuracy and ECE do not apply.

Latencies of different hardware never share an axis: the table names each row's hardware, and the plot gives each
hardware its own panel.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from r3edge.benchmarks.load import collect_probs, run_load
from r3edge.benchmarks.results_files import write_results
from r3edge.benchmarks.systems import bm25_row, first_stage_row, gold_pairs, scored_floor, serve_artifact, teacher_probs
from r3edge.core.errors import InvalidInput
from r3edge.core.pairs import QueryCandidates
from r3edge.core.scoring import Scoring

#: smallest probability taken into a log for the calibration fit (labels may hold exact zeros)
_EPS = 1e-12


def quality(queries: Sequence[QueryCandidates], probs: dict[tuple[str, str], Sequence[float]],
            fit_queries: Sequence[QueryCandidates] | None, fit_probs: dict[tuple[str, str], Sequence[float]] | None,
            label_values: Sequence[float]) -> dict:
    """Relevance metrics of ``probs`` against gold on ``queries`` and, when a calibration split is given, the
    calibrated ECE and accuracy after a fit on its gold labels (``calibration``; an ``error`` when the fit fails,
    e.g. for scores that rank gold backwards)."""
    from r3edge.core.calibration import calibrated_ece
    from r3edge.core.metrics import relevance_metrics

    n = len(label_values)
    p, gold, qids = gold_pairs(queries, probs, n)
    if not len(gold):
        raise InvalidInput("no gold-labelled pair of the evaluation split was scored",
                           "evaluate on pairs with gold labels whose ids the system scored", field="queries")
    out = {k: v for k, v in relevance_metrics(gold, p, qids, label_values).items() if k != "gold_counts"}
    if fit_queries is not None and fit_probs is not None:
        fp, fgold, _ = gold_pairs(fit_queries, fit_probs, n)
        try:
            out["calibration"] = calibrated_ece(np.log(np.maximum(fp, _EPS)), fgold, np.log(np.maximum(p, _EPS)), gold)
        except InvalidInput as exc:
            out["calibration"] = {"error": str(exc), "fit_pairs": int(len(fgold))}
    return out


def _latency(ms: dict | None, axis: str | None, source: str) -> dict:
    return {"p50_ms": (ms or {}).get("p50"), "p95_ms": (ms or {}).get("p95"), "axis": axis, "source": source}


def teacher_row(system: str, labels_dir: str | Path, fit_labels_dir: str | Path | None,
                queries: Sequence[QueryCandidates], fit_queries: Sequence[QueryCandidates] | None,
                axis: str | None, label_values: Sequence[float]) -> dict:
    """A teacher by its labels of the evaluation split (and of the calibration split), graded by the label values its
    manifest names (``label_values`` where it names none). Its latency per request is
    the split's labelling wall time (the manifest's) over the requests it labelled: a mean, not a p50, measured
    in batches on ``axis``; None (not timed) without ``axis`` or a recorded wall time."""
    from r3edge.core.labels import read_manifest

    probs, cols = teacher_probs(labels_dir)
    fit = teacher_probs(fit_labels_dir)[0] if fit_labels_dir else None
    manifest = read_manifest(labels_dir)
    label_values = manifest.get("label_values") or label_values
    wall = (manifest.get("summary") or {}).get("wall_s") or manifest.get("wall_s")
    labelled = set(cols["qid"])
    mean_ms = 1e3 * wall / len(labelled) if wall and labelled and axis else None
    source = (f"labelling wall time {wall:.1f} s / {len(labelled)} requests (a mean, batched)" if mean_ms
              else "not timed: labels read from disk")
    return {"system": system, "kind": "teacher", "model": str(cols["teacher_model"][0]) if cols["qid"] else None,
            "learnt_from": None, "variant": None, "source": str(labels_dir),
            "quality": quality(queries, probs, fit_queries, fit, label_values),
            "latency": {**_latency({"p50": mean_ms} if mean_ms else None, axis if mean_ms else None, source),
                        "statistic": "mean" if mean_ms else None}}


def served_row(system: str, artifact: str | Path, variant: str | None, queries: Sequence[QueryCandidates],
               fit_queries: Sequence[QueryCandidates] | None, *, requests: int, axis: str,
               learnt_from: str | None = None, threads: int | None = None, device: str | None = None) -> dict:
    """A student artifact served by ``r3edge serve`` (its default variant unless ``variant``): both splits scored
    over gRPC, then ``requests`` top-10 Rerank calls one at a time for the latency."""
    from r3edge.api.client import RerankerClient

    limits = {"device": device} if device else {}
    with serve_artifact(str(artifact), variant, threads, **limits) as target:
        with RerankerClient(target) as client:
            client.wait_ready(300)
            info = client.model_info()
        probs = collect_probs(target, queries)
        fit = collect_probs(target, fit_queries) if fit_queries is not None else None
        load = run_load(target, queries, max(1, requests), 1, top_k=10, progress=False)
    if load["errors"]:
        raise InvalidInput(f"{system}: {load['errors']} of the timed requests failed", "read the server's log")
    return {"system": system, "kind": "student", "model": str(artifact), "learnt_from": learnt_from,
            "variant": info.variant, "runtime": info.runtime, "source": str(artifact),
            "quality": quality(queries, probs, fit_queries, fit, list(info.label_values)),
            "latency": {**_latency(load["latency_ms"], axis, f"served over gRPC ({info.runtime}), concurrency 1, "
                                                              f"{load['requests']} requests"), "statistic": "p50"}}


def imported_row(path: str | Path, system: str | None = None, learnt_from: str | None = None) -> dict:
    """A student measured on another machine by the GPU student call (its ``results.json``): the served variant's
    quality on the evaluation split, its calibrated ECE and its concurrency-1 latency, on the GPU it names."""
    res = json.loads(Path(path).read_text())
    served = (res.get("steps") or {}).get("served_fp16") or {}
    ev = (served.get("eval") or {}).get("student_vs_gold")
    if not ev or "c1" not in served:
        raise InvalidInput(f"{path} has no served fp16 evaluation and latency (steps.served_fp16)",
                           "import the results.json of a completed student_1p5b.py call", field="--imported")
    if res.get("smoke"):
        raise InvalidInput(f"{path} is a smoke run's (a random model), not a result",
                           "import the results.json a GPU call returned", field="--imported")
    machine = res.get("machine") or {}
    axis = machine.get("gpu") or f"{res.get('device')} (no GPU named)"
    q = {k: ev.get(k) for k in ("n", "accuracy", "f1_macro", "auc_0_12", "auc_01_2", "ndcg@10", "ndcg_queries", "ece")}
    if served.get("calibrated"):
        q["calibration"] = served["calibrated"]
    info = served.get("model_info") or {}
    return {"system": system or "1.5B causal student", "kind": "student", "model": res.get("config"),
            "learnt_from": learnt_from or res.get("labels"), "variant": info.get("variant"),
            "runtime": info.get("runtime"), "source": str(path), "quality": q,
            "latency": {**_latency(served["c1"].get("latency_ms"), axis,
                                   f"served over gRPC ({info.get('runtime')}), concurrency 1, imported from {path}"),
                        "statistic": "p50"}}


def floor_rows(queries: Sequence[QueryCandidates], label_values: Sequence[float], *, axis: str,
               bm25: Callable[[str, list[str]], Sequence[float]] | None = None,
               base: Sequence[Scoring] = ()) -> list[dict]:
    """The floors a user already has: the first-stage order, BM25 (timed in-process on ``axis``) and each base
    encoder by cosine (not timed: a floor of quality)."""
    def row(system, got, lat=None, model=None):
        vs = got["accuracy"]["vs_gold"] if "accuracy" in got else got
        return {"system": system, "kind": "floor", "model": model, "learnt_from": None, "variant": None, "source": None,
                "quality": {"ndcg@10": vs["ndcg@10"], "ndcg_queries": vs.get("ndcg_queries")},
                "latency": lat or _latency(None, None, "not timed: a floor")}

    rows = [row("first-stage order", first_stage_row(queries, label_values))]
    if bm25 is not None:
        b = bm25_row(queries, label_values, axis, bm25)
        rows.append(row("BM25 (bm25s over each request's candidates)", b,
                        {**_latency(b["latency_ms"], axis, b["latency_source"]), "statistic": "p50"}, "bm25s"))
    for scoring in base:
        rows.append(row(f"base by cosine: {scoring.name}", scored_floor(queries, scoring, label_values),
                        model=scoring.name))
    return rows


def _f(x, spec=".3f") -> str:
    return "–" if x is None else format(x, spec)


HEADER = ["system", "kind", "learnt from", "variant", "nDCG@10", "accuracy", "macro F1", "ECE", "calibrated ECE",
          "ms / request", "hardware"]


def table_cells(row: dict, axes: dict[str, str]) -> list[str]:
    q, lat = row["quality"], row["latency"]
    cal = q.get("calibration") or {}
    ms = lat.get("p50_ms")
    stat = "" if ms is None or lat.get("statistic") == "p50" else f" ({lat['statistic']})"
    return [row["system"], row["kind"], row.get("learnt_from") or "–", row.get("variant") or "–",
            _f(q.get("ndcg@10")), _f(q.get("accuracy")), _f(q.get("f1_macro")), _f(q.get("ece")),
            _f(cal.get("ece")) if "ece" in cal else ("fit failed" if "error" in cal else "–"),
            (_f(ms, ".1f") + stat) if ms is not None else "–", axes.get(lat.get("axis") or "", "–")]


def axes_of(rows: Sequence[dict]) -> dict[str, str]:
    """Each timed row's hardware -> a short key (A, B, ...), in order of first appearance."""
    out: dict[str, str] = {}
    for r in rows:
        axis = r["latency"].get("axis")
        if axis and r["latency"].get("p50_ms") is not None and axis not in out:
            out[axis] = chr(ord("A") + len(out))
    return out


def markdown(results: dict) -> str:
    rows = results["rows"]
    axes = axes_of(rows)
    s = results["settings"]
    lines = [f"# {s.get('title') or 'The distillation chain'}", "",
             f"Evaluation split: {s['split']} ({s['n_queries']} requests, {s['n_pairs']} pairs, gold labels). "
             f"Calibration split: {s.get('fit_split') or 'none'}.", "",
             f"Machine of the rows measured here: {results['machine']['cpu']}, {results['machine']['cores_usable']} cores, "
             + ("; ".join(results["machine"].get("gpus") or []) or "no GPU") + f" ({results['machine']['timestamp']}).",
             "", "| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(table_cells(r, axes)) + " |" for r in rows]
    lines += ["", "Hardware (latency is compared only within one letter):"]
    lines += [f"- {key}: {axis}" for axis, key in axes.items()]
    lines += ["", "- ms / request: p50 per request unless marked; each row's source:"]
    lines += [f"  - {r['system']}: {r['latency']['source']}" for r in rows if r["latency"].get("p50_ms") is not None]
    lines += ["- Calibrated ECE: `r3edge calibrate --bias` fitted on the calibration split's gold labels, applied to "
              "the evaluation split (top-label ECE, 15 bins). Floors only rank: no probabilities, no accuracy or ECE."]
    failed = [r["system"] for r in rows if "error" in (r["quality"].get("calibration") or {})]
    if failed:
        lines.append(f"- The calibration fit failed for: {', '.join(failed)} (their scores rank the calibration "
                     "split's gold backwards).")
    missing = s.get("not_run") or []
    if missing:
        lines += ["", "Not in this table yet:"] + [f"- {m}" for m in missing]
    if s.get("command"):
        lines += ["", f"Reproduce: `{s['command']}`"]
    return "\n".join(lines) + "\n"


def plot(results: dict, path: str | Path) -> Path:
    """nDCG@10 against latency per request (log), one panel per hardware; each floor a dashed line in every panel."""
    from r3edge.core.errors import require

    require("matplotlib", "bench").use("Agg")
    import matplotlib.pyplot as plt

    from r3edge.benchmarks.report import log_latency_axis

    rows = results["rows"]
    axes = axes_of(rows)
    floors = [r for r in rows if r["latency"].get("p50_ms") is None and r["quality"].get("ndcg@10") is not None]
    panels = list(axes) or ["(nothing timed)"]
    fig, subplots = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 6.4), squeeze=False, sharey=True)
    for ax, axis in zip(subplots[0], panels):
        timed = [r for r in rows if r["latency"].get("axis") == axis and r["latency"].get("p50_ms") is not None]
        for r, marker in zip(timed, "os^Dvp*hX<>" * 3):
            x, y = r["latency"]["p50_ms"], r["quality"]["ndcg@10"]
            ax.scatter([x], [y], marker=marker, s=60, label=f"{r['system']} ({r['kind']})")
        for r, style in zip(floors, ["--", ":", "-.", (0, (5, 1))] * 3):
            ax.axhline(r["quality"]["ndcg@10"], color="grey", linestyle=style, linewidth=1,
                       label=f"{r['system']} {r['quality']['ndcg@10']:.3f}")
        if timed:
            log_latency_axis(ax, [r["latency"]["p50_ms"] for r in timed])
        ax.set_xlabel("ms per request (log)")
        ax.set_ylabel("nDCG@10")
        ax.set_title(f"{axes.get(axis, '')}: {axis}"[:70], fontsize=9)
        ax.grid(True, alpha=0.3)
        # below the panel: inside it would hide the points it names
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False)
    fig.suptitle(results["settings"].get("title") or "The distillation chain", fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_chain_report(results: dict, out_dir: str | Path) -> dict[str, Path]:
    """OUT/results.json, OUT/report.md and OUT/chain.png."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = write_results(out, results, markdown(results))
    paths["plot"] = plot(results, out / "chain.png")
    return paths
