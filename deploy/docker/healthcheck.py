"""The serving image's health check: gRPC health of the r3edge server in this container, exit 0 when SERVING.

Docker's ``HEALTHCHECK`` runs it, and so can a Kubernetes ``exec`` probe where the native ``grpc:`` probe
cannot reach the port (kubelet's gRPC probe speaks plain text only, so a TLS-serving pod needs this one:
deploy/k8s/overlays/tls). It reads the port and TLS files the server reads from its environment
(``R3EDGE_PORT``, which the image sets, and ``R3EDGE_TLS_CERT``), plus:

- ``R3EDGE_HEALTHCHECK_HOST`` (default ``127.0.0.1``, or ``localhost`` under TLS: a name the served
  certificate must carry);
- ``R3EDGE_HEALTHCHECK_CA``: the CA that signed the served certificate (default: the served chain itself,
  which works for a self-signed certificate);
- ``R3EDGE_HEALTHCHECK_CERT`` / ``R3EDGE_HEALTHCHECK_KEY``: a client certificate, needed when the server
  requires one (``R3EDGE_TLS_CLIENT_CA``, mutual TLS).

It imports grpcio and grpcio-health-checking only, not r3edge (whose client and settings cost about two
seconds of imports on a busy 2-core box, too much for a probe run every few seconds). The health service
needs no bearer token (the server leaves it open). Exit 1 with one line on stderr when the server is not
SERVING (loading, draining after SIGTERM) or cannot be reached.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def _read(name: str) -> bytes | None:
    path = os.environ.get(name)
    return Path(path).read_bytes() if path else None


def main() -> int:
    env = os.environ
    port = env.get("R3EDGE_PORT")
    if not port:
        print("R3EDGE_PORT is not set: the image sets it; set it to the server's gRPC port", file=sys.stderr)
        return 1
    tls_cert = env.get("R3EDGE_TLS_CERT")
    target = f"{env.get('R3EDGE_HEALTHCHECK_HOST') or ('localhost' if tls_cert else '127.0.0.1')}:{port}"
    timeout = float(env.get("R3EDGE_HEALTHCHECK_TIMEOUT_S", "3"))
    if tls_cert:
        creds = grpc.ssl_channel_credentials(_read("R3EDGE_HEALTHCHECK_CA") or Path(tls_cert).read_bytes(),
                                             _read("R3EDGE_HEALTHCHECK_KEY"), _read("R3EDGE_HEALTHCHECK_CERT"))
        channel = grpc.secure_channel(target, creds)
    else:
        channel = grpc.insecure_channel(target)
    with channel:
        try:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout).status
        except grpc.RpcError as exc:
            print(f"r3edge at {target}: health check failed: {exc.code().name} {exc.details()}", file=sys.stderr)
            return 1
    if status != health_pb2.HealthCheckResponse.SERVING:
        print(f"r3edge at {target} is {health_pb2.HealthCheckResponse.ServingStatus.Name(status)} "
              "(loading, or draining after SIGTERM)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
