"""Write a benchmark's results: ``results.json`` (everything, with the machine), ``report.md``
(one table a reader can compare) and ``latency_vs_accuracy.png`` (the trade-off at a glance)."""

from __future__ import annotations

import json
from pathlib import Path


def _fmt(x, spec: str = ".3f") -> str:
    return "–" if x is None else format(x, spec)


def row_cells(row: dict) -> list[str]:
    acc = row.get("accuracy", {})
    gold = acc.get("vs_gold", {})
    teach = acc.get("vs_teacher", {})
    lat = row.get("latency_ms", {})
    est = "*" if row.get("kind") == "teacher" else ""
    return [
        row["system"], str(row.get("variant") or "–"),
        _fmt(lat.get("p50"), ".1f") + est, _fmt(lat.get("p95"), ".1f") + est,
        _fmt(row.get("pairs_per_s"), ".1f") + est,
        _fmt(gold.get("accuracy")), _fmt(gold.get("f1_macro")), _fmt(gold.get("ndcg@10")),
        _fmt(teach.get("accuracy_vs_teacher")), str(gold.get("n", acc.get("n_scored", "–"))),
    ]


HEADER = ["system", "variant", "p50 ms / top-100 req", "p95 ms", "pairs/s", "accuracy vs gold", "macro F1",
          "nDCG@10", "agreement w/ teacher", "n"]


SUBSET_HEADER = ["system", "variant", "accuracy", "macro F1", "AUC 0/12", "AUC 01/2", "nDCG@10", "n"]


def subset_cells(row: dict) -> list[str]:
    sub = row["accuracy"]["on_teacher_pairs"]
    return [row["system"], str(row.get("variant") or "–"), _fmt(sub.get("accuracy")), _fmt(sub.get("f1_macro")),
            _fmt(sub.get("auc_0_12")), _fmt(sub.get("auc_01_2")), _fmt(sub.get("ndcg@10")), str(sub.get("n", "–"))]


def first_stage_lines(results: dict) -> list[str]:
    """The order the candidates arrived in, against each student on the same held-back lists."""
    order = ((results.get("baselines") or {}).get("input_order") or {}).get("ndcg@10")
    if order is None:
        return []
    lines = ["", f"**First-stage order** (the ranks the candidates came with, which the reranker reorders): "
                 f"nDCG@10 {order:.3f} on the same {results['settings']['n_queries']} queries."]
    base = (results.get("baselines") or {}).get("base_cosine")
    if base and base.get("ndcg@10") is not None:
        lines.append("")  # its own paragraph: markdown would run it into the first-stage line
        lines.append(f"**The student's base encoder by cosine** ({base['system']}: its own pretrained weights, "
                     f"no training): nDCG@10 {base['ndcg@10']:.3f} on the same queries.")
    for r in results["systems"]:
        got = r.get("accuracy", {}).get("vs_gold", {}).get("ndcg@10")
        if r.get("kind") == "student" and got is not None:
            verdict = "above" if got > order else "not above"
            line = (f"- {r['system']} {r.get('variant') or ''}: nDCG@10 {got:.3f}, {verdict} the first-stage order "
                    f"({got - order:+.3f})")
            if base and base.get("ndcg@10") is not None:
                line += (f", {'above' if got > base['ndcg@10'] else 'not above'} its base encoder "
                         f"({got - base['ndcg@10']:+.3f})")
            lines.append(line + ".")
    return lines


def markdown(results: dict) -> str:
    m = results["machine"]
    s = results["settings"]
    lines = [
        "# r3edge benchmark",
        "",
        f"Machine: {m['cpu']} ({' '.join(m.get('cpu_flags') or []) or 'SIMD flags unknown'}), "
        f"{m['cores_usable']}/{m['cores_logical']} cores, {m['ram_gib']} GiB RAM, {m['os']}, "
        f"Python {m['python']}, onnxruntime {m['versions'].get('onnxruntime')}, torch {m['versions'].get('torch')}"
        + (f", GPU {'; '.join(m['gpus'])}" if m["gpus"] else ", no GPU") + f" — {m['timestamp']}",
        "",
        f"Load: {s['requests']} Rerank requests, concurrency {s['concurrency']}, top_k {s['top_k']}, "
        f"{s['n_queries']} queries / {s['n_pairs']} pairs"
        + (f", candidates cycled to {s['pad_to']}" if s.get("pad_to") else "") + ".",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" for _ in HEADER) + "|",
    ]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in results["systems"]]
    if any(r.get("kind") == "teacher" for r in results["systems"]):
        lines += ["", "\\* teacher latency and throughput are estimated from labeling records "
                  "(100 × mean per-pair latency_s, which already carries each pair's share of the query's intent "
                  "round), not measured over gRPC."]
    if any("on_teacher_pairs" in r.get("accuracy", {}) for r in results["systems"]):
        lines += ["", "## Same pairs for every system", "",
                  "The pairs the teacher labelled (the top-ranked candidates of each held-back query), "
                  "scored against gold by every system:", "",
                  "| " + " | ".join(SUBSET_HEADER) + " |", "|" + "|".join("---" for _ in SUBSET_HEADER) + "|"]
        subset_rows = [r for r in results["systems"] if "on_teacher_pairs" in r.get("accuracy", {})]
        lines += ["| " + " | ".join(subset_cells(r)) + " |" for r in subset_rows]
        counts = subset_rows[0]["accuracy"]["on_teacher_pairs"].get("gold_counts") or {}
        if counts:
            frac = max(counts.values()) / sum(counts.values())
            # always predicting the majority label: precision = frac, recall = 1 for it, F1 0 elsewhere
            macro_f1 = 2 * frac / (1 + frac) / len(counts)
            lines += ["", f"Majority-class baseline on these pairs (always label {max(counts, key=counts.get)}): "
                      f"accuracy {frac:.3f}, macro F1 {macro_f1:.3f}; gold label counts {counts}."]
    lines += first_stage_lines(results)
    if results.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in results["notes"]]
    errs = {r["system"] + ":" + str(r.get("variant")): r["load"]["errors"] for r in results["systems"]
            if r.get("load", {}).get("errors")}
    if errs:
        lines += ["", f"Failed requests (counted, not hidden): {errs}"]
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    metrics = [("accuracy", "accuracy vs gold"), ("ndcg@10", "nDCG@10")]
    # Plot on the pairs every system was scored on when there is such a set (like with like).
    block = "on_teacher_pairs" if all("on_teacher_pairs" in r.get("accuracy", {}) for r in results["systems"]) \
        else "vs_gold"
    points = []
    for r in results["systems"]:
        x = r.get("latency_ms", {}).get("p50")
        if x is not None and x > 0:
            points.append((r, x / 1e3))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, (key, title) in zip(axes, metrics):
        for k, (r, x) in enumerate(points):
            y = r.get("accuracy", {}).get(block, {}).get(key)
            if y is None:
                continue
            teacher = r.get("kind") == "teacher"
            label = f"{r['system']} {r.get('variant') or ''}".strip() + (" (est.)" if teacher else "")
            # a legend, not text next to the points: variants of one student sit too close together
            # for labels to say unambiguously which point is whose
            ax.scatter([x], [y], marker="s" if teacher else "o", s=50, color=f"C{k}", label=label)
        ax.legend(fontsize=8, loc="lower left")
        ax.set_xscale("log")
        if points:
            xs = [x for _, x in points]
            ax.set_xlim(min(xs) / 3, max(xs) * 3)
        ax.xaxis.set_major_locator(LogLocator(base=10))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0, 1.05)  # the full scale: a zoomed axis would exaggerate small differences
        ax.set_xlabel("p50 seconds per top-100 request (log)")
        ax.set_ylabel(title)
        ax.grid(True, which="both", alpha=0.3)
    where = "on the teacher-labelled pairs" if block != "vs_gold" else "on all held-back pairs"
    fig.suptitle(f"latency vs quality, {where}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(results: dict, out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"results": out / "results.json", "report": out / "report.md", "plot": out / "latency_vs_accuracy.png"}
    paths["results"].write_text(json.dumps(results, indent=2, default=str) + "\n")
    paths["report"].write_text(markdown(results))
    plot(results, paths["plot"])
    return paths
