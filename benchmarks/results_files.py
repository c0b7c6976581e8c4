"""The two files every ``r3edge bench`` tool leaves in its output folder: ``results.json`` (every number, with the
machine) and ``report.md`` (the table a reader opens, printed from those numbers)."""

from __future__ import annotations

import json
from pathlib import Path

from r3edge.core.fileio import atomic_write_text


def write_results(out: str | Path, results: dict, report: str) -> dict[str, Path]:
    """Write OUT/results.json and OUT/report.md, each atomically; ``{"results": path, "report": path}``."""
    out = Path(out)
    paths = {"results": out / "results.json", "report": out / "report.md"}
    atomic_write_text(paths["results"], json.dumps(results, indent=2) + "\n")
    atomic_write_text(paths["report"], report)
    return paths
