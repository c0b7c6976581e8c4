"""The serving image's health check: gRPC health of the r3edge server in this container, exit 0 when SERVING.

Docker's ``HEALTHCHECK`` runs it, and so can a Kubernetes ``exec`` probe where the native ``grpc:`` probe
cannot reach the port (kubelet's gRPC probe speaks plain text only, so a TLS-serving pod needs this one;
deploy/k8s/overlays/tls). It asks through :class:`r3edge.api.client.RerankerClient`, the project's client,
on the port and TLS files the server reads from its environment (``R3EDGE_PORT``, ``R3EDGE_TLS_CERT``):

- ``R3EDGE_HEALTHCHECK_HOST`` (default ``127.0.0.1``, or ``localhost`` under TLS: the name the served
  certificate must carry);
- ``R3EDGE_HEALTHCHECK_CA``: the CA that signed the served certificate (default: the served chain itself,
  which works for a self-signed certificate);
- ``R3EDGE_HEALTHCHECK_CERT`` / ``R3EDGE_HEALTHCHECK_KEY``: a client certificate, needed when the server
  requires one (``R3EDGE_TLS_CLIENT_CA``, mutual TLS).

The health service needs no bearer token (the server leaves it open). Exit 1 with one line on stderr
when the server is not SERVING (loading, draining after SIGTERM) or cannot be reached.
"""

from __future__ import annotations

import os
import sys

from r3edge.api.client import RerankerClient
from r3edge.serve.config import ServeConfig


def main() -> int:
    env = os.environ
    port = env.get(ServeConfig.env_name("port")) or ServeConfig.model_fields["port"].default
    tls_cert = env.get(ServeConfig.env_name("tls_cert"))
    host = env.get("R3EDGE_HEALTHCHECK_HOST") or ("localhost" if tls_cert else "127.0.0.1")
    tls = {}
    if tls_cert:
        tls = {"tls_ca": env.get("R3EDGE_HEALTHCHECK_CA") or tls_cert,
               "tls_cert": env.get("R3EDGE_HEALTHCHECK_CERT"), "tls_key": env.get("R3EDGE_HEALTHCHECK_KEY")}
    target = f"{host}:{port}"
    with RerankerClient(target, **tls) as client:
        if client.is_serving(timeout=float(env.get("R3EDGE_HEALTHCHECK_TIMEOUT_S", "3"))):
            return 0
    print(f"r3edge at {target} is not SERVING (loading, draining, or unreachable)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
