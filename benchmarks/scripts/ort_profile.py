"""Where an exported variant spends its time: ONNX Runtime's own profiler, summed per operator type.

    python benchmarks/scripts/ort_profile.py --artifact runs/q-art --variants fp32,int8-smooth \\
        --heldout runs/held50.jsonl --requests 4

Each variant runs ``--requests`` top-100 lists through ``score_pairs`` (the server's micro-batching, at
``DEFAULT_MAX_BATCH_TOKENS``: the server's budget on CPU) in the server's own session (``OnnxRuntime``,
single graph) with ONNX Runtime's profiler on; kernel times are summed per op type and divided by the
requests: milliseconds per top-100.
Prints a markdown table; the kernels' total is below the wall time (no tokenisation, no scheduling).
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile

from r3edge.core.onnx_runtime import OnnxRuntime
from r3edge.core.pairs import read_queries
from r3edge.core.scoring import score_pairs


def op_times(artifact: str, variant: str, queries, threads: int) -> dict[str, float]:
    """Kernel milliseconds per top-100 request, by op type."""
    runtime = OnnxRuntime(artifact, variant=variant, threads=threads, prefix_reuse=False,
                          profile_prefix=tempfile.mkdtemp(prefix="r3edge-prof-") + f"/{variant}")
    for q in queries:
        score_pairs(runtime.scorer, runtime.label_logits, [q.query] * len(q.candidates), [c.text for c in q.candidates])
    with open(runtime.session.end_profiling()) as f:
        events = json.load(f)
    by_op: collections.Counter = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"] / 1e3 / len(queries)
    return dict(by_op.most_common())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--variants", default="fp32,int8-smooth")
    ap.add_argument("--heldout", required=True, help="candidate-list JSONL (top-100 requests)")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=10, help="op types listed per variant")
    args = ap.parse_args()
    queries = read_queries(args.heldout)[: args.requests]
    for variant in args.variants.split(","):
        times = op_times(args.artifact, variant, queries, args.threads)
        total = sum(times.values())
        print(f"\n{variant}: {total:.0f} ms of kernels per top-100\n\n| op type | ms / top-100 | share |\n|---|---|---|")
        for op, ms in list(times.items())[: args.top]:
            print(f"| {op} | {ms:.1f} | {ms / total:.1%} |")


if __name__ == "__main__":
    main()
