"""Is Qwen2.5-Coder-1.5B-Instruct, as a score-only judge, a better teacher than what a user already has?

A slice of SemEval-2016 C dev (the questions ``r3edge fidelity --dev-queries N --seed S`` evaluates on, all 100
comments each, titled with their thread's subject as fidelity reads them) is labelled on this CPU by
``configs/teacher/score-only-qwen-coder-1.5b.yaml`` through ``label_pairs`` (the code users run) against a
vLLM server on the converted HF directory, then ranked by the judge's expected grade beside the floors on the
same questions: the forum's own order (first stage), BM25 (bm25s over each question's comments) and the
recommended student's base encoder by cosine (all-MiniLM-L6-v2, no training), the floors of issue 21's goal
"the teacher's nDCG@10 > the first-stage order and > the base encoder's cosine ranking".

    R3EDGE_CACHE=runs/judges nice -n 5 .venv/bin/python benchmarks/scripts/judge_semeval_slice.py \\
        --questions 10 --out benchmarks/results/judge-qwen-coder-cpu-2core/semeval-slice

Labelling resumes after a kill (rerun the same command); the report counts only questions whose 100 comments
are all labelled, and says how many that is. Writes OUT/results.json and OUT/report.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from judge_qwen_cpu import SERVED, convert, qwen_judge_config  # noqa: E402

from r3edge.benchmarks.machine import machine_info  # noqa: E402
from r3edge.core.pairs import write_queries  # noqa: E402
from r3edge.core.timing import LOAD_KEY, load_average  # noqa: E402


def floors(queries, label_values) -> dict:
    from r3edge.benchmarks.systems import baselines, bm25_row, scored_floor
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.distill.data.pooling import bm25_scores
    from r3edge.model.student import base_cosine_scoring

    cos = scored_floor(queries, base_cosine_scoring(load_yaml("minilm-cqa-bi-rank", StudentConfig)), label_values)
    bm25 = bm25_row(queries, label_values, "-", bm25_scores)["accuracy"]["vs_gold"]
    order = baselines(queries, label_values)
    return {"first_stage": order["input_order"], "majority": order["majority"],
            "bm25": {"ndcg@10": bm25["ndcg@10"], "ndcg_queries": bm25["ndcg_queries"]},
            "base_cosine": {"system": cos["system"], "ndcg@10": cos["ndcg@10"], "ndcg_queries": cos["ndcg_queries"]}}


def judge_metrics(labels_dir: Path, queries) -> dict:
    from r3edge.core.labels import read_labels, read_manifest
    from r3edge.core.metrics import relevance_metrics

    rows = {(r["qid"], r["docid"]): r for r in read_labels(labels_dir, allow_partial=True).to_pylist()}
    m = read_manifest(labels_dir)
    pairs = [(q.qid, c) for q in queries for c in q.candidates if c.label is not None]
    gold = np.asarray([c.label for _, c in pairs], dtype=np.int64)
    probs = np.asarray([rows[(qid, c.docid)]["probs"] for qid, c in pairs], dtype=np.float64)
    got = relevance_metrics(gold, probs, [qid for qid, _ in pairs], m["label_values"])
    scored = [rows[(q.qid, c.docid)] for q in queries for c in q.candidates]
    labels = Counter(str(r["score"]) for r in scored)
    return {**{k: got[k] for k in ("ndcg@10", "ndcg_queries", "accuracy", "f1_macro", "auc_0_12", "auc_01_2", "ece", "n")
               if k in got},
            "labels": dict(sorted(labels.items())), "format_failures": sum(not r["format_ok"] for r in scored),
            "pairs": len(scored), "prompt_tokens": sum(r["prompt_tokens"] for r in scored),
            # the run's labelling wall time over every pair it labelled, this slice's or not
            "wall_s": m.get("wall_s"), "pairs_labelled": m.get("n_done")}


def main() -> int:
    from r3edge.core.labels import read_labels
    from r3edge.distill.data.datasets import sample_queries, semeval_queries
    from r3edge.distill.label.driver import label_pairs

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf-dir", default="runs/judges/qwen-coder-1.5b")
    ap.add_argument("--vllm", default=".venv-vllm/bin/python")
    ap.add_argument("--data", default="../shared/data/semeval2016-cqa")
    ap.add_argument("--questions", type=int, default=10, help="C dev questions (r3edge fidelity's --dev-queries)")
    ap.add_argument("--seed", type=int, default=0, help="r3edge fidelity's --seed")
    ap.add_argument("--dtype", default="float32", help="float32 on CPUs without native bf16")
    ap.add_argument("--kv-cache-gib", type=int, default=2)
    ap.add_argument("--work", default="runs/judge-qwen-slice")
    ap.add_argument("--evaluate-only", action="store_true", help="report on what is labelled; start no server")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    work, hf_dir, out = Path(args.work), Path(args.hf_dir), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    queries = sample_queries(semeval_queries(args.data, "C", "dev"), args.questions, args.seed)
    pairs = work / f"semeval-C-dev-{args.questions}q-seed{args.seed}.jsonl"
    write_queries(pairs, queries)
    labels = work / "labels"
    t0 = time.perf_counter()
    if not args.evaluate_only:
        convert(hf_dir)
        from r3edge.distill.label.backends.vllm_server import vllm_server

        with vllm_server(args.vllm, hf_dir, served_name=SERVED, log_path=work / "vllm.log", dtype=args.dtype,
                         max_model_len=2048, kv_cache_gib=args.kv_cache_gib) as url:
            label_pairs(pairs, qwen_judge_config(work / "vllm.yaml", hf_dir, "openai", args.dtype, url), labels,
                        base_url=url, shard_size=25)
    done = ({(r["qid"], r["docid"]) for r in read_labels(labels, allow_partial=True, columns=["qid", "docid"]).to_pylist()}
            if (labels / "manifest.json").is_file() else set())
    whole = [q for q in queries if all((q.qid, c.docid) in done for c in q.candidates)]
    if not whole:
        print("no question is fully labelled yet")
        return 1
    label_values = [0.0, 1.0, 2.0]
    result = {
        "machine": machine_info(), # the labelling command (an --evaluate-only rerun reports on the same labels)
        "command": "R3EDGE_CACHE=runs/judges nice -n 5 .venv/bin/python "
                   + shlex.join(a for a in sys.argv if a != "--evaluate-only"),
        "questions_sampled": [q.qid for q in queries], "questions_scored": [q.qid for q in whole],
        "with_relevant": sum(any((c.label or 0) > 0 for c in q.candidates) for q in whole),
        LOAD_KEY: load_average(), "run_s": round(time.perf_counter() - t0, 1),
        "judge": judge_metrics(labels, whole), "floors": floors(whole, label_values),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2, default=float) + "\n")
    (out / "report.md").write_text(report(result))
    print(report(result))
    return 0


def report(r: dict) -> str:
    m, j, f = r["machine"], r["judge"], r["floors"]
    rows = [("score-only judge, Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF dequantised, fp32, vLLM CPU)", j["ndcg@10"]),
            ("first-stage order (the forum's ranking)", f["first_stage"]["ndcg@10"]),
            ("BM25 (bm25s, each question's comments)", f["bm25"]["ndcg@10"]),
            (f"base encoder by cosine ({f['base_cosine']['system']}, no training)", f["base_cosine"]["ndcg@10"])]
    best_floor = max(v for _, v in rows[1:])
    lines = [
        "# Qwen2.5-Coder-1.5B-Instruct as a score-only judge on a SemEval-2016 C dev slice (CPU)",
        "",
        f"Machine: {m['cpu']}, {m['cores_usable']} cores, {m['ram_gib']} GiB, no GPU. "
        f"Questions: {len(r['questions_scored'])} of the {len(r['questions_sampled'])} that `r3edge fidelity "
        f"--dev-queries {len(r['questions_sampled'])}` samples ({', '.join(r['questions_scored'])}), {j['pairs']} comments in all; "
        f"nDCG@10 over the {j['ndcg_queries']} with a relevant comment.",
        "",
        "| system | nDCG@10 |",
        "|---|---:|",
        *[f"| {name} | {v:.3f} |" for name, v in rows],
        "",
        f"The judge on all {j['n']} pairs against gold: accuracy {j['accuracy']:.3f}, macro-F1 {j['f1_macro']:.3f}"
        + (f", AUC 0/12 {j['auc_0_12']:.3f}, AUC 01/2 {j['auc_01_2']:.3f}" if "auc_0_12" in j else "")
        + (f", ECE {j['ece']:.3f}" if "ece" in j else "")
        + f" (majority class: accuracy {f['majority']['accuracy']:.3f}, macro-F1 {f['majority']['macro_f1']:.3f}); "
        f"its argmax labels {j['labels']}; format failures {j['format_failures']}.",
        f"- Judge minus the best floor here: {j['ndcg@10'] - best_floor:+.3f} nDCG@10; "
        f"minus the base encoder's cosine: {j['ndcg@10'] - f['base_cosine']['ndcg@10']:+.3f}; "
        f"minus the first-stage order: {j['ndcg@10'] - f['first_stage']['ndcg@10']:+.3f}.",
        f"- Labelling: {j['pairs_labelled']} pairs in {j['wall_s']:.0f} s ({j['pairs_labelled'] / j['wall_s']:.3f} pairs/s, "
        f"{j['prompt_tokens'] / j['pairs']:.0f} prompt tokens per pair, prefill only); load average at the end "
        f"{r[LOAD_KEY]} (the box was shared with other jobs when above 2).",
        "",
        f"Command: `{r['command']}`",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
