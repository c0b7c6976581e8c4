"""How fast can any Python gRPC server on this machine refuse a burst? The floor under issue 23's refusal goal.

The same burst as ``r3edge bench load``'s overload phase (``--concurrent`` top-100 Rerank calls leaving through
one barrier from one client channel, :func:`r3edge.benchmarks.load_phases.burst`) is sent, in alternating rounds, to
* ``trivial``: a grpc.aio server in a child process that answers every ``r3edge.v1.Reranker/Rerank`` call with
  RESOURCE_EXHAUSTED at once, reading nothing (no parsing, no model, no queue): what Python gRPC costs alone;
* ``r3edge``: ``r3edge serve ARTIFACT`` in a child process (``--server-args`` passed on as its flags), which admits
  what its queue can drain within ``--max-queue-delay-s`` and refuses the rest;
and the refusals' answer times (timed at the client, as the overload phase does) are reported per round.

    python benchmarks/scripts/refusal_floor.py --artifact runs/serve-bench/artifact \\
        --requests runs/serve-bench/heldout.jsonl --rounds 3 --out runs/refusal-floor

Writes OUT/results.json and prints one line per round. The client runs on the same machine as the servers.
(The committed run, serving-cpu-2core/run4-two-workers/refusal-floor, used serve_load.py's client, since
promoted to ``r3edge bench load``: pre-serialised bodies on sync grpcio threads.)
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


def serve_trivial() -> None:
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
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print("ready", port, flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


def serve_flags(text: str) -> dict[str, str]:
    """``"--workers 2 --max-queue-delay-s 0.5"`` -> ``{"workers": "2", "max_queue_delay_s": "0.5"}`` (flags with values)."""
    words = shlex.split(text)
    if len(words) % 2 or not all(w.startswith("--") for w in words[::2]):
        raise SystemExit(f"--server-args {text!r}: give flags with values, e.g. '--workers 2 --max-queue-delay-s 0.5'")
    return {k[2:].replace("-", "_"): v for k, v in zip(words[::2], words[1::2])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--artifact", default="runs/serve-bench/artifact")
    ap.add_argument("--requests", default="runs/serve-bench/heldout.jsonl")
    ap.add_argument("--concurrent", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--server-args", default="", help="extra flags with values for r3edge serve (one string)")
    ap.add_argument("--settle-s", type=float, default=5.0, help="quiet between bursts (the admitted calls finish)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--serve-trivial", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_trivial:
        serve_trivial()
        return 0

    from r3edge.benchmarks.load import request_candidates
    from r3edge.benchmarks.load_phases import REFUSED, Caller, burst
    from r3edge.benchmarks.machine import machine_info
    from r3edge.benchmarks.systems import serve_artifact
    from r3edge.core.pairs import read_queries
    from r3edge.core.timing import LOAD_KEY, load_average, percentiles

    requests = [(q.query, request_candidates(q)) for q in read_queries(args.requests)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trivial = subprocess.Popen([sys.executable, __file__, "--out", str(out), "--serve-trivial"], stdout=subprocess.PIPE,
                               text=True)
    try:
        ready, port = trivial.stdout.readline().split()
        assert ready == "ready", ready
        with serve_artifact(args.artifact, None, None, **serve_flags(args.server_args)) as address:
            callers = {"trivial": Caller(f"127.0.0.1:{port}", args.timeout), "r3edge": Caller(address, args.timeout)}
            for i in range(3):  # warm the model up
                callers["r3edge"].call(requests[i % len(requests)], 10)
            rounds = []
            for r in range(args.rounds):
                for name, caller in callers.items():
                    time.sleep(args.settle_s)
                    res = burst(caller, requests, args.concurrent, 10, args.timeout)
                    row = {"round": r + 1, "server": name, LOAD_KEY: load_average(),
                           "codes": dict(Counter(code for code, _ in res)),
                           "refused_ms": percentiles([ms for code, ms in res if code == REFUSED])}
                    rounds.append(row)
                    ms = row["refused_ms"]
                    print(f"round {r + 1} {name}: {row['codes']}; refusals p50 {ms['p50']:.1f} / max {ms['max']:.1f} ms "
                          f"(load {row[LOAD_KEY][0]:.2f})", flush=True)
            for caller in callers.values():
                caller.close()
        result = {"machine": machine_info(), "command": shlex.join(sys.argv), "concurrent": args.concurrent,
                  "server_args": args.server_args, "rounds": rounds}
        (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    finally:
        trivial.terminate()
        trivial.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
