"""Helpers on token-id sequences shared by the stages that reuse a common prefix's key/value cache."""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix_length(rows: Sequence[Sequence[int]], limit: int) -> int:
    """The length of the longest run of tokens every row starts with, at most ``limit`` (0 if negative).

    The labelling backend prefills it once per batch and the cold start runs it once per step;
    ``limit`` keeps what each row still has to feed on its own (its last token, its labelled part).
    """
    limit = max(limit, 0)
    first = rows[0]
    return next((j for j in range(limit) if any(r[j] != first[j] for r in rows)), limit)
