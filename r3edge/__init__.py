"""r3edge: distil a reasoning LLM relevance judge into a fast reranker.

This package holds what every stage shares (the scoring contract, pair files, configs, errors)
and must stay importable without torch: the server imports it.
"""

__version__ = "0.1.0"
