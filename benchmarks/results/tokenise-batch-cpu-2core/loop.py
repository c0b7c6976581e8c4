"""Reranker.rank over a requests file's top-100s, again and again for SECONDS: the load py-spy samples (profile.py).

    loop.py ARTIFACT VARIANT SECONDS REQUESTS.jsonl
"""
import sys
import time
from pathlib import Path

from r3edge import Reranker
from r3edge.core.pairs import read_queries

reranker = Reranker(sys.argv[1], variant=sys.argv[2])
requests = [(q.query, [c.text for c in q.candidates]) for q in read_queries(Path(sys.argv[4]))]
t0 = time.time()
while time.time() - t0 < float(sys.argv[3]):
    for query, docs in requests:
        reranker.rank(query, docs, top_k=10)
