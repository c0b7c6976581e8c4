"""Teacher judges served as reasoning rerankers, timed end to end on one engine.

A top-N request is served the way a reasoning-reranker service serves it: the query's intent round
once (two-round judges: R³A), then the query's N pairs in flight together on the engine, and the
request's latency is the wall time from its start to its last verdict. The engine is an
OpenAI-compatible server (vLLM from ``.venv-vllm``, started here per model, or a running one at
``base_url``), where every pair is its own HTTP request and the server's continuous batching runs
them together; without one, the in-process transformers backend batches the pairs itself and serves
one request at a time.

Prompts, the intent round, the score read-out (or Retro*'s K samples), the repair and the mapping
to student labels are the labelling run's own (:class:`r3edge.distill.label.driver.LabelRun` over one
request's pairs), so the judge timed here is the judge that labels. Nothing is estimated: no
per-pair latency is scaled up; a request is timed from its first call to its last answer.

The numbers this returns are raw (per-request seconds, tokens, verdicts); ``r3edge bench`` turns
them into rows with :func:`r3edge.benchmarks.systems.judge_row`.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TextIO

from r3edge.core.config import TeacherConfig
from r3edge.core.errors import InvalidInput
from r3edge.core.hardware import compute_identity
from r3edge.core.pairs import QueryCandidates
from r3edge.distill.label.journal import JudgeJournal

#: candidates of the untimed warm-up request (the first request pays the engine's one-off costs)
WARMUP_CANDIDATES = 4


@dataclass(frozen=True)
class JudgeSpec:
    """One judge row: a teacher config (shipped name or YAML path), for sampling judges K, and the weights.

    Written ``CONFIG[@K][=WEIGHTS]`` on the command line: ``retro-smollm2@1`` is Retro*'s @1 and
    ``retro-smollm2@8`` its mean@8; ``=DIR`` runs the config's prompts on the HF directory DIR (e.g. a
    cold-started teacher), ``=config`` on the config's own model; without ``=`` the weights are
    ``--teacher-model``'s, else the config's."""

    config: str
    samples: int | None = None
    weights: str | None = None   # an HF directory, "config" (the config's own model), or None (the default)

    @classmethod
    def parse(cls, text: str) -> JudgeSpec:
        head, eq, weights = text.strip().partition("=")
        name, at, k = head.partition("@")
        if not name or (eq and not weights) or (at and not k):
            raise InvalidInput(f"--judges entry {text!r} is not CONFIG[@K][=WEIGHTS]",
                               "write e.g. r3a-smollm2-cqa, retro-smollm2@4 or r3a-smollm2=runs/demo/teacher", field="--judges")
        if k and (not k.isdigit() or int(k) < 1):
            raise InvalidInput(f"--judges entry {text!r}: K must be a positive integer", "write e.g. retro-smollm2@4",
                               field="--judges")
        return cls(name, int(k) if k else None, weights or None)


@dataclass(frozen=True)
class ServedRequest:
    """One top-N request to a judge: its wall time and what the judge answered."""

    qid: str
    latency_s: float
    n_pairs: int
    generated_tokens: int      # every token the engine generated for it: intent round, reasoning, all K samples
    format_failures: int       # pairs whose verdict was not well formed (R³A: any round), repaired ones included
    no_label: int              # pairs with no verdict at all (no sample parsed)
    probs: dict[str, list[float] | None]


class _Counting:
    """A backend seen by one request: delegates to the shared backend and counts the tokens its calls
    generated (``completion_tokens`` of every generation it got back)."""

    def __init__(self, backend):
        self.backend, self.tokens = backend, 0

    def generate(self, convs, max_new_tokens, stop):
        out = self.backend.generate(convs, max_new_tokens, stop)
        self.tokens += sum(g.completion_tokens for g in out)
        return out

    def generate_and_score(self, convs, max_new_tokens, score_open, repair, score_tokens):
        gens, probs = self.backend.generate_and_score(convs, max_new_tokens, score_open, repair, score_tokens)
        self.tokens += sum(g.completion_tokens for g in gens)
        return gens, probs

    def sample(self, convs, max_new_tokens, stop, k, temperature):
        out = self.backend.sample(convs, max_new_tokens, stop, k, temperature)
        self.tokens += sum(g.completion_tokens for gens in out for g in gens)
        return out

    def read_scores(self, convs, score_tokens):
        gens, probs = self.backend.read_scores(convs, score_tokens)
        self.tokens += sum(g.completion_tokens for g in gens)
        return gens, probs

    def __getattr__(self, name):  # any other backend call passes through uncounted (it generates nothing)
        return getattr(self.backend, name)


class JudgeReranker:
    """A judge answering top-N requests: each request gets a fresh intent round (no cache across requests)."""

    def __init__(self, cfg: TeacherConfig, backend):
        from r3edge.distill.label.driver import LabelMapping
        from r3edge.distill.label.judges import get_judge

        self.cfg, self.backend = cfg, backend
        self.judge = get_judge(cfg.judge)
        if self.judge.score_tokens is not None and cfg.samples != 1:
            raise InvalidInput(f"judge {self.judge.name!r} reads its score in one pass; samples={cfg.samples} adds nothing",
                               "drop the @K of a read-out judge (K is for sampling judges, e.g. retro)", field="--judges")
        self.mapping = LabelMapping(cfg, self.judge)

    def rerank(self, q: QueryCandidates) -> ServedRequest:
        from r3edge.distill.label.driver import LabelRun

        counting = _Counting(self.backend)
        run = LabelRun(self.cfg, self.judge, counting, self.mapping, Counter({q.qid: len(q.candidates)}))
        t0 = time.perf_counter()
        records = run.label_chunk([(q, c) for c in q.candidates])
        wall = time.perf_counter() - t0
        return ServedRequest(
            qid=q.qid, latency_s=wall, n_pairs=len(records), generated_tokens=counting.tokens,
            format_failures=sum(not r["format_ok"] for r in records), no_label=sum(r["probs"] is None for r in records),
            probs={r["docid"]: r["probs"] for r in records})


def closed_loop(reranker: JudgeReranker, queries: Sequence[QueryCandidates], n_requests: int, concurrency: int,
                desc: str, stream: TextIO | None = None, *, first: int = 0,
                on_answer: Callable[[int, ServedRequest], None] | None = None) -> tuple[list[ServedRequest], float]:
    """Requests ``first`` .. ``n_requests - 1`` (request i asks about ``queries[i % len(queries)]``) from
    ``concurrency`` callers, each sending its next request when its last one is answered; returns those
    requests in order and the wall time. ``on_answer(i, request)`` is called as each is answered."""
    from r3edge.core.progress import Progress

    out: list[ServedRequest | None] = [None] * (n_requests - first)
    lock = threading.Lock()
    prog = Progress(n_requests, desc, stream=stream, every_s=10.0, initial=first)

    def one(i: int) -> None:
        got = reranker.rerank(queries[i % len(queries)])
        out[i - first] = got
        with lock:
            if on_answer is not None:
                on_answer(i, got)
            prog.update(extra=f"last {got.latency_s:.1f} s")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency, thread_name_prefix="r3edge-judge-caller") as pool:
        list(pool.map(one, range(first, n_requests)))
    wall = time.perf_counter() - t0
    prog.close()
    return out, wall  # type: ignore[return-value]


def judge_config(spec: JudgeSpec, *, teacher_model: str | Path | None = None,
                 batch_size: int | None = None) -> TeacherConfig:
    """The teacher config of a judge row, with its weights (the entry's own, else ``teacher_model``),
    ``@K`` and, when given, ``batch_size`` applied. The batch size is an engine setting, not the protocol's:
    the configs size it for a 2-core CPU (16 sequences), where a GPU takes a whole top-100 in one batch."""
    from r3edge.distill.label.driver import load_teacher_config

    weights = spec.weights if spec.weights is not None else teacher_model
    cfg = load_teacher_config(spec.config, samples=spec.samples, model=None if weights == "config" else weights)
    if batch_size is None:
        return cfg
    if batch_size < 1:
        raise InvalidInput(f"judge batch size {batch_size} is not positive", "give --judge-batch-size >= 1",
                           field="--judge-batch-size")
    return cfg.model_copy(update={"generation": cfg.generation.model_copy(update={"batch_size": batch_size})})


def row_name(spec: JudgeSpec, cfg: TeacherConfig) -> str:
    return cfg.name + (f"@{cfg.samples}" if cfg.samples > 1 or spec.samples is not None else "")


def engine_model(cfg: TeacherConfig) -> tuple[Path, str]:
    """The HF directory a serving engine loads for ``cfg`` and the name the config asks the server for.

    A local HF directory (e.g. ``r3edge teacher sft``'s output) is served as it is, under its path; a
    GGUF published in parts (``package:qwen2.5-coder-1.5b-instruct``) as the HF directory r3edge's cache
    already converts it to; any other package, hub or random-init model is written once as an HF
    directory under the r3edge cache (``R3EDGE_CACHE``/engine-models, keyed by the model spec) and
    served under its reference."""
    from r3edge.distill.label.driver import teacher_model_ref
    from r3edge.model.loading import PACKAGED_GGUFS, cache_dir, packaged_gguf_dir, save_hf_checkpoint

    ref = cfg.model.pretrained
    if ref is not None and (Path(ref) / "config.json").is_file():
        return Path(ref), cfg.served_model or ref
    name = cfg.served_model or ref or teacher_model_ref(cfg)
    if ref in PACKAGED_GGUFS:
        return packaged_gguf_dir(ref), name
    key = hashlib.sha256(json.dumps(cfg.model.model_dump(), sort_keys=True).encode()).hexdigest()[:12]
    out = cache_dir() / "engine-models" / f"hf-{key}"
    if not (out / "config.json").is_file():
        save_hf_checkpoint(cfg.model, out)
    return out, name


def measure_judge(cfg: TeacherConfig, queries: Sequence[QueryCandidates], *, base_url: str | None = None,
                  requests: int = 5, concurrency: Sequence[int] = (1, 4), max_in_flight: int = 256,
                  label: str | None = None, stream: TextIO | None = None,
                  journal_dir: str | Path | None = None) -> dict:
    """Serve every query once at concurrency 1 (its verdicts are the row's accuracy; at least
    ``requests`` requests, cycling, for the latency percentiles), then ``max(requests, c)`` requests at
    each other concurrency c for throughput. An untimed warm-up request (the first query's first
    ``WARMUP_CANDIDATES`` candidates) goes first. With ``base_url`` the judge runs through the openai
    backend (at most ``max_in_flight`` pair calls in flight, all requests together); without, in-process
    through transformers, where only concurrency 1 is run (one model, one request at a time).

    With ``journal_dir`` every answered request is kept there (:mod:`r3edge.distill.label.journal`)
    and a rerun with the same settings serves only the requests still missing; when none are, the
    engine is not even loaded."""
    from r3edge.distill.label.judges import get_judge

    stream = stream if stream is not None else sys.stderr
    if not queries:
        raise InvalidInput("no queries to serve to the judge", "pass a pairs file with at least one query")
    name = label or cfg.name
    state = _resume(cfg, queries, name, base_url, requests, concurrency, max_in_flight, journal_dir)
    if state.pending:
        if state.served:
            print(f"judge {name}: {len(state.served)}/{state.n1} concurrency-1 requests already answered "
                  f"({state.journal.path}), serving the rest", file=stream, flush=True)
        more, wall, more_phases = _serve(cfg, queries, base_url=base_url, max_in_flight=max_in_flight, name=name,
                                         first=len(state.served), n1=state.n1,
                                         phases=[c for c in state.wanted if c not in state.phases],
                                         requests=requests, journal=state.journal, stream=stream)
        state.served, state.wall1, state.runs = state.served + more, state.wall1 + wall, state.runs + bool(more)
        state.phases.update(more_phases)
    else:
        print(f"judge {name}: every request already answered in {state.journal.path}; nothing served",
              file=stream, flush=True)
    served = state.served
    first = {q.qid: r for q, r in zip(queries, served)}  # each query's first answer (greedy: repeats agree)
    return {
        "name": name,
        "judge": get_judge(cfg.judge).name,
        "teacher": cfg.name,
        "model": cfg.model.pretrained or "random-init",
        "samples": cfg.samples,
        "batch_size": None if base_url else cfg.generation.batch_size,  # the server batches on its own
        "engine": "OpenAI-compatible server" if base_url else _in_process_engine(),
        "base_url": base_url,
        "phases": {1: _phase(served, state.wall1, 1), **{c: state.phases[c] for c in state.wanted}},
        "concurrency_not_run": [c for c in dict.fromkeys(concurrency) if c != 1 and not base_url],
        "first_phase_runs": max(state.runs, 1),
        "probs": {(qid, docid): p for qid, r in first.items() for docid, p in r.probs.items()},
    }


def _in_process_engine() -> str:
    """The in-process engine as a row names it, with its device when that is not the CPU."""
    from r3edge.distill.label.backends.transformers_backend import engine_device

    device = engine_device()
    return "transformers in-process" + ("" if device == "cpu" else f" on {device}")


@dataclass
class _Resumed:
    """What a judge row needs and what its journal already holds: the journal (None without one), the
    number of concurrency-1 requests, the higher concurrencies to run, the concurrency-1 requests
    answered with their wall time and number of runs, and the finished higher-concurrency phases."""

    journal: JudgeJournal | None
    n1: int
    wanted: list[int]
    served: list[ServedRequest] = field(default_factory=list)
    wall1: float = 0.0
    runs: int = 0
    phases: dict[int, dict] = field(default_factory=dict)

    @property
    def pending(self) -> bool:
        """Whether requests are left to serve (an engine to load)."""
        return len(self.served) < self.n1 or any(c not in self.phases for c in self.wanted)


def _resume(cfg: TeacherConfig, queries, name: str, base_url, requests: int, concurrency, max_in_flight: int,
            journal_dir) -> _Resumed:
    """A judge row's :class:`_Resumed` state. The journal is keyed by everything that changes what is
    measured (not the server's port), this machine's compute identity included: a request timed on
    another CPU (and, through ``dtype: auto``, in another dtype) is never mixed into this one's row."""
    n1 = max(requests, len(queries))
    wanted = [c for c in dict.fromkeys(concurrency) if c != 1 and base_url]
    if journal_dir is None:
        return _Resumed(None, n1, wanted)
    settings = {"teacher": cfg.model_dump(mode="json", exclude={"base_url", "backend"}),
                "engine": "openai" if base_url else "transformers", "requests": requests,
                "concurrency": list(concurrency), "max_in_flight": max_in_flight, "hardware": compute_identity()}
    journal = JudgeJournal.open(journal_dir, name, settings, queries)
    done, wall1, runs = journal.first_phase()
    phases = {c: _phase([ServedRequest(**d) for d in reqs], w, c) for c, (reqs, w) in journal.phases().items()}
    return _Resumed(journal, n1, wanted, [ServedRequest(**d) for d in done[:n1]], wall1, runs, phases)


def judge_pending(cfg: TeacherConfig, queries, *, served_by_server: bool, requests: int, concurrency,
                  label: str | None = None, journal_dir, max_in_flight: int = 256) -> bool:
    """Whether :func:`measure_judge` with these settings still has requests to serve (an engine to start)."""
    return _resume(cfg, queries, label or cfg.name, served_by_server, requests, concurrency, max_in_flight,
                   journal_dir).pending


def _serve(cfg: TeacherConfig, queries, *, base_url, max_in_flight: int, name: str, first: int, n1: int,
           phases: Sequence[int], requests: int, journal, stream) -> tuple[list[ServedRequest], float, dict[int, dict]]:
    """Load the engine, warm it up, serve concurrency-1 requests ``first`` .. ``n1 - 1`` and the given
    higher-concurrency phases whole; each answer goes to ``journal`` as it comes."""
    from r3edge.distill.label.backends import load_backend

    if base_url:
        from r3edge.distill.label.backends.openai_backend import OpenAIBackend

        cfg = cfg.model_copy(update={"backend": "openai", "base_url": base_url})
        backend = OpenAIBackend(cfg, base_url=base_url, max_concurrency=max_in_flight)
    else:
        cfg = cfg.model_copy(update={"backend": "transformers", "base_url": None})
        backend = load_backend(cfg)
    served, wall, done = [], 0.0, {}
    try:
        reranker = JudgeReranker(cfg, backend)
        warm = queries[0]
        t0 = time.perf_counter()
        reranker.rerank(replace(warm, candidates=list(warm.candidates[:WARMUP_CANDIDATES])))
        print(f"judge {name}: warm-up request ({WARMUP_CANDIDATES} pairs) {time.perf_counter() - t0:.1f} s, not timed",
              file=stream, flush=True)
        if first < n1:
            served, wall = closed_loop(reranker, queries, n1, 1, f"judge {name} c=1", stream, first=first,
                                       on_answer=(lambda i, r: journal.add_request(i, asdict(r))) if journal else None)
        for c in phases:
            more, wall_c = closed_loop(reranker, queries, max(requests, c), c, f"judge {name} c={c}", stream)
            done[c] = _phase(more, wall_c, c)
            if journal is not None:
                journal.add_phase(c, [asdict(r) for r in more], wall_c)
    finally:
        backend.close()
    return served, wall, done


def _phase(served: list[ServedRequest], wall_s: float, concurrency: int) -> dict:
    pairs = sum(r.n_pairs for r in served)
    return {
        "concurrency": concurrency,
        "requests": len(served),
        "wall_s": wall_s,
        "latency_s": [r.latency_s for r in served],
        "pairs": pairs,
        "generated_tokens": sum(r.generated_tokens for r in served),
        "format_failures": sum(r.format_failures for r in served),
        "no_label": sum(r.no_label for r in served),
    }


def measure_judges(specs: Sequence[JudgeSpec], queries: Sequence[QueryCandidates], *, teacher_model: str | None = None,
                   vllm_python: str | None = None, base_url: str | None = None, work_dir: str | Path = "runs/bench",
                   requests: int = 5, concurrency: Sequence[int] = (1, 4), kv_cache_gib: int = 2,
                   journal_dir: str | Path | None = None, stream: TextIO | None = None,
                   batch_size: int | None = None) -> list[dict]:
    """:func:`measure_judge` for every judge (``batch_size``: see :func:`judge_config`), on one engine:
    a vLLM server started from ``vllm_python`` per distinct model (judges sharing weights share the
    server), a running server at ``base_url``, or in-process transformers when neither is given.
    ``kv_cache_gib`` sizes a started server's KV cache: a request's pairs run together only while their
    sequences fit in it (pairs of one query share their prefix's blocks through vLLM's prefix cache);
    beyond it the server queues them, and that is measured.
    With ``journal_dir`` answered requests are kept and reused, and a model whose judges are all
    answered there gets no server."""
    if vllm_python and base_url:
        raise InvalidInput("--vllm and --base-url both given", "start a server with --vllm, or use a running one with --base-url")
    work = Path(work_dir)
    cfgs = [(s, judge_config(s, teacher_model=teacher_model, batch_size=batch_size)) for s in specs]
    if not vllm_python:
        return [measure_judge(cfg, queries, base_url=base_url, requests=requests, concurrency=concurrency,
                              label=row_name(s, cfg), stream=stream, journal_dir=journal_dir) for s, cfg in cfgs]
    from contextlib import nullcontext

    from r3edge.distill.label.backends.vllm_server import vllm_server

    groups: dict[tuple[Path, str], list[int]] = {}
    for i, (_, cfg) in enumerate(cfgs):
        groups.setdefault(engine_model(cfg), []).append(i)
    rows: list[dict | None] = [None] * len(cfgs)
    for (model_dir, served_name), members in groups.items():
        served = {i: cfgs[i][1].model_copy(update={"served_model": served_name}) for i in members}
        pending = any(judge_pending(served[i], queries, served_by_server=True, requests=requests, concurrency=concurrency,
                                    label=row_name(*cfgs[i]), journal_dir=journal_dir) for i in members)
        log = work / f"vllm-{model_dir.name}.log"
        if pending:
            print(f"judges {[row_name(*cfgs[i]) for i in members]}: starting vLLM on {model_dir} (log {log})",
                  file=stream or sys.stderr, flush=True)
        # every answer already journaled: they came from a server an earlier run started on this machine
        server = (vllm_server(vllm_python, model_dir, served_name=served_name, log_path=log, kv_cache_gib=kv_cache_gib)
                  if pending else nullcontext("http://127.0.0.1/v1"))
        with server as url:
            for i in members:
                rows[i] = measure_judge(served[i], queries, base_url=url, requests=requests, concurrency=concurrency,
                                        label=row_name(*cfgs[i]), stream=stream, journal_dir=journal_dir)
                rows[i]["engine"] = "vLLM"
    return rows  # type: ignore[return-value]
