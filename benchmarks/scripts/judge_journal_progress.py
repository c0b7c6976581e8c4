"""What a long judges-vs-students run has measured so far, read from its judge journals.

``r3edge bench`` writes a judge's row only when all its requests are answered (every SemEval question at
concurrency 1, then whole higher-concurrency phases). On a 2-core CPU a 1.5B judge takes hours, so between
sittings this prints, per journal, the machine it was measured on (its settings line), the concurrency-1
requests answered so far: their latencies (p50 / p95 per top-100 request), generated tokens and format
failures per pair, the load average each was measured at, which higher-concurrency phases ended, and
nDCG@10 against SemEval gold over the answered questions (r3edge's own ``relevance_metrics``, each pair
ranked by its expected label, as the bench's report ranks judges).
Interim numbers only: the committed report's rows come from ``r3edge bench``.

    .venv/bin/python benchmarks/scripts/judge_journal_progress.py \\
        benchmarks/results/judges-vs-students-cpu-2core/judges/*qwen*.jsonl --semeval ../shared/data/semeval2016-cqa
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from r3edge.core.metrics import relevance_metrics
from r3edge.core.timing import percentiles
from r3edge.distill.data.datasets import semeval_queries
from r3edge.distill.label.journal import JudgeJournal


def summary(path: Path, gold: dict[str, int]) -> list[str]:
    journal = JudgeJournal(path)
    served, _, runs = journal.first_phase()
    phases = sorted(journal.phases())
    hw = (journal.recorded_settings() or {}).get("hardware")
    machine = f"{hw['cpu']} ({', '.join(hw['cpu_flags'])}), {hw['cores_usable']} cores" if hw else "not recorded"
    if not served:
        return [path.stem, machine, "0", *["–"] * 6, ", ".join(map(str, phases)) or "–"]
    lat = percentiles([r["latency_s"] for r in served])  # seconds
    pairs = sum(r["n_pairs"] for r in served)
    docs = [(r["qid"], d, p) for r in served for d, p in r["probs"].items() if p is not None]
    nd = relevance_metrics([gold[d] for _, d, _ in docs], [p for _, _, p in docs], [q for q, _, _ in docs])
    loads = [ln["load_1min"] for ln in map(json.loads, path.read_text().splitlines()) if ln["kind"] == "request"]
    return [path.stem, machine, f"{len(served)} ({runs} runs)", f"{lat['p50']:.0f}", f"{lat['p95']:.0f}",
            f"{sum(r['generated_tokens'] for r in served) / pairs:.1f}",
            f"{sum(r['format_failures'] for r in served)}/{pairs}",
            f"{nd['ndcg@10']:.3f} ({nd['ndcg_queries']} q)" if nd["ndcg@10"] is not None else "–",
            f"{min(loads):.2f}–{max(loads):.2f}", ", ".join(map(str, phases)) or "–"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("journals", nargs="+", type=Path, help="judge journal files (JSONL under the run's judges/)")
    ap.add_argument("--semeval", required=True, help="the SemEval-2016 CQA folder the run's requests came from")
    args = ap.parse_args()
    gold = {c.docid: c.label for q in semeval_queries(args.semeval, "C", "dev") for c in q.candidates}
    head = ["journal", "measured on", "c=1 requests", "p50 s / top-100", "p95 s", "gen tok / pair", "format fails", "nDCG@10",
            "load (1 min)", "phases done (c)"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for path in args.journals:
        if not path.is_file():
            ap.error(f"{path}: no such journal file (they are under the run's --out DIR/judges/)")
        print("| " + " | ".join(summary(path, gold)) + " |")


if __name__ == "__main__":
    main()
