"""Serve an artifact over gRPC: Rerank (top-k), ScorePairs, ModelInfo, health and reflection.

Every flag can also be set as an environment variable R3EDGE_<FLAG> (e.g. R3EDGE_PORT=50052,
R3EDGE_MAX_CANDIDATES=1000) or in a YAML file (--config configs/serve/default.yaml); flags win
over the environment, which wins over the file. Blocks until SIGINT/SIGTERM, then reports
NOT_SERVING and drains in-flight requests for --grace-period-s.
"""

from __future__ import annotations

import argparse

# name -> (type, help); defaults live in serve/config.py (ServeConfig) so there is one source.
FLAGS: dict[str, tuple[type, str]] = {
    "host": (str, "address to bind (default 127.0.0.1)"),
    "port": (int, "port to bind, 0 = any free port (default 50051)"),
    "variant": (str, "artifact variant: fp32, int8, ... (default: the manifest's)"),
    "backend": (str, "onnxruntime (default) or torch (a student directory; imports torch)"),
    "threads": (int, "intra-op threads of the runtime"),
    "max_batch_tokens": (int, "padded-token budget per micro-batch (default 8192)"),
    "max_batch_size": (int, "pairs per micro-batch at most (default 64)"),
    "max_candidates": (int, "candidates per request at most (default 1000)"),
    "max_concurrent_requests": (int, "requests scored at once (default 2)"),
    "max_queued_requests": (int, "requests waiting for a slot; beyond -> RESOURCE_EXHAUSTED (default 32)"),
    "max_message_mb": (int, "largest message in MiB (default 32)"),
    "grace_period_s": (float, "seconds to drain in-flight requests on shutdown (default 10)"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", nargs="?", default=None,
                        help="artifact directory from `r3edge export` (env R3EDGE_ARTIFACT)")
    parser.add_argument("--config", default=None, help="YAML file of settings (configs/serve/default.yaml)")
    for name, (typ, text) in FLAGS.items():
        kw = {"choices": ["onnxruntime", "torch"]} if name == "backend" else {}
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=typ, default=None,
                            help=f"{text}; env R3EDGE_{name.upper()}", **kw)
    parser.add_argument("--log-level", default="INFO", help="logging level")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from serve.config import ServeConfig

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    flags = {name: getattr(args, name) for name in FLAGS}
    flags["artifact"] = args.artifact
    cfg = ServeConfig.resolve(flags, config_file=args.config)

    from serve.server import serve_until_signal

    asyncio.run(serve_until_signal(cfg))
    return 0
