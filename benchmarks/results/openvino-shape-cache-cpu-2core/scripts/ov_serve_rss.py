"""Latency and RSS of the ov-int8 student through ``r3edge.Reranker`` (the server's engine, in process) with the
CPU plugin's per-shape cache at N entries: the 10 held-back top-100s 3 times (shapes repeat), then random
candidate subsets of them (new shapes). Usage: ``python ov_serve_rss.py ARTIFACT HELDOUT.jsonl N [REQUESTS]``."""
import json
import random
import statistics
import sys
import time

import r3edge.core.openvino_runtime as ovr

ovr.RUNTIME_CACHE_CAPACITY = int(sys.argv[3])
from r3edge import Reranker  # noqa: E402


def rss_mb() -> int:
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024


requests = [json.loads(line) for line in open(sys.argv[2])]
reranker = Reranker(sys.argv[1], variant="ov-int8")
print("cap", ovr.RUNTIME_CACHE_CAPACITY, "rss open", rss_mb(), flush=True)
for p in range(3):
    ms = []
    for q in requests:
        t = time.perf_counter()
        reranker.rank(q["query"], [c["text"] for c in q["candidates"]])
        ms.append((time.perf_counter() - t) * 1e3)
    print(f"pass {p}: p50 {statistics.median(ms):.1f} ms per top-100, rss {rss_mb()}", flush=True)
random.seed(0)
ms = []
for k in range(int(sys.argv[4]) if len(sys.argv) > 4 else 300):
    q = random.choice(requests)
    docs = random.sample([c["text"] for c in q["candidates"]], random.randint(5, 100))
    t = time.perf_counter()
    reranker.rank(q["query"], docs)
    ms.append((time.perf_counter() - t) * 1e3 / len(docs))
    if (k + 1) % 250 == 0:
        print(f"random {k + 1}: median {statistics.median(ms[-250:]) * 100:.1f} ms per 100 pairs, rss {rss_mb()}", flush=True)
