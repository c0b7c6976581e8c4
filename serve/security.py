"""Transport security and authentication, shared by the gRPC and HTTP front doors.

TLS (``--tls-cert``/``--tls-key``) and mutual TLS (``--tls-client-ca``) come from the same PEM files
for both doors. Bearer tokens (``--auth-token``, ``R3EDGE_AUTH_TOKEN`` or ``--auth-token-file``) are
compared in constant time; the health service stays open so that load balancers and orchestrators
can probe without a secret. A server that would listen beyond loopback in plain text refuses to
start unless told ``--insecure`` (a bearer token sent in clear is no protection): an open reranker
on a network is a mistake to make on purpose, not by a default.
"""

from __future__ import annotations

import hmac
from pathlib import Path

import grpc

from r3edge.core.errors import InvalidInput, NotFound
from r3edge.core.net import is_loopback
from r3edge.serve.config import ServeConfig

#: gRPC methods that need no token: health checks (load balancers, Kubernetes probes) and reflection
#: (which reveals only the public .proto).
OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def _read(path: str | None, field: str) -> bytes | None:
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        raise NotFound(f"{field} file {path} does not exist", f"pass an existing PEM file to --{field.replace('_', '-')}",
                       field=field)
    return p.read_bytes()


def check_settings(cfg: ServeConfig) -> None:
    """Refuse inconsistent or unsafe settings before anything binds."""
    if bool(cfg.tls_cert) != bool(cfg.tls_key):
        raise InvalidInput("TLS needs both --tls-cert and --tls-key", "pass both PEM files, or neither",
                           field="tls_cert" if not cfg.tls_cert else "tls_key")
    if cfg.tls_client_ca and not cfg.tls_cert:
        raise InvalidInput("--tls-client-ca (mutual TLS) needs the server's own --tls-cert and --tls-key",
                           "add --tls-cert and --tls-key", field="tls_client_ca")
    load_tokens(cfg)  # a missing or unreadable token file fails here, before anything binds
    if not is_loopback(cfg.host) and not cfg.tls_cert and not cfg.insecure:
        raise InvalidInput(f"binding {cfg.host} (beyond loopback) in plain text: requests, and any bearer token, "
                           "would cross the network unencrypted",
                           "add --tls-cert/--tls-key (and --auth-token-file), or pass --insecure on purpose "
                           "(e.g. behind a TLS-terminating proxy)", field="host")


def load_tokens(cfg: ServeConfig) -> tuple[str, ...]:
    """The accepted bearer tokens: ``auth_token`` plus every non-empty line of ``auth_token_file``."""
    tokens = [cfg.auth_token] if cfg.auth_token else []
    raw = _read(cfg.auth_token_file, "auth_token_file")
    if raw is not None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"--auth-token-file {cfg.auth_token_file} is not UTF-8 text",
                               "write one token per line as plain text", field="auth_token_file") from None
        tokens += [line.strip() for line in text.splitlines() if line.strip()]
        if not tokens:
            raise InvalidInput(f"--auth-token-file {cfg.auth_token_file} holds no token",
                               "write one token per line", field="auth_token_file")
    return tuple(tokens)


def token_ok(authorization: str | None, tokens: tuple[str, ...]) -> bool:
    """Whether an ``Authorization`` header value carries one of ``tokens`` (constant-time compare)."""
    if not tokens:
        return True
    if not authorization or not authorization.lower().startswith("bearer "):
        return False
    given = authorization[7:].strip().encode()
    return any(hmac.compare_digest(given, t.encode()) for t in tokens)


def grpc_credentials(cfg: ServeConfig) -> grpc.ServerCredentials | None:
    """TLS server credentials (client certificates required when ``tls_client_ca`` is set), or None."""
    if not cfg.tls_cert:
        return None
    cert, key = _read(cfg.tls_cert, "tls_cert"), _read(cfg.tls_key, "tls_key")
    ca = _read(cfg.tls_client_ca, "tls_client_ca")
    _check_pem(cfg)
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def _check_pem(cfg: ServeConfig) -> None:
    """Parse the PEM files with the standard library first: gRPC reports a bad certificate, a bad key
    or a key of another certificate only as "Failed to bind", naming nothing."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    checks = [("tls_cert", lambda: ctx.load_verify_locations(cafile=cfg.tls_cert)),
              ("tls_client_ca", lambda: cfg.tls_client_ca and ctx.load_verify_locations(cafile=cfg.tls_client_ca)),
              ("tls_key", lambda: ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key))]
    for field, check in checks:
        try:
            check()
        except (ssl.SSLError, ValueError) as exc:
            raise InvalidInput(f"--{field.replace('_', '-')} {getattr(cfg, field)} is not usable: {exc}",
                               "pass a PEM certificate chain, its own private key (unencrypted) and a PEM CA bundle",
                               field=field) from None


def uvicorn_tls(cfg: ServeConfig) -> dict:
    """The same TLS settings as uvicorn.Config keyword arguments."""
    if not cfg.tls_cert:
        return {}
    import ssl

    kw = {"ssl_certfile": cfg.tls_cert, "ssl_keyfile": cfg.tls_key}
    if cfg.tls_client_ca:
        kw |= {"ssl_ca_certs": cfg.tls_client_ca, "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return kw


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """UNAUTHENTICATED for any call but health/reflection without a valid ``authorization: Bearer`` token."""

    def __init__(self, tokens: tuple[str, ...]):
        self.tokens = tokens

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method or ""
        if method.startswith(OPEN_METHOD_PREFIXES):
            return await continuation(handler_call_details)
        auth = dict(handler_call_details.invocation_metadata or ()).get("authorization")
        if token_ok(auth, self.tokens):
            return await continuation(handler_call_details)
        return _deny(handler_call_details)


def _deny(details) -> grpc.RpcMethodHandler:
    missing = "missing" if not dict(details.invocation_metadata or ()).get("authorization") else "invalid"

    async def deny(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                            f"authorization: {missing} bearer token; fix: send metadata 'authorization: Bearer <token>'")

    # the raw body is never parsed for a refused call
    return grpc.unary_unary_rpc_method_handler(deny, request_deserializer=None, response_serializer=None)
