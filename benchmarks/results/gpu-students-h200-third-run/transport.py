#!/usr/bin/env python3
"""Where a served top-100's "transport" goes (the client's latency less the engine's own total), on a CPU.

On the H200 a served top-100 spent 1.8-2.0 ms between the client and the engine (README.md here). This splits that
on any machine, with the same client the GPU benchmark uses (``RerankerClient``, synchronous grpcio) against a real
``r3edge serve`` child on 127.0.0.1, one request at a time:

- client - handler: the client's latency less the server handler's own time (the access log's ms, measured from the
  handler's first line to its return): grpcio on both sides, the wire, (de)serialising the request and response;
- handler - engine: the handler's time less the engine's ``timing.total_ms``: r3edge's code around the engine
  (request id, checks, building the top-10 response);
- a bare RPC (``ModelInfo``, and the health check), the floor of one unary call on that machine.

The server is `r3edge.benchmarks.systems.serve_artifact`'s child, with its output kept in ``OUT.server.log``.

The scoring itself is whatever the artifact costs on this CPU and cancels out of both differences.

    .venv/bin/python benchmarks/results/gpu-students-h200-third-run/transport.py runs/demo/artifact \\
        ../shared/data/semeval2016-cqa/subtaskC_dev.jsonl --out transport-epyc-2core.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifact")
    ap.add_argument("pairs", help="top-100 lists (a pairs JSONL, e.g. SemEval C dev)")
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from r3edge.api.client import RerankerClient
    from r3edge.benchmarks.load import request_candidates
    from r3edge.benchmarks.machine import machine_info
    from r3edge.benchmarks.systems import serve_artifact
    from r3edge.core.pairs import read_queries

    payloads = [(q.query, request_candidates(q)) for q in read_queries(args.pairs)[:10]]
    log = Path(args.out).with_suffix(".server.log")

    def p50_of(call, n=100):
        ms = []
        for _ in range(n):
            t = time.perf_counter()
            call()
            ms.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ms)

    with serve_artifact(args.artifact, None, None, log=log, log_level="DEBUG") as target:
        with RerankerClient(target) as client:
            client.wait_ready(timeout=300)
            rows = []
            for i in range(args.warm + args.requests):
                t = time.perf_counter()
                resp = client.rerank_raw(*payloads[i % len(payloads)])
                rows.append(((time.perf_counter() - t) * 1e3, resp.timing.total_ms))
            bare = {"model_info_ms_p50": p50_of(client.model_info), "health_ms_p50": p50_of(client.is_serving)}
    # the access log's Rerank lines, in the order the requests were sent (one at a time)
    handler = [float(m.group(1)) for m in re.finditer(r"Rerank OK pairs=\d+ ([0-9.]+) ms", log.read_text())]
    if len(handler) != len(rows):
        raise SystemExit(f"{len(handler)} access-log lines for {len(rows)} requests: see {log}")
    timed = list(zip(rows, handler))[args.warm:]
    result = {
        "artifact": args.artifact, "requests": len(timed), "candidates_per_request": len(payloads[0][1]),
        "client_ms_p50": statistics.median(c for (c, _), _ in timed),
        "client_minus_handler_ms_p50": statistics.median(c - h for (c, _), h in timed),
        "handler_minus_engine_ms_p50": statistics.median(h - e for (_, e), h in timed),
        **bare, "machine": machine_info(),
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
