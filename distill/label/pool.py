"""Several OpenAI-compatible judge servers as one: calls spread by load, a dead server's calls retried on the others.

``r3edge label --base-url A --base-url B`` labels through every server at once. A *call* is one unit of
work pinned to one server: the openai backend makes a pair's requests in one call (generation up to the
score marker, then the logprob read right after it), so both land on the same server and the second reuses
the first's prefix cache. The pool sends each call to the server with the fewest calls in flight (relative
to its limit; every server has its own ``max_in_flight``) and waits while every server is full.

A call that fails in transport (connection refused or reset, a reply cut off, a timeout) or is answered
408/429/5xx marks its server down: the call runs again on another server, and so do the server's other
calls as they fail. A down server gets one trial call after ``backoff_s``, doubling per failed trial up to
``max_backoff_s``; a trial that succeeds brings it back. Other errors (HTTP 400, 404, a reply without
logprobs) are the request's fault, not the server's, and fail the run at once, as with one server. The run
gives up (:class:`Unavailable`) when every server has failed ``retries`` trials in a row, or when one call
has failed ``retries + 1`` times on servers that were up (a request that breaks every server it reaches).

Exactly once. :meth:`ServerPool.map` returns one result per item, in the items' order: a retried call
replaces its failed attempt and is never added beside it, and the labelling run writes a chunk's records
only after every call of the chunk has returned, so the labels directory holds each pair once (checked by
tests/test_label_pool.py with one server killed mid-run). A call whose server died after answering it but
before the answer arrived is computed twice and recorded once: labels are greedy reads, so the two agree.

One URL behind a load balancer is one server here: its ``max_in_flight`` is all the balancer gets, and a
failure is retried on the same URL after the backoff (the balancer picks the replica).

Why not an existing batch engine. vLLM documents Ray Data for multi-replica batch inference. Ray 2.60 is
on the package index here (a 79 MB wheel; not installed), but neither of Ray Data's LLM processors does this job:
``vLLMEngineProcessorConfig`` runs vLLM engines inside Ray actors, in the same interpreter as Ray, instead
of talking to servers someone already runs (vLLM pins its own torch, so r3edge keeps it in another
environment and talks HTTP); ``HttpRequestProcessorConfig`` sends requests to one ``url`` with
``max_retries`` on that url, so a dead server's rows are not moved to another. Both would also need the
judge's two-request read-out, the per-query intent cache and the resumable labels directory rebuilt as
Ray stages. What is needed is least-loaded dispatch and failover over a thread pool, which is this module.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from r3edge.core.errors import InvalidInput, Unavailable

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741

#: calls in flight per server: enough to keep a vLLM server's continuous batching full on CPU and small GPUs
DEFAULT_MAX_IN_FLIGHT = 64


class ServerDown(Exception):
    """Raised by a call when its server failed it (transport error or HTTP 408/429/5xx): retry elsewhere."""

    def __init__(self, url: str, detail: str):
        super().__init__(f"{url}: {detail}")
        self.url, self.detail = url, detail


@dataclass
class _Server:
    url: str
    in_flight: int = 0
    answered: int = 0      # calls this server completed
    failed: int = 0        # calls that failed on it (each was retried)
    strikes: int = 0       # failed outages in a row: the first failure plus every failed trial
    outage: int = 0        # increments when the server is marked down; failures of an older outage add no strike
    down_until: float = 0.0   # monotonic time of its next trial; 0 while up
    last_error: str = ""

    @property
    def up(self) -> bool:
        return self.down_until == 0.0


class ServerPool:
    """Least-loaded dispatch of calls over ``urls``, with failover; :meth:`map` runs calls on a thread pool
    of ``max_in_flight`` threads per server."""

    def __init__(self, urls: Sequence[str], *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, retries: int = 5,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0, log: Callable[[str], None] | None = None):
        urls = [u.rstrip("/") for u in urls]
        if not urls or not all(urls):
            raise InvalidInput("the openai backend needs a server address", "pass --base-url http://HOST:PORT/v1")
        dup = sorted({u for u in urls if urls.count(u) > 1})
        if dup:
            raise InvalidInput(f"--base-url {dup[0]} is given twice", "name each server once")
        if max_in_flight < 1:
            raise InvalidInput(f"--max-in-flight {max_in_flight} must be at least 1", "use e.g. --max-in-flight 64")
        self.servers = [_Server(u) for u in urls]
        self.max_in_flight, self.retries = max_in_flight, retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.log = log or (lambda line: None)
        self._cond = threading.Condition()
        self._closed = False
        self._executor = ThreadPoolExecutor(max_in_flight * len(urls), thread_name_prefix="r3edge-openai")

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def stats(self) -> dict[str, dict]:
        """Per server: calls answered, calls failed (and retried elsewhere), whether it is up now. Calls pinned
        to one server (``only``: the backend's start-up check) are not counted."""
        with self._cond:
            return {s.url: {"answered": s.answered, "failed": s.failed, "up": s.up} for s in self.servers}

    # -- dispatch ---------------------------------------------------------------------------------
    def map(self, fn: Callable[[I, str], T], items: Iterable[I]) -> list[T]:
        """``fn(item, base_url)`` for every item, each as one :meth:`call`; the results in the items' order."""
        return list(self._executor.map(lambda item: self.call(lambda url: fn(item, url)), items))

    def call(self, work: Callable[[str], T], *, only: str | None = None) -> T:
        """``work(base_url)`` on the least-loaded server (or on ``only``); re-run elsewhere while it raises
        :class:`ServerDown`."""
        failures, tally = 0, only is None
        while True:
            server, outage, counted = self._acquire(only)
            try:
                result = work(server.url)
            except ServerDown as exc:
                self._release(server, outage, exc.detail, tally)
                failures += counted
                if failures > self.retries:
                    raise Unavailable(f"one call failed {failures} times on servers that were up; last: {exc}",
                                      "see the servers' logs: a request that breaks every server it reaches") from exc
                continue
            except BaseException:
                self._release(server, outage, None, tally)
                raise
            self._release(server, outage, "", tally)
            return result

    def _acquire(self, only: str | None) -> tuple[_Server, int, bool]:
        """A server with room (an up one below its limit, or a down one due for its single trial call);
        waits while there is none. Returns it, its outage number, and whether a failure counts against the
        call (not for a trial: the server was known to be down)."""
        with self._cond:
            while True:
                if self._closed:
                    raise Unavailable("the labelling run stopped", "see the error above")
                now = time.monotonic()
                pool = [s for s in self.servers if only is None or s.url == only]
                if all(s.strikes > self.retries for s in pool):
                    raise Unavailable(
                        "cannot reach " + ", ".join(f"{s.url} ({s.last_error})" for s in pool)
                        + f": every server failed {self.retries + 1} times in a row",
                        "start the server (e.g. `python -m vllm.entrypoints.openai.api_server --model DIR`), "
                        "or fix or drop that --base-url; a server that is up but answers 5xx is failing on these "
                        "requests: see its log")
                ready = [s for s in pool if (s.up and s.in_flight < self.max_in_flight)
                         or (not s.up and s.down_until <= now and s.in_flight == 0)]
                if ready:
                    best = min(ready, key=lambda s: (s.in_flight, s.answered + s.failed))
                    best.in_flight += 1
                    return best, best.outage, best.up
                due = [s.down_until - now for s in pool if not s.up and s.in_flight == 0]
                self._cond.wait(timeout=max(min(due), 0.001) if due else None)

    def _release(self, server: _Server, outage: int, error: str | None, tally: bool) -> None:
        """``error``: "" the call succeeded; text: the server failed it; None: the call failed on its own."""
        with self._cond:
            server.in_flight -= 1
            if error == "":
                server.answered += tally
                if not server.up:
                    self.log(f"label: {server.url} is back")
                server.strikes, server.down_until = 0, 0.0
            elif error is not None:
                server.failed += tally
                server.last_error = error
                if outage == server.outage:  # the first failure of this outage (or a failed trial): a strike
                    server.strikes += 1
                    server.outage += 1
                    wait = min(self.backoff_s * 2 ** (server.strikes - 1), self.max_backoff_s)
                    server.down_until = time.monotonic() + wait
                    where = "its calls go to the other servers" if len(self.servers) > 1 else "its calls wait"
                    self.log(f"label: {server.url} failed ({error}); {where}, trial again in {wait:.0f} s")
            self._cond.notify_all()
