"""``from r3edge import Reranker``: an artifact scored in-process, on the server's own engine.

No server and no torch: the same runtime, device and variant choice, scoring contract, overflow
policy, micro-batching and ranking as ``r3edge serve`` (:mod:`r3edge.serve.loading` builds both
engines), so a score here equals the score the server returns for the same pair. The engine's
coroutine API runs on a private event-loop thread; every public method blocks its caller and may be
called from many threads at once, and their pairs share the engine's one queue and micro-batches,
as concurrent requests to a server do.

Unlike the server, the in-process reranker never refuses work for load: its queue-delay limit is
:data:`IN_PROCESS_QUEUE_DELAY_S`, and :meth:`Reranker.score` splits a large call into requests of at
most ``max_candidates`` pairs, so a caller waits instead of receiving an ``Overloaded`` error.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np

from r3edge.core.errors import InvalidInput, expect_pair, expect_text
from r3edge.serve.config import ServeConfig
from r3edge.serve.engine import Engine, Scored
from r3edge.serve.loading import engine_for, load_runtime_for
from r3edge.serve.metrics import ServeMetrics

#: The in-process engine's admission limit (seconds of queued work): callers wait, nobody is refused.
IN_PROCESS_QUEUE_DELAY_S = 24 * 3600.0


@dataclass(frozen=True)
class Ranked:
    """One document of a :meth:`Reranker.rank` result."""

    index: int                         # its position in the documents passed in
    score: float                       # the expected label value (the served ``score``)
    probabilities: tuple[float, ...]   # per label, in the scorer's label order
    truncated: bool                    # the document was cut to the scoring contract's budget


class Reranker:
    """Rank documents against a query with an ``r3edge export`` artifact, in this process.

    ``variant=None`` and ``device="auto"`` choose as ``r3edge serve`` does (on the CPU the variant
    the export found fastest, on a GPU fp16 else fp32); ``settings`` are any other
    :class:`r3edge.serve.config.ServeConfig` fields (``threads``, ``workers``, ``overflow``,
    ``max_batch_tokens``, ``prefix_reuse``, ...), validated the same way. Close it (or use ``with``)
    to stop its threads.
    """

    def __init__(self, artifact: str | Path, variant: str | None = None, device: str = "auto", **settings: Any):
        unknown = sorted(set(settings) - set(ServeConfig.model_fields) - {"artifact"})
        if unknown:
            raise InvalidInput(f"Reranker takes no setting {', '.join(unknown)}",
                               "pass ServeConfig fields only (threads, workers, overflow, max_batch_tokens, ...)",
                               field=unknown[0])
        settings.setdefault("max_queue_delay_s", IN_PROCESS_QUEUE_DELAY_S)
        self.config = ServeConfig.resolve({"artifact": str(artifact), "variant": variant, "device": device, **settings},
                                          env={})
        self.metrics = ServeMetrics()
        runtime = load_runtime_for(self.config)
        self._engine: Engine = engine_for(self.config, runtime, self.metrics)
        self._engine.start()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="r3edge-reranker", daemon=True)
        self._thread.start()
        self._closed = False

    # -- what is loaded ---------------------------------------------------------------------------
    @property
    def runtime(self):
        return self._engine.runtime

    @property
    def variant(self) -> str:
        return self.runtime.variant

    @property
    def variant_reason(self) -> str:
        return self.runtime.variant_reason

    @property
    def device(self) -> str:
        return self.runtime.device

    @property
    def label_values(self) -> tuple[float, ...]:
        return tuple(self.runtime.scorer.spec.label_values)

    # -- scoring ----------------------------------------------------------------------------------
    def _score(self, query: str, documents: Sequence[str], docs_field: str) -> Scored:
        if self._closed:
            raise InvalidInput("this Reranker is closed", "create a new Reranker")
        future = asyncio.run_coroutine_threadsafe(self._engine.score(query, documents, docs_field=docs_field), self._loop)
        return future.result()

    def rank(self, query: str, documents: Sequence[str], top_k: int | None = 10) -> list[Ranked]:
        """The ``top_k`` best of ``documents`` for ``query`` (all with ``None`` or 0), best first, ties
        in input order: the order of the server's ``Rerank``."""
        if isinstance(documents, str):
            raise InvalidInput("documents is one string", "pass a list of document texts", field="documents")
        if top_k is not None and (not isinstance(top_k, Integral) or isinstance(top_k, bool) or top_k < 0):
            raise InvalidInput(f"top_k is {top_k!r}", "use a positive number, or None/0 for all documents", field="top_k")
        expect_text(query, "query", "pass the user's query text as a str")
        documents = list(documents)
        for i, doc in enumerate(documents):
            expect_text(doc, f"documents[{i}]", "pass each document's text as a str")
        s = self._score(query, documents, "documents")
        return [Ranked(i, float(s.scores[i]), tuple(float(p) for p in s.probs[i]), bool(s.truncated[i]))
                for i in s.ranking(None if top_k is None else int(top_k))]

    def score(self, pairs: Iterable[tuple[str, str]]) -> np.ndarray:
        """Scores of ``(query, document)`` pairs, in their order (float32 ``[n]``). Pairs that share a
        query are sent as one request (the artifact's prefix reuse applies), at most
        ``max_candidates`` documents each, all requests at once."""
        pairs = list(pairs)
        groups: dict[str, list[int]] = {}
        for i, pair in enumerate(pairs):
            expect_pair(pair, f"pairs[{i}]", "(query, document)")
            for k, what in enumerate(("query", "document")):
                expect_text(pair[k], f"pairs[{i}][{k}]", f"pass the {what} as a str")
            groups.setdefault(pair[0], []).append(i)
        step = self.config.max_candidates
        chunks = [(q, idx[k:k + step]) for q, idx in groups.items() for k in range(0, len(idx), step)]
        if self._closed:
            raise InvalidInput("this Reranker is closed", "create a new Reranker")

        async def one(query: str, idx: list[int]) -> Scored:
            try:
                return await self._engine.score(query, [pairs[i][1] for i in idx], docs_field="pairs")
            except InvalidInput as exc:  # name the pair by its place in the caller's list, not in its chunk
                if exc.field == "query":  # the engine's query checks: this chunk's first pair holds it
                    where = f"pairs[{idx[0]}][0]"
                    raise InvalidInput(f"{where}: {exc.what}", exc.fix, field=where) from None
                match = re.match(r"pairs\[(\d+)\]", exc.field or "")
                if not match:
                    raise
                where = f"pairs[{idx[int(match.group(1))]}]"
                raise InvalidInput(exc.what.replace(match.group(0), f"{where}[1]"), exc.fix, field=f"{where}[1]") from None

        async def run_all():
            tasks = [asyncio.ensure_future(one(q, idx)) for q, idx in chunks]
            try:
                return await asyncio.gather(*tasks)
            except BaseException:
                # one request failed: the others leave the engine's queue instead of being scored for nobody
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise

        out = np.empty(len(pairs), dtype=np.float32)
        for (_, idx), s in zip(chunks, asyncio.run_coroutine_threadsafe(run_all(), self._loop).result()):
            out[idx] = s.scores
        return out

    # -- lifecycle --------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._engine.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self.runtime.close()

    def __enter__(self) -> Reranker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Reranker({self.config.artifact!r}, variant={self.variant!r}, device={self.device!r})"


__all__ = ["Reranker", "Ranked", "IN_PROCESS_QUEUE_DELAY_S"]
