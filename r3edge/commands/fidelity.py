"""Measure on real graded data how well the teacher judges and how much of its judgement the student keeps.

SemEval-2016 CQA (Qatar Living forum, comments graded 0/1/2, 100 candidates per question):

1. data: subtask A and C train pairs for the teacher's cold start; subtask C train questions for
   distillation; subtask C dev for every measurement;
2. teacher: ``r3edge teacher sft`` on gold-built traces (they teach the R³A format and the gold
   labels, not reasoning: no stronger judge is reachable here);
3. label: the cold-started teacher labels C train and C dev through the labelling backend (a vLLM
   server started from ``--vllm`` when given, else in-process transformers);
4. students: each student config is distilled on the teacher's soft labels, exported (``--variants``, fp32 + int8 by default)
   and served over gRPC on the dev questions;
5. report: ``results.json``, ``report.md`` and ``latency_vs_ndcg.png`` under ``--results``.

Every stage writes under ``--out`` and is skipped when its output is complete, so a rerun resumes.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from contextlib import nullcontext
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    from r3edge.distill.data.datasets import SFT_QUERIES

    parser.add_argument("--data", default="../shared/data/semeval2016-cqa", help="the semeval2016-cqa folder")
    parser.add_argument("--out", default="runs/fidelity", help="working directory of every stage")
    parser.add_argument("--results", default="benchmarks/results/fidelity-semeval",
                        help="where results.json, report.md and the plot are written")
    parser.add_argument("--sft-config", default="r3a-smollm2-cqa",
                        help="teacher cold-start (SFT) config; its teacher config (judge, prompts, budgets) also labels")
    parser.add_argument("--sft-examples", type=int, default=None, help="cap on cold-start traces (default: the config's)")
    parser.add_argument("--students", default="minilm-cqa-bi-rank-wise,minilm-cqa,smollm2-cqa",
                        help="student configs to distil, comma-separated; the first is the recommended one, the report's "
                             "`student` row that the goals are checked on")
    parser.add_argument("--sft-queries", type=int, default=SFT_QUERIES,
                        help="questions in the cold-start pool, half from subtask A train and half from C train; every "
                             "question adds one intent reply to train on, so this bounds the cold start's cost")
    parser.add_argument("--train-queries", type=int, default=None, help="C train questions to label (default: all of them)")
    parser.add_argument("--dev-queries", type=int, default=None, help="C dev questions to evaluate on (default: all of them)")
    parser.add_argument("--vllm", default=None, metavar="PYTHON",
                        help="label through a vLLM server run by this interpreter (e.g. .venv-vllm/bin/python)")
    parser.add_argument("--base-url", default=None, help="label through this running OpenAI-compatible server instead")
    parser.add_argument("--label-batch-size", type=int, default=None, metavar="N",
                        help="in-process labelling: generation rows per batch (default: the teacher config's; ~128 on a GPU)")
    parser.add_argument("--stages-on", default=None, metavar="TEXT",
                        help="where the cold start and labelling ran when not on this machine (e.g. 'NVIDIA H100 80GB, "
                             "device run'); the report names it beside the teacher's latency")
    parser.add_argument("--labels", default=None, metavar="DIR",
                        help="teacher labels made earlier (DIR/train, DIR/dev and, for a cold-started teacher, its "
                             "DIR/sft_report.json; e.g. committed ones): copied into --out, and the teacher is neither "
                             "trained nor run, so the students can be rebuilt on a CPU. Without sft_report.json the "
                             "labels' teacher is reported as a zero-shot judge (its model and config from the manifest)")
    parser.add_argument("--until", default=None, choices=["teacher", "label"],
                        help="stop after this stage (e.g. cold start and labels on a GPU machine, students on the CPU)")
    parser.add_argument("--requests", type=int, default=10,
                        help="requests (one dev question's comments each) per student variant for latency")
    parser.add_argument("--variants", default="fp32,int8",
                        help="export variants of each student (r3edge export --variants); the first quantized one is the "
                             "int8 the goal compares with fp32 (int8-smooth is the variant the demo serves)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the question samples")


def _step(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


def run(args) -> int:
    from r3edge.core.errors import InvalidInput
    from r3edge.core.labels import read_manifest

    if args.vllm and args.base_url:
        raise InvalidInput("--vllm and --base-url both given", "start a server with --vllm, or use a running one with --base-url")
    out = Path(args.out)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    _step("1/5 data: SemEval-2016 CQA")
    sft_gold, train_pairs, dev_pairs = data / "sft-gold.jsonl", data / "train.jsonl", data / "dev.jsonl"
    from r3edge.core.pairs import read_queries
    from r3edge.distill.data.datasets import write_fidelity_pairs

    dev = write_fidelity_pairs(args.data, sft_gold, train_pairs, dev_pairs, sft_queries=args.sft_queries,
                               train_queries=args.train_queries, dev_queries=args.dev_queries, seed=args.seed)
    print(f"{sft_gold}: cold-start pool; {train_pairs}: {len(read_queries(train_pairs))} questions; "
          f"{dev_pairs}: {len(dev)} questions")

    _step("2/5 teacher: cold start on gold-built traces")
    if args.labels:
        sft, teacher_dir = _given_labels(args, out)
    else:
        sft, teacher_dir = _teacher(args, out, sft_gold)
    if args.until == "teacher":
        return 0

    _step("3/5 label: the teacher on C train and C dev")
    labels = _label(args, out, sft.teacher, teacher_dir, (("dev", dev_pairs), ("train", train_pairs)))
    dev_manifest = read_manifest(labels["dev"])
    if args.until == "label":
        return 0

    _step("4/5 students: distil, export, serve")
    names = [s for s in args.students.split(",") if s]
    bench = _students(args, out, names, labels, train_pairs, dev)

    _step("5/5 report")
    results = _results(args, dev, bench, names, dev_manifest, teacher_dir, time.time() - t_start)
    from r3edge.benchmarks.fidelity import write_fidelity_report

    paths = write_fidelity_report(results, args.results, _command(args))
    for k, p in paths.items():
        print(f"{k}: {p}")
    return 0


def _teacher(args, out: Path, sft_gold: Path):
    """The SFT config and the cold-started teacher's directory, trained unless it is already there."""
    from r3edge.distill.teacher.sft import load_sft_config, teacher_sft

    sft = load_sft_config(args.sft_config)
    teacher_dir = (out / "teacher").resolve()
    if not (teacher_dir / "config.json").is_file():
        teacher_sft(sft, teacher_dir, gold=sft_gold, max_examples=args.sft_examples)
    else:
        print(f"{teacher_dir} is complete; skipping")
    return sft, teacher_dir


def _given_labels(args, out: Path):
    """``--labels``: the teacher's labels and cold-start report copied into ``--out`` (the label stage
    then finds them complete, provided they cover these exact pairs files)."""
    import shutil

    from r3edge.core.errors import NotFound
    from r3edge.distill.teacher.sft import load_sft_config

    given = Path(args.labels)
    teacher_dir = (out / "teacher").resolve()
    for split in ("train", "dev"):
        if not (given / split / "manifest.json").is_file():
            raise NotFound(f"--labels {given} has no {split}/manifest.json",
                           "pass a directory holding train/ and dev/ labels directories written by `r3edge label`")
        if not (out / "labels" / split).exists():
            shutil.copytree(given / split, out / "labels" / split)
    teacher_dir.mkdir(parents=True, exist_ok=True)
    if (given / "sft_report.json").is_file():
        shutil.copyfile(given / "sft_report.json", teacher_dir / "sft_report.json")
        print(f"labels and the teacher's report from {given}; the teacher is not trained here")
    else:
        print(f"labels from {given}, by a zero-shot judge (no sft_report.json); the teacher is not run here")
    return load_sft_config(args.sft_config), teacher_dir


def _label(args, out: Path, teacher_config: str, teacher_dir: Path, splits) -> dict[str, Path]:
    """Each split's labels directory, labelled by the teacher where not already complete (through a vLLM
    server started from ``--vllm``, the server at ``--base-url``, or in-process)."""
    from r3edge.core.fileio import file_sha256
    from r3edge.core.labels import read_manifest
    from r3edge.distill.label.driver import label_pairs

    labels = {split: out / "labels" / split for split, _ in splits}

    def complete(split: str, pairs: Path) -> bool:
        # labels finished by an earlier run of this stage (possibly on another machine, whose
        # teacher weights need not be here): complete and over these exact pairs
        if not (labels[split] / "manifest.json").is_file():
            return False
        man = read_manifest(labels[split])
        return bool(man.get("complete")) and man.get("pairs_sha256") == file_sha256(pairs)

    if args.vllm:
        from r3edge.distill.label.backends.vllm_server import vllm_server

        # served under its path: the name --teacher-model gives the openai backend to ask for
        server = vllm_server(args.vllm, teacher_dir, served_name=str(teacher_dir), log_path=out / "vllm.log")
    else:
        server = nullcontext(args.base_url)
    todo = []
    for split, pairs in splits:
        if complete(split, pairs):
            print(f"{labels[split]} is complete; skipping")
        else:
            todo.append((split, pairs))
    if todo:
        with server as url:
            backend = "openai" if url else None
            bs = args.label_batch_size
            for split, pairs in todo:
                label_pairs(pairs, teacher_config, labels[split], teacher_model=teacher_dir, backend=backend, base_url=url,
                            batch_size=bs, shard_size=max(64, bs or 0), stream=sys.stdout)
    return labels


def _students(args, out: Path, names: list[str], labels: dict[str, Path], train_pairs: Path, dev) -> dict[str, dict]:
    """Per student config: distil it on the train labels, export it (``--variants``) and bench it on the
    dev questions; a student or artifact already there is reused."""
    from r3edge.benchmarks.systems import bench_systems
    from r3edge.core.scoring import SCORER_FILE
    from r3edge.distill.student.train import train_student
    from r3edge.export.onnx import export_artifact

    bench: dict[str, dict] = {}
    for name in names:
        student, artifact = out / "students" / name, out / "artifacts" / name
        if not (student / SCORER_FILE).is_file():
            train_student(labels["train"], name, student)
        if not (artifact / "manifest.json").is_file():
            export_artifact(student, artifact, variants=tuple(args.variants.split(",")), calib_pairs=train_pairs)
        bench[name] = bench_systems(dev, artifact=str(artifact), labels_dir=str(labels["dev"]), requests=args.requests)
    return bench


def _results(args, dev, bench: dict, names: list[str], dev_manifest: dict, teacher_dir: Path, wall_s: float) -> dict:
    from r3edge.benchmarks.fidelity import goals, system_entry
    from r3edge.benchmarks.systems import baselines

    first = bench[names[0]]
    values = next(r["label_values"] for r in first["systems"] if r.get("kind") == "student")
    teacher_row = next(r for r in first["systems"] if r.get("kind") == "labels")  # accuracy of its labels
    summary = dev_manifest.get("summary") or {}
    wall = summary.get("wall_s") or dev_manifest.get("wall_s")
    # Measured: the teacher's whole dev labelling run divided by its questions (every candidate of a
    # question is in flight together on the server), not an estimate from per-record latencies.
    per_q_ms = 1e3 * wall / len(dev) if wall else None
    sft_report, model = _teacher_model(teacher_dir, args.sft_config, dev_manifest)
    teacher = system_entry(teacher_row, model=model, format_failures=summary.get("format_failures"),
                           repairs=summary.get("repairs"))
    teacher["latency_ms_top100"] = {"p50": per_q_ms, "p95": None}
    where = args.stages_on or "this machine"
    teacher["latency_source"] = f"measured: dev labelling wall time / questions, on {where}"
    # the students' latencies are this machine's; a teacher timed elsewhere never shares their latency axis
    teacher["axis"] = args.stages_on or next(r["axis"] for r in first["systems"] if r.get("kind") == "student")
    systems: dict = {"teacher": teacher}
    for i, name in enumerate(names):
        # one row per system: the recommended (first) student is "student", the others "student-<config>"
        key = "student" if i == 0 else f"student-{name}"
        for r in (r for r in bench[name]["systems"] if r.get("kind") == "student"):
            suffix = "" if r.get("variant") in (None, "fp32") else f"-{r['variant']}"
            systems[key + suffix] = system_entry(r, model=name, variant=r.get("variant"))
    systems.update(_base_floors(dev, names, values))
    systems.update(baselines(dev, values))
    results = {
        "split": "dev",
        "machine": first["machine"],
        "settings": {"data": str(args.data), "dev_queries": len(dev), "n_pairs": sum(len(q.candidates) for q in dev),
                     "train_queries": args.train_queries or "all",
                     "students": names, "recommended_student": names[0],
                     "sft_config": args.sft_config if sft_report else None, "teacher": dev_manifest.get("teacher"),
                     "labelling": "vllm" if (args.vllm or args.base_url) else "transformers",
                     "cold_start_and_labelling_on": where,
                     "requests_per_variant": args.requests, "variants": args.variants, "wall_s": round(wall_s, 1),
                     "teacher_cold_start": {k: sft_report.get(k) for k in (
                         "base_model", "trained", "trained_by_label", "earlier_round_examples", "tokens", "epochs",
                         "steps", "wall_time_s", "tokens_per_s", "loss_first", "loss_last")} if sft_report else None,
                     "teacher_labelling": summary},
        "systems": systems,
    }
    results["goals"] = goals(results, "student", int8=next((v for v in args.variants.split(",") if v != "fp32"), "int8"))
    rate = summary.get("pairs", 0) / wall if wall else None
    results["notes"] = [
        f"Teacher latency is measured: the wall time of labelling the {len(dev)} dev questions "
        f"({'through a vLLM server' if (args.vllm or args.base_url) else 'in-process with transformers'} on {where}, "
        f"{rate:.2f} pairs/s) divided by the questions." if rate else "Teacher latency: no wall time recorded.",
        "Student latency is measured over gRPC against a served artifact (`r3edge serve` in a child process), "
        "one dev question's comments a request, one request at a time.",
        f"Teacher format: {summary.get('format_failures')} of {summary.get('pairs')} dev records not well formed, "
        f"{summary.get('repairs')} repaired (score read after closing a cut-off reply).",
    ]
    if args.dev_queries is not None:
        from r3edge.core.pairs import read_queries
        from r3edge.distill.data.datasets import semeval_file

        n_dev = len(read_queries(semeval_file(args.data, "C", "dev")))
        if len(dev) < n_dev:
            results["notes"].append(f"Evaluated on a seeded sample of {len(dev)} of the {n_dev} dev questions (--dev-queries).")
    return results


def _teacher_model(teacher_dir: Path, sft_config: str, dev_manifest: dict) -> tuple[dict | None, str]:
    """The teacher's cold-start report (None for a zero-shot judge's given labels) and how its row names it."""
    import json

    path = teacher_dir / "sft_report.json"
    if path.is_file():
        report = json.loads(path.read_text())
        return report, f"{report.get('base_model')} cold-started ({sft_config})"
    return None, f"{dev_manifest.get('teacher_model')} zero-shot ({dev_manifest.get('teacher')})"


def _base_floors(dev, names: list[str], values) -> dict:
    """Each encoder student's base model ranking by plain cosine, untrained (the floor a user already
    has; r3edge.model.student.base_cosine_scoring), one row per distinct base."""
    from r3edge.benchmarks.systems import scored_floor
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.model.student import base_cosine_scoring

    floors: dict = {}
    for name in names:
        config = load_yaml(name, StudentConfig)
        ref = config.model.pretrained
        if any(f["model"] == ref for f in floors.values()):
            continue
        scoring = base_cosine_scoring(config)
        if scoring is not None:
            got = scored_floor(dev, scoring, values)
            floors[f"base-cosine ({name})"] = {
                "model": ref, "ndcg@10": got["ndcg@10"], "ndcg_queries": got["ndcg_queries"],
                "latency_source": "not timed: a floor (the student's pretrained encoder by cosine, no training)"}
    return floors


def _command(args) -> str:
    parts = ["r3edge", "fidelity", "--data", args.data, "--out", args.out, "--results", args.results,
             "--sft-config", args.sft_config, "--students", args.students]
    for flag, val in (("--stages-on", args.stages_on), ("--label-batch-size", args.label_batch_size),
                      ("--sft-examples", args.sft_examples), ("--sft-queries", args.sft_queries), ("--train-queries", args.train_queries),
                      ("--dev-queries", args.dev_queries), ("--vllm", args.vllm), ("--labels", args.labels),
                      ("--variants", None if args.variants == "fp32,int8" else args.variants)):
        if val is not None:
            parts += [flag, str(val)]
    return " ".join(shlex.quote(p) for p in parts)
