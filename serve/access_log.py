"""One log line per answered request, from both front doors, optionally as JSON with a request id.

The id is the caller's ``x-request-id`` (gRPC metadata or HTTP header) when it sends one, so a
request can be followed from the re-rank stage that sent it; otherwise the server makes one. It is
echoed back (gRPC initial metadata, HTTP response header). Successful requests and refusals for load
log at DEBUG (an overloaded server must not add a log line per refusal; ``r3edge_shed_requests_total``
counts them), other refused ones at INFO (one line, never a traceback), r3edge's own failures at ERROR.
"""

from __future__ import annotations

import json
import logging
import os
import time

log = logging.getLogger("r3edge.serve.access")

REQUEST_ID = "x-request-id"
_OK = ("OK", "200", "RESOURCE_EXHAUSTED", "429")
_SERVER_FAULT = ("INTERNAL", "UNKNOWN", "500")


def request_id(given: str | None) -> str:
    """The caller's id when it is a sane token (printable, at most 128 chars), else a fresh one."""
    if given and len(given) <= 128 and given.isprintable():
        return given
    return os.urandom(8).hex()


def log_request(rid: str, method: str, code: str, pairs: int, ms: float, detail: str = "") -> None:
    level = logging.DEBUG if code in _OK else logging.ERROR if code in _SERVER_FAULT else logging.INFO
    if log.isEnabledFor(level):
        log.log(level, "%s %s %s pairs=%d %.1f ms%s", rid, method, code, pairs, ms, f": {detail}" if detail else "",
                extra={"request_id": rid, "method": method, "code": code, "pairs": pairs, "ms": round(ms, 3)})


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...}`` per line, plus the request fields when the record has them."""

    FIELDS = ("request_id", "method", "code", "pairs", "ms")

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        out.update({k: getattr(record, k) for k in self.FIELDS if hasattr(record, k)})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(level: str, fmt: str) -> None:
    """The root handler for `r3edge serve`: text lines or JSON objects."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
