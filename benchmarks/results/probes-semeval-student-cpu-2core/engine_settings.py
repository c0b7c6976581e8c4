"""The served default's engine settings against their neighbours, on one artifact, side by side.

`peer_speed.py` put the served SemEval student level with the strongest in-process peer (0.96x, then 1.01x).
This asks whether another setting of the engine would have served it faster on this CPU: the micro-batch
token budget (the CPU default 512 against 256, 1,024, the peer's, and 2,048) and the split of the two cores (2
workers x 1 thread, the default, against 1 worker x 2 threads, as the peer runs). One server per setting, all
up at once and idle between calls; rounds interleaved; concurrency 1; each request's time at the client beside
the server's own timing (tokenise, queue, total), so transport is told apart.

    .venv/bin/python benchmarks/results/probes-semeval-student-cpu-2core/engine_settings.py ARTIFACT HELDOUT.jsonl OUT.json
"""
import json
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

from r3edge.benchmarks.load import run_load
from r3edge.benchmarks.machine import machine_info
from r3edge.benchmarks.systems import serve_artifact
from r3edge.core.pairs import read_queries

SETTINGS = {  # name: `r3edge serve` settings besides the artifact (serve_artifact's threads and limits)
    "256 tokens, 2 x 1": {"max_batch_tokens": 256},
    "default (512 tokens, 2 workers x 1 thread)": {},
    "1,024 tokens, 2 x 1": {"max_batch_tokens": 1024},
    "2,048 tokens, 2 x 1": {"max_batch_tokens": 2048},
    "512 tokens, 1 worker x 2 threads": {"workers": 1, "threads": 2},  # threads unset: the server's own
}
ROUNDS, REQUESTS = 8, 10


def main(artifact: str, heldout: str, out: str) -> None:
    queries = read_queries(Path(heldout))
    with ExitStack() as stack:
        servers = {name: stack.enter_context(serve_artifact(artifact, None, **{"threads": None, **settings}))
                   for name, settings in SETTINGS.items()}  # each yields once SERVING (warmed up)
        for name, target in servers.items():  # and one request each before the rounds
            assert run_load(target, queries[:1], 1, 1, progress=False)["ok"] == 1, name
        rows = {name: [] for name in servers}
        for _round in range(ROUNDS):
            for name, target in servers.items():
                r = run_load(target, queries, REQUESTS, 1, progress=False)
                assert r["ok"] == REQUESTS, (name, r["errors"])
                server = {f"server_{k}_p50_ms": v for k, v in r["server_ms_p50"].items()}
                rows[name].append({"client_p50_ms": r["latency_ms"]["p50"], **server})
    table = {}
    for name, rs in rows.items():
        table[name] = {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]}
        table[name]["client_p50_ms_per_round"] = [round(r["client_p50_ms"], 1) for r in rs]
    result = {"artifact": artifact, "heldout": heldout, "rounds": ROUNDS, "requests_per_round": REQUESTS,
              "concurrency": 1, "machine": machine_info(), "settings": SETTINGS, "rows": table}
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    print("| setting | client p50 ms | server total | tokenise | queue | client per round |")
    print("|---|---:|---:|---:|---:|---|")
    for name, t in table.items():
        print(f"| {name} | {t['client_p50_ms']} | {t['server_total_p50_ms']} | {t['server_tokenize_p50_ms']} | "
              f"{t['server_queue_p50_ms']} | {t['client_p50_ms_per_round']} |")


if __name__ == "__main__":
    main(*sys.argv[1:4])
