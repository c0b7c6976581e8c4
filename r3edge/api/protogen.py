"""Generate the Python stubs of ``reranker.proto`` (run by ``make proto``; never at import time).

The stubs are committed beside the .proto so that installing or importing r3edge never needs
grpcio-tools; ``tests/test_layout.py`` (``test_committed_grpc_stubs_match_the_proto``) regenerates
them into a temporary directory and fails when the committed files differ, so the .proto stays the
single source of truth. The proto path ``r3edge/api/reranker.proto`` is relative to the repository
root, so protoc emits ``from r3edge.api import reranker_pb2`` and no generated file is edited
afterwards.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

API_DIR = Path(__file__).resolve().parent
SOURCE_ROOT = API_DIR.parents[1]
PROTO = "r3edge/api/reranker.proto"
GENERATED = ("reranker_pb2.py", "reranker_pb2.pyi", "reranker_pb2_grpc.py")


def generate(out_root: str | Path) -> list[Path]:
    """Run protoc on the .proto; the stubs land in ``out_root/r3edge/api/``. Returns their paths."""
    from grpc_tools import protoc  # dev-only dependency

    out_root = Path(out_root)
    (out_root / "r3edge" / "api").mkdir(parents=True, exist_ok=True)
    include = Path(importlib.util.find_spec("grpc_tools").submodule_search_locations[0]) / "_proto"
    rc = protoc.main(["grpc_tools.protoc", f"-I{SOURCE_ROOT}", f"-I{include}", f"--python_out={out_root}",
                      f"--pyi_out={out_root}", f"--grpc_python_out={out_root}", str(SOURCE_ROOT / PROTO)])
    if rc != 0:
        raise RuntimeError(f"protoc failed on {PROTO} (exit {rc})")
    return [out_root / "r3edge" / "api" / name for name in GENERATED]


if __name__ == "__main__":
    paths = generate(SOURCE_ROOT)
    print("\n".join(str(p) for p in paths))
    sys.exit(0)
