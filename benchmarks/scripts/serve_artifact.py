"""A served artifact of the demo's student shape and its top-100 requests, built in a minute without a teacher,
for load-testing `r3edge serve` (`r3edge bench load`).

    python benchmarks/scripts/serve_artifact.py --out runs/serve-bench

Writes under --out:
* ``heldout.jsonl`` — the demo's held-back-style requests: ``r3edge.distill.data.ugc.generate`` with the demo's
  split (``--queries`` queries of 100 candidates each, starting past the training phrasings), candidate-list
  JSONL, as `r3edge demo` writes its ``heldout.jsonl``;
* ``pairs.jsonl`` — the demo's training-style pairs (10 queries x 10 candidates), used only as the export's
  int8 calibration and parity pairs (as the demo does);
* ``student/`` — the ``minilm-demo`` student as created, untrained: all-MiniLM-L6-v2 with the cosine head, so
  it ranks exactly as the base model does by cosine (a real model, the demo student's shape and cost);
* ``artifact/`` — its ONNX export (``--variants``, default fp32,int8-smooth; default variant int8-smooth, the
  variant the demo serves and issue 23 measured).

Each stage is skipped when its output is complete (``--force`` rebuilds). Imports torch (a tool, not part of
the package); public r3edge names only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/serve-bench", help="output directory (runs/ is git-ignored)")
    ap.add_argument("--student", default="minilm-demo", help="student config, a shipped name or a YAML path")
    ap.add_argument("--queries", type=int, default=10, help="top-100 requests in heldout.jsonl (the demo's 10)")
    ap.add_argument("--candidates", type=int, default=100, help="candidates per request")
    ap.add_argument("--variants", default="fp32,int8-smooth", help="export variants (fp32 is always built)")
    ap.add_argument("--default-variant", default="int8-smooth",
                    help="variant the server loads when none is named (fp32 if this one fails its checks)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the demo data generator (the demo's 0)")
    ap.add_argument("--force", action="store_true", help="rebuild every stage")
    args = ap.parse_args()

    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.core.pairs import write_queries
    from r3edge.distill.data.ugc import generate

    t0 = time.perf_counter()
    out = Path(args.out)
    if args.force and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)

    def log(*a):
        print(f"[{time.perf_counter() - t0:6.1f}s]", *a, flush=True)

    # the demo's split: training queries 0.., held-back queries from 20 (past every training phrasing)
    heldout, pairs = out / "heldout.jsonl", out / "pairs.jsonl"
    held_q = generate(args.queries, args.candidates, seed=args.seed, start=20)
    write_queries(heldout, held_q)
    write_queries(pairs, generate(10, 10, seed=args.seed, start=0))
    log(f"{heldout}: {len(held_q)} requests x {args.candidates} candidates; {pairs}: 100 calibration pairs")

    student = out / "student"
    if not (student / "scorer.json").is_file():
        from r3edge.model.student import create_student, save_student

        config = load_yaml(args.student, StudentConfig)
        lm, scorer = create_student(config)
        save_student(lm, scorer, student, extra_files={"serve_bench.json": json.dumps(
            {"config": args.student, "trained": False, "note": "created by benchmarks/scripts/serve_artifact.py, untrained"},
            indent=2) + "\n"})
        log(f"{student}: {args.student} student, untrained ({config.model.pretrained})")
    else:
        log(f"{student} is complete; skipping (--force rebuilds)")

    artifact = out / "artifact"
    if not (artifact / "manifest.json").is_file():
        from r3edge.export.onnx import export_artifact

        export_artifact(student, artifact, variants=args.variants, calib_pairs=pairs, default=args.default_variant)
    else:
        log(f"{artifact} is complete; skipping (--force rebuilds)")

    manifest = json.loads((artifact / "manifest.json").read_text())
    log(f"artifact {artifact}: variants {', '.join(manifest['variants'])}; default {manifest['default']}")
    print(f"\nrequests:  {heldout}\nartifact:  {artifact}\nstudent:   {student}")
    print(f"serve it:  r3edge serve {artifact} --host 127.0.0.1 --port 50051")
    print(f"load it:   r3edge bench load --artifact {artifact} --pairs {heldout} --out {out}/load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
