"""The scoring engine: one queue of pairs shared by every request and front door (gRPC, HTTP).

No gRPC or HTTP in here (text-embeddings-inference's split of router and core). A request is
tokenised on arrival (the scoring contract's :meth:`Scorer.encode_batch`, with the server's overflow
policy) and its pairs join one queue. A batcher thread forms each
micro-batch with the contract's own planner (:func:`r3edge.core.scoring.plan_batches`, length-sorted
under a padded-token budget) over the pairs waiting across requests, always including the oldest
request's next pair, so pairs of different requests share micro-batches and no request starves. A
request completes when its last pair returns. With no other traffic a request's micro-batches are
exactly :func:`score_pairs`'. ``workers`` batcher threads plan and run micro-batches
concurrently on the same runtime, whose calls are thread-safe: on a CPU, two single-threaded workers
keep both cores busy on small micro-batches that one two-threaded call cannot split well.

Admission is by expected wait, not by request count: the engine measures the seconds per token its
micro-batches take and refuses a request at once (:class:`Overloaded`, with a retry hint) when the
work queued before it would take longer than ``max_queue_delay_s`` to drain, or when it could not
finish before its deadline. So the queue holds at most about ``max_queue_delay_s`` of work and
memory stays bounded whatever arrives; ``max_concurrent_requests`` caps admitted requests as well.
Cancelled or expired requests leave the queue before their pairs cost compute and are counted.

A student served with prefix-reuse graphs (causal or cosine) takes its micro-batches from one request
at a time, in queue order (the candidate graph reads one prefix state per call). A request's shared
prefix (template head + query) runs once, in its own thread while the tokenizer thread still encodes
the request's documents (the job's ``state``, a future every worker reads), and every
worker scores its candidates' suffixes after it, so one request's micro-batches still spread over the
workers. Every scoring thread runs at a lower CPU priority than the event loop (:data:`SCORING_NICE`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from r3edge.core.errors import (
    DeadlineExceeded,
    InvalidInput,
    Overloaded,
    R3EdgeError,
    Unavailable,
)
from r3edge.core.scoring import Encoded, Overflow, plan_batches, score_encoded
from r3edge.serve.metrics import ServeMetrics

log = logging.getLogger("r3edge.serve")

#: Why admitted work was dropped: the client cancelled it, or its deadline passed.
DropReason = Literal["cancelled", "deadline"]

#: A client's own deadline timer cancels the call when its deadline passes, which reaches the server
#: up to the request's transit time before the server's copy of that deadline does; the server cannot
#: tell that from a cancel, so a cancel this close to the deadline counts as ``deadline``.
CANCEL_COUNTS_AS_DEADLINE_S = 0.5

#: Pairs the batcher looks at when it plans a micro-batch (the oldest first): enough to fill any
#: budget with pairs of similar length, few enough that planning stays far below a batch's runtime.
PLANNING_WINDOW = 1024
#: Weight of the newest micro-batch in the measured seconds per token (an exponential moving average).
RATE_EMA = 0.3
#: Shortest push-back the server asks of a refused client, in seconds.
MIN_RETRY_AFTER_S = 0.05


#: Nice value of every scoring thread (the batcher, the tokenizer, and the runtime's own workers, which
#: inherit it from the thread that opens the runtime): on a machine whose cores the runtime fills,
#: the event loop that admits, refuses and answers requests still gets the CPU first.
SCORING_NICE = 10


def lower_priority() -> None:
    """Give the calling thread (and the threads it will create) :data:`SCORING_NICE`; Linux only,
    where priority is per thread. Raising a nice value needs no privilege; failures are ignored."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SCORING_NICE)
    except (AttributeError, OSError):
        pass


def drop_reason(deadline: float | None) -> DropReason:
    """Why a cancelled or expired request is dropped now, given its ``time.monotonic()`` deadline."""
    if deadline is not None and time.monotonic() >= deadline - CANCEL_COUNTS_AS_DEADLINE_S:
        return "deadline"
    return "cancelled"


@dataclass
class Scored:
    """One request's scores, what was cut, and where its time went (milliseconds).

    ``queue_ms`` is arrival-after-tokenising to the start of its first micro-batch; ``inference_ms``
    the runtime calls that held its pairs (shared with other requests' pairs); ``total_ms`` arrival to
    answer, tokenising included.
    """

    probs: np.ndarray          # [n, n_labels]
    scores: np.ndarray         # [n]
    truncated: np.ndarray      # [n] bool: the document was cut to its budget
    query_truncated: bool
    queue_ms: float
    tokenize_ms: float
    inference_ms: float
    total_ms: float

    @property
    def truncated_docs(self) -> int:
        return int(self.truncated.sum())

    def ranking(self, top_k: int | None = None) -> list[int]:
        """Document indices by score, highest first, ties in input order, the first ``top_k`` (all when
        0 or None): the one ranking of every front door and of :class:`r3edge.serve.reranker.Reranker`."""
        order = sorted(range(len(self.scores)), key=lambda i: (-float(self.scores[i]), i))
        return order[:top_k] if top_k else order


@dataclass(eq=False)  # compared and hashed by identity
class _Job:
    """One admitted request in the queue. Fields other than the future are guarded by the engine's lock."""

    encoded: list[Encoded]
    n_labels: int
    deadline: float | None
    future: asyncio.Future
    t_arrive: float                  # perf_counter at arrival
    t_enqueue: float
    tokenize_s: float
    lengths: list[int]               # what each pair costs a micro-batch, in tokens (Engine._pair_tokens)
    pending: list[int] = field(init=False)    # pair indices not yet taken by a micro-batch, shortest first
    truncated: np.ndarray = field(init=False)  # [n] bool: the document was cut
    query_truncated: bool = field(init=False)
    logits: np.ndarray = field(init=False)
    remaining: int = field(init=False)  # pairs not yet scored
    t_first: float | None = None
    infer_s: float = 0.0
    dropped: DropReason | None = None
    state: Future | None = None      # prefix reuse: the prefix graph's output, computed in the prefix thread

    def __post_init__(self):
        self.pending = sorted(range(len(self.encoded)), key=lambda i: self.lengths[i])
        self.truncated = np.array([e.doc_tokens_dropped > 0 for e in self.encoded], dtype=bool)
        self.query_truncated = bool(self.encoded and self.encoded[0].query_tokens_dropped)
        self.logits = np.empty((len(self.encoded), self.n_labels), dtype=np.float32)
        self.remaining = len(self.encoded)

    @property
    def pending_tokens(self) -> int:
        return sum(self.lengths[i] for i in self.pending)


class Engine:
    """The queue, the batcher thread and admission around one runtime (see the module docstring)."""

    def __init__(self, runtime, metrics: ServeMetrics, *, max_batch_tokens: int | None, max_batch_size: int | None,
                 max_batch_wait_s: float, max_queue_delay_s: float, max_concurrent_requests: int,
                 max_candidates: int, overflow: Overflow, prefix_reuse: bool = True, workers: int = 1):
        self.runtime = runtime
        self.scorer = runtime.scorer
        self.metrics = metrics
        # the device's limits are the runtime's (DESIGN: the engine only reads them); configured ones win
        self.max_batch_tokens = max_batch_tokens or runtime.max_batch_tokens
        self.max_batch_size = max_batch_size or runtime.max_batch_size
        self.max_batch_wait_s = max_batch_wait_s
        self.max_queue_delay_s = max_queue_delay_s
        self.max_concurrent_requests = max_concurrent_requests
        self.max_candidates = max_candidates
        self.overflow = overflow
        self.workers = max(1, int(workers))
        self.prefix = getattr(runtime, "prefix", None) if prefix_reuse else None
        # the runtime's served graph removes padding (fp16-packed): budgets count real tokens (plan_batches);
        # its flag is for the path it serves, so the engine takes it only on that path
        self.packed = bool(getattr(runtime, "packed", False)) and (self.prefix is not None) == (
            getattr(runtime, "prefix", None) is not None)
        self._cond = threading.Condition()
        self._queue: deque[_Job] = deque()   # jobs with pending pairs, oldest first
        self._queued_pairs = 0
        self._queued_tokens = 0
        self._inflight_tokens = 0       # tokens of the micro-batches the workers run now
        self._stopping = False
        # event-loop-thread state: admitted requests and the tokens reserved for those still tokenising
        self._admitted = 0
        self._reserved_tokens = 0
        self.s_per_token = 0.0          # one worker's seconds per token of recent micro-batches (EMA; see _run_batch)
        self.pair_tokens = float(self.scorer.fixed_tokens + self.scorer.spec.max_query_tokens)  # EMA of a pair's length
        self._tokenizer_pool = ThreadPoolExecutor(1, thread_name_prefix="r3edge-tokenize", initializer=lower_priority)
        # prefix reuse: runs each request's prefix graph while its documents are still being tokenised
        self._prefix_pool = (ThreadPoolExecutor(1, thread_name_prefix="r3edge-prefix", initializer=lower_priority)
                             if self.prefix is not None else None)
        self._threads = [threading.Thread(target=self._run, name=f"r3edge-batcher-{k}", daemon=True)
                         for k in range(self.workers)]

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Warm the runtime up (its first calls allocate) and measure the token rate, then start batching."""
        self._warm_up()
        for thread in self._threads:
            thread.start()

    def _warm_up(self) -> None:
        """Allocate what serving needs before the server says SERVING, then measure the token rate.

        Every worker runs a budget's worth of the longest pairs the contract admits at once (the
        runtime's buffers for concurrent micro-batches of the largest shape are allocated now, as
        text-embeddings-inference's warm-up does, not by the first burst of traffic); then pairs of
        ~40 tokens, the length of a forum post's first lines, time the rate, which adapts to the real
        traffic from the first micro-batch on."""
        spec = self.scorer.spec
        longest = self.scorer.encode_batch(["warm " * spec.max_query_tokens], ["up " * spec.max_total_tokens],
                                           overflow="truncate")[0]
        with ThreadPoolExecutor(self.workers, thread_name_prefix="r3edge-warm-up") as pool:
            list(pool.map(lambda _: self._warm_batch(longest), range(self.workers)))
        pair = self.scorer.encode_batch(["warm up the runtime"], ["word " * 24], overflow="truncate")[0]
        for _ in range(3):  # the last call is the steady state
            t = time.perf_counter()
            n = self._warm_batch(pair)
            dt = time.perf_counter() - t
        self.s_per_token = dt / float(n * self._pair_tokens(pair))
        self.metrics.token_rate.set(self.token_rate)

    def _warm_batch(self, pair: Encoded) -> int:
        """Score a budget's worth of copies of ``pair`` through the graphs that will serve; how many."""
        n = max(1, min(self.max_batch_size, self.max_batch_tokens // self._pair_tokens(pair)))
        if self.prefix is not None:  # the single graph stays closed
            score_encoded(self.scorer, None, [pair] * n, max_batch_tokens=self.max_batch_tokens,
                          max_batch_size=self.max_batch_size, prefix=self.prefix)
        else:
            self.runtime.label_logits(*self.scorer.collate([pair] * n))
        return n

    def _pair_tokens(self, pair: Encoded) -> int:
        """The tokens a pair costs a micro-batch: its suffix on the prefix-reuse path."""
        return len(pair.suffix) if self.prefix is not None else len(pair.input_ids)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop batching; requests still queued fail with UNAVAILABLE (a server drains first)."""
        with self._cond:
            self._stopping = True
            left = list(self._queue)
            self._queue.clear()
            self._queued_pairs = self._queued_tokens = 0
            self._cond.notify_all()
        for job in left:
            self._settle(job, Unavailable("server is shutting down", "retry on another replica"))
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout)
        self._tokenizer_pool.shutdown(wait=False, cancel_futures=True)
        if self._prefix_pool is not None:
            self._prefix_pool.shutdown(wait=False, cancel_futures=True)
        self._update_gauges()

    @property
    def token_rate(self) -> float:
        """Tokens per second the engine plans admission with (all workers together)."""
        return self.workers / max(self.s_per_token, 1e-12)

    def seconds_for(self, tokens: float) -> float:
        """Seconds the workers together take for ``tokens`` at the measured rate."""
        return tokens * self.s_per_token / self.workers

    # -- admission and the request's life (event loop thread) --------------------------------
    def expected_wait_s(self) -> float:
        """Seconds until the work queued now has drained, at the measured rate."""
        return self.seconds_for(self._queued_tokens + self._inflight_tokens + self._reserved_tokens)

    def _admit(self, n_pairs: int, deadline: float | None) -> float:
        """Refuse at once when the queue could not take this request in time; else reserve its tokens."""
        if self._stopping:
            raise Unavailable("server is shutting down", "retry on another replica")
        if self._admitted >= self.max_concurrent_requests:
            self._shed("max_requests")
            raise Overloaded(f"server busy: {self._admitted} requests admitted (max_concurrent_requests="
                             f"{self.max_concurrent_requests})", "retry later with back-off",
                             retry_after_s=max(MIN_RETRY_AFTER_S, self.expected_wait_s() / max(self._admitted, 1)))
        wait = self.expected_wait_s()
        own = n_pairs * self.pair_tokens
        if wait > self.max_queue_delay_s:
            self._shed("queue_delay")
            raise Overloaded(f"server busy: the queued work takes ~{wait:.2f} s to drain, over max_queue_delay_s="
                             f"{self.max_queue_delay_s:g}", "retry after the push-back the server sent",
                             retry_after_s=max(MIN_RETRY_AFTER_S, wait - self.max_queue_delay_s))
        if deadline is not None:
            finish = time.monotonic() + wait + self.seconds_for(own)
            if finish > deadline:
                self._shed("deadline")
                raise Overloaded(f"the request could not finish before its deadline (~{finish - deadline:.2f} s late "
                                 "at the current queue)", "send a longer deadline, fewer candidates, or retry later",
                                 retry_after_s=max(MIN_RETRY_AFTER_S, wait))
        self._admitted += 1
        self._reserved_tokens += own
        return own

    def _shed(self, reason: str) -> None:
        self.metrics.observe_shed(reason)

    def check(self, query: str, n_docs: int, docs_field: str) -> None:
        """The checks every front door shares: a query to rank against, and 1 to ``max_candidates`` documents."""
        if not query.strip():
            raise InvalidInput("query is empty", "send the user's query text", field="query")
        if not n_docs:
            raise InvalidInput(f"{docs_field} is empty: send at least one", f"send the {docs_field} to rank",
                               field=docs_field)
        if n_docs > self.max_candidates:
            raise InvalidInput(f"{docs_field} has {n_docs} entries, over max_candidates={self.max_candidates}",
                               "split the request, or start the server with a larger --max-candidates", field=docs_field)

    async def score(self, query: str, docs: Sequence[str], *, deadline: float | None = None,
                    docs_field: str = "documents", text_field: str = "",
                    validate: Callable[[], None] | None = None) -> Scored:
        """Score ``docs`` against ``query`` through the shared queue.

        Only ``len(docs)`` is read before admission: the texts are read, and ``validate`` (the front
        door's checks that read every document, e.g. unique ids) runs, in the tokenizer thread once
        the request is admitted, so a refusal costs no per-document work on the event loop and a lazy
        sequence over a request message is never materialised for a refused request.

        ``deadline`` is a ``time.monotonic()`` time. Raises :class:`InvalidInput` for a request
        :meth:`check` refuses or input the overflow policy rejects (the i-th document named
        ``{docs_field}[i]{text_field}``), :class:`Overloaded` at once when refused for load,
        :class:`DeadlineExceeded` when the deadline passes in the queue; a cancelled caller's pairs
        leave the queue.
        """
        t_arrive = time.perf_counter()
        self.check(query, len(docs), docs_field)
        doc_field = f"{docs_field}[{{}}]{text_field}"
        reserved = self._admit(len(docs), deadline)
        loop = asyncio.get_running_loop()
        job = None
        try:
            try:
                t = time.perf_counter()
                encoded, state = await loop.run_in_executor(self._tokenizer_pool, self._encode, query, docs, doc_field,
                                                            validate)
                tokenize_s = time.perf_counter() - t
            except asyncio.CancelledError:
                # cancelled while tokenising: its pairs never reach the queue, and are counted as dropped
                # like those of a cancelled queued request
                self._count_drop(drop_reason(deadline), len(docs))
                raise
            finally:
                self._reserved_tokens -= reserved
            job = _Job(encoded, self.scorer.spec.n_labels, deadline, loop.create_future(), t_arrive,
                       time.perf_counter(), tokenize_s, [self._pair_tokens(e) for e in encoded], state=state)
            self.pair_tokens += RATE_EMA * (float(np.mean(job.lengths)) - self.pair_tokens)
            self._count_truncation(job)
            self._enqueue(job)
            try:
                logits = await job.future
            except asyncio.CancelledError:
                # gRPC cancels the handler when the client goes away or its deadline passes
                self._drop(job, drop_reason(deadline))
                raise
        finally:
            self._admitted -= 1
            self._update_gauges()
        return self._scored(job, logits)

    def _encode(self, query: str, docs: Sequence[str], doc_field: str,
                validate: Callable[[], None] | None) -> tuple[list[Encoded], Future | None]:
        """The request's encoded pairs; on the prefix-reuse path also its prefix state, as a future: the
        prefix graph runs in the prefix thread while this thread encodes the documents. The prefix is
        :meth:`Scorer.encode_batch`'s own (template head + query as cut, + the template's mid piece),
        which no document changes."""
        if validate is not None:
            validate()
        docs = list(docs)
        state = None
        if self._prefix_pool is not None:  # `check` admitted at least one document
            head = self.scorer.encode_batch([query], [""], overflow=self.overflow)[0].prefix
            state = self._prefix_pool.submit(self.prefix.prefix, np.asarray([head], dtype=np.int64))
        encoded = self.scorer.encode_batch([query] * len(docs), docs, overflow=self.overflow, doc_field=doc_field)
        return encoded, state

    def _count_truncation(self, job: _Job) -> None:
        if job.query_truncated:
            self.metrics.truncated.labels("query").inc()
        if job.truncated.any():
            self.metrics.truncated.labels("document").inc(int(job.truncated.sum()))

    def _scored(self, job: _Job, logits: np.ndarray) -> Scored:
        probs, scores = self.scorer.relevance(logits)
        t_done = time.perf_counter()
        queue_s = (job.t_first or job.t_enqueue) - job.t_enqueue
        total_s = t_done - job.t_arrive
        for phase, s in (("queue", queue_s), ("tokenize", job.tokenize_s), ("infer", job.infer_s), ("total", total_s)):
            self.metrics.duration.labels(phase).observe(s)
        return Scored(probs, scores, job.truncated, job.query_truncated, queue_s * 1e3, job.tokenize_s * 1e3,
                      job.infer_s * 1e3, total_s * 1e3)

    def _enqueue(self, job: _Job) -> None:
        with self._cond:
            if self._stopping:
                raise Unavailable("server is shutting down", "retry on another replica")
            self._queue.append(job)
            self._queued_pairs += len(job.pending)
            self._queued_tokens += job.pending_tokens
            self._cond.notify()
        self._update_gauges()

    def _drop(self, job: _Job, reason: DropReason) -> None:
        """Take a cancelled or expired job's pairs out of the queue and count them."""
        with self._cond:
            if job.dropped is not None or job.remaining == 0:
                return
            self._drop_locked(job, reason)
        self._update_gauges()

    def _drop_locked(self, job: _Job, reason: DropReason) -> None:
        """Mark the job dropped, count it and its pairs never run, and take them out of the queue."""
        job.dropped = reason
        self._count_drop(reason, len(job.pending))
        self._unqueue_locked(job)

    def _count_drop(self, reason: DropReason, pairs: int) -> None:
        """One admitted request dropped, and its ``pairs`` that will never run."""
        self.metrics.dropped_requests.labels(reason).inc()
        self.metrics.dropped_pairs.labels(reason).inc(pairs)

    def _unqueue_locked(self, job: _Job) -> None:
        if job.pending:
            self._queued_pairs -= len(job.pending)
            self._queued_tokens -= job.pending_tokens
            job.pending = []
        if job in self._queue:
            self._queue.remove(job)

    def _update_gauges(self) -> None:
        m = self.metrics
        m.queue_requests.set(self._admitted)
        m.queue_pairs.set(self._queued_pairs)
        m.queue_tokens.set(self._queued_tokens)

    def _settle(self, job: _Job, result: np.ndarray | BaseException) -> None:
        """Resolve the job's future from any thread (a closed loop means nobody is waiting)."""
        def settle():
            if job.future.done():
                return
            if isinstance(result, BaseException):
                job.future.set_exception(result)
            else:
                job.future.set_result(result)
        try:
            job.future.get_loop().call_soon_threadsafe(settle)
        except RuntimeError:
            pass

    # -- the batcher thread -------------------------------------------------------------------
    def _run(self) -> None:
        lower_priority()
        while True:
            with self._cond:
                while not self._stopping and not self._queue:
                    self._cond.wait()
                if self._stopping:
                    return
                self._wait_for_a_fuller_batch_locked()
                self._expire_locked()
                if not self._queue:
                    continue
                batch = self._next_batch_locked()
                if self._queue:  # pairs left: another worker may take the next micro-batch now
                    self._cond.notify()
            try:
                self._run_batch(batch)
            except Exception:  # never let the batcher die: _run_batch settles its jobs itself
                log.exception("batcher: unexpected error")

    def _wait_for_a_fuller_batch_locked(self) -> None:
        """Up to ``max_batch_wait_s`` after the oldest pair arrived, wait for a budget's worth of tokens.

        Not on the prefix-reuse path: its micro-batches hold the oldest request's pairs only, which all
        arrived together, so pairs that arrive later could never join the batch and a wait would only
        delay it (by ``max_batch_wait_s`` whenever a request holds less than a budget: every top-100 under
        the GPU budget, which holds a whole one)."""
        if self.max_batch_wait_s <= 0 or self.prefix is not None:
            return
        until = self._queue[0].t_enqueue + self.max_batch_wait_s
        while not self._stopping and self._queued_tokens < self.max_batch_tokens:
            left = until - time.perf_counter()
            if left <= 0 or not self._queue:
                return
            self._cond.wait(left)

    def _expire_locked(self) -> None:
        now = time.monotonic()
        for job in [j for j in self._queue if j.deadline is not None and now >= j.deadline]:
            self._drop_locked(job, "deadline")
            self._settle(job, DeadlineExceeded("deadline exceeded while queued",
                                               "send a longer deadline, or retry when the server is less busy"))

    def _next_batch_locked(self) -> list[tuple[_Job, int]]:
        """The next micro-batch: ``[(job, pair index), ...]`` (of the oldest job only on the prefix-reuse
        path, whose candidate graph reads one prefix state)."""
        window: list[tuple[_Job, int]] = []
        for job in [self._queue[0]] if self.prefix is not None else self._queue:
            window.extend((job, i) for i in job.pending[: PLANNING_WINDOW - len(window)])
            if len(window) >= PLANNING_WINDOW:
                break
        # window[0] is the oldest job's shortest pending pair: the batch that holds it runs now
        plan = plan_batches([j.lengths[i] for j, i in window], self.max_batch_tokens, self.max_batch_size,
                            padded=not self.packed)
        chosen = [window[k] for k in next(b for b in plan if 0 in b)]
        taken: dict[_Job, set[int]] = {}
        for job, i in chosen:
            taken.setdefault(job, set()).add(i)
        for job, mine in taken.items():
            job.pending = [i for i in job.pending if i not in mine]
            tokens = sum(job.lengths[i] for i in mine)
            self._queued_pairs -= len(mine)
            self._queued_tokens -= tokens
            if not job.pending:
                self._queue.remove(job)
        self._inflight_tokens += self._batch_tokens(chosen)
        return chosen

    @staticmethod
    def _batch_tokens(batch: list[tuple[_Job, int]]) -> int:
        """Tokens of a micro-batch, as counted in flight while it runs."""
        return sum(j.lengths[i] for j, i in batch)

    @staticmethod
    def _prefix_state(job: _Job):
        """The job's prefix state, which :meth:`_encode` started in the prefix thread: every worker waits
        for the same result (its error raised here, so it fails the micro-batch)."""
        return job.state.result()

    def _run_batch(self, batch: list[tuple[_Job, int]]) -> None:
        start = time.perf_counter()
        jobs = list(dict.fromkeys(j for j, _ in batch))  # distinct, in order
        real = self._batch_tokens(batch)  # what _next_batch_locked counted in flight
        for job in jobs:
            if job.t_first is None:
                job.t_first = start
        self._update_gauges()
        try:
            if self.prefix is not None:  # one job (see _next_batch_locked)
                job = jobs[0]
                ids, mask = self.scorer.collate_ids([job.encoded[i].suffix for _, i in batch])
                t_infer = time.perf_counter()
                logits = np.asarray(self.prefix.candidates(self._prefix_state(job), ids, mask), dtype=np.float32)
            else:
                ids, mask = self.scorer.collate([j.encoded[i] for j, i in batch])
                t_infer = time.perf_counter()
                logits = np.asarray(self.runtime.label_logits(ids, mask), dtype=np.float32)
            for row, (job, i) in enumerate(batch):
                job.logits[i] = logits[row]
            pairs, padded = len(batch), int(ids.size)
        except BaseException as exc:
            err = exc if isinstance(exc, R3EdgeError) else R3EdgeError(f"scoring failed: {type(exc).__name__}: {exc}")
            if not isinstance(exc, R3EdgeError):
                log.error("micro-batch failed: %s: %s", type(exc).__name__, exc)
            with self._cond:
                for job in jobs:
                    self._unqueue_locked(job)
                    job.remaining = 0
                self._inflight_tokens -= real
            for job in jobs:
                self._settle(job, err)
            return
        end = time.perf_counter()
        dt, infer_s = end - start, end - t_infer  # the rate counts collation too; inference_ms does not
        done = []
        with self._cond:
            self._inflight_tokens -= real
            # averaged as seconds per token, not tokens per second: a wait is tokens x s/token, and a
            # mean of rates would take many batches to notice a 100x slow-down
            self.s_per_token += RATE_EMA * (dt / max(real, 1) - self.s_per_token)
            for job in jobs:
                job.infer_s += infer_s
                job.remaining -= sum(1 for j, _ in batch if j is job)
                if job.remaining == 0 and job.dropped is None:
                    done.append(job)
        m = self.metrics
        m.token_rate.set(self.token_rate)
        m.batch_pairs.observe(pairs)
        m.batch_padded_tokens.observe(padded)
        m.batch_requests.observe(len(jobs))
        for job in done:
            self._settle(job, job.logits)

