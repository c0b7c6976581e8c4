"""Serve an artifact over gRPC (Rerank, ScorePairs, ModelInfo, health, reflection) and, with
--http-port, over HTTP (Cohere-compatible /v1/rerank and /v2/rerank), both on one scoring engine.

Every flag can also be set as an environment variable R3EDGE_<FLAG> (e.g. R3EDGE_PORT=50052,
R3EDGE_MAX_CANDIDATES=1000) or in a YAML file (--config default, or a path); flags win
over the environment, which wins over the file. Blocks until SIGINT/SIGTERM, then reports
NOT_SERVING, keeps serving for --prestop-delay-s, then drains in-flight requests for --grace-period-s.
"""

from __future__ import annotations

import argparse


def _fields():
    """Every ServeConfig field but the artifact: the flags are derived, so help and defaults live once."""
    from r3edge.serve.config import ServeConfig  # pydantic only: cheap enough for --help

    return {name: f for name, f in ServeConfig.model_fields.items() if name != "artifact"}


def configure(parser: argparse.ArgumentParser) -> None:
    from typing import Literal, get_args, get_origin

    from r3edge.serve.config import ServeConfig

    parser.add_argument("artifact", nargs="?", default=None,
                        help="artifact directory from `r3edge export` (env R3EDGE_ARTIFACT)")
    parser.add_argument("--config", default=None,
                        help="settings file: a YAML path or a shipped name (default = configs/serve/default.yaml)")
    for name, field in _fields().items():
        # values stay strings here, as env values do; ServeConfig validates both the same way
        kw = {"choices": list(get_args(field.annotation))} if get_origin(field.annotation) is Literal else {}
        if field.annotation is bool:  # `--insecure` alone means true; `--prefix-reuse false` still parses
            kw = {"nargs": "?", "const": "true"}
        default = f" (default {field.default})" if field.default is not None else ""
        # SUPPRESS: an absent flag is "not given" (env / YAML / ServeConfig decide), not a default of None
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default=argparse.SUPPRESS,
                            help=f"{field.description}{default}; env {ServeConfig.env_name(name)}", **kw)
    parser.add_argument("--log-level", default="INFO", help="logging level")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from r3edge.serve.access_log import configure_logging
    from r3edge.serve.config import ServeConfig

    flags = {name: getattr(args, name, None) for name in _fields()}
    flags["artifact"] = args.artifact
    cfg = ServeConfig.resolve(flags, config_file=args.config)
    configure_logging(args.log_level, cfg.log_format)

    from r3edge.serve.server import serve_until_signal

    asyncio.run(serve_until_signal(cfg))
    return 0
