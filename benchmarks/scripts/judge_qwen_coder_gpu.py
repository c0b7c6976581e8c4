"""Label SemEval-2016 CQA with the packaged Qwen2.5-Coder-1.5B-Instruct judge on a lent GPU, zero-shot or
cold-started on gold labels, and distil the causal student there.

The 2-core CPU labels this judge at ~0.15 pairs/s (benchmarks/results/judge-qwen-coder-cpu-2core), so the
fidelity run's teacher labels (C dev: 50 questions x 100 comments; C train: 67 x 100) and the extra subtask A
train pairs are made on a GPU machine, in-process (transformers; `label_pairs`, the code `r3edge label`
runs), and brought back to be committed; the students are then rebuilt on a CPU by
``r3edge fidelity --labels DIR``.

A device machine has no network: the GGUF travels in pieces (each call carries at most 64 MiB with the
checkout), cut at fixed byte offsets, not at the packages' part boundaries. ``--pieces DIR`` stands in for
the 22 weight packages with modules whose ``get_part_path()`` returns the pieces in order (the last packages
an empty file), so the reassembly still goes through :func:`r3edge.model.gguf_parts.assemble_gguf` and its
pinned size and sha256 check.

    prepare (here):  python benchmarks/scripts/judge_qwen_coder_gpu.py prepare --pairs DIR --pieces DIR
    label (there):   python3 benchmarks/scripts/judge_qwen_coder_gpu.py label --pairs DIR --pieces DIR \\
                         --labels DIR --tar-to "$OUT" [--teacher CONFIG --splits dev --suffix -r3a]
    cold start (there):  python3 benchmarks/scripts/judge_qwen_coder_gpu.py cold-start --pairs DIR \\
                         --pieces DIR --work DIR --tar-to "$OUT" [--smoke]
    report (here):   python benchmarks/scripts/judge_qwen_coder_gpu.py report --pairs DIR --labels DIR --out DIR

``label`` resumes (label_pairs is resumable), tars each finished split's labels directory into --tar-to and
writes run.json (machine, versions, wall time and pairs/s per split) after every split. ``cold-start`` runs
``teacher_sft`` with ``--sft-config`` on ``sft-gold.jsonl`` (prepare's pool: every subtask A and C train
question), labels C dev and C train with the cold-started judge (``label_pairs --teacher-model``), trains
``--student`` (the causal student) on its C train labels and evaluates it on its C dev labels
(``train_student``), then labels A train; after each step it writes what that step made into --tar-to (the SFT report, one tar
per labels directory, the student's report) and run.json, so a call cut short keeps its finished steps.
``--smoke`` runs the same steps with a random 2-layer Qwen2 (tokenizer:qwen2.5), a few traces, pairs and
steps: a check of the code path and of the machine's library versions before the real call. ``report``
ranks C dev by each labelled protocol's expected grade (and by the mean of their probabilities) beside the
floors of issue 21's goal (first-stage order, BM25, the base encoder by cosine) and writes report.md and
results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # judge_semeval_slice's metrics and floors

TEACHER = "score-only-qwen-coder-1.5b"
REF = "package:qwen2.5-coder-1.5b-instruct"
PIECE = 51_000_000  # bytes per piece: a piece + the checkout (~12 MB with the committed labels) stay under 64 MiB
SPLITS = ("dev", "train", "a-train")  # fidelity's dev.jsonl and train.jsonl, then subtask A train


def prepare(args) -> int:
    """Write the pairs files (fidelity's seeded samples, all questions) and cut the GGUF into pieces."""
    from r3edge.core.pairs import write_queries
    from r3edge.distill.data.datasets import semeval_queries, write_fidelity_pairs
    from r3edge.model.gguf_parts import part_paths
    from r3edge.model.loading import PACKAGED_GGUFS

    pairs = Path(args.pairs)
    pairs.mkdir(parents=True, exist_ok=True)
    # fidelity's own defaults (all C train and dev questions, seed 0), so the labels' pairs_sha256 match what
    # `r3edge fidelity` writes
    write_fidelity_pairs(args.data, pairs / "sft-gold.jsonl", pairs / "train.jsonl", pairs / "dev.jsonl",
                         sft_queries=args.sft_queries)
    write_queries(pairs / "a-train.jsonl", semeval_queries(args.data, "A", "train"))
    pieces = Path(args.pieces)
    pieces.mkdir(parents=True, exist_ok=True)
    k, buf = 0, bytearray()
    for part in part_paths(PACKAGED_GGUFS[REF]):
        with part.open("rb") as src:
            while block := src.read(1 << 22):
                buf += block
                while len(buf) >= PIECE:
                    (pieces / f"p{k:02d}").write_bytes(buf[:PIECE])
                    del buf[:PIECE]
                    k += 1
    if buf:
        (pieces / f"p{k:02d}").write_bytes(buf)
        k += 1
    print(f"{k} pieces of <= {PIECE:,} bytes in {pieces}; pairs in {pairs}")
    return 0


def _stand_in_packages(pieces: Path, root: Path) -> None:
    """Modules named like the weight packages whose parts are the pieces, in order."""
    from r3edge.model.loading import PACKAGED_GGUFS

    pkg = PACKAGED_GGUFS[REF]
    files = sorted(pieces.glob("p[0-9][0-9]"))
    if len(files) > pkg.n_parts:
        raise SystemExit(f"{len(files)} pieces for {pkg.n_parts} package slots")
    empty = root / "empty.bin"
    empty.parent.mkdir(parents=True, exist_ok=True)
    empty.write_bytes(b"")
    for i in range(1, pkg.n_parts + 1):
        mod = root / pkg.module.format(i)
        mod.mkdir(parents=True, exist_ok=True)
        target = files[i - 1].resolve() if i <= len(files) else empty
        (mod / "__init__.py").write_text(f"def get_part_path():\n    return {str(target)!r}\n")
    sys.path.insert(0, str(root))


def _machine() -> dict:
    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "python": platform.python_version(), "cpu_count": os.cpu_count()}


def _label_and_tar(pairs_file: Path, teacher: str, out: Path, tar_to: Path, args, *, also: Path | None = None,
                   **kw) -> dict:
    """``label_pairs`` into ``out`` (``also`` copied in beside the labels), ``out`` tarred into ``tar_to``;
    returns its manifest."""
    import shutil

    from r3edge.core.labels import read_manifest
    from r3edge.distill.label.driver import label_pairs

    label_pairs(pairs_file, teacher, out, batch_size=args.batch_size, shard_size=args.shard_size, stream=sys.stdout, **kw)
    if also is not None:
        shutil.copyfile(also, out / also.name)
    with tarfile.open(tar_to / f"labels-{out.name}.tar", "w") as tar:
        tar.add(out, arcname=out.name)
    return read_manifest(out)


def label(args) -> int:
    _stand_in_packages(Path(args.pieces), Path(args.stubs))
    tar_to = Path(args.tar_to)
    tar_to.mkdir(parents=True, exist_ok=True)
    run = {"teacher": args.teacher, "machine": _machine(), "batch_size": args.batch_size, "splits": {}}
    for split in args.splits.split(","):
        t0 = time.time()
        man = _label_and_tar(Path(args.pairs) / f"{split}.jsonl", args.teacher, Path(args.labels) / f"{split}{args.suffix}",
                             tar_to, args, limit=args.limit)
        wall = time.time() - t0
        run["splits"][split] = {"pairs": man.get("n_done"), "complete": man.get("complete"), "wall_s": round(wall, 1),
                                "pairs_per_s_incl_load": round((man.get("n_done") or 0) / wall, 1)}
        (tar_to / "run.json").write_text(json.dumps(run, indent=2))
        print(json.dumps({split: run["splits"][split]}), flush=True)
    return 0


#: the random 2-layer Qwen2 of --smoke (the tests' tiny model, with the real Qwen2.5 tokenizer)
SMOKE_MODEL = {"architecture": {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 64, "intermediate_size": 128,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                "max_position_embeddings": 4096, "tie_word_embeddings": True},
               "tokenizer": "tokenizer:qwen2.5", "seed": 0}


def smoke_student(student: str | Path, work: Path) -> Path:
    """``student``'s config on the random 2-layer Qwen2 of --smoke, written into ``work``."""
    import yaml

    from r3edge.core.config import StudentConfig, load_yaml

    cfg = load_yaml(student, StudentConfig).model_dump(mode="json", exclude_none=True)
    cfg["model"] = {"kind": "causal", **SMOKE_MODEL}
    path = work / "smoke-student.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def cold_start(args) -> int:
    """Cold-start the judge on gold traces, label with it, distil the causal student: see the module docstring."""
    import shutil

    from r3edge.core.config import ModelSpec
    from r3edge.distill.student.train import REPORT_FILE as STUDENT_REPORT
    from r3edge.distill.student.train import train_student
    from r3edge.distill.teacher.sft import REPORT_FILE as SFT_REPORT
    from r3edge.distill.teacher.sft import load_sft_config, teacher_sft

    t_start = time.time()
    if not args.smoke:
        _stand_in_packages(Path(args.pieces), Path(args.stubs))
    pairs, work, tar_to = Path(args.pairs), Path(args.work), Path(args.tar_to)
    tar_to.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    sft = load_sft_config(args.sft_config)
    student = Path(args.student)
    if args.smoke:  # the same steps on a random tiny Qwen2: a few traces, pairs and steps
        sft = sft.model_copy(update={"model": ModelSpec(**SMOKE_MODEL),
                                     "traces": sft.traces.model_copy(update={"per_label_cap": 8})})
        student = smoke_student(student, work)
    run = {"sft_config": sft.name, "student_config": str(args.student), "smoke": args.smoke, "machine": _machine(),
           "batch_size": args.batch_size, "steps": {}}

    def done(step: str, t0: float, **extra) -> None:
        run["steps"][step] = {"wall_s": round(time.time() - t0, 1), **extra}
        run["elapsed_s"] = round(time.time() - t_start, 1)
        (tar_to / "run.json").write_text(json.dumps(run, indent=2))
        print(json.dumps({step: run["steps"][step], "elapsed_s": run["elapsed_s"]}), flush=True)

    t0 = time.time()
    teacher_dir = teacher_sft(sft, work / "teacher", gold=pairs / "sft-gold.jsonl",
                              max_steps=3 if args.smoke else None, log=lambda *a: print(*a, flush=True))
    shutil.copyfile(teacher_dir / SFT_REPORT, tar_to / SFT_REPORT)
    done("cold_start", t0)

    labels = work / "labels"

    def label_split(split: str) -> None:
        t0 = time.time()
        # the SFT report beside the labels: `r3edge fidelity --labels` names the teacher from it
        man = _label_and_tar(pairs / f"{split}.jsonl", sft.teacher, labels / split, tar_to, args, also=teacher_dir / SFT_REPORT,
                             teacher_model=teacher_dir, limit=32 if args.smoke else None)
        done(f"label_{split}", t0, pairs=man.get("n_done"), complete=man.get("complete"))

    label_split("dev")
    label_split("train")
    t0 = time.time()
    made = train_student(labels / "train", student, work / "student", eval_labels_dir=labels / "dev",
                         max_steps=3 if args.smoke else None)
    shutil.copyfile(made / STUDENT_REPORT, tar_to / STUDENT_REPORT)
    done("causal_student", t0)
    label_split("a-train")  # last: only the CPU students that also learn from subtask A use it
    return 0


def _dev_rows(labels: Path, dev) -> dict[str, dict]:
    """Each labelled protocol's metrics on C dev, and the mean of their probabilities when both exist."""
    import numpy as np
    from judge_semeval_slice import judge_metrics

    from r3edge.core.labels import read_labels, read_manifest
    from r3edge.core.metrics import relevance_metrics

    rows: dict[str, dict] = {}
    sft = labels / "sft_report.json"  # a cold-started judge's labels carry its cold start's report
    if sft.is_file():
        r = json.loads(sft.read_text())
        how = f"LoRA r={r['lora']['r']}" if r.get("lora") else "full fine-tuning"
        score_only = (f"score-only, cold-started ({how}, {r['steps']} steps, {r['epochs']:.2f} epochs on "
                      f"{r['examples']} gold traces)")
    else:
        score_only = "score-only, zero-shot"
    for name, sub in ((score_only, "dev"), ("R³A two-round, zero-shot", "dev-r3a")):
        if (labels / sub / "manifest.json").is_file():
            m = read_manifest(labels / sub)
            rows[name] = {**judge_metrics(labels / sub, dev), "dir": sub,
                          "completion_tokens": m["summary"]["completion_tokens"]}
    if len(rows) == 2:
        probs = [{(r["qid"], r["docid"]): np.asarray(r["probs"]) for r in read_labels(labels / v["dir"]).to_pylist()}
                 for v in rows.values()]
        pairs = [(q.qid, c) for q in dev for c in q.candidates if c.label is not None]
        got = relevance_metrics(np.asarray([c.label for _, c in pairs]),
                                np.asarray([(probs[0][(q, c.docid)] + probs[1][(q, c.docid)]) / 2 for q, c in pairs]),
                                [q for q, _ in pairs], read_manifest(labels / "dev")["label_values"])
        rows["mean of both protocols' probabilities"] = {k: got[k] for k in ("ndcg@10", "accuracy", "f1_macro", "ece")}
    return rows


def report(args) -> int:
    from judge_semeval_slice import floors

    from r3edge.core.labels import read_manifest
    from r3edge.core.pairs import read_queries

    labels, out = Path(args.labels), Path(args.out)
    dev = read_queries(Path(args.pairs) / "dev.jsonl")
    run = json.loads((labels / "run.json").read_text())
    rows = _dev_rows(labels, dev)
    floor = floors(dev, read_manifest(labels / "dev")["label_values"])
    train = {sub: read_manifest(labels / sub)["summary"] for sub in ("train", "a-train") if (labels / sub).is_dir()}
    result = {"labelled_on": run["machine"], "dev": rows, "floors": floor, "train_labels": train}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2, default=float) + "\n")
    text = _markdown(result)
    (out / "report.md").write_text(text)
    print(text)
    return 0


def _markdown(r: dict) -> str:
    mach, f = r["labelled_on"], r["floors"]
    first, base = f["first_stage"]["ndcg@10"], f["base_cosine"]["ndcg@10"]

    def cell(v, fmt=".3f"):
        return "–" if v is None else format(v, fmt)

    lines = [
        f"# Qwen2.5-Coder-1.5B-Instruct as the SemEval teacher: {' and '.join(r['dev'])} on all of C dev",
        "",
        f"Labelled on one {mach['gpu']} (lent device machine; torch {mach['torch']}, transformers "
        f"{mach['transformers']}, in-process `label_pairs`, bf16) from the packaged Q4_K_M GGUF; ranked and scored "
        f"on a CPU. nDCG@10 over the {f['first_stage']['ndcg_queries']} C dev questions with a relevant comment.",
        "",
        "| system | nDCG@10 | accuracy | macro-F1 | AUC 0/12 | AUC 01/2 | ECE | argmax labels | format failures "
        "| tokens in / out per pair | labelling s (5,000 pairs) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|",
    ]
    for name, m in r["dev"].items():
        per = (f"{m['prompt_tokens'] / m['pairs']:.0f} / {m['completion_tokens'] / m['pairs']:.0f}"
               if "pairs" in m else "–")
        lines.append(f"| {name} | {m['ndcg@10']:.3f} | {m['accuracy']:.3f} | {m['f1_macro']:.3f} | "
                     f"{cell(m.get('auc_0_12'))} | {cell(m.get('auc_01_2'))} | {cell(m.get('ece'))} | "
                     f"{m.get('labels', '–')} | {m.get('format_failures', '–')} | {per} | {cell(m.get('wall_s'), '.1f')} |")
    lines += [
        f"| first-stage order (the forum's ranking) | {first:.3f} | | | | | | | | | |",
        f"| BM25 (bm25s over each question's comments) | {f['bm25']['ndcg@10']:.3f} | | | | | | | | | |",
        f"| base encoder by cosine ({f['base_cosine']['system']}, no training) | {base:.3f} | | | | | | | | | |",
        f"| majority class (always {f['majority']['label']}) | | {f['majority']['accuracy']:.3f} | "
        f"{f['majority']['macro_f1']:.3f} | | | | | | | |",
        "",
        "Issue 21's teacher goal is nDCG@10 above the first-stage order and above the base encoder's cosine:",
    ]
    for name, m in r["dev"].items():
        lines.append(f"- {name}: {m['ndcg@10'] - first:+.3f} vs the first-stage order, {m['ndcg@10'] - base:+.3f} vs the "
                     f"base encoder: **{'met' if m['ndcg@10'] > max(first, base) else 'missed'}**.")
    lines += ["", "Training labels (score-only, for the students):", ""]
    for sub, s in r["train_labels"].items():
        lines.append(f"- `{sub}`: {s['pairs']} pairs, argmax labels {s['labels']}, labelled in {s['wall_s']:.1f} s.")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--data", default="../shared/data/semeval2016-cqa")
    p.add_argument("--pairs", required=True)
    p.add_argument("--pieces", required=True)
    p.add_argument("--sft-queries", type=int, default=1000,
                   help="fidelity's cold-start pool size: 1000 is every subtask A and C train question")
    p = sub.add_parser("label")
    p.add_argument("--pairs", required=True)
    p.add_argument("--pieces", required=True)
    p.add_argument("--stubs", default="/tmp/r3edge-stubs")
    p.add_argument("--labels", required=True)
    p.add_argument("--tar-to", required=True)
    p.add_argument("--splits", default=",".join(SPLITS))
    p.add_argument("--teacher", default=TEACHER, help="teacher config")
    p.add_argument("--suffix", default="", help="appended to each split's labels directory name")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--shard-size", type=int, default=512)
    p.add_argument("--limit", type=int, default=None, help="pairs per split (a smoke run)")
    p = sub.add_parser("cold-start")
    p.add_argument("--pairs", required=True, help="prepare's pairs: sft-gold.jsonl, dev.jsonl, train.jsonl, a-train.jsonl")
    p.add_argument("--pieces", required=True)
    p.add_argument("--stubs", default="/tmp/r3edge-stubs")
    p.add_argument("--work", required=True, help="where the cold-started judge, its labels and the student are written")
    p.add_argument("--tar-to", required=True)
    p.add_argument("--sft-config", default="score-only-qwen-coder-1.5b-cqa-gpu")
    p.add_argument("--student", default=str(Path(__file__).resolve().parents[2] / "configs/student/qwen-coder-cqa.yaml"),
                   help="student config (YAML path)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--shard-size", type=int, default=512)
    p.add_argument("--smoke", action="store_true", help="a random tiny Qwen2, few traces, pairs and steps")
    p = sub.add_parser("report")
    p.add_argument("--pairs", required=True)
    p.add_argument("--labels", required=True, help="holds dev/ (score-only) and dev-r3a/ (R³A two-round)")
    p.add_argument("--out", required=True)
    args = ap.parse_args()
    return {"prepare": prepare, "label": label, "cold-start": cold_start, "report": report}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
