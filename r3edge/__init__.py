"""r3edge: distil a reasoning LLM relevance judge into a fast reranker.

This package holds what every stage shares (the scoring contract, pair files, configs, errors)
and must stay importable without torch: the server imports it. ``from r3edge import Reranker``
scores an exported artifact in-process (:mod:`r3edge.serve.reranker`, the ``serve`` extra); it is
imported on first use, so ``import r3edge`` stays light.
"""

from r3edge.core.version import __version__

__all__ = ["__version__", "Reranker", "Ranked"]


def __getattr__(name: str):
    if name in ("Reranker", "Ranked"):
        from r3edge.serve import reranker

        return getattr(reranker, name)
    raise AttributeError(f"module 'r3edge' has no attribute {name!r}")
