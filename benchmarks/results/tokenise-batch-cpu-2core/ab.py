"""Scorer.encode_batch at a git revision against the working tree's, on one artifact's tokenizer, interleaved in one
process, each SemEval top-100 (1 query + 100 comments) ten times; asserts both give identical Encoded pairs.

    .venv/bin/python benchmarks/results/tokenise-batch-cpu-2core/ab.py REV ARTIFACT REQUESTS.jsonl
"""
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from r3edge.benchmarks.machine import machine_info
from r3edge.core import scoring as new
from r3edge.core.pairs import read_queries

rev, art, requests = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
src = subprocess.run(["git", "show", f"{rev}:r3edge/core/scoring.py"], capture_output=True, text=True, check=True).stdout
path = Path(tempfile.mkdtemp()) / "scoring_old.py"
path.write_text(src)
spec = importlib.util.spec_from_file_location("scoring_old", path)
old = sys.modules["scoring_old"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(old)

fields = ("input_ids", "doc_tokens", "doc_tokens_dropped", "prefix_len", "query_tokens_dropped")
scorers = {rev: old.Scorer.load(art), "working tree": new.Scorer.load(art)}
ms = {k: [] for k in scorers}
for _rep in range(10):
    for q in read_queries(requests):
        docs = [c.text for c in q.candidates]
        got = {}
        for name, sc in scorers.items():
            t0 = time.perf_counter()
            enc = sc.encode_batch([q.query] * len(docs), docs)
            ms[name].append((time.perf_counter() - t0) * 1e3)
            got[name] = [tuple(getattr(e, f) for f in fields) for e in enc]
        assert got[rev] == got["working tree"], q.qid
print(json.dumps({"TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM"), "calls": len(ms[rev]),
                  "p50_ms": {k: round(statistics.median(v), 2) for k, v in ms.items()}, "identical": True,
                  "cpu": machine_info().get("cpu")}))
