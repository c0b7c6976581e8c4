"""The labelling run: pairs file + teacher config -> a resumable directory of label shards.

Work is cut into shards of ``shard_size`` pairs; each shard is written atomically and the manifest
updated after it, so a killed run loses at most one shard and re-running the same command resumes.
The manifest pins what the labels mean (judge, prompts, model, generation budgets, pairs file): a
directory can never mix labels from two different teachers or two different pair files.

Round 1 (intent) runs once per query and is cached for the life of the process; round 2 runs once
per pair. The score is not taken from the generated digit but read Rank1-style: generation stops at
``<score>`` (a cut-off reasoning is repaired to end there) and one forward pass gives the teacher's
probabilities over "0", "1", "2" — the soft label the student is trained on.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from r3edge.core.config import TeacherConfig, load_yaml
from r3edge.core.errors import R3EdgeError
from r3edge.core.labels import read_labels, read_manifest, shard_paths, write_manifest, write_shard
from r3edge.core.pairs import Candidate, QueryCandidates, read_queries

# Manifest fields that define what the labels mean; any difference on resume is a different run.
IDENTITY_KEYS = (
    "judge", "teacher", "teacher_model", "teacher_config_sha256", "prompt_hash",
    "pairs_sha256", "shard", "limit", "n_pairs",
)


def parse_shard(spec: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise R3EdgeError(f"--shard {spec!r} is not of the form i/n", "write e.g. --shard 0/4 (worker 0 of 4)") from None
    if n < 1 or not 0 <= i < n:
        raise R3EdgeError(f"--shard {spec!r}: need 0 <= i < n", "write e.g. --shard 3/4 for the last of 4 workers")
    return i, n


def shard_of(qid: str, n: int) -> int:
    """Stable across machines and Python runs (unlike ``hash``), so workers agree on the split."""
    return int.from_bytes(hashlib.sha1(qid.encode("utf-8")).digest()[:8], "big") % n


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def teacher_model_ref(cfg: TeacherConfig) -> str:
    if cfg.model.pretrained is not None:
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
            raise R3EdgeError(f"{out} holds label shards but no manifest.json",
                              "pass --overwrite to start over, or choose another --out directory")
        return set()
    old = read_manifest(out)
    diff = [k for k in IDENTITY_KEYS if old.get(k) != identity[k]]
    if diff:
        detail = ", ".join(f"{k}: {old.get(k)!r} -> {identity[k]!r}" for k in diff)
        raise R3EdgeError(f"{out} holds labels from a different run ({detail})",
                          "pass --overwrite to discard them, or choose another --out directory")
    done: set[tuple[str, str]] = set()
    table = read_labels(out, allow_partial=True, columns=["qid", "docid"])
    for qid, docid in zip(table.column("qid").to_pylist(), table.column("docid").to_pylist()):
        if (qid, docid) in done:
            raise R3EdgeError(f"{out}: pair ({qid}, {docid}) is labelled twice", "pass --overwrite to start over")
        done.add((qid, docid))
    return done


def label_pairs(
    pairs_path: str | Path,
    teacher_config_path: str | Path,
    out_dir: str | Path,
    *,
    shard_size: int = 64,
    shard: str = "0/1",
    limit: int | None = None,
    overwrite: bool = False,
    stream: TextIO | None = None,
) -> Path:
    """Label the pairs with the configured teacher into ``out_dir`` (resumable); returns ``out_dir``."""
    from r3edge.core.progress import Progress
    from r3edge.distill.judges import get_judge

    stream = stream if stream is not None else sys.stderr
    if shard_size < 1:
        raise R3EdgeError(f"--shard-size {shard_size} must be at least 1", "use e.g. --shard-size 64")
    if limit is not None and limit < 1:
        raise R3EdgeError(f"--limit {limit} must be at least 1", "omit --limit to label every pair")
    pairs_path, out = Path(pairs_path), Path(out_dir)
    cfg = load_yaml(teacher_config_path, TeacherConfig)
    judge = get_judge(cfg.judge)
    shard_spec = parse_shard(shard)
    queries = read_queries(pairs_path)
    plan = plan_pairs(queries, shard_spec, limit)
    if not plan:
        raise R3EdgeError(f"--shard {shard} selects no query of {pairs_path}", "use fewer shards than queries")

    identity = {
        "judge": judge.name,
        "teacher": cfg.name,
        "teacher_model": teacher_model_ref(cfg),
        "teacher_config_sha256": hashlib.sha256(json.dumps(cfg.model_dump(), sort_keys=True).encode()).hexdigest(),
        "prompt_hash": judge.prompt_hash,
        "pairs_file": str(pairs_path),
        "pairs_sha256": file_sha256(pairs_path),
        "shard": shard,
        "limit": limit,
        "n_pairs": len(plan),
    }
    done = _prepare_dir(out, identity, overwrite)
    planned = {(q.qid, c.docid) for q, c in plan}
    if not done <= planned:
        raise R3EdgeError(f"{out} holds pairs that are not in this run's plan", "pass --overwrite to start over")
    manifest = {
        **identity,
        "native_scale": judge.native_scale,
        "label_values": [judge.to_label(int(t)) for t in judge.score_tokens],
        "n_labels": len(judge.score_tokens),
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
              f"[{identity['teacher_model']}], judge {judge.name}; loading the teacher...", file=stream, flush=True)
        from r3edge.distill.backends import load_backend

        run = _Run(cfg, judge, load_backend(cfg), Counter(q.qid for q, _ in plan))
        progress = Progress(len(plan), "label", stream=stream, initial=len(done))
        for start in range(0, len(todo), shard_size):
            chunk = todo[start:start + shard_size]
            write_shard(out, run.label_chunk(chunk))
            manifest["n_done"] += len(chunk)
            manifest["intent_calls"] = manifest.get("intent_calls", 0) + run.pop_intent_calls()
            write_manifest(out, manifest)
            progress.update(len(chunk))
        progress.close()
    manifest["complete"] = True
    write_manifest(out, manifest)
    print(summarize(out), file=stream, flush=True)
    return out


class _Run:
    """One process's labelling state: the loaded teacher and the per-query intent cache."""

    def __init__(self, cfg: TeacherConfig, judge, backend, pairs_per_query: Counter):
        self.cfg, self.judge, self.backend = cfg, judge, backend
        self.teacher_model = teacher_model_ref(cfg)
        self.pairs_per_query = pairs_per_query
        self.score_ids = backend.score_token_ids(judge.score_tokens, judge.score_open)
        self.intents: dict[str, _IntentResult] = {}
        self._intent_calls = 0

    def pop_intent_calls(self) -> int:
        n, self._intent_calls = self._intent_calls, 0
        return n

    def _cut(self, text: str) -> str:
        return text[: self.cfg.generation.max_doc_chars]

    def _ensure_intents(self, queries: list[QueryCandidates]) -> None:
        missing = {q.qid: q for q in queries if q.qid not in self.intents}
        if not missing:
            return
        qs = list(missing.values())
        msgs = [self.judge.intent_messages(q.query, [self._cut(a) for a in q.auxiliary_docs(self.cfg.n_aux)]) for q in qs]
        pre = self.judge.reply_prefix
        gens = self.backend.generate([self.backend.render(m) + pre for m in msgs],
                                     self.cfg.generation.intent_max_new_tokens, ["</intent>"])
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
        judge, backend = self.judge, self.backend
        self._ensure_intents([q for q, _ in chunk])
        docs = [self._cut(c.text) for _, c in chunk]
        pre = judge.reply_prefix
        prompts = [backend.render(judge.assess_messages(q.query, d, self.intents[q.qid].history)) + pre
                   for (q, _), d in zip(chunk, docs)]
        repairs: dict[str, tuple[str, bool]] = {}  # the backend's completions, reused for the records

        def complete(text: str) -> str:
            repairs[text] = judge.repair(pre + text)
            return repairs[text][0][len(pre):]

        gens, probs = backend.generate_and_score(
            prompts, self.cfg.generation.assess_max_new_tokens, [judge.score_open], complete, self.score_ids)
        repaired = [repairs[g.text] for g in gens]
        records = []
        for k, ((q, c), doc, gen, (prefix, was_repaired)) in enumerate(zip(chunk, docs, gens, repaired)):
            native = int(probs[k].argmax())
            verdict = prefix[: -len(judge.score_open)] + f"{judge.score_open}{native}</score>"
            parsed = judge.parse_assessment(verdict, doc)
            intent = self.intents[q.qid]
            records.append({
                "qid": q.qid, "docid": c.docid, "query": q.query, "text": c.text, "gold": c.label,
                "judge": judge.name, "teacher_model": self.teacher_model, "prompt_hash": judge.prompt_hash,
                "probs": [float(x) for x in probs[k]], "score": judge.to_label(native),
                "native_score": float(native), "native_scale": judge.native_scale,
                # I_format over both rounds; a reply that needed repair is never well formed
                "format_ok": bool(parsed.format_ok and not was_repaired and intent.format_ok),
                "intent": intent.intent, "extract": parsed.extract,
                "extract_is_verbatim": parsed.extract_is_verbatim,
                "raw_intent": intent.raw, "raw_assessment": pre + gen.text,
                "prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
                "latency_s": gen.latency_s + intent.latency_s / self.pairs_per_query[q.qid],
            })
        return records


def summarize(out: str | Path) -> str:
    """Counts a user checks before training: how many, how well formed, how the scores spread."""
    t = read_labels(out, allow_partial=True)
    n = t.num_rows
    if n == 0:
        return f"label: {out}: no records"
    ok = sum(t.column("format_ok").to_pylist())
    scores = Counter(t.column("score").to_pylist())
    hist = " ".join(f"{s}:{scores.get(s, 0)}" for s in sorted(scores))
    lines = [
        f"label: {out}: {n} pairs, format_ok {ok}/{n} ({ok / n:.1%}), score histogram {hist}",
        f"label: mean latency {sum(t.column('latency_s').to_pylist()) / n:.3f} s/pair, "
        f"mean tokens prompt {sum(t.column('prompt_tokens').to_pylist()) / n:.0f} "
        f"+ completion {sum(t.column('completion_tokens').to_pylist()) / n:.0f}",
    ]
    gold = [(g, s) for g, s in zip(t.column("gold").to_pylist(), t.column("score").to_pylist()) if g is not None]
    if gold:
        agree = sum(g == s for g, s in gold)
        lines.append(f"label: agreement with gold labels {agree}/{len(gold)} ({agree / len(gold):.1%})")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(summarize(sys.argv[1]))
