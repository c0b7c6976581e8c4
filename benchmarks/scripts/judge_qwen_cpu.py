"""The score-only judge on Qwen2.5-Coder-1.5B-Instruct (the judge-qwen extra), on CPU: vLLM and transformers.

One SemEval-2016 C dev question (a new forum question and its 100 comments, read as `r3edge fidelity`
reads them: comments titled with their thread's subject) is labelled with
``configs/teacher/score-only-qwen-coder-1.5b.yaml`` through ``label_pairs``, the code users run, once
per engine: a vLLM server started on the converted HF directory (``--backend openai``) and the
in-process transformers backend. Rates come from each run's manifest (labelling wall time; model
loading and server start-up are timed apart). The question's nDCG@10 is computed from the
teacher's expected grade against the forum's own order, on the gold labels.

    R3EDGE_CACHE=runs/judges nice -n 5 .venv/bin/python benchmarks/scripts/judge_qwen_cpu.py \\
        --hf-dir runs/judges/qwen-coder-1.5b --vllm .venv-vllm/bin/python \\
        --out benchmarks/results/judge-qwen-coder-cpu-2core

``--hf-dir`` is the converted directory (``r3edge.model.loading.packaged_gguf_dir``); when it does not
exist the script converts the packaged GGUF there first (reassembly, sha256 check, conversion).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from r3edge.benchmarks.judge_configs import write_teacher_variant
from r3edge.benchmarks.machine import machine_info
from r3edge.core.pairs import write_queries
from r3edge.core.timing import LOAD_KEY, load_average

CONFIG = "score-only-qwen-coder-1.5b"
SERVED = "qwen-coder-1.5b"


def qwen_judge_config(path: Path, hf_dir: Path, backend: str, dtype: str, base_url: str | None = None) -> Path:
    """The score-only judge on the converted directory, in ``dtype``, through ``backend``."""
    return write_teacher_variant(path, CONFIG, model={"pretrained": str(hf_dir), "dtype": dtype}, backend=backend,
                                 base_url=base_url)


def convert(hf_dir: Path) -> float:
    """Convert the packaged GGUF into ``hf_dir`` (a link to the cache entry); seconds taken (0 if present)."""
    from r3edge.model.loading import packaged_gguf_dir

    if (hf_dir / "config.json").is_file():
        return 0.0
    t0 = time.perf_counter()
    built = packaged_gguf_dir("package:qwen2.5-coder-1.5b-instruct")
    hf_dir.parent.mkdir(parents=True, exist_ok=True)
    if not hf_dir.exists():
        hf_dir.symlink_to(built.resolve())
    return time.perf_counter() - t0


def evaluate(labels_dir: Path, queries, whole: bool) -> dict:
    from r3edge.core.labels import read_labels, read_manifest
    from r3edge.core.metrics import ndcg_at_k

    rows = read_labels(labels_dir).to_pylist()
    m = read_manifest(labels_dir)
    rank = {(q.qid, c.docid): c.rank for q in queries for c in q.candidates}
    gains = np.array([r["gold"] for r in rows], dtype=float)
    expected = np.array([float(np.dot(r["probs"], m["label_values"])) for r in rows])
    forum = -np.array([rank[(r["qid"], r["docid"])] for r in rows], dtype=float)
    qids = [r["qid"] for r in rows]
    s = m["summary"]
    return {
        "pairs": s["pairs"], "wall_s": s["wall_s"], "pairs_per_s": round(s["pairs"] / s["wall_s"], 3),
        "prompt_tokens_per_pair": round(s["prompt_tokens"] / s["pairs"], 1),
        "prompt_tok_per_s": round(s["prompt_tokens"] / s["wall_s"], 1),
        "completion_tokens": s["completion_tokens"], "labels": s["labels"],
        # nDCG@10 ranks the whole question: only when every one of its comments was labelled
        "ndcg@10_judge": ndcg_at_k(gains, expected, qids)["ndcg@10"] if whole else None,
        "ndcg@10_forum_order": ndcg_at_k(gains, forum, qids)["ndcg@10"] if whole else None,
        "accuracy_vs_gold": float(np.mean([r["score"] == r["gold"] for r in rows])),
    }


def run(args) -> dict:
    from r3edge.distill.data.datasets import semeval_queries
    from r3edge.distill.label.driver import label_pairs

    work, hf_dir = Path(args.work), Path(args.hf_dir)
    work.mkdir(parents=True, exist_ok=True)
    convert_s = convert(hf_dir)
    queries = semeval_queries(args.data, "C", "dev")
    q = next(q for q in queries if (args.question is None or q.qid == args.question)
             and any((c.label or 0) > 0 for c in q.candidates))
    n_all = len(q.candidates)
    q.candidates = q.candidates[: args.pairs]
    pairs = work / f"semeval-C-dev-{q.qid}.jsonl"
    write_queries(pairs, [q])
    result = {"machine": machine_info(), "config": CONFIG, "hf_dir": str(hf_dir), "convert_s": round(convert_s, 1),
              LOAD_KEY: load_average(), "question": q.qid,  # before the first engine; each row's: after it
              "n_candidates": len(q.candidates), "dtype": args.dtype, "rows": {}}
    for engine in args.engines.split(","):
        out = work / f"labels-{engine}"
        if engine == "vllm":
            from r3edge.distill.label.backends.vllm_server import vllm_server

            t0 = time.perf_counter()
            with vllm_server(args.vllm, hf_dir, served_name=SERVED, log_path=work / "vllm.log",
                             dtype=args.dtype, max_model_len=2048, kv_cache_gib=args.kv_cache_gib) as url:
                start_s = time.perf_counter() - t0
                label_pairs(pairs, qwen_judge_config(work / "vllm.yaml", hf_dir, "openai", args.dtype, url), out,
                            base_url=url, overwrite=True, shard_size=args.shard_size)
        else:
            t0 = time.perf_counter()
            label_pairs(pairs, qwen_judge_config(work / "tf.yaml", hf_dir, "transformers", args.dtype), out,
                        overwrite=True, shard_size=args.shard_size, batch_size=args.batch_size)
            start_s = None  # loading is inside the run; the manifest's wall time excludes it
        row = evaluate(out, [q], whole=len(q.candidates) == n_all)
        row["total_s"] = round(time.perf_counter() - t0, 1)
        row[LOAD_KEY] = load_average()
        row["server_start_s"] = round(start_s, 1) if start_s is not None else None
        result["rows"][engine] = row
        print(engine, json.dumps(row), flush=True)
    return result


def report(result: dict) -> str:
    m = result["machine"]
    lines = [
        "# Score-only judge on Qwen2.5-Coder-1.5B-Instruct, CPU: vLLM vs transformers (one SemEval C dev question)",
        "",
        f"Machine: {m['cpu']}, {m['cores_usable']} cores ({', '.join(f for f in m.get('cpu_flags', []) if 'avx' in f or 'amx' in f)}), "
        f"{m['ram_gib']} GiB, no GPU; torch {m['versions'].get('torch')}, transformers {m['versions'].get('transformers')}; "
        f"dtype {result['dtype']}. Question {result['question']}, "
        f"config `{result['config']}` on `{result['hf_dir']}`.",
        "",
        "| engine | pairs | pairs/s | labelling wall s | prompt tok/pair | prompt tok/s | server start s | nDCG@10 judge "
        "| nDCG@10 forum order | accuracy vs gold | labels |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for engine, r in result["rows"].items():
        nd = {k: (f"{r[k]:.3f}" if r[k] is not None else "– (part of the question)") for k in ("ndcg@10_judge", "ndcg@10_forum_order")}
        lines.append(f"| {engine} | {r['pairs']} | {r['pairs_per_s']} | {r['wall_s']} | {r['prompt_tokens_per_pair']} | "
                     f"{r['prompt_tok_per_s']} | "
                     f"{r['server_start_s'] if r['server_start_s'] is not None else '–'} | {nd['ndcg@10_judge']} | "
                     f"{nd['ndcg@10_forum_order']} | {r['accuracy_vs_gold']:.2f} | {r['labels']} |")
    lines += ["", "Commands:", "", "```bash", *sorted({r["command"] for r in result["rows"].values()}), "```", ""]
    # rows kept from an earlier invocation may carry the key older runs wrote
    lines += [f"Load average (1/5/15 min) before the last run: {result[LOAD_KEY]}; after each engine: "
              + ", ".join(f"{e} {r.get(LOAD_KEY, r.get('loadavg_1_5_15_after'))}" for e, r in result["rows"].items())
              + ". The box is shared with other jobs: a loadavg above 2 on 2 cores means these rates are lower "
              "than an idle machine's.", ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hf-dir", default="runs/judges/qwen-coder-1.5b")
    p.add_argument("--vllm", default=".venv-vllm/bin/python")
    p.add_argument("--data", default="../shared/data/semeval2016-cqa")
    p.add_argument("--question", default=None, help="a SemEval C dev qid (default: the first with a relevant comment)")
    p.add_argument("--pairs", type=int, default=100)
    p.add_argument("--engines", default="vllm,transformers")
    p.add_argument("--shard-size", type=int, default=10, help="pairs per label shard (progress is visible per shard)")
    p.add_argument("--dtype", default="float32", help="float32 on CPUs without native bf16 (vLLM and torch alike)")
    p.add_argument("--batch-size", type=int, default=8, help="transformers rows per forward")
    p.add_argument("--kv-cache-gib", type=int, default=2)
    p.add_argument("--work", default="runs/judge-qwen-cpu")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import shlex
    import sys

    command = "nice -n 5 .venv/bin/python " + shlex.join(sys.argv)
    for row in result["rows"].values():
        row["command"], row["n_candidates"] = command, result["n_candidates"]
    if (out / "results.json").is_file():  # one engine per invocation: keep the other engines' rows
        old = json.loads((out / "results.json").read_text())
        result["rows"] = {**old["rows"], **result["rows"]}
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "report.md").write_text(report(result))


if __name__ == "__main__":
    main()
