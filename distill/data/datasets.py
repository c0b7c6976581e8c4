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
from dataclasses import dataclass, field
from pathlib import Path

from r3edge.core.errors import InvalidInput, NotFound
from r3edge.core.pairs import QueryCandidates, read_queries
from r3edge.distill.data.pooling import Doc, Query

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



#: the train files `r3edge pairs --semeval` pools from: their questions are the queries, their comments the corpus
SEMEVAL_POOL_SUBTASKS = ("A", "C")


def _thread_ids(docid: str) -> set[str]:
    """The thread and question a SemEval id names: comment ``Q268_R4_C1`` -> {Q268_R4, Q268}."""
    parts = docid.split("_")
    return {"_".join(parts[:i]) for i in range(1, len(parts))}


@dataclass
class SemevalSplit:
    """What a split names: every id (questions, threads, comments), its question texts (new questions and the
    related threads' questions) and its comments as pooling shows them (titled with their thread's subject)."""

    ids: set[str] = field(default_factory=set)
    questions: set[str] = field(default_factory=set)
    comments: set[str] = field(default_factory=set)


def _titled(text: str, subject: str) -> str:
    return Doc("", text, subject or None).full_text


def semeval_dev_split(data_dir: str | Path) -> SemevalSplit:
    """Every id and text of the dev split, from its three files."""
    dev = SemevalSplit()
    for subtask in "ABC":
        for q in semeval_queries(data_dir, subtask, "dev", aux_k=0):
            dev.ids.add(q.qid)
            dev.ids.update(c.docid for c in q.candidates)
            dev.questions.add(q.query)
            if subtask == "B":  # the related threads' questions
                dev.questions.update(c.text for c in q.candidates)
            elif subtask == "C":  # titled by semeval_queries
                dev.comments.update(c.text for c in q.candidates)
            else:
                dev.comments.update(_titled(c.text, q.query.split("\n", 1)[0].strip()) for c in q.candidates)
    return dev


@dataclass
class DevContent:
    """Which train questions and comments carry dev content, by the rules :func:`semeval_train_collection` leaves
    them out by (also applied to older train pairs, such as fidelity's C train, that were never pooled that way): a
    question whose text is a dev question's; a comment of a thread whose question is a dev question; a comment whose
    titled text is a dev comment's."""

    dev: SemevalSplit
    #: a related thread's id -> its question (subtask B train)
    thread_question: dict[str, str]

    @classmethod
    def of(cls, data_dir: str | Path) -> DevContent:
        return cls(semeval_dev_split(data_dir),
                   {c.docid: c.text for q in read_queries(semeval_file(data_dir, "B", "train")) for c in q.candidates})

    def question(self, text: str) -> str | None:
        """``"dev_questions"`` when a train question's text is a dev question's, else None."""
        return "dev_questions" if text in self.dev.questions else None

    def comment(self, docid: str, titled: str, thread: str | None = None) -> str | None:
        """Why a train comment is dev content (``"dev_thread_comments"``, ``"dev_comments"``) or None. ``thread`` is
        its thread's question where the caller has it (subtask A: the query); else it is looked up by the id."""
        if thread is None:
            thread = self.thread_question.get(docid.rsplit("_", 1)[0])
        if thread in self.dev.questions:
            return "dev_thread_comments"
        if titled in self.dev.comments:
            return "dev_comments"
        return None


@dataclass
class SemevalTrainPool:
    """Pooling's inputs from the train split, and what was left out and why (counts)."""

    queries: list[Query]
    docs: list[Doc]
    left_out: dict[str, int]


def semeval_train_collection(data_dir: str | Path) -> SemevalTrainPool:
    """Pooling's inputs from the train split only: the questions of subtask A train (379 related questions)
    and C train (67 new questions) as queries, and the comments of their threads as the corpus. A comment's
    text is titled with its thread's subject line, as :func:`semeval_queries` shows C's comments (the form the
    SemEval judges and students were trained and measured on).

    The forum's search returned some threads for both a train and a dev question, under other ids, so the
    train files hold dev content. Left out (and counted): a train question whose text is a dev question's or a
    dev thread's question, every comment of a train thread whose question is one of those, any other comment
    whose titled text is a dev comment's, and repeated texts (the first query or comment with a text is kept).
    A train id that *is* a dev id (or names a dev thread or question) is an error: the files are mixed up.
    :func:`check_not_dev` then checks the result against the dev split."""
    rules = DevContent.of(data_dir)
    dev = rules.dev
    left = dict.fromkeys(("dev_questions", "dev_thread_comments", "dev_comments", "repeated_questions",
                          "repeated_comments"), 0)
    queries: dict[str, Query] = {}
    docs: dict[str, Doc] = {}
    seen: set[str] = set()
    for subtask in SEMEVAL_POOL_SUBTASKS:
        for q in semeval_queries(data_dir, subtask, "train", aux_k=0):
            check_not_dev([Query(q.qid, "")], [Doc(c.docid, "") for c in q.candidates], SemevalSplit(ids=dev.ids),
                          data_dir)
            if rules.question(q.query):
                left["dev_questions"] += 1
            elif q.query in queries:
                left["repeated_questions"] += 1
            else:
                queries[q.query] = Query(q.qid, q.query, {"semeval": subtask})
            subject = q.query.split("\n", 1)[0].strip()  # subtask A: the query is the thread's own question
            for c in q.candidates:
                if c.docid in seen:  # subtask A's comments are also C's
                    continue
                seen.add(c.docid)
                text = c.text if subtask == "C" else _titled(c.text, subject)
                why = rules.comment(c.docid, text, q.query if subtask == "A" else None)
                if why:
                    left[why] += 1
                elif text in docs:
                    left["repeated_comments"] += 1
                else:
                    docs[text] = Doc(c.docid, text)
    out = SemevalTrainPool(list(queries.values()), list(docs.values()), left)
    check_not_dev(out.queries, out.docs, dev, data_dir)
    return out


def check_not_dev(queries: list[Query], docs: list[Doc], dev: SemevalSplit, data_dir: str | Path) -> None:
    """An error naming the first query or comment whose id, thread or question is a dev id, or whose text is a
    dev question's or comment's."""
    for kind, items, texts, what in (("query", [(q.qid, q.query) for q in queries], dev.questions, "question"),
                                     ("comment", [(d.docid, d.text) for d in docs], dev.comments, "comment")):
        for item, text in items:
            hit = sorted(({item} | _thread_ids(item)) & dev.ids)
            if hit or text in texts:
                why = f"{', '.join(hit)} is a dev id" if hit else f"its text is a dev {what}'s"
                raise InvalidInput(f"{kind} {item!r} of the train files in {data_dir} is in the dev split ({why}): "
                                   "dev must never be pooled for training",
                                   "restore the official train and dev files (see the data folder's README.md)",
                                   field="--semeval")
