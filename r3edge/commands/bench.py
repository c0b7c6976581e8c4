"""Benchmark latency, throughput and accuracy over gRPC; write results.json, report.md and a plot.

Either serve an artifact's variants one after another (--artifact: each in its own `r3edge serve`
process on a free port) or load an already running server (--target). Accuracy is measured on --pairs (a
held-back split) against gold labels and, with --labels, against the teacher, which also gets a
row of its own (latency estimated from its labelling records).
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    sys_ = parser.add_mutually_exclusive_group(required=True)
    sys_.add_argument("--artifact", default=None, help="artifact directory to serve (a child `r3edge serve` per variant)")
    sys_.add_argument("--target", default=None, help="a running server host:port")
    parser.add_argument("--variants", default=None, help="comma-separated variants (default: all in the manifest)")
    parser.add_argument("--threads", type=int, default=None, help="runtime intra-op threads")
    parser.add_argument("--pairs", required=True, help="held-back pairs JSONL (labels give accuracy vs gold)")
    parser.add_argument("--labels", default=None, help="teacher labels directory (agreement + teacher row)")
    parser.add_argument("--requests", type=int, default=20, help="Rerank requests in the load phase")
    parser.add_argument("--concurrency", type=int, default=1, help="concurrent callers")
    parser.add_argument("--top-k", type=int, default=10, help="top_k of each load request")
    parser.add_argument("--pad-to", type=int, default=None,
                        help="cycle each query's candidates up to this many (off by default: real lists only)")
    parser.add_argument("--max-queries", type=int, default=None, help="use only the first N queries")
    parser.add_argument("--max-concurrent-requests", type=int, default=None, help="server setting for --artifact")
    parser.add_argument("--max-batch-tokens", type=int, default=None, help="server setting for --artifact")
    parser.add_argument("--max-batch-size", type=int, default=None, help="server setting for --artifact")
    parser.add_argument("--out", default="runs/bench", help="output directory")


def run(args: argparse.Namespace) -> int:
    from r3edge.benchmarks.report import write_report
    from r3edge.benchmarks.systems import bench_systems
    from r3edge.core.errors import InvalidInput
    from r3edge.core.pairs import read_queries

    if args.requests < 1 or args.concurrency < 1 or args.top_k < 0:
        raise InvalidInput("--requests and --concurrency must be >= 1 and --top-k >= 0", "fix the numbers")
    queries = read_queries(args.pairs)[: args.max_queries]
    limits = {k: getattr(args, k) for k in ("max_concurrent_requests", "max_batch_tokens", "max_batch_size")
              if getattr(args, k) is not None}
    results = bench_systems(
        queries, artifact=args.artifact, target=args.target,
        variants=[v for v in args.variants.split(",") if v] if args.variants else None,
        threads=args.threads, labels_dir=args.labels, requests=args.requests,
        concurrency=args.concurrency, top_k=args.top_k, pad_to=args.pad_to, serve_limits=limits,
    )
    paths = write_report(results, args.out)
    print(paths["report"].read_text())
    print(f"wrote {paths['results']}, {paths['report']}, {paths['plot']}")
    return 0
