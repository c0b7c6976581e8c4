"""A cosine student served by r3edge against sentence-transformers on the same weights, side by side on the same
requests (``r3edge bench peers``).

* **r3edge**: each variant served by its own ``r3edge serve`` child process (or running servers, ``--target``),
  asked over gRPC for the top 10, as a client asks. The first is the reference ranking (serve fp32 first).
* **Peers**: ``benchmarks/peer_side/sentence_transformers_peers.py``, run by the interpreter that has
  sentence-transformers (``--peers-python``; its ONNX and OpenVINO backends pin transformers 4.x, so that is
  usually a venv of its own): SentenceTransformer on the student directory's encoder, mean pooling at unit length,
  the student's label head on the cosines. This process never imports torch.

Every system ranks every request once (warm-up, and the rankings the top-10 overlaps are taken from), then
:func:`r3edge.core.timing.interleaved_rounds` times ``reps`` passes over the requests, each call client to
top 10 (a peer's call crosses a pipe to its worker). The summary compares the fastest r3edge system that keeps
:data:`r3edge.core.fidelity.MIN_TOP10_OVERLAP` of the reference's top 10 with the fastest peer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from r3edge.benchmarks.machine import machine_info
from r3edge.benchmarks.results_files import write_results
from r3edge.benchmarks.systems import serve_artifact
from r3edge.core.artifact import read_manifest
from r3edge.core.errors import InvalidInput, R3EdgeError
from r3edge.core.fidelity import MIN_TOP10_OVERLAP
from r3edge.core.pairs import QueryCandidates
from r3edge.core.scoring import Scorer
from r3edge.core.timing import LOAD_KEY, interleaved_rounds, percentiles

#: the worker the peers run in (a file outside the package's import graph: it imports sentence-transformers)
PEER_WORKER = Path(__file__).resolve().parent / "peer_side" / "sentence_transformers_peers.py"
TOP_K = 10
R3EDGE = "r3edge served "


class PeerWorker:
    """The peer worker process: built once, then asked for one peer's top 10 of one request per call."""

    def __init__(self, python: str, student: str | Path, requests: Sequence[tuple[str, list[str]]], peers: Sequence[str],
                 threads: int, max_seq_length: int):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
        try:
            self.proc = subprocess.Popen([python, str(PEER_WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         text=True, env=env)  # its stderr is ours: library logs, warnings
        except OSError as exc:
            raise InvalidInput(f"cannot run --peers-python {python}: {exc}", "pass an interpreter with "
                               "sentence-transformers installed", field="--peers-python") from exc
        try:
            ready = self._call({"student": str(student), "requests": [list(r) for r in requests], "peers": list(peers),
                                "threads": threads, "max_seq_length": max_seq_length})
        except R3EdgeError as exc:
            self.close()
            raise InvalidInput(f"--peers-python {python} could not start the peers: {exc.what}", exc.fix,
                               field="--peers-python") from exc
        self.ready, self.skipped, self.versions = ready["ready"], ready["skipped"], ready["versions"]

    def _call(self, message: dict) -> dict:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the worker died: its reply (or its silence) says why
        line = self.proc.stdout.readline()
        reply = json.loads(line) if line else {"error": f"the peer worker exited (code {self.proc.wait()})"}
        if "error" in reply:
            raise R3EdgeError(f"the sentence-transformers peer worker failed:\n{reply['error']}",
                              "run the peers in an interpreter with sentence-transformers installed (--peers-python)")
        return reply

    def rank(self, peer: str, request: int) -> list[int]:
        return self._call({"peer": peer, "request": request})["top"]

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # it has exited already
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def peer_max_seq_length(scorer: Scorer) -> int:
    """sentence-transformers' ``max_seq_length`` for a cosine student's peers (here and in benchmarks/gpu):
    ``[CLS] document [SEP]``, the document budget as r3edge embeds a document. The peers cut the query there too;
    the student cuts it at ``max_query_tokens``. That is the one difference in what they compute: on the demo student
    (48 query tokens) it left the peer 0.946 of the student's top 10, and with each query cut as the student cuts it
    the two agreed to 6.9e-7 (benchmarks/results/gpu-students-h200-third-run/st_query_cut.py)."""
    return scorer.spec.max_doc_tokens + 2


def grpc_ranker(target: str, requests: Sequence[tuple[str, list[str]]]) -> tuple[Callable[[int], list[int]], Callable]:
    """``(rank(request) -> top-10 candidate indices, close)`` through a running server's ``Rerank``."""
    from r3edge.api.client import RerankerClient

    client = RerankerClient(target, timeout=600)
    client.wait_ready()

    def rank(i: int) -> list[int]:
        query, texts = requests[i]
        return [int(r.id) for r in client.rerank(query, list(enumerate(texts)), top_k=TOP_K)]
    return rank, client.close


def cosine_scorer(student: str | Path, artifact: str | Path | None) -> Scorer:
    """The student's scorer, checked: a cosine student, and the spec ``artifact`` was exported from."""
    scorer = Scorer.load(student)
    if scorer.spec.head != "cosine":
        raise InvalidInput(f"{student} is a {scorer.spec.head} student; the sentence-transformers peers embed texts on "
                           "their own", "pass a cosine (biencoder) student's directory", field="--student")
    if artifact is not None:
        exported = read_manifest(artifact).get("scorer_fingerprint")
        if exported and exported != scorer.spec.fingerprint():
            raise InvalidInput(f"{artifact} was exported from another scorer spec than {student}'s "
                               f"({exported} != {scorer.spec.fingerprint()})",
                               "pass the student directory the artifact was exported from", field="--student")
    return scorer


def measure_peers(student: str | Path, queries: Sequence[QueryCandidates], *, artifact: str | Path | None = None,
                  variants: Sequence[str] = ("fp32",), targets: Sequence[tuple[str, str]] = (),
                  peers_python: str = sys.executable, peers: Sequence[str] = ("all",), threads: int = 2,
                  reps: int = 3, pause_s: float = 0.2, min_overlap: float = MIN_TOP10_OVERLAP,
                  log: Callable[[str], None] = print) -> dict:
    """r3edge (each of ``variants`` of ``artifact`` served by a child process, then each ``(label, host:port)`` of
    ``targets``) and the sentence-transformers ``peers`` on ``queries``; the results dict :func:`write_report`
    writes."""
    if not queries:
        raise InvalidInput("no requests to time", "pass a candidate-list JSONL with at least one query", field="--pairs")
    if reps < 1:
        raise InvalidInput(f"--reps {reps} times nothing", "pass --reps 1 or more", field="--reps")
    if not (artifact and variants) and not targets:
        raise InvalidInput("no r3edge system to compare", "pass --artifact DIR (its --variants are served) or --target",
                           field="--artifact")
    scorer = cosine_scorer(student, artifact)
    max_seq_length = peer_max_seq_length(scorer)
    requests = [(q.query, [c.text for c in q.candidates]) for q in queries]
    systems: dict[str, Callable[[int], list[int]]] = {}
    with ExitStack() as stack:
        worker = PeerWorker(peers_python, student, requests, peers, threads, max_seq_length)  # first: a bad venv fails fast
        stack.callback(worker.close)
        for variant in (variants if artifact else ()):
            target = stack.enter_context(serve_artifact(str(artifact), variant, threads))
            rank, close = grpc_ranker(target, requests)
            stack.callback(close)
            systems[R3EDGE + variant] = rank
        for label, target in targets:
            rank, close = grpc_ranker(target, requests)
            stack.callback(close)
            systems[R3EDGE + label] = rank
        for peer in worker.ready:
            systems[peer] = lambda i, peer=peer: worker.rank(peer, i)
        log(f"systems: {', '.join(systems)}" + (f"; skipped {worker.skipped}" if worker.skipped else ""))
        tops = {name: [rank(i) for i in range(len(requests))] for name, rank in systems.items()}  # warm-up
        n = len(requests)
        timed = interleaved_rounds({name: (lambda r, rank=rank: rank(r % n)) for name, rank in systems.items()},
                                   reps * n, pause_s=pause_s)
    reference = next(iter(systems))
    rows = []
    for name in systems:
        pairs = list(zip(tops[reference], tops[name]))
        p = percentiles(timed["ms"][name])
        rows.append({"system": name, "kind": "r3edge" if name.startswith(R3EDGE) else "peer",
                     "p50_ms": p["p50"], "p95_ms": p["p95"], "n": len(timed["ms"][name]),
                     "top10_overlap_with_reference": sum(len(set(a) & set(b)) / max(1, len(a)) for a, b in pairs) / n,
                     "top10_same_order": sum(a == b for a, b in pairs) / n})
    return {
        "machine": machine_info(),
        "student": str(student),
        "artifact": None if artifact is None else Path(artifact).name,
        "peers_python": peers_python,
        "peer_versions": worker.versions,
        "peers_skipped": worker.skipped,
        "threads": threads,
        "requests": n,
        "candidates_per_request": [len(texts) for _, texts in requests],
        "reps": reps,
        "pause_s": pause_s,
        "max_seq_length": max_seq_length,
        LOAD_KEY: timed[LOAD_KEY],
        "reference": reference,
        "min_overlap": min_overlap,
        "rows": rows,
        "tops": tops,
        **summary(rows, min_overlap),
    }


def summary(rows: Sequence[dict], min_overlap: float) -> dict:
    """The fastest r3edge system that keeps ``min_overlap`` of the reference's top 10, the fastest peer, and the
    ratio of their p50s (> 1: r3edge is faster)."""
    faithful = [r for r in rows if r["kind"] == "r3edge" and r["top10_overlap_with_reference"] >= min_overlap]
    peers = [r for r in rows if r["kind"] == "peer"]
    best = min(faithful, key=lambda r: r["p50_ms"]) if faithful else None
    peer = min(peers, key=lambda r: r["p50_ms"]) if peers else None
    return {"best_r3edge": best and best["system"], "best_peer": peer and peer["system"],
            "ratio_best_peer_over_best_r3edge": peer["p50_ms"] / best["p50_ms"] if best and peer else None}


def _setting(results: dict) -> str:
    """What was run where: requests, rounds, threads, machine, load, the peers' interpreter and versions."""
    loads = [x[0] for x in results[LOAD_KEY]]
    versions = ", ".join(f"{k} {v}" for k, v in results["peer_versions"].items() if v)
    return (f"{results['requests']} requests of {sum(results['candidates_per_request']) / results['requests']:.0f} "
            f"candidates x {results['reps']} rounds, {results['threads']} threads each, systems in a shuffled order per "
            f"call; {results['machine']['cpu']}, {results['machine']['timestamp']}; 1-min load average "
            f"{min(loads):.2f}-{max(loads):.2f}. Peers ({results['peers_python']}): {versions}; max_seq_length "
            f"{results['max_seq_length']}.")


def report_lines(results: dict) -> list[str]:
    """``report.md`` of :func:`measure_peers`' results: every number is read from them."""
    by = {r["system"]: r for r in results["rows"]}
    lines = [
        "# r3edge served vs sentence-transformers on the same weights", "", _setting(results), "",
        f"| system | p50 ms per request | p95 ms | top-10 overlap with {results['reference']} | same top-10 order |",
        "|---|---|---|---|---|",
        *(f"| {r['system']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['top10_overlap_with_reference']:.3f} | "
          f"{r['top10_same_order']:.3f} |" for r in results["rows"]),
        "",
    ]
    if results["peers_skipped"]:
        lines += ["Skipped peers: " + "; ".join(f"{k} ({v})" for k, v in results["peers_skipped"].items()) + ".", ""]
    best, peer = results["best_r3edge"], results["best_peer"]
    if best and peer:
        lines += [f"Fastest r3edge system at >= {results['min_overlap']:g} top-10 overlap: **{best}** "
                  f"({by[best]['p50_ms']:.1f} ms); fastest peer: **{peer}** ({by[peer]['p50_ms']:.1f} ms, top-10 overlap "
                  f"{by[peer]['top10_overlap_with_reference']:.3f}); ratio (peer / r3edge) "
                  f"**{results['ratio_best_peer_over_best_r3edge']:.2f}x**.", ""]
    return lines


def write_report(results: dict, out: str | Path) -> dict[str, Path]:
    """Write OUT/results.json and OUT/report.md."""
    return write_results(out, results, "\n".join(report_lines(results)))
