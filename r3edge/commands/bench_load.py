"""Load on a served artifact over gRPC (r3edge.benchmarks.load_phases): overload (N top-N calls at once: counts by
status, lost calls, admitted p50/p99, how fast refusals come back), cross-request batching, one request at a time,
a concurrency sweep and a soak with the server's RSS drift. Against a running server (--target) or a child
`r3edge serve --artifact` on a free 127.0.0.1 port. Writes OUT/results.json (after every phase) and OUT/report.md."""

from __future__ import annotations

import argparse
import dataclasses


def _plan_fields():
    from r3edge.benchmarks.load_phases import LoadPlan

    return LoadPlan, dataclasses.fields(LoadPlan)


def configure(parser: argparse.ArgumentParser) -> None:
    srv = parser.add_argument_group("server (one of)")
    srv.add_argument("--target", default=None, help="a running server, HOST:PORT")
    srv.add_argument("--artifact", default=None, help="artifact directory served here by a child `r3edge serve`")
    srv.add_argument("--variant", default=None, help="with --artifact: the variant served; unset: the manifest's default")
    srv.add_argument("--serve-flag", action="append", default=[], metavar="NAME=VALUE",
                     help="with --artifact: a `r3edge serve` flag, e.g. max_concurrent_requests=8; repeatable")
    parser.add_argument("--pairs", required=True, help="candidate-list JSONL: each query with its candidates is one request")
    parser.add_argument("--out", default="runs/bench-load", help="output directory")
    plan_cls, fields = _plan_fields()
    phases = parser.add_argument_group("phases (every bound of every phase)")
    for f in fields:
        default = f.default
        if isinstance(default, tuple):
            phases.add_argument(f"--{f.name.replace('_', '-')}", default=",".join(map(str, default)),
                                help=f.metadata["help"] + " (comma-separated)")
        else:
            phases.add_argument(f"--{f.name.replace('_', '-')}", type=type(default), default=default, help=f.metadata["help"])


def plan_of(args: argparse.Namespace):
    from r3edge.core.errors import InvalidInput

    plan_cls, fields = _plan_fields()
    values = {}
    for f in fields:
        value = getattr(args, f.name)
        if isinstance(f.default, tuple):
            kind = type(f.default[0])
            try:
                value = tuple(kind(x) for x in value.split(",") if x.strip())
            except ValueError as exc:
                raise InvalidInput(f"--{f.name.replace('_', '-')} {value!r}: {exc}",
                                   f"give comma-separated values like {','.join(map(str, f.default))}",
                                   field=f.name) from exc
        values[f.name] = value
    return plan_cls(**values)


def serve_flags(items: list[str]) -> dict:
    from r3edge.core.errors import InvalidInput

    flags = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidInput(f"--serve-flag {item!r}", "write NAME=VALUE, e.g. max_concurrent_requests=8",
                               field="serve_flag")
        flags[name.strip().replace("-", "_")] = value
    return flags


def run(args: argparse.Namespace) -> int:
    from r3edge.benchmarks.load_phases import measure
    from r3edge.core.pairs import read_queries

    measure(plan_of(args), read_queries(args.pairs), args.out, target=args.target, artifact=args.artifact,
            variant=args.variant, serve_flags=serve_flags(args.serve_flag))
    report = f"{args.out}/report.md"
    with open(report, encoding="utf-8") as fh:
        print(fh.read())
    print(f"wrote {args.out}/results.json, {report}")
    return 0
