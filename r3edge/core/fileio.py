"""Atomic outputs: a later stage never sees half a file or half a directory.

Files are written beside their final name and renamed; directories are built as ``<name>.partial``
and swapped in only when complete. One implementation, used by every stage that writes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def partial_dir(out: str | Path) -> Path:
    """An empty ``<out>.partial`` to build a directory in (left-overs of a killed run are removed)."""
    tmp = Path(out).with_name(Path(out).name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def publish_dir(tmp: str | Path, out: str | Path) -> Path:
    """Swap a completed build directory in under its final name."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    Path(tmp).replace(out)
    return out
