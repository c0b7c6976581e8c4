"""Write the embedded demo pairs: a deterministic generator of user-generated-content posts.

Queries are short and ambiguous, posts are informal (emoji, hashtags, slang, chatter), each query
has auxiliary in-platform posts (R³A's intent evidence) and graded 0/1/2 candidates. Same seed,
same file. Output: candidate-list JSONL, the format every other stage reads.
"""

from __future__ import annotations


def configure(parser):
    parser.add_argument("--out", required=True, help="JSONL file to write (candidate-list form)")
    parser.add_argument("--queries", type=int, default=12, help="number of queries")
    parser.add_argument("--candidates", type=int, default=12, help="candidates per query (100 = a top-100 request)")
    parser.add_argument("--start", type=int, default=0,
                        help="index of the first query; give held-out splits a start past the training queries")
    parser.add_argument("--seed", type=int, default=0, help="random seed (same seed, same bytes)")
    parser.add_argument("--qid-prefix", default="ugc", help="prefix of query and document ids")


def run(args) -> int:
    from r3edge.core.errors import R3EdgeError
    from r3edge.core.pairs import write_queries
    from r3edge.distill.ugc import generate

    if args.queries <= 0 or args.candidates <= 0:
        raise R3EdgeError("--queries and --candidates must be positive", "pass e.g. --queries 12 --candidates 12")
    queries = generate(args.queries, args.candidates, seed=args.seed, start=args.start, qid_prefix=args.qid_prefix)
    write_queries(args.out, queries)
    n = sum(len(q.candidates) for q in queries)
    print(f"wrote {len(queries)} queries, {n} pairs to {args.out}")
    return 0
