"""One family of typed errors for everything a user or a client can get wrong.

Every error says what is wrong (``what``) and how to repair it (``fix``), and carries an
:class:`ErrorKind`. The CLI prints ``what`` and ``fix`` and exits 2; the server maps the kind to a
gRPC status and an HTTP status in one table each (``r3edge.serve.grpc_api.STATUS_OF``,
``r3edge.serve.http_api.HTTP_STATUS_OF``), so nothing downstream decides a
status by reading a message. Subclasses exist for the kinds callers branch on.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    """What sort of failure it is; decides the gRPC and HTTP status codes and nothing else."""

    INVALID_INPUT = "invalid_input"        # a request, record, file content or flag value is wrong
    NOT_FOUND = "not_found"                # a file, directory, model or config is missing
    FORMAT = "format"                      # an on-disk format or its version does not match this reader
    MISSING_DEPENDENCY = "missing_dependency"  # an optional extra is not installed
    OVERLOADED = "overloaded"              # too much work offered: retry later
    UNAVAILABLE = "unavailable"            # not ready yet or shutting down
    CANCELLED = "cancelled"                # the caller went away
    DEADLINE = "deadline"                  # the caller's deadline passed
    CONFLICT = "conflict"                  # someone else holds the resource (e.g. a labeling lock)
    QUALITY = "quality"                    # a numeric check failed (export parity, label validity)
    INTERNAL = "internal"                  # r3edge itself failed: a bug or a broken environment, not the caller's fault


class R3EdgeError(Exception):
    """A user-facing error: ``what`` is wrong, ``fix`` says how to repair it.

    ``field`` names the offending input (``query``, ``candidates[3].text``, ``--shard``) where
    there is one; messages for clients start with it. A bare ``R3EdgeError`` is r3edge's own
    failure (kind ``INTERNAL``): whoever blames the caller says so by raising :class:`InvalidInput`
    (or another subclass), so a client is never told to fix a request that was fine, and retries
    what it should.
    """

    kind: ErrorKind = ErrorKind.INTERNAL

    def __init__(self, what: str, fix: str | None = None, *, kind: ErrorKind | None = None,
                 field: str | None = None):
        if kind is not None:
            self.kind = kind
        self.what = what
        self.fix = fix
        self.field = field
        super().__init__(f"{what}" + (f" — fix: {fix}" if fix else ""))


class InvalidInput(R3EdgeError):
    """The caller is at fault: a request, record, file content, config field or flag value is wrong."""

    kind = ErrorKind.INVALID_INPUT


class NotFound(R3EdgeError):
    kind = ErrorKind.NOT_FOUND


class FormatError(R3EdgeError):
    """A file written by another (or a future) r3edge, or not by r3edge at all."""

    kind = ErrorKind.FORMAT


class Overloaded(R3EdgeError):
    """Refused on arrival: the work already queued would not drain in time. ``retry_after_s`` is the
    server's estimate of when a retry could be admitted (gRPC push-back, HTTP Retry-After)."""

    kind = ErrorKind.OVERLOADED

    def __init__(self, what: str, fix: str | None = None, *, retry_after_s: float | None = None, **kw):
        super().__init__(what, fix, **kw)
        self.retry_after_s = retry_after_s


class Unavailable(R3EdgeError):
    kind = ErrorKind.UNAVAILABLE


class Cancelled(R3EdgeError):
    kind = ErrorKind.CANCELLED


class DeadlineExceeded(R3EdgeError):
    kind = ErrorKind.DEADLINE


class Conflict(R3EdgeError):
    kind = ErrorKind.CONFLICT


class MissingDependency(R3EdgeError):
    """Something this machine lacks: a package, a build of onnxruntime with a provider, a tool."""

    kind = ErrorKind.MISSING_DEPENDENCY


class MissingExtraError(MissingDependency):
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


def check_format_version(found: object, expected: str, what: str, fix: str) -> None:
    """Refuse a file whose ``format`` field is not ``expected`` (older, newer, or not ours)."""
    if found != expected:
        raise FormatError(f"{what} has format {found!r}; this r3edge reads {expected!r}", fix)


def expect_text(value: object, field: str, fix: str) -> str:
    """``value`` if it is a ``str``, else :class:`InvalidInput` naming ``field``.

    For the Python doors (``Reranker``, the gRPC clients): the server's doors get strings from their
    schemas, but a Python caller can pass ``None`` or a number, which the tokenizer rejects with a
    ``TypeError`` that names no field and protobuf turns (``None``) into an empty text, silently."""
    if not isinstance(value, str):
        raise InvalidInput(f"{field} is {type(value).__name__}, not a string", fix, field=field)
    return value


def expect_pair(value: object, field: str, names: str) -> tuple:
    """``value`` if it is a 2-tuple or 2-list (``names`` says of what, e.g. ``"(id, text)"``), else
    :class:`InvalidInput` naming ``field``; for the same Python doors as :func:`expect_text`."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise InvalidInput(f"{field} is {type(value).__name__}, not a {names} pair", f"pass {names} tuples",
                           field=field)
    return tuple(value)
