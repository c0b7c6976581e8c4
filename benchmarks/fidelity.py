"""The fidelity report: does a distilled student keep its teacher's judgement on real graded data?

Input is what :func:`r3edge.benchmarks.systems.bench_systems` measured (every student variant served
over gRPC, the teacher from its label records on the same pairs) plus two baselines that need no
model: the input order (the first-stage ranking the reranker is meant to improve) and the majority
class. Output: ``results.json`` in the shape the judgement issue fixed
(``{"split", "machine", "systems": {"teacher": {...}, "student": {...}, ...}}``), ``report.md``
and ``latency_vs_ndcg.png``.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

#: the per-system fields copied from a metrics block (relevance_metrics / agreement_metrics)
GOLD_KEYS = ("accuracy", "f1_macro", "f1_per_class", "auc_0_12", "auc_01_2", "ndcg@10", "n", "ndcg_queries")
TEACHER_KEYS = ("accuracy_vs_teacher", "kl_teacher_student", "spearman_expected_score")


def system_entry(row: dict, **extra) -> dict:
    """A bench row (student or teacher) flattened to the report's per-system fields."""
    acc = row.get("accuracy", {})
    gold = acc.get("vs_gold", {})
    out = {("macro_f1" if k == "f1_macro" else k): gold.get(k) for k in GOLD_KEYS}
    out.update({k: acc.get("vs_teacher", {}).get(k) for k in TEACHER_KEYS if "vs_teacher" in acc})
    lat = row.get("latency_ms", {})
    out["latency_ms_top100"] = {"p50": lat.get("p50"), "p95": lat.get("p95")}
    out["latency_source"] = row.get("latency_source")
    out["axis"] = row.get("axis")  # the hardware the latency was measured on
    out["pairs_per_s"] = row.get("pairs_per_s")
    out.update(extra)
    return out


def goals(results: dict, recommended: str, int8: str = "int8") -> dict:
    """The judgement issue's goals, each with the two numbers it compares (None where not measured); ``int8``
    is the quantized variant compared with fp32."""
    s = results["systems"]
    t, st, q = s.get("teacher", {}), s.get(recommended, {}), s.get(f"{recommended}-{int8}", {})

    def ratio(a, b):
        return None if a is None or not b else a / b

    base = next((e.get("ndcg@10") for k, e in s.items() if k.startswith("base-cosine")), None)
    return {
        "teacher_ndcg_above_input_order": [t.get("ndcg@10"), s["input_order"]["ndcg@10"]],
        "teacher_ndcg_above_base_cosine": [t.get("ndcg@10"), base],
        "student_ndcg_above_base_cosine": [st.get("ndcg@10"), base],
        "teacher_macro_f1_above_majority": [t.get("macro_f1"), s["majority"]["macro_f1"]],
        "student_ndcg_share_of_teacher": ratio(st.get("ndcg@10"), t.get("ndcg@10")),
        "student_accuracy_share_of_teacher": ratio(st.get("accuracy"), t.get("accuracy")),
        "int8_minus_fp32_accuracy_points": (None if q.get("accuracy") is None or st.get("accuracy") is None
                                            else 100 * (q["accuracy"] - st["accuracy"])),
    }


def _cell(x, spec=".3f") -> str:
    return "–" if x is None else format(x, spec)


def split_size(settings: dict) -> str:
    """How many questions (and comments, where the run counted them) the report measured on."""
    pairs = settings.get("n_pairs")
    return f"{settings['dev_queries']} questions" + (f", {pairs} comments" if pairs is not None else "")


def per_request(settings: dict) -> str:
    """``top-100`` on SemEval's lists: the mean comments per dev question, as the bench report names a request."""
    from r3edge.benchmarks.report import request_size

    return request_size({"settings": {"n_queries": settings["dev_queries"], "n_pairs": settings.get("n_pairs")}})


def markdown(results: dict, command: str) -> str:
    m = results["machine"]
    systems = results["systems"]
    head = ["system", "model", "accuracy", "macro F1", "F1 0/1/2", "AUC 0/12", "AUC 01/2", "nDCG@10",
            "agreement w/ teacher", "KL(teacher‖sys)", f"p50 ms / {per_request(results['settings'])}", "latency source"]
    lines = [
        "# Fidelity on SemEval-2016 CQA (subtask C, dev)", "",
        f"Reproduce: `{command}`", "",
        f"Machine: {m['cpu']}, {m['cores_usable']} cores, {m['ram_gib']} GiB, "
        + (f"GPU {'; '.join(m['gpus'])}" if m.get("gpus") else "no GPU") + f"; {m['timestamp']}.", "",
        f"Split: {results['split']} — {split_size(results['settings'])}, gold 0/1/2.", "",
        "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|",
    ]
    for name, e in systems.items():
        if name in ("input_order", "majority"):
            continue
        f1 = e.get("f1_per_class") or {}
        lines.append("| " + " | ".join([
            name, str(e.get("model", "–")), _cell(e.get("accuracy")), _cell(e.get("macro_f1")),
            "/".join(_cell(f1.get(k), ".2f") for k in ("0", "1", "2")) if f1 else "–",
            _cell(e.get("auc_0_12")), _cell(e.get("auc_01_2")), _cell(e.get("ndcg@10")),
            _cell(e.get("accuracy_vs_teacher")), _cell(e.get("kl_teacher_student")),
            _cell((e.get("latency_ms_top100") or {}).get("p50"), ".0f"), str(e.get("latency_source") or "–"),
        ]) + " |")
    io, mj = systems["input_order"], systems["majority"]
    lines += [f"| input order | first stage | – | – | – | – | – | {_cell(io['ndcg@10'])} | – | – | – | – |",
              f"| majority (always {mj['label']}) | – | {_cell(mj['accuracy'])} | {_cell(mj['macro_f1'])} "
              "| – | – | – | – | – | – | – | – |", ""]
    g = results.get("goals", {})
    if g:
        lines += ["## Goals", ""]
        lines += [f"- `{k}`: {json.dumps(v)}" for k, v in g.items()]
        lines.append("")
    for note in results.get("notes", []):
        lines.append(f"- {note}")
    return "\n".join(lines) + "\n"


def placed(results: dict) -> tuple[str | None, dict[tuple[float, float], list[str]], list[str]]:
    """What the plot puts on its one latency axis: the hardware most timed rows were measured on (the
    students' machine), the points of the rows timed there (systems at the same point share one), and
    the rows timed on other hardware, named with their nDCG@10 but never placed on this axis."""
    timed = [e for e in results["systems"].values() if (e.get("latency_ms_top100") or {}).get("p50") is not None]
    axes = [e.get("axis") for e in timed]
    axis = max(set(axes), key=axes.count) if axes else None
    points: dict[tuple[float, float], list[str]] = {}
    elsewhere = []
    for name, e in results["systems"].items():
        x = (e.get("latency_ms_top100") or {}).get("p50")
        y = e.get("ndcg@10")
        if x is not None and y is not None and e.get("axis") != axis:
            elsewhere.append(f"{name} ({y:.3f}; timed on {e.get('axis')})")
        elif x is not None and y is not None:
            points.setdefault((x, y), []).append(name)
    return axis, points, elsewhere


def plot(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from r3edge.benchmarks.report import log_latency_axis, seconds_axis_label

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    axis, points, elsewhere = placed(results)
    for k, ((x, y), names) in enumerate(points.items()):
        # a legend, not text next to the points: a student's fp32 and int8 sit too close together
        ax.scatter([x / 1e3], [y], marker="s" if "teacher" in names else "o", s=50, color=f"C{k}",
                   label=" = ".join(names))
    io = results["systems"]["input_order"]["ndcg@10"]
    if io is not None:
        ax.axhline(io, linestyle="--", color="grey", label=f"input order {io:.3f}")
    for name, e in results["systems"].items():
        if name.startswith("base-cosine") and e.get("ndcg@10") is not None:
            ax.axhline(e["ndcg@10"], linestyle=":", color="black", label=f"{name} {e['ndcg@10']:.3f}")
    for text in elsewhere:  # a legend entry without a point: another machine's latency is not on this axis
        # wrapped: a device's description runs wider than the axes and the figure would clip it
        ax.plot([], [], linestyle="none", label=textwrap.fill(f"not on this axis: {text}", 70))
    ax.legend(loc="upper left", fontsize=8)  # the points sit well below 1.0 on real data
    log_latency_axis(ax, [x / 1e3 for x, _ in points])
    ax.set_ylim(0, 1.0)
    ax.set_xlabel(seconds_axis_label(per_request(results["settings"])))
    ax.set_ylabel("nDCG@10 vs gold (SemEval C dev)")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"latency vs nDCG@10 (latency on {axis})" if axis else "latency vs nDCG@10", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_fidelity_report(results: dict, out_dir: str | Path, command: str) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"results": out / "results.json", "report": out / "report.md", "plot": out / "latency_vs_ndcg.png"}
    paths["results"].write_text(json.dumps(results, indent=2, default=str) + "\n")
    paths["report"].write_text(markdown(results, command))
    plot(results, paths["plot"])
    return paths
