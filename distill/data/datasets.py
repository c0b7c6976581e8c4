"""Public graded relevance data as candidate lists: SemEval-2016 Task 3 CQA (Qatar Living forum).

The files under ``../shared/data/semeval2016-cqa`` are already candidate-list JSONL (see their
README); this module picks the splits the fidelity run uses and adds what R³A's intent round wants:
for a subtask C question (new question -> 100 comments of 10 related threads) the auxiliary posts
are the related *questions* that the forum's search returned for it (subtask B's candidates, in
search order): "posts that the platform's search ranked high for this query". A subtask C comment
is titled with its thread's subject line (title, then text, as pooling shows a document): a comment
answers its thread's question, so whether it answers the new question depends on that thread, and
the forum shows it that way. Nothing is copied into the project; the data is read where it lies.
"""

from __future__ import annotations

import random
from pathlib import Path

from r3edge.core.errors import NotFound
from r3edge.core.pairs import QueryCandidates, read_queries
from r3edge.distill.data.pooling import Doc

SEMEVAL_FILES = {
    ("A", "train"): "subtaskA_train2.jsonl", ("A", "dev"): "subtaskA_dev.jsonl",
    ("B", "train"): "subtaskB_train2.jsonl", ("B", "dev"): "subtaskB_dev.jsonl",
    ("C", "train"): "subtaskC_train2.jsonl", ("C", "dev"): "subtaskC_dev.jsonl",
}


def semeval_file(data_dir: str | Path, subtask: str, split: str) -> Path:
    path = Path(data_dir) / SEMEVAL_FILES[(subtask, split)]
    if not path.is_file():
        raise NotFound(f"{path} does not exist", "pass --data pointing at the semeval2016-cqa folder (see its README.md)")
    return path


def semeval_queries(data_dir: str | Path, subtask: str, split: str, *, aux_k: int = 3,
                    titled: bool = True) -> list[QueryCandidates]:
    """One subtask's split; subtask C questions get their top ``aux_k`` related questions as ``aux``
    and (``titled``) each comment its thread's subject line as title."""
    queries = read_queries(semeval_file(data_dir, subtask, split))
    if subtask != "C" or (aux_k <= 0 and not titled):
        return queries
    related = {q.qid: q for q in read_queries(semeval_file(data_dir, "B", split))}
    for q in queries:
        threads = related[q.qid].candidates if q.qid in related else []
        if aux_k > 0 and threads:
            ranked = sorted(threads, key=lambda c: (c.rank is None, c.rank or 0))
            q.aux = [c.text for c in ranked[:aux_k]]
        if titled:
            subject = {t.docid: t.text.split("\n", 1)[0].strip() for t in threads}
            for c in q.candidates:  # comment Q268_R4_C1 belongs to thread Q268_R4
                title = subject.get(c.docid.rsplit("_", 1)[0])
                if title:
                    c.text = Doc(c.docid, c.text, title).full_text
    return queries


def sample_queries(queries: list[QueryCandidates], n: int | None, seed: int) -> list[QueryCandidates]:
    """``n`` queries drawn without replacement (all when ``n`` is None or too large), in file order."""
    if n is None or n >= len(queries):
        return list(queries)
    keep = set(random.Random(seed).sample(range(len(queries)), n))
    return [q for i, q in enumerate(queries) if i in keep]


#: questions in `r3edge fidelity`'s cold-start pool by default, half from subtask A train and half from C train
SFT_QUERIES = 60


def write_fidelity_pairs(data_dir: str | Path, sft_gold: Path, train_pairs: Path, dev_pairs: Path, *,
                         sft_queries: int = SFT_QUERIES, train_queries: int | None = None, dev_queries: int | None = None,
                         seed: int = 0) -> list[QueryCandidates]:
    """`r3edge fidelity`'s three pairs files (seeded samples, all questions where a count is None): the cold-start
    pool, C train to distil on and C dev to measure on. Kept once the dev file exists, so a rerun measures the
    same questions; returns the dev questions."""
    from r3edge.core.pairs import write_queries

    if not dev_pairs.is_file():
        c_train = semeval_queries(data_dir, "C", "train")
        half = sft_queries // 2
        write_queries(sft_gold, sample_queries(semeval_queries(data_dir, "A", "train"), sft_queries - half, seed)
                      + sample_queries(c_train, half, seed))
        write_queries(train_pairs, sample_queries(c_train, train_queries, seed))
        write_queries(dev_pairs, sample_queries(semeval_queries(data_dir, "C", "dev"), dev_queries, seed))
    return read_queries(dev_pairs)
