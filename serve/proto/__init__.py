"""Python bindings for ``r3edge/v1/reranker.proto``, generated from the .proto on first import.

The .proto is the single source of truth, so generated code is never committed: it is written
next to the .proto (gitignored) when missing or older than the .proto, or, when the package is
installed read-only, into ``$R3EDGE_CACHE/proto/<hash of the .proto>/``. protoc emits
``from r3edge.v1 import reranker_pb2``, which would collide with the real ``r3edge`` package,
so the generated modules are loaded by path under the ``serve.proto.r3edge.v1`` names.

Use::

    from serve.proto import pb2, pb2_grpc
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

PROTO_ROOT = Path(__file__).resolve().parent
PROTO_REL = "r3edge/v1/reranker.proto"
PROTO_FILE = PROTO_ROOT / PROTO_REL
_PKG = "serve.proto.r3edge.v1"
_NAMES = ("reranker_pb2", "reranker_pb2_grpc")


def _fresh(out_dir: Path) -> bool:
    mtime = PROTO_FILE.stat().st_mtime
    return all((out_dir / f"{n}.py").is_file() and (out_dir / f"{n}.py").stat().st_mtime >= mtime for n in _NAMES)


def _generate(out_dir: Path) -> None:
    """Run protoc into a temp dir, then move the files into place (safe against parallel imports)."""
    from grpc_tools import protoc

    inc = Path(importlib.util.find_spec("grpc_tools").submodule_search_locations[0]) / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        rc = protoc.main(["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{inc}", f"--python_out={tmp}",
                          f"--grpc_python_out={tmp}", str(PROTO_FILE)])
        if rc != 0:
            raise RuntimeError(f"protoc failed on {PROTO_FILE} (exit {rc})")
        gen = Path(tmp) / "r3edge" / "v1"
        grpc_src = (gen / "reranker_pb2_grpc.py").read_text()
        (gen / "reranker_pb2_grpc.py").write_text(
            grpc_src.replace("from r3edge.v1 import reranker_pb2", f"from {_PKG} import reranker_pb2")
        )
        for n in _NAMES:
            os.replace(gen / f"{n}.py", out_dir / f"{n}.py")


def _out_dir() -> Path:
    here = PROTO_FILE.parent
    if _fresh(here) or os.access(here, os.W_OK):
        return here
    from r3edge.models import cache_dir  # torch-free

    digest = hashlib.sha256(PROTO_FILE.read_bytes()).hexdigest()[:12]
    return cache_dir() / "proto" / digest


def _load() -> tuple[ModuleType, ModuleType]:
    if f"{_PKG}.reranker_pb2_grpc" in sys.modules:
        return sys.modules[f"{_PKG}.reranker_pb2"], sys.modules[f"{_PKG}.reranker_pb2_grpc"]
    out = _out_dir()
    if not _fresh(out):
        _generate(out)
    import serve.proto.r3edge.v1  # noqa: F401  (parent package for the loaded modules)

    mods = []
    for n in _NAMES:
        spec = importlib.util.spec_from_file_location(f"{_PKG}.{n}", out / f"{n}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        mods.append(mod)
    return mods[0], mods[1]


pb2, pb2_grpc = _load()
SERVICE_NAME = pb2.DESCRIPTOR.services_by_name["Reranker"].full_name

__all__ = ["pb2", "pb2_grpc", "SERVICE_NAME", "PROTO_FILE"]
