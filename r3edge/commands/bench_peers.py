"""A cosine student served by r3edge (gRPC, top 10) against sentence-transformers on the same weights: p50/p95 ms per
request side by side in shuffled rounds, each system's top-10 overlap with the first r3edge system, and the
fastest faithful r3edge system against the fastest peer (r3edge.benchmarks.peers). The peers run in a worker
process of --peers-python, which needs sentence-transformers (its ONNX and OpenVINO peers need
`sentence-transformers[onnx,openvino]`, which pins transformers 4.x: a venv of their own). Writes
OUT/results.json and OUT/report.md."""

from __future__ import annotations

import argparse
import sys

from r3edge.core.fidelity import MIN_TOP10_OVERLAP


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--student", required=True, help="the cosine student's directory (`r3edge train`): the peers' weights")
    parser.add_argument("--pairs", "--heldout", dest="pairs", required=True,
                        help="candidate-list JSONL: each query with its candidates is one request (the name the other "
                             "bench tools use; --heldout: its earlier name, in committed reproduce lines)")
    parser.add_argument("--artifact", default=None,
                        help="the student's artifact (`r3edge export`): each of --variants is served by a child `r3edge serve`")
    parser.add_argument("--variants", default="fp32", help="comma-separated variants of --artifact to serve; the first is the "
                        "reference ranking")
    parser.add_argument("--target", action="append", default=[], metavar="LABEL=HOST:PORT",
                        help="a running `r3edge serve` to compare too (after --artifact's); repeatable")
    parser.add_argument("--peers-python", default=sys.executable,
                        help="the interpreter that runs the peers (has sentence-transformers)")
    parser.add_argument("--peers", default="all",
                        help="comma-separated, of st-torch-fp32, st-onnx-fp32, st-onnx-int8, st-openvino-fp32, openvino-int8-nncf; "
                             "all: every one --peers-python can build (the report names the others and why)")
    parser.add_argument("--max-requests", type=int, default=10, help="use only the first N requests of --pairs")
    parser.add_argument("--threads", type=int, default=2, help="threads of each child server (--artifact) and of the peers")
    parser.add_argument("--reps", type=int, default=3, help="timed passes over the requests")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds of quiet before each timed call")
    parser.add_argument("--min-overlap", type=float, default=MIN_TOP10_OVERLAP,
                        help="top-10 overlap with the reference an r3edge system needs to count as the fastest r3edge")
    parser.add_argument("--out", default="runs/bench-peers", help="output directory")


def _targets(entries: list[str]) -> list[tuple[str, str]]:
    from r3edge.core.errors import InvalidInput

    out = []
    for entry in entries:
        label, sep, target = entry.partition("=")
        if not sep or not label or ":" not in target:
            raise InvalidInput(f"--target {entry!r} is not LABEL=HOST:PORT", "write e.g. --target fp32=127.0.0.1:50051",
                               field="--target")
        out.append((label, target))
    return out


def run(args: argparse.Namespace) -> int:
    from r3edge.benchmarks.peers import measure_peers, write_report
    from r3edge.core.pairs import read_queries

    results = measure_peers(
        args.student, read_queries(args.pairs)[: args.max_requests], artifact=args.artifact,
        variants=[v for v in args.variants.split(",") if v], targets=_targets(args.target),
        peers_python=args.peers_python, peers=[p for p in args.peers.split(",") if p], threads=args.threads,
        reps=args.reps, pause_s=args.pause, min_overlap=args.min_overlap,
        log=lambda line: print(line, file=sys.stderr, flush=True))
    paths = write_report(results, args.out)
    print(paths["report"].read_text())
    print(f"wrote {paths['results']}, {paths['report']}")
    return 0
