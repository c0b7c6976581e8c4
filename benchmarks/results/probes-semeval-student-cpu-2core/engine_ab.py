"""Two servers of the same artifact at concurrency 1, interleaved: this README's engine before and after."""
import json
import statistics
from pathlib import Path

from r3edge.benchmarks.load import run_load
from r3edge.core.pairs import read_queries

qs = read_queries(Path("/tmp/heldout10.jsonl"))  # head -10 of SemEval 2016 C dev (README)
res = {"new 50073": [], "old 50074": []}
for _round in range(4):
    for name in res:
        port = name.split()[1]
        r = run_load(f"127.0.0.1:{port}", qs, 10, 1, progress=False)
        res[name].append(r["latency_ms"]["p50"])
print(json.dumps(res))
print({k: round(statistics.median(v), 1) for k, v in res.items()})
