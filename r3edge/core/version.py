"""The installed r3edge's version, read from its package metadata (pyproject.toml is its one home)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("r3edge")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
