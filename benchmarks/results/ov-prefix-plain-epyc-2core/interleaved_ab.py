"""Interleaved A/B of served top-100 latency over gRPC, concurrency 1.

    python interleaved_ab.py HOST:PORT,HOST:PORT REQUESTS.jsonl REPS

Every request of REQUESTS.jsonl (candidate-list lines) goes to each target in turn, the order rotated per
request and rep, so slow phases of the machine fall on every target alike. The first pass is warm-up.
Prints p50/p95 ms per target and the p50 ratio of the second to the first.
"""
import json
import statistics
import sys
import time

import grpc

from r3edge.api import reranker_pb2 as pb
from r3edge.api import reranker_pb2_grpc as pb_grpc


def main() -> None:
    targets, path, reps = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
    stubs = [pb_grpc.RerankerStub(grpc.insecure_channel(t)) for t in targets]
    msgs = []
    for line in open(path):
        r = json.loads(line)
        msgs.append(pb.RerankRequest(query=r["query"], top_k=10,
                                     candidates=[pb.Candidate(id=c["docid"], text=c["text"]) for c in r["candidates"]]))
    times: list[list[float]] = [[] for _ in targets]
    for rep in range(reps + 1):
        for k, msg in enumerate(msgs):
            shift = (rep + k) % len(targets)
            for i in list(range(len(targets)))[shift:] + list(range(len(targets)))[:shift]:
                t0 = time.perf_counter()
                stubs[i].Rerank(msg)
                if rep:
                    times[i].append((time.perf_counter() - t0) * 1e3)
    for target, ts in zip(targets, times):
        print(f"{target} p50 {statistics.median(ts):.1f} p95 {sorted(ts)[int(0.95 * len(ts))]:.1f} n {len(ts)}")
    print(f"ratio p50 {statistics.median(times[1]) / statistics.median(times[0])}")


if __name__ == "__main__":
    main()
