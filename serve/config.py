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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from r3edge.core.config import resolve_config, validated
from r3edge.core.scoring import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, GPU_MAX_BATCH_TOKENS

ENV_PREFIX = "R3EDGE_"


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    artifact: str = Field(description="artifact directory written by `r3edge export`")
    host: str = Field("127.0.0.1", description="address to bind; 0.0.0.0 to listen on all interfaces")
    port: int = Field(50051, ge=0, le=65535, description="port to bind; 0 picks a free one")
    variant: str | None = Field(None, description="model variant in the artifact (fp32, int8, ...); default: the manifest's")
    threads: int | None = Field(None, ge=1, description="intra-op threads of the runtime")
    prefix_reuse: bool = Field(True, description="score a causal student's shared prefix (template head + query) once "
                               "per request when the artifact has prefix-reuse graphs (`r3edge export --prefix-reuse`)")
    max_batch_tokens: int | None = Field(None, ge=1, description="padded-token budget of one micro-batch; unset: "
                                         f"{DEFAULT_MAX_BATCH_TOKENS} (measured fastest on CPU), {GPU_MAX_BATCH_TOKENS} "
                                         "when the session runs on a GPU provider")
    max_batch_size: int = Field(DEFAULT_MAX_BATCH_SIZE, ge=1, description="pairs in one micro-batch at most")
    max_candidates: int = Field(1000, ge=1, description="candidates in one request at most")
    max_concurrent_requests: int = Field(2, ge=1, description="requests scored at the same time")
    max_queued_requests: int = Field(32, ge=0, description="requests waiting for a scoring slot; more -> RESOURCE_EXHAUSTED")
    max_message_mb: int = Field(32, ge=1, description="largest request message in MiB")
    grace_period_s: float = Field(10.0, ge=0, description="seconds in-flight requests get to finish on shutdown")

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
        return validated(cls, values, lambda field: (
            f"serve setting '{field}'", f"fix --{field.replace('_', '-')} / {cls.env_name(field)} / the YAML key"))
