"""Load on `r3edge serve` through gRPC only: overload, cross-request batching, one request at a time, a
concurrency sweep and a soak, this checkout's server ("new") against the server of an older commit
("baseline"), both started here as child processes on free 127.0.0.1 ports (issue 23's "Done when").

    python benchmarks/scripts/serve_artifact.py --out runs/serve-bench          # the artifact + requests
    python benchmarks/scripts/serve_load.py --artifact runs/serve-bench/artifact \\
        --requests runs/serve-bench/heldout.jsonl --out runs/serve-bench/load [--phases overload,batching,...]

Servers:
* new — ``r3edge serve ARTIFACT --host 127.0.0.1 --port P [--server-args ...]``, the r3edge beside this
  interpreter (the project venv's, i.e. this checkout);
* baseline — ``--baseline-commit`` (default db80abf, the commit before the serving rewrite) extracted with
  ``git archive`` and installed with ``pip install --no-deps --no-build-isolation --target DIR`` into DIR
  (the venv is not touched), run as ``PYTHONPATH=DIR python -P -m r3edge.cli serve ...`` from DIR: -P and that
  working directory keep the checkout's own r3edge (the editable install, or ``./r3edge`` from the current
  directory) from shadowing it. The modules a baseline process imports are checked to come from DIR.

Phases (``--phases``, each bounded in requests and seconds; the request file's top-100s, top_k 10):
* overload — ``--overload-concurrent`` (100) top-100 Rerank calls sent at once: counts by status code, calls not
  answered (lost: no status before the client deadline, or the connection dropped), admitted p50/p99, refusal
  (RESOURCE_EXHAUSTED) answer time p50/max, server RSS before/after; goals of issue 23 judged;
* batching — ``--batching-clients`` (16) closed-loop clients sending top-10 requests (the first 10 candidates of
  each request) for ``--batching-s`` per segment, baseline and new interleaved (baseline, new, baseline, ...):
  pairs/s each and new/baseline (goal >= 1.5x);
* single — one top-100 at a time, ``--single-requests`` per segment, baseline and new interleaved: p50/p95 and
  new/baseline p50 (goal: no slower than baseline + 5%);
* sweep — closed loop at ``--sweep-concurrency`` (1,2,4,8,16) and one open-loop Poisson arrival rate at
  ``--sweep-open-factor`` x the best closed-loop request rate: p50/p95/p99, requests/s, pairs/s, status codes;
* soak — open loop (Poisson) at ``--soak-fraction`` (0.5) of the capacity measured by a short closed-loop run
  first, for ``--soak-s``: per-window (``--soak-window-s``, 60) p50/p99 and RSS, RSS growth % (goal < 5%),
  last/first window p99 (goal: within 20%).
Open-loop latency is counted from each request's scheduled send time (no coordinated omission). Server RSS is
read from /proc/PID/status (the server process and its children). The client runs on the same machine as the
server; its CPU time per phase is recorded. Writes OUT/results.json (after every phase) and OUT/report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

#: statuses that mean the call got no answer from the server (its connection failed or the client gave up); a
#: DEADLINE_EXCEEDED counts as lost only when it came at the client's own deadline (a server may answer with it sooner)
LOST_CODES = ("UNAVAILABLE", "CANCELLED", "CLIENT_ERROR")
REFUSED = "RESOURCE_EXHAUSTED"
MODULES_CHECKED = ("r3edge", "r3edge.cli", "r3edge.serve.server", "r3edge.core.scoring", "r3edge.api")
#: set on SIGTERM/SIGINT: callers stop, open channels are closed (their in-flight calls end), the report is written
STOP = threading.Event()
TARGETS: list = []


def on_signal(signum, frame) -> None:
    STOP.set()
    for t in TARGETS:
        t.close()
    raise KeyboardInterrupt(signal.Signals(signum).name)


#: run by the server's interpreter, cwd and PYTHONPATH: the files those modules really come from
IMPORT_CHECK = ("import importlib, json; print(json.dumps({m: importlib.import_module(m).__file__ for m in "
                + repr(MODULES_CHECKED) + "}))")


def load_avg() -> float:
    return round(os.getloadavg()[0], 2)


def pct(values, q):
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else None


def summary(values_ms) -> dict:
    return {"n": len(values_ms), "p50": pct(values_ms, 50), "p95": pct(values_ms, 95), "p99": pct(values_ms, 99),
            "mean": float(np.mean(values_ms)) if len(values_ms) else None,
            "max": float(np.max(values_ms)) if len(values_ms) else None}


def rss_mb(pid: int) -> float | None:
    """VmRSS of ``pid`` plus every descendant (a server that forks workers is measured whole)."""
    total, seen, todo = 0.0, set(), [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/status", encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", encoding="utf-8") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            if p == pid:
                return None
    return round(total, 1)


def die_with_parent() -> None:
    """In the server child (Linux): SIGTERM it when this script dies, even by SIGKILL, so no server outlives a run."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ticker:
    """Prints one progress line every ``every`` seconds: done, rate, elapsed, ETA from the request and time bounds."""

    def __init__(self, label: str, total: int | None, seconds: float | None, every: float = 10.0):
        self.label, self.total, self.seconds, self.every = label, total, seconds, every
        self.done = self.failed = 0
        self.lock = threading.Lock()
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def add(self, ok: bool = True) -> None:
        with self.lock:
            self.done += 1
            self.failed += not ok

    def _line(self) -> str:
        el = time.perf_counter() - self.t0
        rate = self.done / el if el > 0 else 0.0
        etas = []
        if self.total and rate > 0:
            etas.append((self.total - self.done) / rate)
        if self.seconds:
            etas.append(self.seconds - el)
        eta = max(0.0, min(etas)) if etas else float("nan")
        of = f"/{self.total}" if self.total else ""
        return (f"  [{self.label}] {self.done}{of} requests ({self.failed} not OK), {rate:.2f} req/s, {el:.0f} s elapsed, "
                f"ETA {eta:.0f} s, load {load_avg()}")

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            print(self._line(), flush=True)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class Target:
    """One server over raw gRPC: requests are serialised once, responses parsed only for their result count."""

    def __init__(self, address: str, timeout: float):
        import grpc

        from r3edge.api import SERVICE_NAME, pb2

        self.grpc, self.pb2, self.address, self.timeout = grpc, pb2, address, timeout
        TARGETS.append(self)
        mib = 64 << 20
        self.channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", mib),
                                                               ("grpc.max_send_message_length", mib)])
        self.rerank = self.channel.unary_unary(f"/{SERVICE_NAME}/Rerank")  # bytes in, bytes out
        self.model_info_call = self.channel.unary_unary(
            f"/{SERVICE_NAME}/ModelInfo", request_serializer=pb2.ModelInfoRequest.SerializeToString,
            response_deserializer=pb2.ModelInfoResponse.FromString)

    def call(self, payload: tuple[bytes, int, int], timeout: float | None = None) -> tuple[str, float]:
        """(status name, ms). A response with the wrong number of results counts as BAD_ANSWER."""
        body, n_pairs, want = payload
        t = time.perf_counter()
        try:
            raw = self.rerank(body, timeout=timeout or self.timeout)
        except self.grpc.RpcError as exc:
            code = exc.code().name if exc.code() is not None else "CLIENT_ERROR"
        except Exception:  # a client-side failure is a lost call: counted, never raised
            code = "CLIENT_ERROR"
        else:
            code = "OK" if len(self.pb2.RerankResponse.FromString(raw).results) == want else "BAD_ANSWER"
        return code, (time.perf_counter() - t) * 1e3

    def close(self) -> None:
        self.channel.close()


def payloads(queries, pb2, n_candidates: int | None, top_k: int) -> list[tuple[bytes, int, int]]:
    out = []
    for q in queries:
        cands = q.candidates[:n_candidates] if n_candidates else q.candidates
        req = pb2.RerankRequest(query=q.query, top_k=top_k,
                                candidates=[pb2.Candidate(id=c.docid, text=c.text) for c in cands])
        out.append((req.SerializeToString(), len(cands), min(top_k, len(cands)) if top_k > 0 else len(cands)))
    return out


def tally(records) -> dict:
    """records: (t_send_s, ms, code, pairs) -> latency of OK calls, status counts, rates over the span."""
    ok = [ms for _, ms, code, _ in records if code == "OK"]
    codes = Counter(code for _, _, code, _ in records)
    if records:
        span = max(t + ms / 1e3 for t, ms, _, _ in records) - min(t for t, _, _, _ in records)
    else:
        span = 0.0
    pairs = sum(p for _, _, code, p in records if code == "OK")
    return {"requests": len(records), "codes": dict(codes), "latency_ms": summary(ok), "wall_s": span,
            "requests_per_s": len(ok) / span if span > 0 else None, "pairs_per_s": pairs / span if span > 0 else None}


def closed_loop(target: Target, pays, concurrency: int, max_requests: int, max_s: float, label: str,
                progress_s: float, backoff_s: float = 0.0) -> dict:
    """``concurrency`` callers, each sending its next request when the last returns, until either bound.

    A caller whose call failed waits ``backoff_s`` first (a real client backs off; without it a refused caller
    spins, and on a small machine its client CPU is taken from the server it measures)."""
    records, lock = [], threading.Lock()
    counter = iter(range(max_requests))
    ticker = Ticker(label, max_requests, max_s, progress_s)
    t0 = time.perf_counter()
    end = t0 + max_s
    cpu0 = time.process_time()

    def worker(w: int) -> None:
        k = w
        while time.perf_counter() < end and not STOP.is_set():
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t = time.perf_counter()
            code, ms = target.call(pays[(i + k) % len(pays)])
            with lock:
                records.append((t - t0, ms, code, pays[(i + k) % len(pays)][1]))
            ticker.add(code == "OK")
            if code != "OK" and backoff_s > 0:
                time.sleep(backoff_s)

    try:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(worker, range(concurrency)))
    finally:
        ticker.close()
    res = tally(records)
    res.update(concurrency=concurrency, bound_requests=max_requests, bound_s=max_s, backoff_after_failure_s=backoff_s,
               client_cpu_s=round(time.process_time() - cpu0, 2))
    return res


def open_loop(target: Target, pays, rate: float, duration_s: float, seed: int, label: str, progress_s: float,
              timeout: float) -> tuple[dict, list]:
    """Poisson arrivals at ``rate``/s for ``duration_s``; latency from each scheduled send time."""
    rnd = random.Random(seed)
    times, t = [], rnd.expovariate(rate)
    while t < duration_s:
        times.append(t)
        t += rnd.expovariate(rate)
    records, lock = [], threading.Lock()
    ticker = Ticker(label, len(times), duration_s, progress_s)
    late = []
    cpu0 = time.process_time()
    t0 = time.perf_counter()

    def fire(i: int, sched: float) -> None:
        pay = pays[i % len(pays)]
        start = time.perf_counter()
        late.append((start - t0 - sched) * 1e3)
        code, ms = target.call(pay, timeout=timeout)
        total = ms + (start - t0 - sched) * 1e3
        rec = (sched, total, code, pay[1])
        with lock:
            records.append(rec)
        ticker.add(code == "OK")

    # enough threads that a slow server never delays a send (a send waiting for a thread is still timed from its schedule)
    workers = int(min(512, max(16, rate * (timeout + 1))))
    try:
        with ThreadPoolExecutor(workers) as pool:
            for i, sched in enumerate(times):
                if STOP.wait(max(0.0, t0 + sched - time.perf_counter())):
                    break
                pool.submit(fire, i, sched)
            STOP.wait(max(0.0, t0 + duration_s - time.perf_counter()))  # the run lasts its duration, arrivals or not
    finally:
        ticker.close()
    res = tally(records)
    res.update(rate_per_s=rate, duration_s=duration_s, scheduled=len(times), client_cpu_s=round(time.process_time() - cpu0, 2),
               send_lag_ms=summary(late))
    return res, records


# -- servers ----------------------------------------------------------------------------------------------


def install_baseline(commit: str, site: Path | None, work: Path) -> dict:
    """``git archive COMMIT`` -> pip --target DIR (no deps, no build isolation): the venv is untouched."""
    full = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{commit}^{{commit}}"],
                          capture_output=True, text=True, check=True).stdout.strip()
    site = (Path(site) if site else work / f"baseline-{full[:12]}" / "site").resolve()  # PYTHONPATH, used from another cwd
    marker = site / ".serve_load_commit"
    if not (marker.is_file() and marker.read_text().strip() == full):
        print(f"installing baseline {full[:12]} into {site} (git archive + pip --target, no deps)", flush=True)
        with tempfile.TemporaryDirectory(prefix="r3edge-baseline-src-") as src:
            archive = subprocess.Popen(["git", "-C", str(REPO), "archive", full], stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", src], stdin=archive.stdout, check=True)
            if archive.wait() != 0:
                raise SystemExit(f"git archive {full} failed")
            if site.exists():
                subprocess.run(["rm", "-rf", str(site)], check=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                            "--no-compile", "--target", str(site), src], check=True)
        marker.write_text(full + "\n")
    # what a baseline process really imports, from the same interpreter, flags, cwd and PYTHONPATH as the server
    code = IMPORT_CHECK
    files = json.loads(subprocess.run([sys.executable, "-P", "-c", code], cwd=site, env={**os.environ, "PYTHONPATH": str(site)},
                                      capture_output=True, text=True, check=True).stdout)
    foreign = {m: f for m, f in files.items() if not Path(f).resolve().is_relative_to(site.resolve())}
    if foreign:
        raise SystemExit(f"the baseline install at {site} does not shadow this checkout: {foreign}")
    return {"commit": full, "site": str(site), "module_files": files}


def new_code_files() -> dict:
    code = IMPORT_CHECK
    out = subprocess.run([sys.executable, "-c", code], cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return {"commit": head, "dirty": bool(dirty), "module_files": json.loads(out.stdout)}


class Server:
    def __init__(self, role: str, cmd: list[str], cwd: Path, env: dict, log_path: Path, ready_s: float):
        self.role, self.cmd, self.log_path = role, cmd, log_path
        self.port = int(cmd[cmd.index("--port") + 1])
        self.address = f"127.0.0.1:{self.port}"
        self.log = open(log_path, "w", encoding="utf-8")  # closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=die_with_parent)
        self.info = self._wait_ready(ready_s)

    def _wait_ready(self, ready_s: float) -> dict:
        import grpc
        from google.protobuf.json_format import MessageToDict
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        from r3edge.api import pb2, pb2_grpc

        end = time.monotonic() + ready_s
        with grpc.insecure_channel(self.address) as ch:
            health, stub = health_pb2_grpc.HealthStub(ch), pb2_grpc.RerankerStub(ch)
            while time.monotonic() < end:
                if self.proc.poll() is not None:
                    raise SystemExit(f"{self.role} server exited ({self.proc.returncode}):\n{self.tail()}")
                try:
                    if health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status == \
                            health_pb2.HealthCheckResponse.SERVING:
                        info = stub.ModelInfo(pb2.ModelInfoRequest(), timeout=10)
                        return MessageToDict(info, preserving_proto_field_name=True)
                except grpc.RpcError:
                    pass
                time.sleep(0.3)
        raise SystemExit(f"{self.role} server not SERVING after {ready_s:.0f} s:\n{self.tail()}")

    def tail(self, n: int = 30) -> str:
        self.log.flush()
        return "".join(self.log_path.read_text(errors="replace").splitlines(keepends=True)[-n:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def start_server(role: str, args, out: Path, baseline: dict | None) -> Server:
    port = free_port()
    common = [str(Path(args.artifact).resolve()), "--host", "127.0.0.1", "--port", str(port)]
    if role == "new":
        exe = Path(sys.executable).parent / "r3edge"
        cmd = ([str(exe)] if exe.is_file() else [sys.executable, "-m", "r3edge"]) + ["serve", *common, *shlex.split(args.server_args)]
        cwd, env = REPO, dict(os.environ)
    else:
        cmd = [sys.executable, "-P", "-m", "r3edge.cli", "serve", *common, *shlex.split(args.baseline_server_args)]
        cwd, env = Path(baseline["site"]), {**os.environ, "PYTHONPATH": baseline["site"]}
    print(f"starting {role}: {shlex.join(cmd)}" + (f"  (cwd {cwd}, PYTHONPATH={env['PYTHONPATH']})" if role != "new" else ""),
          flush=True)
    srv = Server(role, cmd, cwd, env, out / f"server-{role}.log", args.ready_s)
    print(f"  {role} SERVING on {srv.address} (pid {srv.proc.pid}, variant {srv.info.get('variant')}, "
          f"RSS {rss_mb(srv.proc.pid)} MB)", flush=True)
    return srv


# -- phases -----------------------------------------------------------------------------------------------


def warm(target: Target, pays, n: int = 3) -> None:
    for i in range(n):
        target.call(pays[i % len(pays)])


def barrier_burst(t: Target, pays, n: int, timeout: float) -> list[tuple[str, float]]:
    """``n`` calls (the payloads in turn) that all leave at one instant: (status name, ms) each."""
    batch = [pays[i % len(pays)] for i in range(n)]
    barrier = threading.Barrier(n)

    def one(pay):
        barrier.wait()  # every call leaves at once
        return t.call(pay, timeout=timeout)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, batch))


def phase_overload(srv: Server, t: Target, top100, args) -> dict:
    pid = srv.proc.pid
    warm(t, top100)
    service = [ms for code, ms in (t.call(top100[i % len(top100)]) for i in range(args.service_requests)) if code == "OK"]
    rss0 = rss_mb(pid)
    n = args.overload_concurrent
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    res = barrier_burst(t, top100, n, args.overload_timeout)
    wall = time.perf_counter() - t0
    rss1 = rss_mb(pid)
    time.sleep(args.settle_s)
    rss2 = rss_mb(pid)
    codes = Counter(c for c, _ in res)
    ok = [ms for c, ms in res if c == "OK"]
    refused = [ms for c, ms in res if c == REFUSED]
    other = {c: summary([ms for cc, ms in res if cc == c]) for c in codes if c not in ("OK", REFUSED)}
    lost = sum(1 for c, ms in res if c in LOST_CODES or (c == "DEADLINE_EXCEEDED" and ms >= 990 * args.overload_timeout))
    alive_code, _ = t.call(top100[0])
    return {
        "concurrent": n, "client_timeout_s": args.overload_timeout, "codes": dict(codes), "lost": lost,
        "answered": n - lost, "admitted_ms": summary(ok), "refused_ms": summary(refused), "other_codes_ms": other,
        "service_time_ms": summary(service), "wall_s": wall, "client_cpu_s": round(time.process_time() - cpu0, 2),
        "rss_mb": {"before": rss0, "after": rss1, f"after_{args.settle_s:g}s": rss2},
        "rss_growth_pct": 100 * (rss1 - rss0) / rss0 if rss0 and rss1 else None,
        "server_alive_after": srv.alive(), "call_after": alive_code,
    }


def interleaved(targets: dict, rounds: int, fn) -> dict:
    segs = {"baseline": [], "new": []}
    for r in range(rounds):
        for role in ("baseline", "new"):
            time.sleep(1.0)  # the other server's threads park
            segs[role].append(fn(role, targets[role], r))
    return segs


def phase_batching(servers, targets, reqs, args) -> dict:
    top10 = reqs["top10"]
    for role in ("baseline", "new"):
        warm(targets[role], top10, 8)

    def seg(role, t, r):
        return closed_loop(t, top10, args.batching_clients, args.batching_max_requests, args.batching_s,
                           f"batching {role} round {r + 1}", args.progress_s, args.backoff_ms / 1e3)

    segs = interleaved(targets, args.rounds, seg)
    out = {"clients": args.batching_clients, "candidates_per_request": args.batching_candidates, "segments": segs}
    for role, rows in segs.items():
        pairs = sum((r["pairs_per_s"] or 0) * r["wall_s"] for r in rows)
        wall = sum(r["wall_s"] for r in rows)
        lat = [r["latency_ms"]["p50"] for r in rows if r["latency_ms"]["p50"] is not None]
        codes = Counter()
        for r in rows:
            codes.update(r["codes"])
        out[role] = {"pairs_per_s": pairs / wall if wall else None, "segment_pairs_per_s": [r["pairs_per_s"] for r in rows],
                     "segment_p50_ms": lat, "codes": dict(codes)}
    b, n = out["baseline"]["pairs_per_s"], out["new"]["pairs_per_s"]
    out["ratio_new_over_baseline"] = n / b if b and n else None
    return out


def phase_single(servers, targets, reqs, args) -> dict:
    top100 = reqs["top100"]
    for role in ("baseline", "new"):
        warm(targets[role], top100)

    def seg(role, t, r):
        lat, codes = [], Counter()
        ticker = Ticker(f"single {role} round {r + 1}", args.single_requests, args.single_s, args.progress_s)
        end = time.perf_counter() + args.single_s
        for i in range(args.single_requests):
            if time.perf_counter() >= end or STOP.is_set():
                break
            time.sleep(args.single_pause_s)
            code, ms = t.call(top100[(i + r) % len(top100)])
            codes[code] += 1
            if code == "OK":
                lat.append(ms)
            ticker.add(code == "OK")
        ticker.close()
        return {"latency_ms": summary(lat), "codes": dict(codes), "samples_ms": lat}

    segs = interleaved(targets, args.rounds, seg)
    out = {"segments": {role: [{k: v for k, v in s.items() if k != "samples_ms"} for s in rows] for role, rows in segs.items()}}
    for role, rows in segs.items():
        out[role] = {"latency_ms": summary([ms for s in rows for ms in s["samples_ms"]])}
    b, n = out["baseline"]["latency_ms"], out["new"]["latency_ms"]
    out["ratio_p50_new_over_baseline"] = n["p50"] / b["p50"] if b["p50"] and n["p50"] else None
    out["ratio_p95_new_over_baseline"] = n["p95"] / b["p95"] if b["p95"] and n["p95"] else None
    return out


def phase_sweep(srv: Server, t: Target, top100, args) -> dict:
    warm(t, top100)
    levels = []
    for c in [int(x) for x in args.sweep_concurrency.split(",") if x]:
        time.sleep(1.0)
        row = closed_loop(t, top100, c, args.sweep_requests, args.sweep_s, f"sweep {srv.role} c={c}", args.progress_s,
                          args.backoff_ms / 1e3)
        row["rss_mb"] = rss_mb(srv.proc.pid)
        levels.append(row)
    best = max((r["requests_per_s"] or 0) for r in levels)
    out = {"closed_loop": levels, "capacity_requests_per_s": best}
    if best > 0 and args.sweep_open_s > 0:
        time.sleep(1.0)
        rate = args.sweep_open_factor * best
        res, _ = open_loop(t, top100, rate, args.sweep_open_s, args.seed, f"sweep {srv.role} open {rate:.2f}/s",
                           args.progress_s, args.open_timeout)
        res["factor_of_capacity"] = args.sweep_open_factor
        res["rss_mb"] = rss_mb(srv.proc.pid)
        out["open_loop"] = res
    return out


def phase_soak(srv: Server, t: Target, top100, args) -> dict:
    warm(t, top100)
    cap = closed_loop(t, top100, args.capacity_concurrency, args.capacity_requests, args.capacity_s,
                      f"soak {srv.role} capacity", args.progress_s, args.backoff_ms / 1e3)
    capacity = cap["requests_per_s"] or 0
    rate = args.soak_fraction * capacity
    out = {"capacity_run": cap, "capacity_requests_per_s": capacity, "fraction": args.soak_fraction, "rate_per_s": rate}
    if rate <= 0:
        out["error"] = "no capacity measured"
        return out
    time.sleep(1.0)
    rss_samples, stop = [], threading.Event()
    t0 = time.perf_counter()

    def sample():
        while True:
            rss_samples.append((time.perf_counter() - t0, rss_mb(srv.proc.pid)))
            if stop.wait(1.0):
                return

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        res, records = open_loop(t, top100, rate, args.soak_s, args.seed + 1, f"soak {srv.role} {rate:.2f}/s",
                                 args.progress_s, args.open_timeout)
    finally:
        stop.set()
        th.join()
    windows = []
    w = args.soak_window_s
    for k in range(int(np.ceil(args.soak_s / w))):
        lo, hi = k * w, min((k + 1) * w, args.soak_s)
        recs = [r for r in records if lo <= r[0] < hi]
        rss = [m for s, m in rss_samples if lo <= s < hi + 1 and m is not None]
        windows.append({"start_s": lo, "end_s": hi, **{k2: v for k2, v in tally(recs).items() if k2 != "wall_s"},
                        "rss_mb_end": rss[-1] if rss else None, "rss_mb_max": max(rss) if rss else None})
    rss_all = [m for _, m in rss_samples if m is not None]
    out.update(result=res, windows=windows, rss_mb_start=rss_all[0] if rss_all else None,
               rss_mb_end=rss_all[-1] if rss_all else None, rss_mb_max=max(rss_all) if rss_all else None)
    if rss_all:
        out["rss_growth_pct"] = 100 * (rss_all[-1] - rss_all[0]) / rss_all[0]
        first_end = windows[0]["rss_mb_end"]
        out["rss_growth_after_first_window_pct"] = 100 * (rss_all[-1] - first_end) / first_end if first_end else None
    p99s = [wd["latency_ms"]["p99"] for wd in windows]
    if len(windows) >= 2 and p99s[0] and p99s[-1]:
        out["p99_last_over_first"] = p99s[-1] / p99s[0]
    out["server_alive_after"] = srv.alive()
    return out


# -- goals and report -------------------------------------------------------------------------------------


def goals(results: dict) -> list[dict]:
    """Issue 23's "Done when" numbers, judged from the results only (None = not measured)."""
    g = []
    ph = results["phases"]

    def add(phase, goal, value, target, met, detail=""):
        g.append({"phase": phase, "goal": goal, "value": value, "target": target, "met": met, "detail": detail})

    for role, o in (ph.get("overload") or {}).items():
        p = f"overload ({role})"
        add(p, "every call answered (OK or a status, none lost)", o["answered"], o["concurrent"], o["lost"] == 0,
            f"{o['answered']} of {o['concurrent']} answered; codes {o['codes']}")
        delay = o.get("max_queue_delay_ms")
        svc = o["service_time_ms"]["p50"]
        p99 = o["admitted_ms"]["p99"]
        if delay is not None and svc is not None and p99 is not None:
            lim = delay + 2 * svc
            add(p, "admitted p99 <= max queue delay + 2 x one request's service time", p99, lim, p99 <= lim,
                f"max queue delay {delay:.0f} ms ({o.get('max_queue_delay_source')}), service time p50 {svc:.0f} ms")
        else:
            add(p, "admitted p99 <= max queue delay + 2 x one request's service time", p99, None, None,
                "not judged: the server's maximum queue delay is unknown (pass --max-queue-delay-ms)" if delay is None
                else "not judged: no admitted call")
        rmax = o["refused_ms"]["max"]
        add(p, "refusals answered in <= 50 ms (max)", rmax, 50.0, None if rmax is None else rmax <= 50.0,
            f"{o['refused_ms']['n']} refusals" + (f", p50 {o['refused_ms']['p50']:.1f} ms (timed at the client)" if rmax is not None
                                                  else " (none to judge)"))
        add(p, "RSS growth <= 20%", o["rss_growth_pct"], 20.0, None if o["rss_growth_pct"] is None else o["rss_growth_pct"] <= 20.0,
            f"{o['rss_mb']['before']} -> {o['rss_mb']['after']} MB")
    b = ph.get("batching")
    if b:
        r = b["ratio_new_over_baseline"]
        add("batching", f"{b['clients']} clients x top-{b['candidates_per_request']}: new pairs/s >= 1.5 x baseline", r, 1.5,
            None if r is None else r >= 1.5,
            f"new {b['new']['pairs_per_s']:.1f} vs baseline {b['baseline']['pairs_per_s']:.1f} pairs/s")
    s = ph.get("single")
    if s:
        r = s["ratio_p50_new_over_baseline"]
        add("single", "one top-100 at a time: new p50 no slower than baseline (ratio <= 1.05)", r, 1.05,
            None if r is None else r <= 1.05,
            f"new p50 {s['new']['latency_ms']['p50']:.1f} ms vs baseline {s['baseline']['latency_ms']['p50']:.1f} ms")
    for role, k in (ph.get("soak") or {}).items():
        if "rss_growth_pct" in k:
            add(f"soak ({role})", "RSS growth < 5%", k["rss_growth_pct"], 5.0, k["rss_growth_pct"] < 5.0,
                f"{k['rss_mb_start']} -> {k['rss_mb_end']} MB over {k['result']['duration_s']:.0f} s")
        r = k.get("p99_last_over_first")
        add(f"soak ({role})", "p99 stable: last vs first window within 20%", r, "0.8-1.2",
            None if r is None else 0.8 <= r <= 1.2, "needs a p99 in both the first and the last window" if r is None else "")
        if k.get("result", {}).get("duration_s", 0) < 600:
            g[-1]["detail"] += f" (soak ran {k['result']['duration_s']:.0f} s; the goal asks >= 600 s)"
    return g


def f(x, nd=1):
    if x is None:
        return "–"
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def verdict(met):
    return "not judged" if met is None else ("met" if met else "missed")


def write_report(results: dict, out: Path) -> Path:
    m = results["machine"]
    lines = ["# Serving load: new vs baseline", "",
             f"Machine: {m['cpu']} ({', '.join(m['cpu_flags']) or 'no AVX2+'}), {m['cores_usable']} usable of "
             f"{m['cores_logical']} logical cores, {m['ram_gib']} GiB; {m['os']}; Python {m['python']}; "
             f"onnxruntime {m['versions'].get('onnxruntime')}, grpcio {m['versions'].get('grpcio')}. "
             f"Started {m['timestamp']}; the client ran on the same machine.", ""]
    if results.get("interrupted"):
        it = results["interrupted"]
        lines += [f"**Interrupted** ({it['by']}) after {it['at_s']:.0f} s: phases finished "
                  f"{', '.join(it['phases_done']) or 'none'}; of the phase running then, only the servers it had finished are shown.", ""]
    s = results["settings"]
    lines += [f"Artifact `{s['artifact']}`; requests `{s['requests']}` ({s['n_requests']} requests of "
              f"{s['candidates_per_request']:.0f} candidates, top_k {s['top_k']})."]
    for role, srv in results["servers"].items():
        info = srv.get("model_info", {})
        lines.append(f"- **{role}**: commit `{srv['code']['commit'][:12]}`{' (uncommitted changes)' if srv['code'].get('dirty') else ''}, "
                     f"`{srv['command']}`; ModelInfo: artifact `{info.get('artifact')}`, variant {info.get('variant')}, "
                     f"runtime {info.get('runtime')}, limits {info.get('limits')}; r3edge.serve.server imported from "
                     f"`{srv['code']['module_files'].get('r3edge.serve.server')}`; RSS when ready {srv.get('rss_mb_ready')} MB; "
                     f"alive at the end: {srv.get('alive_at_end')}.")
    lines += ["", "## Goals (issue 23)", "", "| phase | goal | measured | target | verdict |", "|---|---|---|---|---|"]
    for gl in results.get("goals", []):
        val = f(gl["value"], 2) if isinstance(gl["value"], float) else f(gl["value"])
        tgt = f(gl["target"], 2) if isinstance(gl["target"], float) else f(gl["target"])
        detail = f": {gl['detail']}" if gl["detail"] else ""
        lines.append(f"| {gl['phase']} | {gl['goal']} | {val} | {tgt} | {verdict(gl['met'])}{detail} |")
    ph = results["phases"]
    if ph.get("overload"):
        lines += ["", "## Overload", "", "| server | calls | status codes | lost | admitted p50 / p99 ms | refusal p50 / max ms "
                  "| one request alone p50 ms | RSS before → after MB | growth | alive after |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for role, o in ph["overload"].items():
            lines.append(f"| {role} | {o['concurrent']} | {o['codes']} | {o['lost']} | {f(o['admitted_ms']['p50'], 0)} / "
                         f"{f(o['admitted_ms']['p99'], 0)} | {f(o['refused_ms']['p50'], 1)} / {f(o['refused_ms']['max'], 1)} | "
                         f"{f(o['service_time_ms']['p50'], 1)} | {o['rss_mb']['before']} → {o['rss_mb']['after']} | "
                         f"{f(o['rss_growth_pct'], 1)}% | {o['server_alive_after']} |")
    b = ph.get("batching")
    if b:
        lines += ["", f"## Cross-request batching ({b['clients']} closed-loop clients, top-{b['candidates_per_request']} requests)", "",
                  "| server | pairs/s | per segment pairs/s | per segment p50 ms | status codes | client CPU s |",
                  "|---|---|---|---|---|---|"]
        for role in ("baseline", "new"):
            r = b[role]
            lines.append(f"| {role} | {f(r['pairs_per_s'])} | {', '.join(f(x) for x in r['segment_pairs_per_s'])} | "
                         f"{', '.join(f(x) for x in r['segment_p50_ms'])} | {r['codes']} | "
                         f"{f(sum(x['client_cpu_s'] for x in b['segments'][role]), 1)} |")
        seg_s = b["segments"]["new"][0]["bound_s"] if b["segments"]["new"] else None
        lines.append(f"\nnew / baseline: {f(b['ratio_new_over_baseline'], 2)}x; {len(b['segments']['new'])} segments of "
                     f"{f(seg_s, 0)} s per server, interleaved baseline, new, ...; a client whose call was not OK waited "
                     f"{f(b['segments']['new'][0]['backoff_after_failure_s'] * 1e3 if b['segments']['new'] else None, 0)} ms "
                     "before its next call.")
    s1 = ph.get("single")
    if s1:
        lines += ["", "## One top-100 at a time", "", "| server | n | p50 ms | p95 ms |", "|---|---|---|---|"]
        for role in ("baseline", "new"):
            lt = s1[role]["latency_ms"]
            lines.append(f"| {role} | {lt['n']} | {f(lt['p50'])} | {f(lt['p95'])} |")
        lines.append(f"\nnew / baseline: p50 {f(s1['ratio_p50_new_over_baseline'], 3)}, p95 {f(s1['ratio_p95_new_over_baseline'], 3)}.")
    for role, sw in (ph.get("sweep") or {}).items():
        lines += ["", f"## Sweep ({role})", "",
                  "| load | requests | p50 ms | p95 ms | p99 ms | requests/s | pairs/s | status codes | RSS MB |",
                  "|---|---|---|---|---|---|---|---|---|"]
        rows = [(f"closed, concurrency {r['concurrency']}", r) for r in sw["closed_loop"]]
        if sw.get("open_loop"):
            o = sw["open_loop"]
            rows.append((f"open, Poisson {o['rate_per_s']:.2f}/s ({o['factor_of_capacity']:g}x capacity)", o))
        for name, r in rows:
            lt = r["latency_ms"]
            lines.append(f"| {name} | {r['requests']} | {f(lt['p50'])} | {f(lt['p95'])} | {f(lt['p99'])} | "
                         f"{f(r['requests_per_s'], 2)} | {f(r['pairs_per_s'])} | {r['codes']} | {f(r.get('rss_mb'))} |")
    for role, k in (ph.get("soak") or {}).items():
        lines += ["", f"## Soak ({role})", ""]
        if "windows" not in k:
            lines.append(f"Not run: {k.get('error')}.")
            continue
        lines += [f"Capacity {k['capacity_requests_per_s']:.2f} requests/s (closed loop, concurrency "
                  f"{k['capacity_run']['concurrency']}, {k['capacity_run']['wall_s']:.0f} s); open loop at "
                  f"{k['fraction']:g} of it = {k['rate_per_s']:.2f}/s for {k['result']['duration_s']:.0f} s; "
                  f"RSS {k['rss_mb_start']} → {k['rss_mb_end']} MB ({f(k.get('rss_growth_pct'), 2)}%; "
                  f"{f(k.get('rss_growth_after_first_window_pct'), 2)}% after the first window), max {k['rss_mb_max']} MB; "
                  f"last/first window p99 {f(k.get('p99_last_over_first'), 3)}.", "",
                  "| window s | requests | p50 ms | p99 ms | status codes | RSS MB (end) |", "|---|---|---|---|---|---|"]
        for w in k["windows"]:
            lines.append(f"| {w['start_s']:.0f}–{w['end_s']:.0f} | {w['requests']} | {f(w['latency_ms']['p50'])} | "
                         f"{f(w['latency_ms']['p99'])} | {w['codes']} | {f(w['rss_mb_end'])} |")
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def queue_delay_of(info: dict, given: float | None) -> tuple[float | None, str | None]:
    if given is not None:
        return given, "--max-queue-delay-ms"
    for k, v in (info.get("limits") or {}).items():
        if "queue_delay" in k:
            return (float(v) * 1000 if k.endswith("_s") else float(v)), f"ModelInfo.limits.{k}"
    return None, None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", default="runs/serve-bench/artifact")
    ap.add_argument("--requests", default="runs/serve-bench/heldout.jsonl", help="candidate-list JSONL of top-100 requests")
    ap.add_argument("--out", default="runs/serve-bench/load")
    ap.add_argument("--phases", default="overload,batching,single,sweep,soak")
    ap.add_argument("--roles", default="new", help="servers the overload, sweep and soak phases load (new, baseline or both)")
    ap.add_argument("--server-args", default="", help="extra flags for the new server (one string)")
    ap.add_argument("--baseline-server-args", default="", help="extra flags for the baseline server (one string)")
    ap.add_argument("--baseline-commit", default="db80abf", help="commit of the baseline server")
    ap.add_argument("--baseline-site", default=None, help="install dir of the baseline (default OUT/../baseline-SHA/site, reused)")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=120.0, help="client deadline of closed-loop calls, s")
    ap.add_argument("--backoff-ms", type=float, default=100.0,
                    help="a closed-loop client whose call was not OK (e.g. refused) waits this long before its next one")
    ap.add_argument("--ready-s", type=float, default=300.0, help="seconds a server gets to report SERVING")
    ap.add_argument("--progress-s", type=float, default=10.0, help="seconds between progress lines")
    ap.add_argument("--seed", type=int, default=0)
    g = ap.add_argument_group("overload")
    g.add_argument("--overload-concurrent", type=int, default=100)
    g.add_argument("--overload-timeout", type=float, default=300.0, help="client deadline, s (stress_probe.py's 300)")
    g.add_argument("--service-requests", type=int, default=5, help="top-100s sent alone first: one request's service time")
    g.add_argument("--max-queue-delay-ms", type=float, default=None,
                   help="the new server's configured maximum queue delay (default: a *queue_delay* field of ModelInfo.limits)")
    g.add_argument("--settle-s", type=float, default=2.0, help="RSS is read again this long after the burst")
    g = ap.add_argument_group("batching and single (baseline and new interleaved)")
    g.add_argument("--rounds", type=int, default=2, help="segments per server, interleaved baseline, new, baseline, new, ...")
    g.add_argument("--batching-clients", type=int, default=16)
    g.add_argument("--batching-candidates", type=int, default=10, help="first N candidates of each request")
    g.add_argument("--batching-s", type=float, default=60.0, help="seconds per segment")
    g.add_argument("--batching-max-requests", type=int, default=100_000, help="requests per segment at most")
    g.add_argument("--single-requests", type=int, default=30, help="requests per segment")
    g.add_argument("--single-s", type=float, default=120.0, help="seconds per segment at most")
    g.add_argument("--single-pause-s", type=float, default=0.1, help="quiet before each request")
    g = ap.add_argument_group("sweep")
    g.add_argument("--sweep-concurrency", default="1,2,4,8,16")
    g.add_argument("--sweep-requests", type=int, default=60, help="requests per level at most")
    g.add_argument("--sweep-s", type=float, default=60.0, help="seconds per level at most")
    g.add_argument("--sweep-open-factor", type=float, default=1.5, help="open-loop rate as a multiple of the best closed-loop rate")
    g.add_argument("--sweep-open-s", type=float, default=30.0, help="seconds of open-loop arrivals (0: skip)")
    g.add_argument("--open-timeout", type=float, default=30.0, help="client deadline of open-loop calls, s")
    g = ap.add_argument_group("soak")
    g.add_argument("--soak-s", type=float, default=600.0)
    g.add_argument("--soak-fraction", type=float, default=0.5)
    g.add_argument("--soak-window-s", type=float, default=60.0)
    g.add_argument("--capacity-concurrency", type=int, default=8)
    g.add_argument("--capacity-s", type=float, default=30.0)
    g.add_argument("--capacity-requests", type=int, default=10_000)
    args = ap.parse_args()

    from r3edge.api import pb2
    from r3edge.benchmarks.machine import machine_info
    from r3edge.core.pairs import read_queries

    phases = [p for p in args.phases.split(",") if p]
    bad = set(phases) - {"overload", "batching", "single", "sweep", "soak"}
    if bad:
        ap.error(f"unknown phase(s) {sorted(bad)}")
    roles = [r for r in args.roles.split(",") if r]
    need = set(roles) if set(phases) & {"overload", "sweep", "soak"} else set()
    if set(phases) & {"batching", "single"}:
        need |= {"baseline", "new"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    queries = read_queries(args.requests)
    top100 = payloads(queries, pb2, None, args.top_k)
    reqs = {"top100": top100, "top10": payloads(queries, pb2, args.batching_candidates, args.top_k)}
    results = {
        "settings": vars(args) | {
            "n_requests": len(queries), "candidates_per_request": float(np.mean([p[1] for p in top100])),
            "phases": phases},
        "machine": machine_info(), "servers": {}, "phases": {}, "load_avg": {},
    }
    t_start = time.perf_counter()
    n_levels = len([x for x in args.sweep_concurrency.split(",") if x])
    bounds = {"overload": len(roles) * (args.overload_timeout + 60), "batching": 2 * args.rounds * (args.batching_s + 1),
              "single": 2 * args.rounds * args.single_s, "sweep": len(roles) * (n_levels * (args.sweep_s + 1) + args.sweep_open_s),
              "soak": len(roles) * (args.capacity_s + args.soak_s + 2)}
    print("time bounds (s, beyond server start-up and the tail of in-flight calls): "
          + ", ".join(f"{p} <= {bounds[p]:.0f}" for p in phases) + f"; total <= {sum(bounds[p] for p in phases) / 60:.0f} min",
          flush=True)

    def save():
        results["goals"] = goals(results)
        results["wall_s"] = round(time.perf_counter() - t_start, 1)
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")

    with ExitStack() as stack:
        servers, targets = {}, {}
        baseline = install_baseline(args.baseline_commit, args.baseline_site, out.parent) if "baseline" in need else None
        for role in ("baseline", "new"):
            if role not in need:
                continue
            srv = start_server(role, args, out, baseline)
            stack.callback(srv.stop)
            servers[role] = srv
            targets[role] = Target(srv.address, args.timeout)
            stack.callback(targets[role].close)
            results["servers"][role] = {"command": shlex.join(srv.cmd), "pid": srv.proc.pid, "model_info": srv.info,
                                        "code": baseline if role == "baseline" else new_code_files(),
                                        "rss_mb_ready": rss_mb(srv.proc.pid)}
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            run_phases(phases, roles, servers, targets, top100, reqs, args, results, save)
        except KeyboardInterrupt as exc:
            results["interrupted"] = {"by": str(exc), "phases_done": list(results["load_avg"]),
                                      "at_s": round(time.perf_counter() - t_start, 1)}
            print(f"\ninterrupted ({exc}): writing what was measured", flush=True)
        for role, srv in servers.items():
            results["servers"][role]["alive_at_end"] = srv.alive()
            results["servers"][role]["log"] = str(srv.log_path)
    save()
    report = write_report(results, out)
    print(f"\nresults: {out / 'results.json'}\nreport:  {report}")
    return 0


def run_phases(phases, roles, servers, targets, top100, reqs, args, results, save) -> None:
    for phase in phases:
        print(f"\n=== {phase} === (load {load_avg()})", flush=True)
        t0 = time.perf_counter()
        la0 = load_avg()
        if phase in ("overload", "sweep", "soak"):
            res = results["phases"][phase] = {}  # a role finished before an interrupt is kept
            for role in roles:
                fn = {"overload": phase_overload, "sweep": phase_sweep, "soak": phase_soak}[phase]
                res[role] = fn(servers[role], targets[role], top100, args)
                if phase == "overload":
                    res[role]["max_queue_delay_ms"], res[role]["max_queue_delay_source"] = queue_delay_of(
                        servers[role].info, args.max_queue_delay_ms if role == "new" else None)
        else:
            res = {"batching": phase_batching, "single": phase_single}[phase](servers, targets, reqs, args)
        results["phases"][phase] = res
        results["load_avg"][phase] = {"start": la0, "end": load_avg(), "wall_s": round(time.perf_counter() - t0, 1)}
        save()
        print(f"=== {phase} done in {time.perf_counter() - t0:.0f} s", flush=True)
        for gl in [x for x in results["goals"] if x["phase"].startswith(phase)]:
            print(f"  {gl['goal']}: {verdict(gl['met'])} ({f(gl['value'], 2) if isinstance(gl['value'], float) else gl['value']}"
                  f" vs {gl['target']}) {gl['detail']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
