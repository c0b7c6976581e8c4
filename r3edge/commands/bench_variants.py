"""Which variant of an artifact to serve on this machine: every ONNX Runtime and OpenVINO variant timed side by
side on the same requests (model time through `score_pairs` with the server's defaults, interleaved shuffled
rounds), each beside its fidelity to fp32 (max |Δlogit|, argmax agreement, top-10 overlap, batch invariance);
recommends the fastest variant whose fidelity passes (r3edge.benchmarks.variants). Writes OUT/results.json and
OUT/report.md."""

from __future__ import annotations

import argparse

from r3edge.core.fidelity import MIN_TOP10_OVERLAP


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--artifact", required=True, help="artifact directory (`r3edge export`) with fp32 and the variants to compare")
    parser.add_argument("--pairs", "--heldout", dest="pairs", required=True,
                        help="candidate-list JSONL: each query with its candidates is one request (the name the other "
                             "bench tools use; --heldout: its earlier name, in committed reproduce lines)")
    parser.add_argument("--variants", default=None,
                        help="comma-separated (default: every variant of the artifact; fp32 is always added); VARIANT@bf16 "
                             "or @f32: an OpenVINO variant compiled with that inference precision")
    parser.add_argument("--max-requests", type=int, default=None, help="use only the first N requests of --pairs")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of every variant")
    parser.add_argument("--reps", type=int, default=10, help="timed rounds; each scores the next request with every variant")
    parser.add_argument("--pause", type=float, default=0.25, help="seconds of quiet before each timing")
    parser.add_argument("--min-overlap", type=float, default=MIN_TOP10_OVERLAP,
                        help="mean top-10 overlap with fp32 a recommended variant must keep")
    parser.add_argument("--prefix-reuse", action=argparse.BooleanOptionalAction, default=True,
                        help="score through each variant's prefix-reuse graphs where the artifact has them (the server's "
                             "default); --no-prefix-reuse: every pair through the single graph")
    parser.add_argument("--student", default=None, help="what the artifact's student is, for the report (default: its manifest's)")
    parser.add_argument("--out", default="runs/bench-variants", help="output directory")


def run(args: argparse.Namespace) -> int:
    import sys

    from r3edge.benchmarks.variants import measure_variants, write_report
    from r3edge.core.pairs import read_queries

    results = measure_variants(
        args.artifact, read_queries(args.pairs)[: args.max_requests],
        variants=[v for v in args.variants.split(",") if v] if args.variants else None,
        threads=args.threads, reps=args.reps, pause_s=args.pause, prefix_reuse=args.prefix_reuse,
        min_overlap=args.min_overlap, student=args.student, log=lambda line: print(line, file=sys.stderr, flush=True))
    paths = write_report(results, args.out)
    print(paths["report"].read_text())
    print(f"wrote {paths['results']}, {paths['report']}")
    return 0
