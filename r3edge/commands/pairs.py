"""Write candidate-list JSONL, the format every other stage reads, in one of three modes.

Demo (``--out F`` alone): the embedded generator of user-generated-content posts. Queries are short
and ambiguous, posts are informal (emoji, hashtags, slang, chatter), each query has auxiliary
in-platform posts (R³A's intent evidence) and graded 0/1/2 candidates. Same seed, same file.

Pooling (``--queries Q.jsonl --corpus C.jsonl --out F``): per query, the union of the BM25 top
``--bm25-k`` over the corpus, a reranker run's top ``--run-k`` (TREC run) and the documents a TREC
qrels file grades above 0 (clicks), deduplicated, in that order; qrels grades become gold labels
(unjudged documents get none), each candidate's meta says which sources found it, and the top
``--aux-k`` BM25 hits become the query's auxiliary documents. Queries JSONL: {"qid", "query",
"meta"?}; corpus JSONL: {"docid", "text", "title"?, "meta"?}. ``--format beir`` or ``msmarco`` reads BEIR's
``queries.jsonl``/``corpus.jsonl``/``qrels/SPLIT.tsv`` or MS MARCO's ``queries.*.tsv``/``collection.tsv`` instead
(told from --corpus when left out); --run is TREC's six columns or MS MARCO's ``qid<TAB>pid<TAB>rank``.

SemEval (``--semeval DIR --out F``): pooling's BM25 step over SemEval-2016 CQA's train split alone (subtask A and C
train questions, the train threads' comments, ``r3edge.distill.data.datasets.semeval_train_collection``); an id of
the dev files in them is an error, so dev never becomes training data.

Conversion (``--from SOURCE --out F``): a pair source in another format (Parquet, a ``datasets`` dataset,
a BEIR or MS MARCO folder's judged pairs) written as candidate-list JSONL, the same pairs `r3edge label
SOURCE` labels. The formats: ``r3edge.distill.data.formats``.
"""

from __future__ import annotations

import argparse

DEMO_DEFAULTS = {"candidates": 12, "start": 0, "seed": 0, "qid_prefix": "ugc"}
POOL_DEFAULTS = {"bm25_k": 100, "run_k": 20, "aux_k": 3, "stemmer": "english", "stopwords": "en"}


def configure(parser):
    from r3edge.distill.data.formats import add_format_arguments

    parser.add_argument("--out", required=True, help="JSONL file to write (candidate-list form)")
    parser.add_argument("--from", dest="source", default=argparse.SUPPRESS, metavar="SOURCE",
                        help="convert a pair source (a Parquet file, a datasets dataset, a BEIR or MS MARCO folder, pairs "
                             "JSONL) into candidate-list JSONL, as `r3edge label SOURCE` reads it")
    add_format_arguments(parser, default=argparse.SUPPRESS)
    parser.add_argument("--queries", default=argparse.SUPPRESS,
                        help="demo: number of queries (12 when left out); pooling: the queries file (JSONL, BEIR "
                             "queries.jsonl, MS MARCO queries.*.tsv)")
    demo = parser.add_argument_group("demo generator (without --corpus)")
    demo.add_argument("--candidates", type=int, default=argparse.SUPPRESS, help="candidates per query (12; 100 = a top-100 request)")
    demo.add_argument("--start", type=int, default=argparse.SUPPRESS,
                      help="index of the first query (0); give held-out splits a start past the training queries")
    demo.add_argument("--seed", type=int, default=argparse.SUPPRESS, help="random seed (0; same seed, same bytes)")
    demo.add_argument("--qid-prefix", default=argparse.SUPPRESS, help="prefix of query and document ids (ugc)")
    pool = parser.add_argument_group("pooling (with --queries Q.jsonl --corpus C.jsonl)")
    pool.add_argument("--semeval", default=argparse.SUPPRESS, metavar="DIR",
                      help="pool SemEval-2016 CQA's train split in DIR (semeval2016-cqa): subtask A and C train questions "
                           "over the train threads' comments; an id of the dev files is an error")
    pool.add_argument("--corpus", default=argparse.SUPPRESS,
                      help="corpus JSONL: {docid, text, title?, meta?} per line; or BEIR's corpus.jsonl, MS MARCO's "
                           "collection.tsv (--format)")
    pool.add_argument("--bm25-k", type=int, default=argparse.SUPPRESS, help="BM25 hits pooled per query (100)")
    pool.add_argument("--run", default=argparse.SUPPRESS,
                      help="a reranker's run: TREC 'qid Q0 docid rank score tag' or MS MARCO 'qid<TAB>pid<TAB>rank'")
    pool.add_argument("--run-k", type=int, default=argparse.SUPPRESS, help="top documents of --run pooled per query (20)")
    pool.add_argument("--qrels", default=argparse.SUPPRESS,
                      help="TREC qrels 'qid 0 docid rel' (tab or space separated; --format beir: BEIR's qrels TSV): "
                           "grades become labels; rel > 0 (clicks) always join the pool")
    pool.add_argument("--aux-k", type=int, default=argparse.SUPPRESS, help="top BM25 hits kept as auxiliary documents per query (3)")
    pool.add_argument("--stemmer", default=argparse.SUPPRESS, help="Snowball stemmer language for BM25, or none (english)")
    pool.add_argument("--stopwords", default=argparse.SUPPRESS, help="bm25s stopword list for BM25 (en, de, fr, ...), or none (en)")


def _given(args, names) -> list[str]:
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n) is not None]


def run(args) -> int:
    from r3edge.core.errors import InvalidInput

    # Options left out are absent (their defaults depend on the mode); None marks them from here on.
    for name in ("queries", "corpus", "semeval", "run", "qrels", "source", "format", "split", *DEMO_DEFAULTS, *POOL_DEFAULTS):
        if not hasattr(args, name):
            setattr(args, name, None)

    pool_flags = _given(args, ["corpus", "semeval", *POOL_DEFAULTS, "run", "qrels"])
    queries_is_count = args.queries is None or args.queries.strip().lstrip("-").isdigit()
    if args.source is not None:
        others = pool_flags + _given(args, DEMO_DEFAULTS) + (["--queries"] if args.queries is not None else [])
        if others:
            raise InvalidInput(f"--from converts a pair source; {', '.join(others)} belong to pooling or the demo",
                               f"drop {', '.join(others)}, or drop --from", field=others[0])
        return _convert(args)
    if args.semeval is not None:
        others = _given(args, ["queries", "corpus", "run", "run_k", "qrels", "format", "split", *DEMO_DEFAULTS])
        if others:
            raise InvalidInput(f"--semeval pools SemEval's train questions over its train comments; {', '.join(others)} "
                               "name other inputs", f"drop {', '.join(others)}, or drop --semeval", field=others[0])
        return _pool(args)
    if args.split is not None:
        raise InvalidInput("--split picks a split of a --from source", "add --from SOURCE, or drop --split (pooling reads "
                           "the files --queries, --corpus and --qrels name)", field="--split")
    if not pool_flags and queries_is_count:
        if args.format is not None:
            raise InvalidInput("--format names the format of --from or of pooling's files, and neither is given",
                               "add --from SOURCE (or --queries Q --corpus C), or drop --format", field="--format")
        return _demo(args)
    if args.corpus is None:
        given = ", ".join(pool_flags) or f"--queries {args.queries}"
        raise InvalidInput(f"{given} pools from a corpus, but --corpus is missing",
                           "add --corpus C.jsonl (and --queries Q.jsonl), or pass --queries N alone for the demo generator",
                           field="--corpus")
    if args.queries is None:
        raise InvalidInput("--corpus needs the queries to pool for, but --queries is missing",
                           "add --queries Q.jsonl (one {\"qid\", \"query\"} per line)", field="--queries")
    demo_flags = _given(args, DEMO_DEFAULTS)
    if demo_flags:
        raise InvalidInput(f"{', '.join(demo_flags)} only apply to the demo generator, not to pooling with --corpus",
                           f"drop {', '.join(demo_flags)}", field=demo_flags[0])
    if args.run_k is not None and args.run is None:
        raise InvalidInput("--run-k is given without --run", "add --run RUN (a TREC run file) or drop --run-k", field="--run-k")
    return _pool(args)


def _demo(args) -> int:
    from r3edge.core.errors import InvalidInput
    from r3edge.core.pairs import write_queries
    from r3edge.distill.data.ugc import generate

    for name, default in DEMO_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    n_queries = 12 if args.queries is None else int(args.queries)
    if n_queries <= 0 or args.candidates <= 0:
        raise InvalidInput("--queries and --candidates must be positive", "pass e.g. --queries 12 --candidates 12")
    queries = generate(n_queries, args.candidates, seed=args.seed, start=args.start, qid_prefix=args.qid_prefix)
    write_queries(args.out, queries)
    n = sum(len(q.candidates) for q in queries)
    print(f"wrote {len(queries)} queries, {n} pairs to {args.out}")
    return 0


def _convert(args) -> int:
    from r3edge.core.pairs import write_queries
    from r3edge.distill.data.formats import detect_format, read_pairs

    fmt = args.format or detect_format(args.source)
    queries = read_pairs(args.source, fmt, split=args.split)
    write_queries(args.out, queries)
    n = sum(len(q.candidates) for q in queries)
    labelled = sum(c.label is not None for q in queries for c in q.candidates)
    print(f"wrote {len(queries)} queries, {n} pairs ({labelled} labelled) from {args.source} ({fmt}) to {args.out}")
    return 0


def _pool(args) -> int:
    from r3edge.core.errors import InvalidInput
    from r3edge.core.pairs import write_queries
    from r3edge.distill.data.formats import Collection, detect_pool_format, read_collection
    from r3edge.distill.data.pooling import BM25Index, pool

    for name, default in POOL_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    for flag, value, low in (("--bm25-k", args.bm25_k, 0), ("--run-k", args.run_k, 1), ("--aux-k", args.aux_k, 0)):
        if value < low:
            raise InvalidInput(f"{flag} is {value}; it must be at least {low}",
                               f"pass e.g. {flag} {POOL_DEFAULTS[flag[2:].replace('-', '_')]}", field=flag)
    if args.bm25_k == 0 and args.run is None and args.qrels is None:
        raise InvalidInput("--bm25-k 0 without --run or --qrels pools nothing", "raise --bm25-k or add --run / --qrels",
                           field="--bm25-k")
    none = lambda v: None if v.lower() in ("none", "") else v
    if args.semeval is not None:
        from r3edge.distill.data.datasets import semeval_train_collection

        train = semeval_train_collection(args.semeval)
        print("semeval train: " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in train.left_out.items())
              + f" left out; pooling {len(train.queries)} questions over {len(train.docs)} comments")
        coll = Collection(train.queries, train.docs)
    else:
        fmt = args.format or detect_pool_format(args.corpus)
        coll = read_collection(fmt, args.queries, args.corpus, run_path=args.run, qrels_path=args.qrels)
    index = BM25Index(coll.docs, stemmer=none(args.stemmer), stopwords=none(args.stopwords))
    queries, stats = pool(coll.queries, coll.docs, index, bm25_k=args.bm25_k, run=coll.run, run_k=args.run_k,
                          qrels=coll.qrels, aux_k=args.aux_k)
    if not queries:
        raise InvalidInput("no query has a candidate: BM25 matched nothing and no run or qrels added any",
                           "check that --queries and --corpus share a language and vocabulary", field="--queries")
    write_queries(args.out, queries)
    sources = ", ".join(f"{s} {n}" for s, n in stats.by_source.items())
    print(f"wrote {stats.queries} queries, {stats.candidates} pairs ({stats.labelled} labelled from qrels; "
          f"found by {sources}) to {args.out}")
    if stats.skipped_empty:
        shown = ", ".join(stats.skipped_empty[:5]) + (" ..." if len(stats.skipped_empty) > 5 else "")
        print(f"left out {len(stats.skipped_empty)} queries with an empty pool: {shown}")
    return 0
