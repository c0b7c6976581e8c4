"""Write a benchmark's results: ``results.json`` (everything, with the machine), ``report.md``
(one table, one row per system, a reader can compare) and ``latency_vs_accuracy.png`` (the Pareto
plot: log latency per top-100 request against nDCG@10, one panel per hardware).

Every row carries the hardware its latency was measured on (``axis``); the table names it, the
ratios compare only rows of one axis, and the plot gives each axis its own panel, so rows measured
on different hardware never share a latency axis.
"""

from __future__ import annotations

import json
from pathlib import Path

from r3edge.core.scoring import ENCODER_HEADS

HEADER = ["system", "variant / engine", "kind", "p50 ms / request", "p95 ms", "pairs/s c=LO", "pairs/s c=HI",
          "gen tok / pair", "format fails", "nDCG@10", "accuracy", "macro F1", "AUC 0/12", "AUC 01/2",
          "agreement w/ teacher", "n", "hw"]

SUBSET_HEADER = ["system", "variant", "accuracy", "macro F1", "AUC 0/12", "AUC 01/2", "nDCG@10", "n"]


def request_size(results: dict) -> str:
    """``top-100`` for SemEval's lists: the mean candidates per request of the run, rounded ("request" where
    the run did not count them)."""
    s = results["settings"]
    return f"top-{round(s['n_pairs'] / s['n_queries'])}" if s.get("n_queries") and s.get("n_pairs") else "request"


def _fmt(x, spec: str = ".3f") -> str:
    return "–" if x is None else format(x, spec)


def table_rows(results: dict) -> list[dict]:
    """Every system of the run, then the floors that need no model (first-stage order, majority class,
    the base encoder by cosine) when the run computed them as baselines rather than as rows."""
    rows = list(results["systems"])
    names = {r["system"] for r in rows}
    base = results.get("baselines") or {}
    order = base.get("input_order") or {}
    if order.get("ndcg@10") is not None and "first-stage order" not in names:
        rows.append({"system": "first-stage order", "kind": "floor", "latency_source": "not timed",
                     "accuracy": {"vs_gold": {"ndcg@10": order["ndcg@10"], "n": None}}})
    maj = base.get("majority")
    if maj:
        rows.append({"system": f"majority (always {maj['label']})", "kind": "floor", "latency_source": "not timed",
                     "accuracy": {"vs_gold": {"accuracy": maj["accuracy"], "f1_macro": maj["macro_f1"], "n": maj["n"]}}})
    cos = base.get("base_cosine")
    if cos and cos.get("ndcg@10") is not None and cos["system"] not in names:
        rows.append({"system": cos["system"], "variant": "base encoder, cosine", "kind": "floor",
                     "latency_source": "not timed", "accuracy": {"vs_gold": {"ndcg@10": cos["ndcg@10"], "n": None}}})
    return rows


def axes_of(rows: list[dict]) -> dict[str, str]:
    """Hardware description -> its short key (A, B, ...) in order of first appearance."""
    out: dict[str, str] = {}
    for r in rows:
        if r.get("axis") and (r.get("latency_ms") or {}).get("p50") is not None and r["axis"] not in out:
            out[r["axis"]] = chr(ord("A") + len(out))
    return out


def levels(results: dict) -> tuple[int, int]:
    """The run's lowest and highest closed-loop concurrency (latency at the first, throughput at each)."""
    c = results["settings"].get("concurrency", 1)
    c = [c] if isinstance(c, int) else list(c)
    return c[0], c[-1]


def header(results: dict) -> list[str]:
    """The table's columns; one throughput column when the run measured one concurrency."""
    lo, hi = levels(results)
    cols = [h for h in HEADER if lo != hi or h != "pairs/s c=HI"]
    return [h.replace("request", request_size(results)).replace("LO", str(lo)).replace("HI", str(hi)) for h in cols]


def row_cells(row: dict, axes: dict[str, str], hi: int = 4) -> list[str]:
    acc = row.get("accuracy", {})
    gold = acc.get("vs_gold", {})
    teach = acc.get("vs_teacher", {})
    lat = row.get("latency_ms") or {}
    thr = row.get("throughput") or {}
    c4 = (thr.get(str(hi)) or {}).get("pairs_per_s")
    c4_cell = _fmt(c4, ".1f") if c4 is not None else ("not run" if hi in (row.get("concurrency_not_run") or []) else "–")
    return [
        row["system"], str(row.get("variant") or "–"), row.get("kind", "–"),
        _fmt(lat.get("p50"), ".1f"), _fmt(lat.get("p95"), ".1f"), _fmt(row.get("pairs_per_s"), ".1f"), c4_cell,
        _fmt(row.get("generated_tokens_per_pair"), ".1f"),
        ("–" if row.get("format_failures") is None else f"{row['format_failures']}/{row['n_pairs_served']}"
         if row.get("n_pairs_served") else str(row["format_failures"])),
        _fmt(gold.get("ndcg@10")), _fmt(gold.get("accuracy")), _fmt(gold.get("f1_macro")),
        _fmt(gold.get("auc_0_12")), _fmt(gold.get("auc_01_2")), _fmt(teach.get("accuracy_vs_teacher")),
        str(gold.get("n") if gold.get("n") is not None else acc.get("n_scored", "–")),
        axes.get(row.get("axis") or "", "–") if lat.get("p50") is not None else "–",
    ]


def ratios(results: dict) -> list[dict]:
    """Each served int8 student variant against each judge measured on the same hardware: judge p50 /
    student p50 per top-100 request, and the student's nDCG@10 as a share of the judge's."""
    rows = results["systems"]
    students = [r for r in rows if r.get("kind") == "student" and "int8" in str(r.get("variant") or "")]
    out = []
    for s in students:
        for j in (r for r in rows if r.get("kind") == "judge"):
            if j.get("axis") != s.get("axis"):
                continue
            sp, jp = s["latency_ms"].get("p50"), j["latency_ms"].get("p50")
            sn = s["accuracy"].get("vs_gold", {}).get("ndcg@10")
            jn = j["accuracy"].get("vs_gold", {}).get("ndcg@10")
            out.append({"student": f"{s['system']} {s['variant']}", "judge": j["system"],
                        "p50_ratio": jp / sp if sp and jp else None,
                        "ndcg_share": sn / jn if sn is not None and jn else None})
    return out


def naive_ratios(results: dict) -> list[dict]:
    """Each served variant against the naive forward (in-process PyTorch) of the same student (same
    scorer fingerprint) on the same hardware: naive p50 / served p50 per request."""
    rows = results["systems"]
    out = []
    for naive in (r for r in rows if r.get("kind") == "student" and r.get("runtime") == "torch"):
        for s in rows:
            if (s.get("kind") == "student" and s.get("runtime") != "torch" and s.get("axis") == naive.get("axis")
                    and s.get("scorer_fingerprint") == naive.get("scorer_fingerprint")):
                sp, np_ = s["latency_ms"].get("p50"), naive["latency_ms"].get("p50")
                out.append({"served": f"{s['system']} {s['variant']}", "naive": naive["system"],
                            "p50_ratio": np_ / sp if sp and np_ else None})
    return out


def subset_cells(row: dict) -> list[str]:
    sub = row["accuracy"]["on_teacher_pairs"]
    return [row["system"], str(row.get("variant") or "–"), _fmt(sub.get("accuracy")), _fmt(sub.get("f1_macro")),
            _fmt(sub.get("auc_0_12")), _fmt(sub.get("auc_01_2")), _fmt(sub.get("ndcg@10")), str(sub.get("n", "–"))]


def first_stage_lines(results: dict) -> list[str]:
    """Each student and judge against the order its candidates arrived in (and each encoder student
    against its base encoder), on the same lists."""
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
    verdicts = []
    for r in results["systems"]:
        got = r.get("accuracy", {}).get("vs_gold", {}).get("ndcg@10")
        if r.get("kind") in ("student", "judge") and got is not None:
            verdict = "above" if got > order else "not above"
            line = (f"- {r['system']} {r.get('variant') or ''}: nDCG@10 {got:.3f}, {verdict} the first-stage order "
                    f"({got - order:+.3f})")
            # a causal student (head label_rows) has no encoder base; a row without a head is a remote server's
            if (r.get("kind") == "student" and r.get("head") in (None, *ENCODER_HEADS) and base
                    and base.get("ndcg@10") is not None):
                line += (f", {'above' if got > base['ndcg@10'] else 'not above'} its base encoder "
                         f"({got - base['ndcg@10']:+.3f})")
            verdicts.append(line + ".")
    return lines + ([""] + verdicts if verdicts else [])


def markdown(results: dict) -> str:
    m = results["machine"]
    s = results["settings"]
    rows = table_rows(results)
    axes = axes_of(rows)
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    lines = [
        "# r3edge benchmark",
        "",
        f"Machine: {m['cpu']} ({' '.join(m.get('cpu_flags') or []) or 'SIMD flags unknown'}), "
        f"{m['cores_usable']}/{m['cores_logical']} cores, {m['ram_gib']} GiB RAM, {m['os']}, "
        f"Python {m['python']}" + (f", GPU {'; '.join(m['gpus'])}" if m["gpus"] else ", no GPU") + f" — {m['timestamp']}",
        "",
        f"Versions: {versions}" + (f"; vLLM: {m['vllm']}" if m.get("vllm") else "") + ".",
        "",
        f"Requests: {s['n_queries']} queries / {s['n_pairs']} pairs"
        + (f" ({s['data']})" if s.get("data") else "")
        + (f"; students: {s['requests']} Rerank requests per concurrency, top_k {s['top_k']}"
           + (f", candidates cycled to {s['pad_to']}" if s.get("pad_to") else "")
           if any(r.get("kind") == "student" for r in results["systems"]) else "")
        + (f"; judges: every query once at concurrency 1 (at least {s['judge_requests']} requests), "
           f"then {s['judge_requests']} requests per further concurrency" if s.get("judge_requests") else "") + ".",
        "",
        "| " + " | ".join(header(results)) + " |",
        "|" + "|".join("---" for _ in header(results)) + "|",
    ]
    lo, hi = levels(results)
    for r in rows:
        cells = row_cells(r, axes, hi)
        if lo == hi:
            del cells[HEADER.index("pairs/s c=HI")]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for desc, key in axes.items():
        lines.append(f"hw {key}: {desc}.  ")
    sources = sorted({r["latency_source"] for r in rows if r.get("latency_source")})
    if sources:
        lines += ["", "Latency sources: " + "; ".join(sources) + "."]
    rat = ratios(results)
    if rat:
        lines += ["", f"## Served int8 student vs each judge (same hardware, p50 per {request_size(results)} request)", "",
                  "| student | judge | judge p50 / student p50 | student nDCG@10 / judge nDCG@10 |", "|---|---|---|---|"]
        lines += [f"| {r['student']} | {r['judge']} | {_fmt(r['p50_ratio'], '.1f')}× | {_fmt(r['ndcg_share'], '.3f')} |"
                  for r in rat]
    elif any(r.get("kind") == "judge" for r in results["systems"]):
        lines += ["", "No served int8 student variant measured on the judges' hardware: no ratio computed."]
    naive = naive_ratios(results)
    if naive:
        lines += ["", f"## Served student vs the same student's naive PyTorch forward (p50 per {request_size(results)} request)",
                  "", "| served | naive forward | naive p50 / served p50 |", "|---|---|---|"]
        lines += [f"| {r['served']} | {r['naive']} | {_fmt(r['p50_ratio'], '.1f')}× |" for r in naive]
    subset_rows = [r for r in results["systems"] if "on_teacher_pairs" in r.get("accuracy", {})]
    if any(r["accuracy"]["on_teacher_pairs"].get("n") != r["accuracy"].get("vs_gold", {}).get("n") for r in subset_rows):
        lines += ["", "## Same pairs for every system", "",
                  "The pairs the teacher labelled (e.g. the top-ranked candidates of each held-back query), "
                  "scored against gold by every system:", "",
                  "| " + " | ".join(SUBSET_HEADER) + " |", "|" + "|".join("---" for _ in SUBSET_HEADER) + "|"]
        lines += ["| " + " | ".join(subset_cells(r)) + " |" for r in subset_rows]
    lines += first_stage_lines(results)
    if results.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in results["notes"]]
    errs = {r["system"] + ":" + str(r.get("variant")): r["load"]["errors"] for r in results["systems"]
            if r.get("load", {}).get("errors")}
    if errs:
        lines += ["", f"Failed requests (counted, not hidden): {errs}"]
    return "\n".join(lines) + "\n"


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both latency (lower) and nDCG@10 (higher), fastest first."""
    front, best = [], float("-inf")
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if y > best:
            front.append((x, y))
            best = y
    return front


def spread(ys: list[float], gap: float, lo: float = 0.0, hi: float = 1.0) -> list[float]:
    """Label positions (axes fraction) as close to ``ys`` as possible, in the same order, at least
    ``gap`` apart and within [lo, hi]: labels in one column then never overlap. Refuses labels that
    cannot fit (the caller sizes its panel for them: :func:`plot`)."""
    if len(ys) > 1 and (len(ys) - 1) * gap > hi - lo + 1e-9:
        raise ValueError(f"{len(ys)} labels {gap} apart do not fit in [{lo}, {hi}]: make the panel taller")
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    pos = [0.0] * len(ys)
    last = lo - gap
    for i in order:
        last = max(ys[i], last + gap)
        pos[i] = last
    over = (last - hi) if ys else 0.0
    if over > 0:  # pushed off the top: shift everything down, keeping the gaps, then pin the bottom
        for i in order:
            pos[i] -= over
        first = lo
        for i in order:
            pos[i] = max(pos[i], first)
            first = pos[i] + gap
    return pos


#: The vertical pitch of the plot's label column, in points (8 pt text).
LABEL_PT = 12


def log_latency_axis(ax, xs: list[float]) -> None:
    """A log x axis (latencies in any unit) from half the fastest point to twice the slowest, ticked at 1, 2
    and 5 of each decade: points that span less than a decade (three variants of one student) still get
    labelled ticks, where ticks at powers of ten alone left such a panel with none."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    if xs:
        ax.set_xlim(min(xs) / 2, max(xs) * 2)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 0.01, not 0.0
    ax.xaxis.set_minor_formatter(NullFormatter())


def seconds_axis_label(size: str) -> str:
    """The x label of a plot in seconds per request of ``size`` (:func:`request_size`): "top-100 request", or
    just "request" where the run did not count its pairs."""
    return f"p50 seconds per {size if size == 'request' else size + ' request'} (log)"


def plot(results: dict, path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table_rows(results)
    axes = axes_of(rows)
    lines = [(r["system"] + (f" {r['variant']}" if r.get("variant") else ""), r["accuracy"]["vs_gold"]["ndcg@10"])
             for r in rows if (r.get("latency_ms") or {}).get("p50") is None
             and (r.get("accuracy", {}).get("vs_gold") or {}).get("ndcg@10") is not None]
    panels = list(axes) or [None]
    points = {axis: [] for axis in panels}
    for r in rows:
        x = (r.get("latency_ms") or {}).get("p50")
        y = (r.get("accuracy", {}).get("vs_gold") or {}).get("ndcg@10")
        if x is not None and y is not None and x > 0 and r.get("axis") in points:
            points[r["axis"]].append((x / 1e3, y, f"{r['system']} {r.get('variant') or ''}".strip(), r.get("kind")))
    # panels tall enough for their column of labels, LABEL_PT apart (one line of 8 pt text and air)
    n, top, bottom, hspace = len(panels), (0.9 if len(panels) == 1 else 0.94), 0.1, 0.35
    labels_in = (max(len(p) for p in points.values()) + len(lines)) * LABEL_PT / 72 * 1.05
    axes_in = max(labels_in, 5.0 * (top - bottom))  # at least the axes of a 5-inch panel
    fig, axs = plt.subplots(n, 1, figsize=(12, axes_in * (n + hspace * (n - 1)) / (top - bottom)), squeeze=False)
    fig.subplots_adjust(left=0.07, right=0.62, top=top, bottom=bottom, hspace=hspace)
    for ax, axis in zip(axs[:, 0], panels):
        pts = points[axis]
        marker = {"judge": "s", "student": "o", "floor": "^"}
        for k, (x, y, _, kind) in enumerate(pts):
            ax.scatter([x], [y], marker=marker.get(kind, "D"), s=45, color=f"C{k % 10}", zorder=3)
        front = pareto_front([(x, y) for x, y, _, _ in pts])
        if len(front) > 1:
            ax.step([x for x, _ in front], [y for _, y in front], where="post", color="grey", lw=1, alpha=0.6,
                    label="Pareto front")
        for _, y in lines:
            ax.axhline(y, linestyle=":", color="black", lw=0.8)
        log_latency_axis(ax, [x for x, _, _, _ in pts])
        ax.set_ylim(0, 1.0)  # the full scale: a zoomed axis would exaggerate small differences
        ax.set_xlabel(seconds_axis_label(request_size(results)))
        ax.set_ylabel("nDCG@10 vs gold")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"hw {axes[axis]}: {axis}" if axis else "no timed system", fontsize=9)
        # labels in one column right of the panel, spread so that none overlaps, each tied to its point
        labels = [(y, text, (x, y), f"C{k % 10}") for k, (x, y, text, _) in enumerate(pts)]
        labels += [(y, f"{text}: {y:.3f} (not timed)", None, "black") for text, y in lines]
        gap = LABEL_PT / 72 / (ax.get_position().height * fig.get_figheight())  # in axes fraction (y spans 0-1)
        ys = spread([y for y, _, _, _ in labels], gap=gap)
        for (_, text, xy, color), ly in zip(labels, ys):
            if xy is None:
                ax.annotate(text, xy=(1.0, ly), xycoords=("axes fraction", "data"), xytext=(1.03, ly),
                            textcoords=("axes fraction", "data"), fontsize=8, va="center", color=color,
                            arrowprops=dict(arrowstyle="-", color=color, lw=0.6, linestyle=":"))
            else:
                ax.annotate(text, xy=xy, xycoords="data", xytext=(1.03, ly), textcoords=("axes fraction", "data"),
                            fontsize=8, va="center", color=color,
                            arrowprops=dict(arrowstyle="-", color=color, lw=0.6, alpha=0.7))
        if len(front) > 1:
            ax.legend(fontsize=8, loc="lower left")
    fig.suptitle("latency vs nDCG@10 (one panel per hardware; squares judges, circles students, triangles floors)",
                 fontsize=10)
    fig.savefig(path, dpi=120, bbox_inches="tight")  # the label column may reach past the figure's right edge
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


def rewrite_report(out_dir: str | Path) -> dict[str, Path]:
    """``report.md`` and the plot again from a run's ``results.json`` (``r3edge bench report DIR``)."""
    from r3edge.core.errors import NotFound

    out = Path(out_dir)
    src = out / "results.json"
    if not src.is_file():
        raise NotFound(f"{src} does not exist", "pass the --out directory of an `r3edge bench` run")
    return write_report(json.loads(src.read_text()), out)
