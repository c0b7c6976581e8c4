"""The labelling run: pairs file + teacher config -> a resumable directory of label shards.

Work is cut into shards of ``shard_size`` pairs; each shard is written atomically and the manifest
updated after it, so a killed run loses at most one shard and re-running the same command resumes.
The manifest pins what the labels mean (judge, prompts, model, label mapping, pairs file): a
directory can never mix labels from two different teachers or two different pair files, and a lock
refuses a second run on the same directory while the first is alive.

For two-round judges (R³A) round 1 (intent) runs once per query and is cached for the life of the
process; round 2 runs once per pair as a continuation of that chat, so an OpenAI-compatible
server's prefix cache reuses the shared conversation. Read-out judges get the score Rank1-style:
generation stops at the judge's score marker (a cut-off reasoning is repaired to end there) and the
teacher's probabilities over the native score tokens are read there (a judge whose prompt already
ends at the marker, the score-only judge, is only prefilled and read); sampling judges (Retro*) draw
K trajectories and integrate their parsed scores. Either way the native distribution is mapped to
the student's labels by the config's ``label_map`` or ``bands``: the soft label the student learns.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from r3edge.core.config import TeacherConfig, load_yaml
from r3edge.core.errors import Conflict, ErrorKind, InvalidInput, R3EdgeError
from r3edge.core.fileio import file_sha256
from r3edge.core.labels import MEANING_KEYS, read_labels, read_manifest, shard_paths, write_manifest, write_shard
from r3edge.core.pairs import Candidate, QueryCandidates, read_queries
from r3edge.distill.label.judges import PairContext, prefill_only

# Manifest fields that define what the labels mean; any difference on resume is a different run.
IDENTITY_KEYS = (*MEANING_KEYS, "pairs_sha256", "shard", "limit", "n_pairs")
LOCK_FILE = ".lock"


def parse_shard(spec: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise InvalidInput(f"--shard {spec!r} is not of the form i/n", "write e.g. --shard 0/4 (worker 0 of 4)") from None
    if n < 1 or not 0 <= i < n:
        raise InvalidInput(f"--shard {spec!r}: need 0 <= i < n", "write e.g. --shard 3/4 for the last of 4 workers")
    return i, n


def shard_of(qid: str, n: int) -> int:
    """Stable across machines and Python runs (unlike ``hash``), so workers agree on the split."""
    return int.from_bytes(hashlib.sha1(qid.encode("utf-8")).digest()[:8], "big") % n


def teacher_model_ref(cfg: TeacherConfig) -> str:
    """What the labels were computed with: a package or hub name, a local directory's weights by hash
    (two fine-tunes written to the same path are different teachers), or a random init's recipe."""
    if cfg.model.pretrained is not None:
        local = Path(cfg.model.pretrained)
        if local.is_dir():
            h = hashlib.sha256()
            for w in sorted(p for p in local.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf")):
                h.update(w.name.encode())
                h.update(file_sha256(w).encode())
            return f"local:{local.name}:{h.hexdigest()[:12]}"
        return cfg.model.pretrained
    arch = hashlib.sha256(json.dumps(cfg.model.architecture, sort_keys=True).encode()).hexdigest()[:12]
    return f"random-init:{cfg.model.architecture.get('model_type', '?')}:{arch}:seed{cfg.model.seed}"


@dataclass
class _IntentResult:
    history: list[dict[str, str]]
    raw: str
    intent: str | None
    format_ok: bool
    latency_s: float


def plan_pairs(queries: list[QueryCandidates], shard: tuple[int, int], limit: int | None):
    """The (query, candidate) pairs this run labels, in file order."""
    i, n = shard
    plan = [(q, c) for q in queries if shard_of(q.qid, n) == i for c in q.candidates]
    return plan[:limit] if limit is not None else plan


def _prepare_dir(out: Path, identity: dict, overwrite: bool) -> set[tuple[str, str]]:
    """Create, clear or validate ``out``; return the (qid, docid) pairs already labelled."""
    out.mkdir(parents=True, exist_ok=True)
    if overwrite:
        for p in [*shard_paths(out), *out.glob(".part-*.tmp"), out / "manifest.json"]:
            p.unlink(missing_ok=True)
    for tmp in out.glob(".part-*.tmp"):  # a shard a killed run never renamed: never accepted
        tmp.unlink()
    if not (out / "manifest.json").is_file():
        if shard_paths(out):
            raise InvalidInput(f"{out} holds label shards but no manifest.json",
                              "pass --overwrite to start over, or choose another --out directory")
        return set()
    old = read_manifest(out)
    diff = [k for k in IDENTITY_KEYS if old.get(k) != identity[k]]
    if diff:
        detail = ", ".join(f"{k}: {old.get(k)!r} -> {identity[k]!r}" for k in diff)
        raise InvalidInput(f"{out} holds labels from a different run ({detail})",
                          "pass --overwrite to discard them, or choose another --out directory")
    done: set[tuple[str, str]] = set()
    table = read_labels(out, allow_partial=True, columns=["qid", "docid"])
    for qid, docid in zip(table.column("qid").to_pylist(), table.column("docid").to_pylist()):
        if (qid, docid) in done:
            raise InvalidInput(f"{out}: pair ({qid}, {docid}) is labelled twice", "pass --overwrite to start over")
        done.add((qid, docid))
    return done


class LabelMapping:
    """The judge's native scale -> the student's labels, as the teacher config states it."""

    def __init__(self, cfg: TeacherConfig, judge):
        self.bands = list(cfg.bands) if cfg.bands is not None else None
        lmap = cfg.label_map if cfg.label_map is not None else (None if self.bands else judge.default_label_map)
        if self.bands is None and lmap is None:
            raise InvalidInput(f"teacher config {cfg.name!r} does not say how judge {judge.name!r} scores map to student labels",
                              "add 'label_map: {native: label, ...}' or, for 0..100 scales, 'bands: [t1, t2]'")
        if self.bands is None:
            missing = [v for v in judge.native_values if v not in lmap]
            if missing:
                raise InvalidInput(f"teacher config {cfg.name!r}: label_map has no entry for native scores {missing}",
                                  f"map every score of {judge.native_scale} to a student label")
            self.map = {int(k): int(v) for k, v in lmap.items()}
            self.n_labels = max(self.map.values()) + 1
        else:
            self.map = None
            self.n_labels = len(self.bands) + 1
        if self.n_labels < 2:
            raise InvalidInput(f"teacher config {cfg.name!r} maps every score to one label", "map to at least two labels")
        self.native_values = tuple(judge.native_values)

    def label(self, native: float) -> int:
        if self.map is not None:
            return self.map[int(native)]
        return bisect.bisect_right(self.bands, native)

    def from_native_probs(self, p: np.ndarray) -> np.ndarray:
        """[n, n_native] read-out probabilities -> [n, n_labels] by summing the mass of each label."""
        out = np.zeros((p.shape[0], self.n_labels), dtype=np.float64)
        for j, v in enumerate(self.native_values):
            out[:, self.label(v)] += p[:, j]
        return out / out.sum(axis=1, keepdims=True)

    def from_samples(self, scores: list[int | None], weights: np.ndarray) -> np.ndarray | None:
        """Weighted histogram of the parsable samples' labels; None when no sample parsed."""
        out = np.zeros(self.n_labels, dtype=np.float64)
        for s, w in zip(scores, weights):
            if s is not None:
                out[self.label(s)] += w
        return out / out.sum() if out.sum() > 0 else None

    def describe(self) -> dict:
        return {"label_map": self.map, "bands": self.bands, "n_labels": self.n_labels}


class RunLock:
    """An exclusive ``flock`` on ``out/.lock`` for the life of a labelling run.

    A second run on the same directory is refused at once instead of interleaving shards; the
    kernel drops the lock when the holder dies (even by SIGKILL), so a resume is never blocked.
    """

    def __init__(self, out: Path):
        import fcntl

        out.mkdir(parents=True, exist_ok=True)
        self.path = out / LOCK_FILE
        self._fh = self.path.open("a+")
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.seek(0)
            holder = self._fh.read().strip() or "another process"
            self._fh.close()
            raise Conflict(f"{out} is being labelled by {holder}",
                           "wait for that run to finish, or label into another --out directory") from None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        self._fh.flush()

    def release(self) -> None:
        import fcntl

        if not self._fh.closed:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def load_teacher_config(teacher_config_path: str | Path, *, backend: str | None = None, base_url: str | None = None,
                        samples: int | None = None, model: str | Path | None = None,
                        batch_size: int | None = None) -> TeacherConfig:
    """The teacher config with the command line's overrides applied (and validated again).

    ``model`` replaces the config's weights (e.g. the directory `r3edge teacher sft` wrote) and keeps
    its judge, prompts, budgets and dtype; ``served_model`` is cleared because it named the old model.
    ``batch_size`` (generation rows per batch) is how fast, not what: a GPU takes ~10x a CPU's.
    """
    cfg = load_yaml(teacher_config_path, TeacherConfig)
    overrides: dict = {k: v for k, v in {"backend": backend, "base_url": base_url, "samples": samples}.items() if v is not None}
    if batch_size is not None:
        overrides["generation"] = {**cfg.generation.model_dump(), "batch_size": batch_size}
    if model is not None:
        overrides["model"] = {"pretrained": str(model), "dtype": cfg.model.dtype}
        overrides["served_model"] = None
    if not overrides:
        return cfg
    try:
        return TeacherConfig.model_validate({**cfg.model_dump(), **overrides})
    except Exception as exc:  # pydantic.ValidationError: name the flag
        raise InvalidInput(f"teacher config with {overrides}: {exc}",
                          "fix the --backend / --base-url / --samples / --teacher-model / --batch-size flags") from exc


def label_pairs(
    pairs_path: str | Path,
    teacher_config_path: str | Path,
    out_dir: str | Path,
    *,
    shard_size: int = 64,
    shard: str = "0/1",
    limit: int | None = None,
    overwrite: bool = False,
    backend: str | None = None,
    base_url: str | Sequence[str] | None = None,
    max_in_flight: int | None = None,
    samples: int | None = None,
    teacher_model: str | Path | None = None,
    batch_size: int | None = None,
    stream: TextIO | None = None,
) -> Path:
    """Label the pairs with the configured teacher into ``out_dir`` (resumable); returns ``out_dir``.

    ``teacher_model`` runs the config's judge with other weights (see :func:`load_teacher_config`).
    ``base_url`` may name several OpenAI-compatible servers: the pairs are spread over them by load, and
    a server that fails has its pairs labelled by the others (:mod:`r3edge.distill.label.pool`);
    ``max_in_flight`` is the calls in flight per server. Which server answered is not part of the labels'
    identity; the manifest's ``servers`` counts each one's calls."""
    from r3edge.distill.label.judges import get_judge

    stream = stream if stream is not None else sys.stderr
    if shard_size < 1:
        raise InvalidInput(f"--shard-size {shard_size} must be at least 1", "use e.g. --shard-size 64")
    if limit is not None and limit < 1:
        raise InvalidInput(f"--limit {limit} must be at least 1", "omit --limit to label every pair")
    pairs_path, out = Path(pairs_path), Path(out_dir)
    urls = [base_url] if isinstance(base_url, str) else list(base_url or [])
    cfg = load_teacher_config(teacher_config_path, backend=backend, base_url=urls[0] if urls else None, samples=samples,
                              model=teacher_model, batch_size=batch_size)
    judge = get_judge(cfg.judge)
    if judge.score_tokens is not None and cfg.samples != 1:
        raise InvalidInput(f"judge {judge.name!r} reads its score distribution in one pass; samples={cfg.samples} adds nothing",
                          "use --samples 1 (sampling is for judges without single-token scores, e.g. retro)")
    mapping = LabelMapping(cfg, judge)
    shard_spec = parse_shard(shard)
    queries = read_queries(pairs_path)
    plan = plan_pairs(queries, shard_spec, limit)
    if not plan:
        raise InvalidInput(f"--shard {shard} selects no query of {pairs_path}", "use fewer shards than queries")

    # The backend and its address are how labels are computed, not what they mean: not identity.
    meaning = cfg.model_dump(exclude={"backend", "base_url", "served_model", "generation"})
    meaning["generation"] = cfg.generation.model_dump(exclude={"batch_size"})
    identity = {
        "judge": judge.name,
        "teacher": cfg.name,
        "teacher_model": teacher_model_ref(cfg),
        "teacher_config_sha256": hashlib.sha256(json.dumps(meaning, sort_keys=True).encode()).hexdigest(),
        "prompt_hash": judge.prompt_hash,
        "pairs_file": pairs_path.name,
        "pairs_sha256": file_sha256(pairs_path),
        "shard": shard,
        "limit": limit,
        "n_pairs": len(plan),
    }
    with RunLock(out):
        done = _prepare_dir(out, identity, overwrite)
        planned = {(q.qid, c.docid) for q, c in plan}
        if not done <= planned:
            raise InvalidInput(f"{out} holds pairs that are not in this run's plan", "pass --overwrite to start over")
        manifest = {
            **identity,
            "native_scale": judge.native_scale,
            "label_values": [float(v) for v in range(mapping.n_labels)],
            "n_labels": mapping.n_labels,
            "mapping": mapping.describe(),
            "samples": cfg.samples,
            "integration": cfg.integration if cfg.samples > 1 else None,
            "generation": cfg.generation.model_dump(),
            "n_done": len(done),
            "complete": False,
        }
        if (out / "manifest.json").is_file():
            manifest = {**read_manifest(out), **manifest}
        todo = [(q, c) for q, c in plan if (q.qid, c.docid) not in done]
        if todo:
            write_manifest(out, manifest)
            print(f"label: {len(plan)} pairs ({len(done)} already done), teacher {cfg.name} "
                  f"[{identity['teacher_model']}], judge {judge.name}, backend {cfg.backend}"
                  f"{f' on {len(urls)} servers' if len(urls) > 1 and cfg.backend == 'openai' else ''}; loading the teacher...",
                  file=stream, flush=True)
            _label_todo(cfg, judge, mapping, plan, todo, out, manifest, shard_size, stream, urls or None, max_in_flight)
        manifest["complete"] = True
        manifest["summary"] = run_summary(out)
        write_manifest(out, manifest)
    print(summarize(out), file=stream, flush=True)
    return out


def _label_todo(cfg, judge, mapping, plan, todo, out, manifest, shard_size, stream, urls, max_in_flight) -> None:
    from r3edge.core.progress import Progress
    from r3edge.distill.label.backends import load_backend

    backend = load_backend(cfg, urls, max_in_flight=max_in_flight, log=lambda line: print(line, file=stream, flush=True))
    earlier = manifest.get("servers") or {}  # counts of the runs this one resumes
    try:
        run = LabelRun(cfg, judge, backend, mapping, Counter(q.qid for q, _ in plan))
        progress = Progress(len(plan), "label", stream=stream, initial=manifest["n_done"])
        t0, tokens = time.perf_counter(), 0
        for start in range(0, len(todo), shard_size):
            chunk = todo[start:start + shard_size]
            records = run.label_chunk(chunk)
            write_shard(out, records)
            manifest["n_done"] += len(chunk)
            manifest["intent_calls"] = manifest.get("intent_calls", 0) + run.pop_intent_calls()
            manifest["wall_s"] = round(manifest.get("wall_s", 0.0) + (time.perf_counter() - t0), 2)
            if hasattr(backend, "server_stats"):  # the openai backend: calls answered and failed per server
                manifest["servers"] = _add_server_counts(earlier, backend.server_stats())
            write_manifest(out, manifest)
            tokens += sum(r["prompt_tokens"] + r["completion_tokens"] for r in records)
            t1 = time.perf_counter()
            progress.update(len(chunk), extra=f"{tokens / max(t1 - t0, 1e-9):.0f} tok/s")
            t0, tokens = t1, 0
        progress.close()
    finally:
        backend.close()


def _add_server_counts(earlier: dict, now: dict) -> dict:
    """Per server URL, this run's calls answered and failed added to those of the runs it resumes."""
    out = {url: dict(c) for url, c in earlier.items()}
    for url, c in now.items():
        old = out.get(url, {})
        out[url] = {k: old.get(k, 0) + c[k] for k in ("answered", "failed")}
    return out


def cut_document(cfg: TeacherConfig, text: str) -> str:
    """A document as the judge is shown it: the first ``generation.max_doc_chars`` characters."""
    return text[: cfg.generation.max_doc_chars]


def intent_prompt(cfg: TeacherConfig, judge, q: QueryCandidates) -> list[dict[str, str]]:
    """Round 1's messages for a query: its auxiliary posts (``n_aux``), each cut like a document."""
    return judge.intent_messages(q.query, [cut_document(cfg, a) for a in q.auxiliary_docs(cfg.n_aux)])


def pair_context(cfg: TeacherConfig, q: QueryCandidates, c: Candidate) -> PairContext:
    """What the judge sees of one pair. Labelling and SFT traces both build prompts from these three
    functions, so a fine-tuned judge is trained on exactly the prompts it will label."""
    return PairContext(q.query, cut_document(cfg, c.text), q.meta or {}, c.meta or {})


class LabelRun:
    """One process's labelling state: the loaded teacher and the per-query intent cache.

    Public because judges served as rerankers (:mod:`r3edge.distill.label.rerank`) label a request's pairs
    through it, so the judge a benchmark times is the judge that labels."""

    def __init__(self, cfg: TeacherConfig, judge, backend, mapping: LabelMapping, pairs_per_query: Counter):
        self.cfg, self.judge, self.backend, self.mapping = cfg, judge, backend, mapping
        self.teacher_model = teacher_model_ref(cfg)
        self.pairs_per_query = pairs_per_query
        self.intents: dict[str, _IntentResult] = {}
        self._intent_calls = 0

    def pop_intent_calls(self) -> int:
        n, self._intent_calls = self._intent_calls, 0
        return n

    def _ensure_intents(self, queries: list[QueryCandidates]) -> None:
        missing = {q.qid: q for q in queries if q.qid not in self.intents}
        if not missing:
            return
        qs = list(missing.values())
        msgs = [intent_prompt(self.cfg, self.judge, q) for q in qs]
        pre = self.judge.reply_prefix
        gens = self.backend.generate([(m, pre) for m in msgs], self.cfg.generation.intent_max_new_tokens, ["</intent>"])
        self._intent_calls += len(qs)
        for q, m, g in zip(qs, msgs, gens):
            text = pre + g.text
            end = text.find("</intent>")
            raw = text[: end + len("</intent>")] if end >= 0 else text
            parsed = self.judge.parse_intent(raw)
            self.intents[q.qid] = _IntentResult(
                history=[*m, {"role": "assistant", "content": raw}], raw=raw,
                intent=parsed.intent, format_ok=parsed.format_ok, latency_s=g.latency_s,
            )

    def label_chunk(self, chunk: list[tuple[QueryCandidates, Candidate]]) -> list[dict]:
        judge = self.judge
        if judge.two_round:
            self._ensure_intents([q for q, _ in chunk])
        pairs = [pair_context(self.cfg, q, c) for q, c in chunk]
        pre = judge.reply_prefix
        convs = [(judge.assess_messages(p, self.intents[q.qid].history if judge.two_round else None), pre)
                 for (q, _), p in zip(chunk, pairs)]
        if judge.score_tokens is not None:
            outcomes = self._read_out(convs, pairs)
            _require_finite_probs(chunk, outcomes, self.teacher_model)
        else:
            outcomes = self._sampled(convs, pairs)
        records = []
        for (q, c), o in zip(chunk, outcomes):
            intent = self.intents.get(q.qid)
            parsed = o["parsed"]
            latency = o["latency_s"] + (intent.latency_s / self.pairs_per_query[q.qid] if intent else 0.0)
            records.append({
                "qid": q.qid, "docid": c.docid, "query": q.query, "text": c.text, "gold": c.label,
                "judge": judge.name, "teacher_model": self.teacher_model, "prompt_hash": judge.prompt_hash,
                "probs": o["probs"], "score": o["score"],
                "native_score": o["native"], "native_scale": judge.native_scale,
                # I_format over every round; a reply that needed repair is never well formed
                "format_ok": bool(o["format_ok"] and (intent.format_ok if intent else True)),
                "repaired": o["repaired"],
                "intent": intent.intent if intent else None, "extract": parsed.extract if parsed else None,
                "extract_is_verbatim": bool(parsed.extract_is_verbatim) if parsed else False,
                "details": json.dumps(dict(parsed.details)) if parsed and parsed.details else None,
                "raw_intent": intent.raw if intent else None, "raw_assessment": o["raw"],
                "prompt_tokens": o["prompt_tokens"], "completion_tokens": o["completion_tokens"],
                "latency_s": latency,
            })
        return records

    def _read_out(self, convs, pairs) -> list[dict]:
        judge, pre = self.judge, self.judge.reply_prefix
        if prefill_only(judge):  # the prompt ends at the score marker: nothing to generate
            gens, native_probs = self.backend.read_scores(convs, judge.score_tokens)
        else:
            gens, native_probs = self.backend.generate_and_score(
                convs, self.cfg.generation.assess_max_new_tokens, judge.score_open, judge.repair, judge.score_tokens)
        student = self.mapping.from_native_probs(native_probs)
        out = []
        for k, (pair, gen) in enumerate(zip(pairs, gens)):
            native = judge.native_values[int(native_probs[k].argmax())]
            # what the teacher wrote up to the marker, completed with the verdict it was read to give
            reply, _ = judge.repair(pre + gen.text)
            parsed = judge.parse_assessment(reply + verdict_tail(judge, native), pair)
            out.append({"parsed": parsed, "probs": [float(x) for x in student[k]], "score": int(student[k].argmax()),
                        "native": float(native), "format_ok": parsed.format_ok and not gen.repaired,
                        "repaired": gen.repaired, "raw": pre + gen.text, "prompt_tokens": gen.prompt_tokens,
                        "completion_tokens": gen.completion_tokens, "latency_s": gen.latency_s})
        return out

    def _sampled(self, convs, pairs) -> list[dict]:
        from r3edge.distill.label.judges.retro import closest_sample, integrate

        judge, cfg, pre = self.judge, self.cfg, self.judge.reply_prefix
        samples = self.backend.sample(convs, cfg.generation.assess_max_new_tokens, [], cfg.samples, cfg.sample_temperature)
        out = []
        for pair, gens in zip(pairs, samples):
            parsed_all = [judge.parse_assessment(pre + g.text, pair) for g in gens]
            scores = [p.score for p in parsed_all]
            lps = [g.logprob for g in gens]
            native = integrate(scores, lps if cfg.integration == "likelihood" else None, cfg.integration)
            weights = _sample_weights(scores, lps, cfg.integration)
            probs = self.mapping.from_samples(scores, weights)
            best = closest_sample(scores, native) if native is not None else 0
            out.append({"parsed": parsed_all[best], "probs": [float(x) for x in probs] if probs is not None else None,
                        "score": int(np.argmax(probs)) if probs is not None else None,
                        "native": float(native) if native is not None else None,
                        "format_ok": all(p.format_ok for p in parsed_all), "repaired": False,
                        "raw": pre + gens[best].text, "prompt_tokens": gens[0].prompt_tokens,
                        "completion_tokens": sum(g.completion_tokens for g in gens),
                        "latency_s": sum(g.latency_s for g in gens)})
        return out


def _require_finite_probs(chunk, outcomes: list[dict], model: str) -> None:
    """A QUALITY error, before anything of the chunk is written, when a read-out is NaN or inf: the
    forward pass failed (e.g. weights a diverged fine-tune saved as NaN), and NaN records would pass as
    label 0 (the argmax of NaN) with no format failure."""
    for (q, c), o in zip(chunk, outcomes):
        if not np.isfinite(o["probs"]).all():
            raise R3EdgeError(f"teacher {model} read non-finite probabilities {o['probs']} for pair ({q.qid}, {c.docid}); "
                              "nothing of this chunk was written",
                              "check the teacher's weights for NaN (a cold start that diverged saves them), then rerun: "
                              "labelling resumes after the last written shard", kind=ErrorKind.QUALITY)


def verdict_tail(judge, native: int) -> str:
    """The text after the score marker that completes a verdict: the score token of ``native`` and
    the judge's ``score_close`` (``2</score>`` for tag judges, ``2}`` for Tongxiao's JSON, `` true`` for Rank1)."""
    token = judge.score_tokens[judge.native_values.index(native)] if judge.score_tokens else str(native)
    return token + judge.score_close


def _sample_weights(scores, logprobs, mode: str) -> np.ndarray:
    """Retro*'s integration weights (:func:`retro.sample_weights`), normalised to sum to 1 over the
    parsable samples (all zero when none parsed)."""
    from r3edge.distill.label.judges.retro import sample_weights

    w = np.asarray(sample_weights(scores, logprobs if mode == "likelihood" else None, mode), dtype=np.float64)
    return w / w.sum() if w.sum() > 0 else w


def run_summary(out: str | Path) -> dict:
    """What a run produced: labels per class, format failures, repairs, tokens in/out, wall time."""
    t = read_labels(out, allow_partial=True)
    cols = t.to_pydict()
    n = t.num_rows
    scores = Counter(s for s in cols["score"])
    manifest = read_manifest(out)
    return {
        "pairs": n,
        "labels": {str(k): v for k, v in sorted(scores.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))},
        "format_failures": n - sum(bool(x) for x in cols["format_ok"]),
        "repairs": sum(bool(x) for x in cols.get("repaired", [])),
        "no_label": sum(p is None for p in cols["probs"]),
        "prompt_tokens": int(sum(cols["prompt_tokens"])),
        "completion_tokens": int(sum(cols["completion_tokens"])),
        "wall_s": manifest.get("wall_s"),
    }


def merge_shards(pairs_path: str | Path, shard_dirs: list[str | Path], out_dir: str | Path, *,
                 overwrite: bool = False, stream: TextIO | None = None) -> Path:
    """Merge the labels of ``--shard 0/n`` ... ``--shard n-1/n`` into one directory, proving completeness.

    Refused unless every shard is a complete run of the same teacher on this pairs file, the shards
    are exactly 0..n-1 of one n, and together they label every pair of the file once.
    """
    stream = stream if stream is not None else sys.stderr
    pairs_path, out = Path(pairs_path), Path(out_dir)
    manifests = [read_manifest(d) for d in shard_dirs]
    for d, m in zip(shard_dirs, manifests):
        if not m.get("complete"):
            raise InvalidInput(f"{d} is an unfinished labelling run ({m.get('n_done')}/{m.get('n_pairs')} pairs)",
                              "re-run its `r3edge label ... --shard` command until it completes")
        if m.get("limit") is not None:
            raise InvalidInput(f"{d} was labelled with --limit {m['limit']}", "merge only runs over whole shards")
    same = [k for k in IDENTITY_KEYS if k not in ("shard", "limit", "n_pairs")]
    for d, m in zip(shard_dirs[1:], manifests[1:]):
        diff = [k for k in same if m.get(k) != manifests[0].get(k)]
        if diff:
            raise InvalidInput(f"{d} was labelled differently from {shard_dirs[0]} ({', '.join(diff)})",
                              "merge only shards of one `r3edge label` command")
    sha = file_sha256(pairs_path)
    if manifests[0]["pairs_sha256"] != sha:
        raise InvalidInput(f"the shards labelled another pairs file than {pairs_path}", "pass the pairs file the shards were run on")
    specs = [parse_shard(m["shard"]) for m in manifests]
    n = specs[0][1]
    got = sorted(i for i, _ in specs)
    if any(k != n for _, k in specs) or got != list(range(n)):
        raise InvalidInput(f"shards {[m['shard'] for m in manifests]} are not exactly 0/{n} .. {n - 1}/{n}",
                          f"pass one labels directory for each of the {n} shards")
    plan = {(q.qid, c.docid) for q, c in plan_pairs(read_queries(pairs_path), (0, 1), None)}
    tables, seen = [], set()
    for d in shard_dirs:
        t = read_labels(d)
        keys = list(zip(t.column("qid").to_pylist(), t.column("docid").to_pylist()))
        dup = seen.intersection(keys)
        if dup or len(set(keys)) != len(keys):
            raise InvalidInput(f"{d} labels pairs that another shard (or itself) labelled too, e.g. {sorted(dup)[:3]}",
                              "re-label the shards with one --shard i/n each")
        seen.update(keys)
        tables.append(t)
    if seen != plan:
        missing, extra = plan - seen, seen - plan
        raise InvalidInput(f"the shards cover {len(seen)} of {len(plan)} pairs ({len(missing)} missing, {len(extra)} not in the file)",
                          "re-run the missing shards")
    with RunLock(out):
        _prepare_dir(out, {**manifests[0], "shard": "0/1", "limit": None, "n_pairs": len(plan)}, overwrite)
        if shard_paths(out):
            raise InvalidInput(f"{out} already holds labels", "pass --overwrite or choose another --out directory")
        for t in tables:
            write_shard(out, t.to_pylist())
        manifest = {**manifests[0], "shard": "0/1", "merged_from": [m["shard"] for m in manifests],
                    "n_pairs": len(plan), "n_done": len(plan), "complete": True,
                    "wall_s": round(sum(m.get("wall_s") or 0.0 for m in manifests), 2)}
        manifest.pop("summary", None)
        write_manifest(out, manifest)
        manifest["summary"] = run_summary(out)
        write_manifest(out, manifest)
    print(f"label: merged {n} shards into {out}: {len(plan)} pairs, each once", file=stream, flush=True)
    return out


def summarize(out: str | Path) -> str:
    """The run summary as lines a user reads before training (counts from :func:`run_summary`)."""
    t = read_labels(out, allow_partial=True, columns=["gold", "score"])
    if t.num_rows == 0:
        return f"label: {out}: no records"
    s = run_summary(out)
    n = s["pairs"]
    hist = " ".join(f"{k}:{v}" for k, v in s["labels"].items())
    lines = [
        f"label: {out}: {n} pairs; student labels {hist}; format failures {s['format_failures']}/{n}; "
        f"repaired {s['repairs']}; no label {s['no_label']}",
        f"label: tokens in {s['prompt_tokens']} ({s['prompt_tokens'] / n:.0f}/pair) out {s['completion_tokens']} "
        f"({s['completion_tokens'] / n:.0f}/pair); labelling wall time {s['wall_s'] if s['wall_s'] is not None else '?'} s",
    ]
    gold = [(g, p) for g, p in zip(t.column("gold").to_pylist(), t.column("score").to_pylist()) if g is not None]
    if gold:
        agree = sum(g == p for g, p in gold)
        lines.append(f"label: agreement with gold labels {agree}/{len(gold)} ({agree / len(gold):.1%})")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(summarize(sys.argv[1]))
