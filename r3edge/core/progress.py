"""Progress lines for long jobs: counts, rate and ETA, throttled so logs stay readable."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Prints ``desc: i/total (r/s, ETA mm:ss)`` at most every ``every_s`` seconds, plus a final line.

    Plain lines rather than a redrawn bar, because labelling and benchmarks run under nohup, CI and
    subprocess pipes where carriage returns turn into noise.
    """

    def __init__(self, total: int, desc: str, stream: TextIO | None = None, every_s: float = 2.0, initial: int = 0):
        self.total = max(0, int(total))
        self.desc = desc
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.n = int(initial)
        self._start_n = self.n
        self._t0 = time.perf_counter()
        self._last = self._t0
        self._closed = False
        self.extra = ""

    def update(self, n: int = 1, extra: str = "") -> None:
        """Count ``n`` more done; ``extra`` (e.g. ``"812 tok/s"``) is appended to the next line."""
        self.n += n
        self.extra = extra
        now = time.perf_counter()
        if now - self._last >= self.every_s:
            self._last = now
            self._print(now)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._print(time.perf_counter(), final=True)

    def _print(self, now: float, final: bool = False) -> None:
        elapsed = max(now - self._t0, 1e-9)
        done = self.n - self._start_n
        rate = done / elapsed
        if final:
            tail = f"{rate:.2f}/s, {_mmss(elapsed)} elapsed"
        else:
            left = (self.total - self.n) / rate if rate > 0 else float("inf")
            tail = f"{rate:.2f}/s, ETA {_mmss(left)}"
        extra = f", {self.extra}" if self.extra else ""
        print(f"{self.desc}: {self.n}/{self.total} ({tail}{extra})", file=self.stream, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _mmss(seconds: float) -> str:
    if seconds == float("inf"):
        return "--:--"
    seconds = int(round(seconds))
    return f"{seconds // 60:02d}:{seconds % 60:02d}"
