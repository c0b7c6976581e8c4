#!/usr/bin/env python3
"""Why the demo student's sentence-transformers peer ranks differently from the student itself.

In both H200 runs, sentence-transformers on the demo student's weights kept only 0.94-0.95 of torch fp32's top 10
(max |Δ score| 0.34-0.43), while on the SemEval student it kept all of it. The suspected cause: the peer cuts every
text, the query too, at its ``max_seq_length`` (the student's ``max_doc_tokens`` + 2 = 130 for the demo student),
while the student cuts the query at ``max_query_tokens`` (48 for the demo student, 192 for the SemEval student). This
tests that cause on a CPU. It scores SemEval C dev's top-100s three ways:

- r3edge's own scoring graph in torch fp32 (``lm_score_fn``), the reference;
- sentence-transformers on the same weights, as the peer runs (``peer_max_seq_length``);
- the same peer, given each query already cut where the student cuts it (at the end of its ``max_query_tokens``-th
  token, in the student's own tokenizer's offsets).

If the cause is the query's cut, the third row matches the reference, and the second does not.

    .venv/bin/python benchmarks/results/gpu-students-h200-third-run/st_query_cut.py runs/demo/student \\
        ../shared/data/semeval2016-cqa/subtaskC_dev.jsonl --out st-query-cut-epyc-2core.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("student", help="a trained cosine student directory")
    ap.add_argument("pairs", help="top-100 lists (a pairs JSONL)")
    ap.add_argument("--max-requests", type=int, default=50)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    from r3edge.benchmarks.machine import machine_info
    from r3edge.benchmarks.peers import peer_max_seq_length
    from r3edge.core.pairs import read_queries
    from r3edge.core.timing import top_k_overlap
    from r3edge.model.student import lm_score_fn, load_student

    student = Path(args.student)
    queries = read_queries(args.pairs)[: args.max_requests]
    lm, scorer = load_student(student)
    spec = scorer.spec
    fn = lm_score_fn(lm.eval(), scorer)
    with torch.inference_mode():
        reference = {q.qid: scorer.relevance(fn([q.query] * len(q.candidates), [c.text for c in q.candidates]))[1]
                     for q in queries}

    peer_side = importlib.util.spec_from_file_location(
        "st_peers", ROOT / "benchmarks" / "peer_side" / "sentence_transformers_peers.py")
    peers = importlib.util.module_from_spec(peer_side)
    peer_side.loader.exec_module(peers)
    head = json.loads((student / "cosine_head.json").read_text())
    st = SentenceTransformer(str(student), device="cpu")
    st.max_seq_length = peer_max_seq_length(scorer)
    t = spec.template

    def cut(query: str) -> str:
        """The query as the student reads it: render_batch cuts it where encode_batch does (the template stripped)."""
        return scorer.render_batch([query], [""])[0][len(t.head): -len(t.mid + t.tail) or None]

    def peer(query: str, docs: list[str]) -> np.ndarray:
        emb = st.encode([query, *docs], batch_size=128, normalize_embeddings=True, convert_to_numpy=True,
                        show_progress_bar=False).astype(np.float64)
        return peers.expected_scores(emb[1:] @ emb[0], head, spec.label_values, float(spec.temperature))

    rows = {}
    for name, prep in (("peer as run (query cut at max_seq_length)", lambda q: q),
                       (f"peer, query cut at max_query_tokens ({spec.max_query_tokens})", cut)):
        overlap, diff = [], []
        for q in queries:
            s = peer(prep(q.query), [c.text for c in q.candidates])
            overlap.append(top_k_overlap(reference[q.qid], s))
            diff.append(float(np.abs(s - reference[q.qid]).max()))
        rows[name] = {"top10_overlap_mean": float(np.mean(overlap)), "max_abs_score_diff": max(diff),
                      "lists_with_overlap_below_1": int(sum(o < 1 for o in overlap))}
    long_queries = sum(scorer.encode_batch([q.query], [""])[0].query_tokens_dropped > 0 for q in queries)
    out = {"student": str(student), "lists": len(queries), "max_query_tokens": spec.max_query_tokens,
           "max_doc_tokens": spec.max_doc_tokens, "peer_max_seq_length": st.max_seq_length,
           "queries_over_max_query_tokens": int(long_queries), "reference": "r3edge's scoring graph, torch fp32",
           "rows": rows, "machine": machine_info()}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "machine"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
