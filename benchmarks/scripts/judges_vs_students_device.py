"""Issue 22's GPU axis: `r3edge bench` on a lent GPU machine, on the same 10 SemEval-2016 C dev requests
as the CPU report (`judges-vs-students-xeon-2core`: 10 questions x 100 comments, seed 0).

Rows: the judges on the packaged Qwen2.5-Coder-1.5B-Instruct, zero-shot, in-process transformers on the
GPU with a whole top-100 request in one generation batch (``--judge-batch-size``); the causal student
(`qwen-coder-cqa`, distilled there from the committed labels of the cold-started judge) by its PyTorch
forward on the GPU; a SemEval encoder student's int8 ONNX artifact served by `r3edge serve` on that
machine's CPU cores; BM25 and the first-stage order. The machine has no vLLM and no network, so every
judge runs in-process.

A device machine has no network and a call carries at most 64 MiB: the GGUF travels in
judge_qwen_coder_gpu.py's pieces, the artifact's ONNX file in pieces (``prepare --artifact``), and the
wheels the machine lacks in .whl/ and .whl2/ (see the results README).

    prepare (here):  python benchmarks/scripts/judges_vs_students_device.py prepare --data DIR --out .gpu/bench \\
                         --artifact ARTIFACT_DIR --variant int8-smooth
    run (there):     python3 benchmarks/scripts/judges_vs_students_device.py run --bench .gpu/bench \\
                         --pieces DIR --work DIR --out "$OUT"     [--smoke]

``run`` has three steps, each written into --out as it ends (run.json after every step):
1. ``r3edge bench`` with the judges only: every answered request is journaled in OUT/bench/judges/;
2. ``r3edge train`` of the causal student on the committed C train labels (its config caps the time);
3. ``r3edge bench`` again with the students and the floors: the judges' rows are read back from the
   journals of step 1 (same machine, same settings), so the report holds every row.
``--smoke`` runs the same steps with the tests' tiny random judge (r3a-tiny), the student's config on a random
2-layer Qwen2 and prepare's tiny artifact, on 2 requests: a check of the code path and of the machine's libraries.
A call's files under $OUT come back; report.md and the plot are written again here by
``r3edge bench report`` when the machine lacks matplotlib.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the GGUF pieces' stand-in packages

ROOT = Path(__file__).resolve().parents[2]
LABELS = ROOT / "benchmarks/results/judge-qwen-coder-cold-start-lora-h100/labels"
JUDGES = "r3a-qwen-coder-1.5b,rank1-qwen-coder-1.5b,score-only-qwen-coder-1.5b"
PIECE = 50_000_000  # bytes per piece of the artifact's ONNX file: a piece + the checkout (~12 MB) stay under 64 MiB


def prepare(args) -> int:
    """The requests file (the CPU report's 10 questions) and the artifact: small files + its ONNX in pieces;
    with ``--smoke-artifact``, a tiny artifact (e.g. bert-tiny, int8) copied whole for ``run --smoke``."""
    from r3edge.core.pairs import write_queries
    from r3edge.distill.data.datasets import sample_queries, semeval_queries

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_queries(out / "requests.jsonl", sample_queries(semeval_queries(args.data, "C", "dev"), args.questions, args.seed))
    art, dst = Path(args.artifact), out / "artifact"
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir()
    for f in art.iterdir():
        if f.is_file() and not f.name.startswith("model."):
            shutil.copyfile(f, dst / f.name)
    onnx = art / f"model.{args.variant}.onnx"
    data = onnx.read_bytes()
    pieces = Path(args.pieces or out)
    pieces.mkdir(parents=True, exist_ok=True)
    for k in range(0, len(data), PIECE):
        (pieces / f"onnx{k // PIECE:02d}").write_bytes(data[k:k + PIECE])
    (out / "onnx-name").write_text(onnx.name)
    if args.smoke_artifact:  # a tiny artifact, small enough to travel whole
        shutil.copytree(args.smoke_artifact, out / "smoke-artifact", dirs_exist_ok=True)
    print(f"wrote {out}/requests.jsonl, {dst} and {len(range(0, len(data), PIECE))} pieces of {onnx.name} in {pieces}")
    return 0


def _env(stubs: Path | None) -> dict:
    env = dict(os.environ)
    if stubs is not None:  # the stand-in weight packages, for the CLI's child processes too
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(stubs), env.get("PYTHONPATH")) if p)
    return env


def run(args) -> int:
    from judge_qwen_coder_gpu import _machine, _stand_in_packages, smoke_student

    t_start = time.time()
    # absolute: the CLI steps run in --work, not here
    bench_dir, work, out = Path(args.bench).resolve(), Path(args.work).resolve(), Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    stubs = None
    if not args.smoke:
        stubs = Path(args.stubs).resolve()
        _stand_in_packages(Path(args.pieces), stubs)
    env = _env(stubs)
    artifact = work / "artifact"
    if not artifact.is_dir():  # the carried small files, then the ONNX file from its pieces
        shutil.copytree(bench_dir / ("smoke-artifact" if args.smoke else "artifact"), artifact)
        if not args.smoke:
            with (artifact / (bench_dir / "onnx-name").read_text().strip()).open("wb") as dst:
                for piece in sorted(Path(args.artifact_pieces or bench_dir).glob("onnx[0-9][0-9]")):
                    dst.write(piece.read_bytes())
    judges = "r3a-tiny" if args.smoke else args.judges
    # --smoke: the real student's config on the random 2-layer Qwen2 of judge_qwen_coder_gpu's smoke
    student_cfg = str(smoke_student(args.student, work)) if args.smoke else args.student
    variant = "int8" if args.smoke else args.variant
    common = ["--pairs", str(bench_dir / "requests.jsonl"), "--judges", judges, "--judge-batch-size", str(args.judge_batch_size),
              "--labels", str(LABELS / "dev"), "--concurrency", "1,4", "--out", str(out / "bench")]
    if args.smoke:
        common += ["--max-queries", "2"]
    run_info = {"smoke": args.smoke, "machine": _machine(), "judges": judges, "student": student_cfg, "steps": {}}

    def step(name: str, cmd: list[str]) -> bool:
        t0 = time.time()
        log = out / f"{name}.log"
        with log.open("w") as fh:
            # cwd: not the checkout, whose r3edge/ folder would shadow the installed package
            rc = subprocess.run(cmd, env=env, cwd=work, stdout=fh, stderr=subprocess.STDOUT).returncode
        run_info["steps"][name] = {"rc": rc, "wall_s": round(time.time() - t0, 1)}
        run_info["elapsed_s"] = round(time.time() - t_start, 1)
        (out / "run.json").write_text(json.dumps(run_info, indent=2))
        print(json.dumps({name: run_info["steps"][name], "elapsed_s": run_info["elapsed_s"]}), flush=True)
        return rc == 0

    cli = [sys.executable, "-m", "r3edge"]
    steps = args.steps.split(",")
    # a bench whose only failure is a missing matplotlib (the plot, written last) still wrote results.json
    if "judges" in steps:
        step("judges", cli + ["bench"] + common)
    student = work / "causal-student"
    if "causal_student" in steps:
        train = cli + ["train", str(LABELS / "train"), "--student", student_cfg, "--out", str(student)]
        if args.smoke:
            train += ["--max-steps", "2"]
        if not step("causal_student", train):
            return 1
        shutil.copyfile(student / "train_report.json", out / "causal_train_report.json")
    if "bench" in steps:
        step("bench", cli + ["bench"] + common + ["--artifact", str(artifact), "--variants", variant,
                                                  "--torch-student", str(student)])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--data", default="../shared/data/semeval2016-cqa")
    p.add_argument("--out", required=True)
    p.add_argument("--artifact", required=True, help="an exported student artifact (r3edge export)")
    p.add_argument("--variant", default="int8-smooth")
    p.add_argument("--pieces", default=None, help="where the ONNX file's pieces go (default: --out), each carried alone")
    p.add_argument("--smoke-artifact", default=None, help="a tiny artifact for run --smoke (e.g. bert-tiny, int8)")
    p.add_argument("--questions", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("run")
    p.add_argument("--bench", required=True, help="prepare's --out, carried")
    p.add_argument("--pieces", default=None, help="the GGUF's pieces (judge_qwen_coder_gpu.py prepare)")
    p.add_argument("--artifact-pieces", default=None, help="where the ONNX pieces are (default: --bench)")
    p.add_argument("--stubs", default="/tmp/r3edge-stubs")
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--judges", default=JUDGES)
    p.add_argument("--student", default=str(ROOT / "configs/student/qwen-coder-cqa.yaml"))
    p.add_argument("--variant", default="int8-smooth")
    p.add_argument("--judge-batch-size", type=int, default=100)
    p.add_argument("--steps", default="judges,causal_student,bench",
                   help="which steps this call runs (a later call finds the earlier steps' files in --work and --out)")
    p.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    return {"prepare": prepare, "run": run}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
