"""Atomic outputs, and file digests.

Files are written beside their final name and renamed; directories are built as ``<name>.partial``
and swapped in only when complete, so a later stage never sees half a file or half a directory.
:func:`file_sha256` is the one digest a manifest records of an input file. One implementation of
each, used by every stage.
"""

from __future__ import annotations

import hashlib
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


def file_sha256(path: str | Path) -> str:
    """The file's sha256 (hex), read in 1 MiB blocks so a large file is never held in memory."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
