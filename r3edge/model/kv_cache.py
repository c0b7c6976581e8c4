"""transformers' name for a model's key/value cache, as the installed transformers spells it.

transformers 5.x renamed the ``past_key_values`` argument and output field to ``cache``: 5.24 still takes
the old name with a FutureWarning, and says it goes in 5.40.0 for ``forward`` and 6.0.0 for ``generate``.
The lent GPU machines run their image's own transformers, which may predate the rename, so the name is
read from the installed library once instead of assumed. Every place that hands a cache to a model or
reads one from its output goes through :func:`cache_kwargs` and :func:`cache_of`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any


@functools.cache
def cache_name() -> str:
    """``"cache"`` where transformers' model outputs hold the cache under that name, else ``"past_key_values"``."""
    from transformers.modeling_outputs import BaseModelOutputWithPast

    return "cache" if "cache" in {f.name for f in dataclasses.fields(BaseModelOutputWithPast)} else "past_key_values"


def cache_kwargs(cache: Any) -> dict[str, Any]:
    """The keyword that passes ``cache`` to a model's ``forward`` or ``generate``."""
    return {cache_name(): cache}


def cache_of(output: Any) -> Any:
    """The cache a model's ``forward`` or ``generate`` returned (``use_cache=True``)."""
    return getattr(output, cache_name())
