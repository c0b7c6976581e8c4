"""How fast can any Python gRPC server on this machine refuse a burst? The floor under issue 23's refusal goal.

The same burst as ``serve_load.py --phases overload`` (``--concurrent`` top-100 Rerank calls leaving through one
barrier, serve_load's own client: one channel, pre-serialised bodies, sync grpcio threads) is sent, in alternating
rounds, to
* ``trivial``: a grpc.aio server in a child process that answers every ``r3edge.v1.Reranker/Rerank`` call with
  RESOURCE_EXHAUSTED at once, reading nothing (no parsing, no model, no queue): what Python gRPC costs alone;
* ``r3edge``: ``r3edge serve ARTIFACT`` in a child process (``--server-args`` passed on), which admits what its
  queue can drain within ``--max-queue-delay-s`` and refuses the rest;
and the refusals' answer times (timed at the client, as the overload phase does) are reported per round.

    python benchmarks/scripts/refusal_floor.py --artifact runs/serve-bench/artifact \\
        --requests runs/serve-bench/heldout.jsonl --rounds 3 --out runs/refusal-floor

Writes OUT/results.json and prints one line per round. The client runs on the same machine as the servers.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import serve_load as sl  # noqa: E402  (the overload phase's client, payloads and server start-up)


def serve_trivial(port: int) -> None:
    """The child process: refuse every Rerank call with RESOURCE_EXHAUSTED, nothing else."""
    import asyncio

    import grpc

    from r3edge.api import SERVICE_NAME

    async def refuse(request, context):
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy")

    async def main():
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, {
            "Rerank": grpc.unary_unary_rpc_method_handler(refuse)}),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


def burst(target, pays, n: int, timeout: float) -> dict:
    res = sl.barrier_burst(target, pays, n, timeout)
    return {"codes": dict(Counter(code for code, _ in res)),
            "refused_ms": sl.summary([ms for code, ms in res if code == sl.REFUSED])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--artifact", default="runs/serve-bench/artifact")
    ap.add_argument("--requests", default="runs/serve-bench/heldout.jsonl")
    ap.add_argument("--concurrent", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--server-args", default="", help="extra flags for r3edge serve (one string)")
    ap.add_argument("--settle-s", type=float, default=5.0, help="quiet between bursts (the admitted calls finish)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--serve-trivial", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_trivial is not None:
        serve_trivial(args.serve_trivial)
        return 0

    from r3edge.api import pb2
    from r3edge.benchmarks.machine import machine_info
    from r3edge.core.pairs import read_queries

    pays = sl.payloads(read_queries(args.requests), pb2, None, 10)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    procs, targets, srv = {}, {}, None
    try:
        port = sl.free_port()
        procs["trivial"] = subprocess.Popen([sys.executable, __file__, "--out", str(out), "--serve-trivial", str(port)],
                                            stdout=subprocess.PIPE, text=True)
        assert procs["trivial"].stdout.readline().strip() == "ready"
        targets["trivial"] = sl.Target(f"127.0.0.1:{port}", args.timeout)
        args.ready_s = 300.0
        srv = sl.start_server("new", args, out, None)
        targets["r3edge"] = sl.Target(srv.address, args.timeout)
        sl.warm(targets["r3edge"], pays)
        rounds = []
        for r in range(args.rounds):
            for name, t in targets.items():
                time.sleep(args.settle_s)
                row = {"round": r + 1, "server": name, "load": sl.load_avg(), **burst(t, pays, args.concurrent, args.timeout)}
                rounds.append(row)
                ms = row["refused_ms"]
                print(f"round {r + 1} {name}: {row['codes']}; refusals p50 {ms['p50']:.1f} / max {ms['max']:.1f} ms "
                      f"(load {row['load']:.2f})", flush=True)
        result = {"machine": machine_info(), "command": shlex.join(sys.argv), "concurrent": args.concurrent,
                  "server_args": args.server_args, "rounds": rounds}
        (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    finally:
        for t in targets.values():
            t.close()
        for p in procs.values():
            p.terminate()
            p.wait(30)
        if srv is not None:
            srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
