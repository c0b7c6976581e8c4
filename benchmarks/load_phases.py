"""Load on a running `r3edge serve` over gRPC only: what its operator needs to know before traffic tells them.

Phases (:data:`PHASES`, each bounded in requests or seconds by a :class:`LoadPlan` field):

* overload — ``overload_concurrent`` top-N Rerank calls leaving at one instant: counts by status code, calls never
  answered (lost), admitted p50/p99, how fast refusals (RESOURCE_EXHAUSTED) come back, server RSS before and after.
  A server with admission control admits what it can serve in time and refuses the rest at once; one without it
  queues everything and loses calls to client deadlines or a dropped connection.
* batching — requests of the first ``batching_candidates`` candidates from one client and from
  ``batching_clients`` clients, in interleaved rounds: pairs/s of each and their ratio, i.e. what the server's
  cross-request micro-batching gives.
* single — one top-N at a time: p50/p95 of a request alone.
* sweep — closed loop at each ``sweep_concurrency``, then one open-loop Poisson rate at ``sweep_open_factor`` x the
  best closed-loop rate (above capacity: where admission control has to work).
* soak — open loop at ``soak_fraction`` of the capacity a closed-loop run measured first, for ``soak_s``: per-window
  p50/p99 and RSS, and the RSS drift (a leak shows as growth after the first window).

Closed-loop phases are :func:`r3edge.benchmarks.load.run_load`. Open-loop latency counts from each request's
scheduled send time, so a slow server cannot hide its queue by delaying the sends (no coordinated omission).
RSS is the server process and its children (psutil), read where the server runs on this machine (a child
`r3edge serve`, or a --target on a loopback address); elsewhere it is None. Client calls are never retried:
what is counted is what the server answered.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from r3edge.benchmarks.load import request_candidates, run_load
from r3edge.core.errors import InvalidInput
from r3edge.core.pairs import QueryCandidates
from r3edge.core.timing import LOAD_KEY, interleaved_rounds, load_average, percentiles

PHASES = ("overload", "batching", "single", "sweep", "soak")
#: statuses that mean a call got no answer from the server (its connection failed or the client gave up); a
#: DEADLINE_EXCEEDED is lost only when it came at the client's own deadline (a server may answer with it sooner)
LOST_CODES = ("UNAVAILABLE", "CANCELLED", "CLIENT_ERROR")
REFUSED = "RESOURCE_EXHAUSTED"


def _opt(default, help_text: str):
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class LoadPlan:
    """Every bound of every phase, in one place (`r3edge bench load` turns each field into a flag)."""

    phases: tuple[str, ...] = _opt(PHASES, "phases to run, in this order")
    top_k: int = _opt(10, "top_k of each Rerank request")
    timeout_s: float = _opt(120.0, "client deadline of closed-loop calls, s")
    overload_concurrent: int = _opt(100, "overload: top-N calls sent at one instant")
    overload_timeout_s: float = _opt(300.0, "overload: client deadline, s")
    service_requests: int = _opt(5, "overload: top-Ns sent alone first (one request's service time)")
    settle_s: float = _opt(2.0, "overload: RSS is read again this long after the burst")
    batching_clients: int = _opt(16, "batching: closed-loop clients of the many-clients side")
    batching_candidates: int = _opt(10, "batching: the first N candidates of each request")
    batching_requests: int = _opt(400, "batching: requests per side and round")
    rounds: int = _opt(2, "batching: rounds, each running both sides in a shuffled order")
    single_requests: int = _opt(30, "single: requests sent one at a time")
    sweep_concurrency: tuple[int, ...] = _opt((1, 2, 4, 8, 16), "sweep: closed-loop concurrencies")
    sweep_requests: int = _opt(60, "sweep: requests per concurrency")
    sweep_open_factor: float = _opt(1.5, "sweep: open-loop rate as a multiple of the best closed-loop rate")
    sweep_open_s: float = _opt(30.0, "sweep: seconds of open-loop arrivals (0: none)")
    open_timeout_s: float = _opt(30.0, "client deadline of open-loop calls, s")
    capacity_concurrency: int = _opt(8, "soak: closed-loop concurrency of the capacity run")
    capacity_requests: int = _opt(100, "soak: requests of the capacity run")
    soak_fraction: float = _opt(0.5, "soak: open-loop rate as a fraction of the measured capacity")
    soak_s: float = _opt(600.0, "soak: seconds of open-loop arrivals")
    soak_window_s: float = _opt(60.0, "soak: window of the per-window latency and RSS")
    seed: int = _opt(0, "seed of the Poisson arrivals")

    def __post_init__(self):
        bad = sorted(set(self.phases) - set(PHASES))
        if bad or not self.phases:
            raise InvalidInput(f"phases: unknown {bad}" if bad else "phases: none given", f"pick from {', '.join(PHASES)}", field="phases")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            values = value if isinstance(value, tuple) and f.name != "phases" else (value,)
            least = 1 if f.name.endswith(("concurrency", "concurrent", "clients")) else 0  # callers: one at least
            if any(isinstance(v, (int, float)) and v < least for v in values) or values == ():
                raise InvalidInput(f"{f.name} = {value!r}", f"give values of at least {least}", field=f.name)


# -- the server's process -----------------------------------------------------------------------------------


def server_pid(address: str) -> int | None:
    """The pid listening on ``address``'s port when it is a loopback address of this machine, else None."""
    import psutil

    from r3edge.core.net import is_loopback

    host, _, port = address.rpartition(":")
    if not (is_loopback(host) or host == "0.0.0.0"):  # a server bound to every address is reached here too
        return None
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return None
    pids = {c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == int(port) and c.pid}
    return pids.pop() if len(pids) == 1 else None


def rss_mb(pid: int | None) -> float | None:
    """Resident MB of ``pid`` and all its descendants (a server that forks workers is measured whole)."""
    import psutil

    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        return None
    return round(total / 2**20, 1)


# -- calls --------------------------------------------------------------------------------------------------


class Caller:
    """One channel to the server, no retries; ``call`` returns (status name, ms) and never raises."""

    def __init__(self, target: str, timeout_s: float):
        from r3edge.api.client import RerankerClient, Retry

        self.client = RerankerClient(target, timeout=timeout_s, retry=Retry(max_attempts=1))

    def call(self, request: tuple[str, list[tuple[str, str]]], top_k: int, timeout_s: float | None = None) -> tuple[str, float]:
        """A response with the wrong number of results counts as BAD_ANSWER, a client-side failure as CLIENT_ERROR."""
        import grpc

        query, cands = request
        t = time.perf_counter()
        try:
            resp = self.client.rerank_raw(query, cands, top_k=top_k, timeout=timeout_s)
        except grpc.RpcError as exc:
            code = exc.code().name if exc.code() is not None else "CLIENT_ERROR"
        except Exception:  # noqa: BLE001  (a failure of the client is a lost call: counted, never raised)
            code = "CLIENT_ERROR"
        else:
            want = min(top_k, len(cands)) if top_k > 0 else len(cands)
            code = "OK" if len(resp.results) == want else "BAD_ANSWER"
        return code, (time.perf_counter() - t) * 1e3

    def close(self) -> None:
        self.client.close()


def tally(records: Sequence[tuple[float, float, str, int]]) -> dict:
    """records (send s, ms, status, pairs) -> status counts, latency of OK calls, rates over their span."""
    ok = [ms for _, ms, code, _ in records if code == "OK"]
    span = (max(t + ms / 1e3 for t, ms, _, _ in records) - min(t for t, _, _, _ in records)) if records else 0.0
    pairs = sum(p for _, _, code, p in records if code == "OK")
    return {"requests": len(records), "codes": dict(Counter(code for _, _, code, _ in records)),
            "latency_ms": {"n": len(ok), **percentiles(ok)}, "wall_s": span,
            "requests_per_s": len(ok) / span if span > 0 else None, "pairs_per_s": pairs / span if span > 0 else None}


def burst(caller: Caller, requests, n: int, top_k: int, timeout_s: float) -> list[tuple[str, float]]:
    """``n`` calls (the requests in turn) that all leave at one instant (a barrier): (status, ms) each."""
    barrier = threading.Barrier(n)

    def one(i: int):
        barrier.wait()
        return caller.call(requests[i % len(requests)], top_k, timeout_s)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def open_loop(caller: Caller, requests, rate: float, duration_s: float, top_k: int, timeout_s: float, seed: int,
              label: str) -> tuple[dict, list]:
    """Poisson arrivals at ``rate``/s for ``duration_s``; each latency counts from the scheduled send time."""
    from r3edge.core.progress import Progress

    rnd = random.Random(seed)
    times, t = [], rnd.expovariate(rate)
    while t < duration_s:
        times.append(t)
        t += rnd.expovariate(rate)
    records, late, lock = [], [], threading.Lock()
    bar = Progress(len(times), label, every_s=10.0)
    t0 = time.perf_counter()

    def fire(i: int, sched: float) -> None:
        req = requests[i % len(requests)]
        lag_ms = (time.perf_counter() - t0 - sched) * 1e3
        code, ms = caller.call(req, top_k, timeout_s)
        with lock:
            late.append(lag_ms)
            records.append((sched, ms + lag_ms, code, len(req[1])))
            bar.update(extra=f"load {load_average()[0]}")

    # enough threads that a slow server never delays a send (one waiting for a thread is still timed from its schedule)
    with ThreadPoolExecutor(int(min(512, max(16, rate * (timeout_s + 1))))) as pool:
        for i, sched in enumerate(times):
            time.sleep(max(0.0, t0 + sched - time.perf_counter()))
            pool.submit(fire, i, sched)
        time.sleep(max(0.0, t0 + duration_s - time.perf_counter()))  # the run lasts its duration, arrivals or not
    bar.close()
    res = tally(records)
    res.update(rate_per_s=rate, duration_s=duration_s, scheduled=len(times), send_lag_ms=percentiles(late))
    return res, records


# -- phases ---------------------------------------------------------------------------------------------------


@dataclass
class Server:
    """What the phases need of the server: its address, its pid where it runs here, its ModelInfo."""

    target: str
    pid: int | None
    info: dict

    def rss(self) -> float | None:
        return rss_mb(self.pid)


def overload(server: Server, requests, plan: LoadPlan) -> dict:
    caller = Caller(server.target, plan.timeout_s)
    try:
        service = [ms for code, ms in (caller.call(requests[i % len(requests)], plan.top_k)
                                       for i in range(plan.service_requests)) if code == "OK"]
        rss0 = server.rss()
        n = plan.overload_concurrent
        t0 = time.perf_counter()
        res = burst(caller, requests, n, plan.top_k, plan.overload_timeout_s)
        wall = time.perf_counter() - t0
        rss1 = server.rss()
        time.sleep(plan.settle_s)
        rss2 = server.rss()
        after, _ = caller.call(requests[0], plan.top_k)
    finally:
        caller.close()
    codes = Counter(code for code, _ in res)
    # what admission control promises: an admitted call waits at most the server's max queue delay, then is served
    delay, alone = (server.info.get("limits") or {}).get("max_queue_delay_ms"), percentiles(service)["p50"]
    lost = sum(1 for code, ms in res if code in LOST_CODES
               or (code == "DEADLINE_EXCEEDED" and ms >= 990 * plan.overload_timeout_s))
    return {"concurrent": n, "client_timeout_s": plan.overload_timeout_s, "codes": dict(codes), "lost": lost,
            "answered": n - lost, "admitted_ms": {"n": codes["OK"], **percentiles([ms for c, ms in res if c == "OK"])},
            "refused_ms": {"n": codes[REFUSED], **percentiles([ms for c, ms in res if c == REFUSED])},
            "service_time_ms": {"n": len(service), **percentiles(service)}, "wall_s": wall,
            "rss_mb": {"before": rss0, "after": rss1, "settled": rss2},
            "rss_growth_pct": 100 * (rss1 - rss0) / rss0 if rss0 and rss1 else None, "call_after": after,
            "max_queue_delay_ms": delay,
            "admitted_p99_bound_ms": delay + 2 * alone if delay is not None and alone is not None else None}


def batching(server: Server, queries: Sequence[QueryCandidates], plan: LoadPlan) -> dict:
    short = [dataclasses.replace(q, candidates=q.candidates[: plan.batching_candidates]) for q in queries]
    runs: dict[str, list[dict]] = {"1 client": [], f"{plan.batching_clients} clients": []}

    def side(name: str, clients: int) -> Callable[[int], None]:
        return lambda r: runs[name].append(run_load(server.target, short, plan.batching_requests, clients,
                                                    top_k=plan.top_k, timeout=plan.timeout_s))

    rounds = interleaved_rounds({"1 client": side("1 client", 1),
                                 f"{plan.batching_clients} clients": side(f"{plan.batching_clients} clients",
                                                                         plan.batching_clients)},
                                plan.rounds, seed=plan.seed)
    out = {"clients": plan.batching_clients, "candidates": plan.batching_candidates, "rounds": {LOAD_KEY: rounds[LOAD_KEY]}}
    for name, rows in runs.items():
        pairs = sum((r["pairs_per_s"] or 0) * r["wall_s"] for r in rows)
        wall = sum(r["wall_s"] for r in rows)
        errors = Counter()
        for r in rows:
            errors.update(r["errors"])
        out[name] = {"pairs_per_s": pairs / wall if wall else None, "round_pairs_per_s": [r["pairs_per_s"] for r in rows],
                     "round_p50_ms": [r["latency_ms"]["p50"] for r in rows], "ok": sum(r["ok"] for r in rows),
                     "errors": dict(errors)}
    one, many = out["1 client"]["pairs_per_s"], out[f"{plan.batching_clients} clients"]["pairs_per_s"]
    out["ratio_many_over_one"] = many / one if one and many else None
    return out


def single(server: Server, queries: Sequence[QueryCandidates], plan: LoadPlan) -> dict:
    res = run_load(server.target, queries, plan.single_requests, 1, top_k=plan.top_k, timeout=plan.timeout_s)
    return {**res, "rss_mb": server.rss()}


def sweep(server: Server, queries: Sequence[QueryCandidates], requests, plan: LoadPlan) -> dict:
    levels = []
    for c in plan.sweep_concurrency:
        row = run_load(server.target, queries, plan.sweep_requests, c, top_k=plan.top_k, timeout=plan.timeout_s)
        row["rss_mb"] = server.rss()
        levels.append(row)
    best = max((r["requests_per_s"] or 0) for r in levels) if levels else 0
    out = {"closed_loop": levels, "capacity_requests_per_s": best}
    if best > 0 and plan.sweep_open_s > 0:
        caller = Caller(server.target, plan.open_timeout_s)
        try:
            rate = plan.sweep_open_factor * best
            res, _ = open_loop(caller, requests, rate, plan.sweep_open_s, plan.top_k, plan.open_timeout_s, plan.seed,
                               f"sweep open loop {rate:.2f}/s")
        finally:
            caller.close()
        out["open_loop"] = {**res, "factor_of_capacity": plan.sweep_open_factor, "rss_mb": server.rss()}
    return out


def soak(server: Server, queries: Sequence[QueryCandidates], requests, plan: LoadPlan) -> dict:
    cap = run_load(server.target, queries, plan.capacity_requests, plan.capacity_concurrency, top_k=plan.top_k,
                   timeout=plan.timeout_s)
    capacity = cap["requests_per_s"]  # OK answers per second: refused calls add nothing to it
    out = {"capacity_run": cap, "capacity_requests_per_s": capacity, "fraction": plan.soak_fraction}
    if not capacity:
        out["error"] = f"no capacity measured: the capacity run got no OK answer ({cap['errors']})"
        return out
    rate = out["rate_per_s"] = plan.soak_fraction * capacity
    samples, stop = [], threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        while True:
            samples.append((time.perf_counter() - t0, server.rss()))
            if stop.wait(1.0):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    caller = Caller(server.target, plan.open_timeout_s)
    try:
        res, records = open_loop(caller, requests, rate, plan.soak_s, plan.top_k, plan.open_timeout_s, plan.seed + 1,
                                 f"soak {rate:.2f}/s")
    finally:
        caller.close()
        stop.set()
        sampler.join()
    windows = []
    w = plan.soak_window_s or plan.soak_s
    for k in range(max(1, int(np.ceil(plan.soak_s / w)))):
        lo, hi = k * w, min((k + 1) * w, plan.soak_s)
        rss = [m for s, m in samples if lo <= s < hi + 1 and m is not None]
        win = tally([r for r in records if lo <= r[0] < hi])
        windows.append({"start_s": lo, "end_s": hi, **{k2: v for k2, v in win.items() if k2 != "wall_s"},
                        "rss_mb_end": rss[-1] if rss else None})
    rss_all = [m for _, m in samples if m is not None]
    out.update(result=res, windows=windows, rss_mb_start=rss_all[0] if rss_all else None,
               rss_mb_end=rss_all[-1] if rss_all else None, rss_mb_max=max(rss_all) if rss_all else None)
    if rss_all:
        out["rss_growth_pct"] = 100 * (rss_all[-1] - rss_all[0]) / rss_all[0]
        first = windows[0]["rss_mb_end"]
        out["rss_growth_after_first_window_pct"] = 100 * (rss_all[-1] - first) / first if first else None
    p99 = [wd["latency_ms"]["p99"] for wd in windows]
    out["p99_last_over_first"] = p99[-1] / p99[0] if len(p99) >= 2 and p99[0] and p99[-1] else None
    return out


def run_phases(server: Server, queries: Sequence[QueryCandidates], plan: LoadPlan,
               save: Callable[[dict], None] = lambda phases: None) -> dict:
    """Run ``plan.phases`` in order against ``server``; ``save(phases)`` after each (results survive a stop)."""
    if not queries:
        raise InvalidInput("no request to send", "pass a --pairs file with at least one query", field="pairs")
    requests = [(q.query, request_candidates(q)) for q in queries]
    run_load(server.target, queries, min(3, len(queries)), 1, top_k=plan.top_k, timeout=plan.timeout_s,
             progress=False)  # warm-up: first calls pay for lazy initialisation, not for load
    phases: dict = {}
    for name in plan.phases:
        print(f"=== {name} (load {load_average()})", flush=True)
        t0, la0 = time.perf_counter(), load_average()
        if name == "overload":
            res = overload(server, requests, plan)
        elif name in ("batching", "single"):
            res = {"batching": batching, "single": single}[name](server, queries, plan)
        else:
            res = {"sweep": sweep, "soak": soak}[name](server, queries, requests, plan)
        res[LOAD_KEY] = {"start": la0, "end": load_average()}
        res["phase_wall_s"] = round(time.perf_counter() - t0, 1)
        res["server_alive_after"] = rss_mb(server.pid) is not None if server.pid else None
        phases[name] = res
        save(phases)
    return phases


def measure(plan: LoadPlan, queries: Sequence[QueryCandidates], out: str | Path, *, target: str | None = None,
            artifact: str | Path | None = None, variant: str | None = None, serve_flags: dict | None = None) -> dict:
    """Run the plan against ``target`` (a running server) or a child `r3edge serve ARTIFACT` on a free loopback port;
    write OUT/results.json after every phase and OUT/report.md at the end. Returns the results."""
    from contextlib import nullcontext

    from google.protobuf.json_format import MessageToDict

    from r3edge.api.client import RerankerClient
    from r3edge.benchmarks.load_report import markdown
    from r3edge.benchmarks.machine import machine_info
    from r3edge.benchmarks.results_files import write_results
    from r3edge.benchmarks.systems import serve_artifact

    if (target is None) == (artifact is None):
        raise InvalidInput("give exactly one server", "pass --target HOST:PORT (a running server) or --artifact DIR "
                           "(served here by a child `r3edge serve`)", field="target")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"settings": {**dataclasses.asdict(plan), "target": target, "artifact": str(artifact) if artifact else None,
                            "variant": variant, "serve_flags": serve_flags or {}, "n_queries": len(queries),
                            "candidates_per_request": float(np.mean([len(q.candidates) for q in queries])) if queries else 0},
               "machine": machine_info(), "phases": {}}

    def save(phases: dict) -> None:  # after every phase: a stopped run keeps what it measured, report included
        results["phases"] = phases
        write_results(out, results, markdown(results) + "\n")

    started = (serve_artifact(str(artifact), variant, None, **(serve_flags or {})) if artifact is not None
               else nullcontext(target))
    with started as address:
        with RerankerClient(address, timeout=30) as client:
            client.wait_ready()
            info = MessageToDict(client.model_info(), preserving_proto_field_name=True)
        server = Server(address, server_pid(address), info)
        results["server"] = {"target": address, "child": artifact is not None, "pid": server.pid, "model_info": info,
                             "rss_mb_ready": server.rss()}
        try:
            run_phases(server, queries, plan, save)
        finally:  # Ctrl-C, SIGTERM: the phases finished are written
            save(results["phases"])
    return results
