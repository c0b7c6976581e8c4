"""Send one Rerank request to a running server and print the top-k as a table.

Candidates come from a JSONL file of {"id"|"docid", "text"} lines (--candidates), or from a pairs
file (--pairs, either form) for one query id (--qid), whose query text is used unless --query
is given.
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="127.0.0.1:50051", help="server address host:port")
    parser.add_argument("--query", default=None, help="query text (default with --pairs: the qid's query)")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--candidates", default=None, help="JSONL with one {\"id\", \"text\"} per line")
    src.add_argument("--pairs", default=None, help="pairs file (candidate-list or flat JSONL)")
    parser.add_argument("--qid", default=None, help="query id in --pairs (default: the first query)")
    parser.add_argument("--top-k", type=int, default=10, help="results to print (0 = all)")
    parser.add_argument("--timeout", type=float, default=60.0, help="request deadline in seconds")
    parser.add_argument("--width", type=int, default=80, help="characters of text shown per row")


def _read_candidates(path: str) -> list[tuple[str, str]]:
    import json
    from pathlib import Path

    from r3edge.core.errors import InvalidInput

    p = Path(path)
    if not p.is_file():
        raise InvalidInput(f"candidates file {p} does not exist", "pass a JSONL file with {\"id\", \"text\"} lines")
    out = []
    for lineno, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            cid = obj.get("id", obj.get("docid"))
            text = obj["text"]
        except (json.JSONDecodeError, KeyError, AttributeError) as exc:
            raise InvalidInput(f"{p}:{lineno}: expected {{\"id\", \"text\"}} ({exc})", "fix that line") from exc
        if cid is None:
            raise InvalidInput(f"{p}:{lineno}: missing field 'id'", "give every candidate an id (or docid)")
        out.append((str(cid), str(text)))
    return out


def run(args: argparse.Namespace) -> int:
    from r3edge.core.errors import InvalidInput, R3EdgeError

    query = args.query
    texts: dict[str, str] = {}
    if args.pairs:
        from r3edge.core.pairs import read_queries

        queries = read_queries(args.pairs)
        if args.qid is None:
            q = queries[0]
        else:
            found = [q for q in queries if q.qid == args.qid]
            if not found:
                raise InvalidInput(f"qid {args.qid!r} is not in {args.pairs}", f"use one of {[q.qid for q in queries][:10]}")
            q = found[0]
        query = query or q.query
        cands = [(c.docid, c.text) for c in q.candidates]
    else:
        cands = _read_candidates(args.candidates)
        if not query:
            raise InvalidInput("--query is required with --candidates", "pass --query 'your question'")
    texts = dict(cands)

    import grpc

    from r3edge.api.client import RerankerClient

    with RerankerClient(args.target, timeout=args.timeout) as client:
        try:
            resp = client.rerank_raw(query, cands, top_k=args.top_k)
        except grpc.RpcError as exc:
            # the server's status says whose fault it was; this CLI only relays it
            raise R3EdgeError(f"server at {args.target} answered {exc.code().name}: {exc.details()}",
                              "check the request (INVALID_ARGUMENT) or that the server runs (UNAVAILABLE)") from exc
    t = resp.timing
    print(f"query: {query}")
    cut = f"{resp.truncated_docs} documents" + (" and the query" if resp.query_truncated else "")
    print(f"model: {resp.model}  candidates: {len(cands)}  cut to the budget: {cut}  "
          f"total {t.total_ms:.1f} ms (queue {t.queue_ms:.1f}, tokenize {t.tokenize_ms:.1f}, inference {t.inference_ms:.1f})")
    print(f"{'rank':>4}  {'score':>6}  {'probs':<20}  {'id':<12}  text")
    for rank, r in enumerate(resp.results, start=1):
        probs = " ".join(f"{p:.2f}" for p in r.label_probs)
        text = " ".join(texts[r.id].split())
        if len(text) > args.width:
            text = text[: args.width - 1] + "…"
        print(f"{rank:>4}  {r.score:>6.3f}  {probs:<20}  {r.id:<12}  {text}")
    return 0
