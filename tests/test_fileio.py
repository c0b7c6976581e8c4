"""`r3edge.core.fileio.file_sha256`: the one digest manifests record of an input file (labels'
``pairs_sha256``, ``--only-pairs``, the served model's id), read in blocks."""

from __future__ import annotations

import hashlib
import os

from r3edge.core.fileio import file_sha256


def test_file_sha256_is_the_digest_of_every_block(tmp_path):
    """A file of 2.5 blocks: a digest of the first block only, or of a block read twice, differs."""
    data = os.urandom((5 << 20) // 2)
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
    assert file_sha256(str(path)) == file_sha256(path)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert file_sha256(empty) == hashlib.sha256(b"").hexdigest()
