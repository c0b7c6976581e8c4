"""One error type for everything a user can get wrong.

Every stage raises :class:`R3EdgeError` with the thing that is wrong and the fix, so the CLI can
print one line and exit 2 instead of a traceback, and the server can map it to INVALID_ARGUMENT.
"""

from __future__ import annotations


class R3EdgeError(Exception):
    """A user-facing error: ``what`` is wrong, ``fix`` says how to repair it."""

    def __init__(self, what: str, fix: str | None = None):
        self.what = what
        self.fix = fix
        super().__init__(f"{what}" + (f" — fix: {fix}" if fix else ""))


class MissingExtraError(R3EdgeError):
    """An optional dependency group is not installed."""

    def __init__(self, module: str, extra: str):
        super().__init__(
            f"this command needs the Python package '{module}', which is not installed",
            f"pip install 'r3edge[{extra}]' (on a CPU-only machine run `pip install torch==2.13.0` first)",
        )


def require(module: str, extra: str):
    """Import ``module`` or raise a :class:`MissingExtraError` naming the extra that provides it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(module, extra) from exc
