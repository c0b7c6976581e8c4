"""A judge benchmark's answered requests on disk, so that a comparison taking hours resumes where it stopped.

On a 2-core CPU one top-100 request to a reasoning judge takes minutes, and a comparison of every seed
judge takes longer than one sitting. So every request served at concurrency 1 is appended here as soon
as it is answered, and every phase at a higher concurrency when it ends: its throughput is one wall
time, so a phase cut short is served again whole. A rerun with the same judge config (its weights'
path), kind of engine, machine (CPU model, SIMD extensions, cores, GPUs: the caller's settings),
queries and request counts reads them back and serves only what is missing; a change to any of them
starts another file, whose first line states those settings. Each answer records when it was measured
and the machine's load average then, because a resumed row's requests were timed at different times of
a shared machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

from r3edge.core.pairs import QueryCandidates


class JudgeJournal:
    """One judge row's answered requests: ``<dir>/<row name>-<settings hash>.jsonl``."""

    def __init__(self, path: Path, settings: dict | None = None):
        self.path = path
        self.settings = settings  # written as the file's first line, so a reader sees what the hash stands for
        self.segment = f"{os.getpid()}-{time.time():.0f}"   # this process's requests, timed as one stretch

    @classmethod
    def open(cls, directory: str | Path, name: str, settings: dict, queries: Sequence[QueryCandidates]) -> JudgeJournal:
        """The journal of ``name`` under these settings (anything that changes what is measured) and queries."""
        key = {"settings": settings, "queries": [[q.qid, [c.docid for c in q.candidates]] for q in queries]}
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
        path = Path(directory) / f"{re.sub(r'[^A-Za-z0-9_.@-]+', '_', name)}-{digest}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file():  # a run killed mid-write leaves a torn last line: drop it, it was never answered
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):
                path.write_bytes(data[: data.rfind(b"\n") + 1])
        return cls(path, settings)

    def _lines(self) -> list[dict]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            out.append(json.loads(line))
        return out

    def first_phase(self) -> tuple[list[dict], float, int]:
        """The concurrency-1 requests answered so far, in order; their wall time, the sum over the runs
        that served them of each run's first start to its last answer (gaps between runs are not
        counted); and how many runs that was."""
        rows = sorted((r for r in self._lines() if r["kind"] == "request"), key=lambda r: r["index"])
        served = [r["request"] for r in rows]
        if [r["index"] for r in rows] != list(range(len(rows))):
            raise ValueError(f"{self.path}: concurrency-1 requests are not numbered 0..{len(rows) - 1}; delete the file")
        spans: dict[str, tuple[float, float]] = {}
        for r in rows:
            start, end = r["finished_at"] - r["request"]["latency_s"], r["finished_at"]
            lo, hi = spans.get(r["segment"], (start, end))
            spans[r["segment"]] = (min(lo, start), max(hi, end))
        return served, sum(hi - lo for lo, hi in spans.values()), len(spans)

    def phases(self) -> dict[int, tuple[list[dict], float]]:
        """Higher-concurrency phases that ran to the end: their requests and wall time."""
        return {r["concurrency"]: (r["requests"], r["wall_s"])
                for r in self._lines() if r["kind"] == "phase"}

    def add_request(self, index: int, request: dict) -> None:
        """Concurrency-1 request number ``index`` (a dict with its ``latency_s``), just answered."""
        self._append({"kind": "request", "index": index, "segment": self.segment, "finished_at": time.time(),
                      "load_1min": os.getloadavg()[0], "request": request})

    def add_phase(self, concurrency: int, served: Sequence[dict], wall_s: float) -> None:
        self._append({"kind": "phase", "concurrency": concurrency, "wall_s": wall_s, "finished_at": time.time(),
                      "load_1min": os.getloadavg()[0], "requests": list(served)})

    def recorded_settings(self) -> dict | None:
        """The settings line a journal starts with (None in journals written before it was added)."""
        return next((r["settings"] for r in self._lines() if r["kind"] == "settings"), None)

    def _append(self, record: dict) -> None:
        new = not self.path.is_file() or self.path.stat().st_size == 0
        with self.path.open("a") as f:
            if new and self.settings is not None:
                f.write(json.dumps({"kind": "settings", "settings": self.settings}, default=str) + "\n")
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
