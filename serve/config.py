"""Server settings: one pydantic model, every field both a CLI flag and an ``R3EDGE_<NAME>`` env var.

Precedence is flag > environment > YAML file (``--config``) > default, as in
text-embeddings-inference, so a container can be configured by env alone and a developer by
flags alone. ``max_candidates`` defaults to 1000: a reranker that rejects top-100 requests (TEI's
``max_client_batch_size=32``) is not a reranker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from r3edge.core.config import resolve_config, validated
from r3edge.core.devices import Device
from r3edge.core.errors import InvalidInput
from r3edge.core.scoring import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_BATCH_TOKENS,
    DEFAULT_OVERFLOW,
    GPU_MAX_BATCH_SIZE,
    GPU_MAX_BATCH_TOKENS,
    Overflow,
)

ENV_PREFIX = "R3EDGE_"
#: Settings that were renamed: the old name as an env variable or a YAML key is an error naming the new
#: one (an unknown env variable would otherwise be ignored silently; an old flag is refused by argparse).
RENAMED = {"truncation": "overflow"}


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    artifact: str = Field(description="artifact directory written by `r3edge export`")
    host: str = Field("127.0.0.1", description="address to bind; 0.0.0.0 to listen on all interfaces (needs TLS, a token "
                      "or --insecure)")
    port: int = Field(50051, ge=0, le=65535, description="gRPC port to bind; 0 picks a free one")
    http_port: int | None = Field(None, ge=0, le=65535, description="also serve HTTP (Cohere-compatible /v1/rerank and "
                                  "/v2/rerank, /health, /metrics) on this port, same engine; 0 picks a free one")
    metrics_port: int | None = Field(None, ge=0, le=65535, description="serve Prometheus /metrics on this port "
                                     "(plain HTTP, no auth; 0 picks a free one)")
    variant: str | None = Field(None, description="model variant in the artifact (fp32, int8, ...); default: on the CPU "
                                "the manifest's default (the fastest variant that passed at export), on a GPU fp16 "
                                "else fp32")
    device: Device = Field("auto", description="where the model runs: 'cpu', 'cuda' (ONNX Runtime's CUDA provider, "
                           "needs onnxruntime-gpu: the serve-gpu extra), 'tensorrt' (ORT's TensorRT provider, "
                           "needs TensorRT's libraries) or 'auto' (cuda when onnxruntime has it and a GPU is visible, "
                           "else cpu); a named device that cannot open stops the start with the reason")
    workers: int | None = Field(None, ge=1, description="batcher threads running micro-batches concurrently on the one "
                                "runtime (its calls are thread-safe); unset: 2, or 1 on a one-CPU machine")
    threads: int | None = Field(None, ge=1, description="intra-op threads of each worker's runtime calls; unset: the "
                                "CPUs this process may use, shared among the workers")
    prefix_reuse: bool = Field(True, description="score a request's shared prefix (a causal student's template head + query, "
                               "a cosine student's query) once "
                               "per request when the artifact has prefix-reuse graphs (`r3edge export --prefix-reuse`)")
    max_batch_tokens: int | None = Field(None, ge=1, description="padded-token budget of one micro-batch; unset: the "
                                         f"runtime's own ({DEFAULT_MAX_BATCH_TOKENS} on CPU, {GPU_MAX_BATCH_TOKENS} when "
                                         "its session runs on a GPU provider)")
    max_batch_size: int | None = Field(None, ge=1, description="pairs in one micro-batch at most; unset: the runtime's "
                                       f"own ({DEFAULT_MAX_BATCH_SIZE} on CPU, {GPU_MAX_BATCH_SIZE} when its session runs on a "
                                       "GPU provider)")
    max_batch_wait_s: float = Field(0.002, ge=0, description="seconds a micro-batch may wait for more pairs (of any "
                                    "request) when the queue holds less than its budget")
    max_queue_delay_s: float = Field(2.0, gt=0, description="refuse a request at once (RESOURCE_EXHAUSTED / HTTP 429, "
                                     "with a retry hint) when the work queued before it would take longer than this "
                                     "to drain at the measured rate")
    max_candidates: int = Field(1000, ge=1, description="candidates in one request at most")
    max_concurrent_requests: int = Field(512, ge=1, description="requests admitted at once (queued or scoring); more -> "
                                         "RESOURCE_EXHAUSTED")
    overflow: Overflow = Field(DEFAULT_OVERFLOW, description="a query or document over the scoring contract's budget: "
                               "'truncate' cuts it to its first tokens (the response says which) or 'reject' refuses "
                               "the request naming it")
    max_message_mb: int = Field(32, ge=1, description="largest request message in MiB")
    grace_period_s: float = Field(10.0, ge=0, description="seconds in-flight requests get to finish on shutdown")
    prestop_delay_s: float = Field(0.0, ge=0, description="on SIGTERM, seconds to keep serving while health reports "
                                   "NOT_SERVING (so load balancers stop routing) before draining")
    tls_cert: str | None = Field(None, description="PEM certificate chain: serve gRPC and HTTP over TLS (with --tls-key)")
    tls_key: str | None = Field(None, description="PEM private key of --tls-cert")
    tls_client_ca: str | None = Field(None, description="PEM CA bundle: require client certificates signed by it (mutual TLS)")
    auth_token: str | None = Field(None, description="bearer token every Rerank/ScorePairs/ModelInfo call and HTTP "
                                   "request must send (Authorization: Bearer ...); health stays open; prefer the env "
                                   "variable or --auth-token-file over a flag")
    auth_token_file: str | None = Field(None, description="file holding bearer tokens, one per line (any of them is accepted)")
    insecure: bool = Field(False, description="allow binding a non-loopback address without TLS and without a token")
    log_format: Literal["text", "json"] = Field("text", description="log lines as text or as JSON objects (with request ids)")

    @classmethod
    def yaml_template(cls) -> str:
        """The shipped ``configs/serve/default.yaml``: every field commented out with its default and
        description, so the file documents the settings without restating a default (a test checks the
        shipped file is this text)."""
        import yaml

        lines = ["# `r3edge serve` settings (`--config default` names this file; copy it to change a value).",
                 "# Generated from r3edge.serve.config.ServeConfig, which holds every default:",
                 "# precedence is flag > R3EDGE_<NAME> env > this file > that default. Every line is a comment.", ""]
        for name, f in cls.model_fields.items():
            value = "" if f.is_required() or f.default is None else " " + yaml.safe_dump(f.default).splitlines()[0]
            flag = "the ARTIFACT argument" if name == "artifact" else f"flag --{name.replace('_', '-')}"
            lines += [f"# {f.description} ({flag}, env {cls.env_name(name)})", f"# {name}:{value}"]
        return "\n".join(lines) + "\n"

    @staticmethod
    def env_name(field: str) -> str:
        return ENV_PREFIX + field.upper()

    @classmethod
    def resolve(cls, flags: Mapping[str, Any], env: Mapping[str, str] | None = None,
                config_file: str | Path | None = None) -> ServeConfig:
        """Merge file, environment and flags (``None`` flags mean "not given")."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        if config_file:
            import yaml

            path = resolve_config(config_file, "serve")
            values.update(yaml.safe_load(path.read_text()) or {})
        for name in cls.model_fields:
            if cls.env_name(name) in env:
                values[name] = env[cls.env_name(name)]
        values.update({k: v for k, v in flags.items() if v is not None and k in cls.model_fields})
        for old, new in RENAMED.items():
            if old in values or cls.env_name(old) in env or flags.get(old) is not None:
                raise InvalidInput(f"serve setting '{old}' is now called '{new}'",
                                   f"use --{new.replace('_', '-')} / {cls.env_name(new)} / the YAML key {new}", field=new)
        return validated(cls, values, lambda field: (
            f"serve setting '{field}'", f"fix --{field.replace('_', '-')} / {cls.env_name(field)} / the YAML key"))
