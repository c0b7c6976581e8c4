"""Where each variant of an artifact spends its time: ONNX Runtime's profiler on the server's own session,
kernel milliseconds summed per operator type over --requests top-N requests (r3edge.benchmarks.op_profile).
Writes OUT/results.json, OUT/report.md and each variant's raw profile (chrome://tracing JSON)."""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--artifact", required=True, help="artifact directory (`r3edge export`)")
    parser.add_argument("--pairs", required=True, help="candidate-list JSONL: each query with its candidates is one request")
    parser.add_argument("--variants", default=None, help="comma-separated variants; unset: every ONNX Runtime variant")
    parser.add_argument("--requests", type=int, default=4, help="the first N requests of --pairs, profiled per variant")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads; unset: ONNX Runtime's default")
    parser.add_argument("--top", type=int, default=None, help="op types listed per variant; unset: all")
    parser.add_argument("--out", default="runs/bench-profile", help="output directory")


def run(args: argparse.Namespace) -> int:
    from r3edge.benchmarks.op_profile import profile_artifact

    variants = [v for v in args.variants.split(",") if v] if args.variants else None
    paths = profile_artifact(args.artifact, args.pairs, args.out, variants=variants, requests=args.requests,
                             threads=args.threads, top=args.top)
    print(paths["report"].read_text())
    print(f"wrote {paths['results']}, {paths['report']}")
    return 0
