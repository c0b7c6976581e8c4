"""`r3edge bench load`'s report.md, written from its results.json alone: every number and verdict is computed."""

from __future__ import annotations

from r3edge.benchmarks.load_phases import REFUSED
from r3edge.core.timing import LOAD_KEY


def _f(x, nd: int = 1) -> str:
    if x is None:
        return "–"
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def _n(k: int, one: str, many: str | None = None) -> str:
    return f"{k} {one if k == 1 else (many or one + 's')}"


def overload_lines(o: dict) -> list[str]:
    adds_up = sum(o["codes"].values()) == o["concurrent"]
    verdict = "every call was answered" if o["lost"] == 0 else f"{o['lost']} calls were lost (no answer from the server)"
    return ["## Overload", "",
            f"{o['concurrent']} calls left at one instant (client deadline {o['client_timeout_s']:g} s): {verdict}; "
            f"status codes {o['codes']} ({'adding up to' if adds_up else 'NOT adding up to'} the {o['concurrent']} sent). "
            f"Admitted {o['admitted_ms']['n']}: p50 {_f(o['admitted_ms']['p50'], 0)} ms, p99 {_f(o['admitted_ms']['p99'], 0)} ms; "
            f"refused ({REFUSED}) {o['refused_ms']['n']}: answered in p50 {_f(o['refused_ms']['p50'], 1)} ms, "
            f"max {_f(o['refused_ms']['max'], 1)} ms. One request alone took p50 {_f(o['service_time_ms']['p50'], 1)} ms "
            f"({o['service_time_ms']['n']} sent first). Server RSS {_f(o['rss_mb']['before'])} → {_f(o['rss_mb']['after'])} MB "
            f"({_f(o['rss_growth_pct'])}%), {_f(o['rss_mb']['settled'])} MB once settled; the next call after the burst: "
            f"{o['call_after']}.", "", *admission_lines(o)]


def admission_lines(o: dict) -> list[str]:
    bound, p99 = o["admitted_p99_bound_ms"], o["admitted_ms"]["p99"]
    if bound is None or p99 is None:
        why = "the server reports no max queue delay" if o["max_queue_delay_ms"] is None else "no call was admitted or timed alone"
        return [f"Admitted latency not judged: {why}.", ""]
    return [f"Admitted p99 {p99:.0f} ms is {'within' if p99 <= bound else 'OVER'} the admission bound of {bound:.0f} ms "
            f"(the server's max queue delay {o['max_queue_delay_ms']:.0f} ms + 2 x one request alone).", ""]


def batching_lines(b: dict) -> list[str]:
    many = f"{b['clients']} clients"
    lines = [f"## Cross-request batching (requests of {b['candidates']} candidates)", "",
             "| clients | pairs/s | pairs/s per round | p50 ms per round | OK | errors |", "|---|---|---|---|---|---|"]
    for name in ("1 client", many):
        r = b[name]
        lines.append(f"| {name} | {_f(r['pairs_per_s'])} | {', '.join(_f(x) for x in r['round_pairs_per_s'])} | "
                     f"{', '.join(_f(x) for x in r['round_p50_ms'])} | {r['ok']} | {r['errors'] or 'none'} |")
    lines += ["", f"{many} / 1 client: {_f(b['ratio_many_over_one'], 2)}x the pairs/s "
              f"({_n(len(b['1 client']['round_pairs_per_s']), 'round')}, both sides in a shuffled order each round).", ""]
    return lines


def load_row(name: str, r: dict) -> str:
    lt = r["latency_ms"]
    codes = r.get("codes") or {"OK": r["ok"], **r["errors"]}
    return (f"| {name} | {r['requests']} | {_f(lt['p50'])} | {_f(lt['p95'])} | {_f(lt['p99'])} | {_f(r['requests_per_s'], 2)} | "
            f"{_f(r['pairs_per_s'])} | {codes} | {_f(r.get('rss_mb'))} |")


LOAD_HEADER = ["| load | requests | p50 ms | p95 ms | p99 ms | requests/s | pairs/s | status codes | RSS MB |",
               "|---|---|---|---|---|---|---|---|---|"]


def sweep_lines(sw: dict, single: dict | None) -> list[str]:
    rows = [("one at a time", single)] if single else []
    rows += [(f"closed loop, concurrency {r['concurrency']}", r) for r in (sw or {}).get("closed_loop", [])]
    if sw and sw.get("open_loop"):
        o = sw["open_loop"]
        rows.append((f"open loop, Poisson {o['rate_per_s']:.2f}/s ({o['factor_of_capacity']:g}x the best closed loop)", o))
    return ["## One at a time and the concurrency sweep", "", *LOAD_HEADER, *(load_row(n, r) for n, r in rows), ""]


def soak_lines(k: dict) -> list[str]:
    lines = ["## Soak", ""]
    if "windows" not in k:
        return [*lines, f"Not run: {k['error']}.", ""]
    res = k["result"]
    lines += [f"Capacity {k['capacity_requests_per_s']:.2f} requests/s (closed loop, concurrency "
              f"{k['capacity_run']['concurrency']}, {k['capacity_run']['requests']} requests); open loop at {k['fraction']:g} of it "
              f"= {k['rate_per_s']:.2f}/s for {res['duration_s']:g} s: {res['requests']} requests, status codes {res['codes']}. "
              f"RSS {_f(k['rss_mb_start'])} → {_f(k['rss_mb_end'])} MB ({_f(k.get('rss_growth_pct'), 2)}%; "
              f"{_f(k.get('rss_growth_after_first_window_pct'), 2)}% after the first window), max {_f(k['rss_mb_max'])} MB; "
              f"last/first window p99 {_f(k['p99_last_over_first'], 3)}.", "",
              "| window s | requests | p50 ms | p99 ms | status codes | RSS MB (end) |", "|---|---|---|---|---|---|"]
    for w in k["windows"]:
        lines.append(f"| {w['start_s']:g}–{w['end_s']:g} | {w['requests']} | {_f(w['latency_ms']['p50'])} | "
                     f"{_f(w['latency_ms']['p99'])} | {w['codes']} | {_f(w['rss_mb_end'])} |")
    return [*lines, ""]


def markdown(results: dict) -> str:
    m, s, srv = results["machine"], results["settings"], results["server"]
    info = srv["model_info"]
    where = f"a child `r3edge serve {s['artifact']}`" if srv["child"] else "a running server"
    lines = ["# Serving load", "",
             f"Server: {where} at {srv['target']} (variant {info.get('variant')}, runtime {info.get('runtime')}, limits "
             f"{info.get('limits')}); RSS when ready {_f(srv['rss_mb_ready'])} MB"
             + ("" if srv["pid"] else " (not read: the server is not a process of this machine)") + ".",
             f"Requests: {_n(s['n_queries'], 'query', 'queries')} of {s['candidates_per_request']:.1f} candidates on average, "
             f"top_k {s['top_k']}; no client retries. Client on {m['cpu']}, {m['cores_usable']} usable cores, "
             f"started {m['timestamp']}.", ""]
    ph = results["phases"]
    if "overload" in ph:
        lines += overload_lines(ph["overload"])
    if "batching" in ph:
        lines += batching_lines(ph["batching"])
    if "single" in ph or "sweep" in ph:
        lines += sweep_lines(ph.get("sweep"), ph.get("single"))
    if "soak" in ph:
        lines += soak_lines(ph["soak"])
    lines += ["## Load average (1/5/15 min) per phase", "", "| phase | start | end | wall s | server alive after |",
              "|---|---|---|---|---|"]
    for name, r in ph.items():
        lines.append(f"| {name} | {r[LOAD_KEY]['start']} | {r[LOAD_KEY]['end']} | {r['phase_wall_s']} | "
                     f"{_f(r['server_alive_after'])} |")
    return "\n".join(lines)
