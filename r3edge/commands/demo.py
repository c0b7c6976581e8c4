"""Run the whole chain on the embedded demo data: pairs, teacher cold start, label, train, export, bench.

The teacher's judgement comes from a cold start (``r3edge teacher sft``) on traces built from the
embedded data's gold labels: SmolLM2-135M-Instruct does not judge zero-shot (it ranked the demo's
pairs below chance), and templated gold traces teach it the R³A format and the labels (not
reasoning). The student then learns the cold-started teacher's label distribution (mixed with gold
labels only where its config sets train.gold_weight; the demo's does not, and its report says which).

Every stage writes its output under --out. A rerun with the same --out rewrites the pairs files
(the same seed gives the same pairs), skips the cold start, training and export whose output
directory exists, labels only the pairs not labelled yet (a killed labelling run resumes), and
always reruns the benchmark; --force starts over. Each stage can also be rerun alone with its own
subcommand, e.g. `r3edge serve runs/demo/artifact --host 127.0.0.1 --port 50051`. Ends by
printing where the report (a latency/accuracy table per system) and its plot are.
"""

from __future__ import annotations

from pathlib import Path


def configure(parser):
    parser.add_argument("--out", default="runs/demo", help="directory for every stage's output")
    parser.add_argument("--teacher", default="r3a-smollm2",
                        help="teacher config, a shipped name or a YAML path (judge + model + generation budgets)")
    parser.add_argument("--sft", default="r3a-smollm2-demo",
                        help="the teacher's cold-start config (its teacher config must be --teacher's)")
    parser.add_argument("--sft-queries", type=int, default=10,
                        help="queries whose gold-labelled posts build the cold-start traces (10: one per demo topic; "
                             "at most 20)")
    parser.add_argument("--student", default="minilm-demo",
                        help="student config, a shipped name or a YAML path (model + scorer budgets + training)")
    parser.add_argument("--train-queries", type=int, default=10,
                        help="training queries (at most 20: the held-back queries are each topic's third phrasing)")
    parser.add_argument("--train-candidates", type=int, default=10, help="candidates per training query")
    parser.add_argument("--heldout-queries", type=int, default=10,
                        help="held-back queries, each a top-100 request in the benchmark (at most 10: one per topic)")
    parser.add_argument("--heldout-teacher-candidates", type=int, default=6,
                        help="top-ranked candidates per held-back query that the teacher also labels "
                             "(only these, to bound the demo's time; the report's agreement is measured on them)")
    parser.add_argument("--variants", default=None,
                        help="export variants to build and benchmark (default: fp32,int8-smooth, plus ov-int8 where "
                             "OpenVINO and NNCF are installed; the export makes the fastest that passed the default, and "
                             "the demo's report times every variant beside fp32 on this machine)")
    parser.add_argument("--requests", type=int, default=6, help="top-100 requests per system in the benchmark")
    parser.add_argument("--seed", type=int, default=0, help="seed of the demo data generator")
    parser.add_argument("--force", action="store_true", help="redo every stage even if its output is complete")


#: the first held-back query: the generator's queries 0-9 and 10-19 are each topic's first two phrasings
HELDOUT_START = 20


def _check_splits(args) -> None:
    """The generator's query i is topic i % 10 in phrasing (i // 10) % 3, and the held-back requests are queries
    HELDOUT_START.. (each topic's third phrasing): a training or cold-start query past HELDOUT_START, or more
    held-back queries than topics, would give two splits the same query text."""
    from r3edge.core.errors import InvalidInput
    from r3edge.distill.data.ugc import TOPICS

    for flag, n, most in (("--train-queries", args.train_queries, HELDOUT_START),
                          ("--sft-queries", args.sft_queries, HELDOUT_START),
                          ("--heldout-queries", args.heldout_queries, len(TOPICS))):
        if not 1 <= n <= most:
            raise InvalidInput(f"{flag} {n} must be 1..{most}",
                               f"the held-back queries are the generator's queries {HELDOUT_START}-"
                               f"{HELDOUT_START + len(TOPICS) - 1} (each topic's third phrasing); more queries would "
                               "repeat a held-back query's text in another split", field=flag)


def _step(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


def run(args) -> int:
    import json
    import shutil
    import time

    from r3edge.core.pairs import QueryCandidates, write_queries
    from r3edge.distill.data.ugc import generate
    from r3edge.export.options import cpu_variants

    _check_splits(args)
    out = Path(args.out)
    if args.force and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    variants = tuple(v for v in (args.variants or ",".join(cpu_variants())).split(",") if v)

    _step("1/6 pairs: embedded UGC-style data")
    sft_pairs = out / "sft-pairs.jsonl"
    pairs = out / "pairs.jsonl"
    heldout = out / "heldout.jsonl"
    heldout_teacher = out / "heldout-teacher.jsonl"
    train_q = generate(args.train_queries, args.train_candidates, seed=args.seed, start=0)
    # the cold start sees other posts (another seed) of the training topics, never a held-back query
    write_queries(sft_pairs, generate(args.sft_queries, 12, seed=args.seed + 1, start=0))
    # held-back queries start past every training phrasing, so their texts were never trained on
    held_q = generate(args.heldout_queries, 100, seed=args.seed, start=HELDOUT_START)
    write_queries(pairs, train_q)
    write_queries(heldout, held_q)
    write_queries(heldout_teacher, [
        QueryCandidates(q.qid, q.query, q.candidates[: args.heldout_teacher_candidates], q.aux) for q in held_q
    ])
    print(f"{pairs}: {sum(len(q.candidates) for q in train_q)} training pairs; "
          f"{heldout}: {len(held_q)} top-100 requests")

    _step("2/6 teacher: cold start on traces built from gold labels")
    from r3edge.distill.teacher.sft import load_sft_config, teacher_sft

    teacher = (out / "teacher").resolve()
    if not (teacher / "config.json").is_file():
        teacher_sft(load_sft_config(args.sft), teacher, gold=sft_pairs)
    else:
        print(f"{teacher} is complete; skipping (use --force to redo)")

    _step("3/6 label: the cold-started teacher on training and held-back pairs")
    from r3edge.distill.label.driver import label_pairs

    labels_train = label_pairs(pairs, args.teacher, out / "labels" / "train", teacher_model=teacher)
    labels_heldout = label_pairs(heldout_teacher, args.teacher, out / "labels" / "heldout", teacher_model=teacher)

    _step("4/6 train: student on the teacher's label-token distribution")
    from r3edge.core.scoring import PREFIX_HEADS, SCORER_FILE, Scorer

    student = out / "student"
    if not (student / SCORER_FILE).is_file():
        from r3edge.distill.student.train import train_student

        train_student(labels_train, args.student, student)
    else:
        print(f"{student} is complete; skipping (use --force to retrain)")

    _step("5/6 export: ONNX scoring graph(s) with parity checks")
    artifact = out / "artifact"
    if not (artifact / "manifest.json").is_file():
        from r3edge.export.onnx import export_artifact

        # a causal or cosine student computes each request's shared prefix (its query) once when served
        export_artifact(student, artifact, variants=variants, calib_pairs=pairs,
                        prefix_reuse=Scorer.load(student).spec.head in PREFIX_HEADS)
    else:
        print(f"{artifact} is complete; skipping (use --force to re-export)")

    _step("6/6 bench: top-100 requests over gRPC, accuracy on the held-back split")
    from r3edge.benchmarks.report import write_report
    from r3edge.benchmarks.systems import accuracy_block, bench_systems, teacher_probs
    from r3edge.core.pairs import read_queries

    # every variant that passed its parity checks (a rejected int8 is recorded in export_report.json)
    results = bench_systems(read_queries(heldout), artifact=str(artifact), variants=None,
                            labels_dir=str(labels_heldout), requests=args.requests)
    # the floor a user already has: the student's own pretrained encoder ranking by cosine, no training
    from r3edge.benchmarks.systems import scored_floor
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.model.student import base_cosine_scoring

    base = base_cosine_scoring(load_yaml(args.student, StudentConfig))
    if base is not None and results.get("baselines"):
        results["baselines"]["base_cosine"] = scored_floor(read_queries(heldout), base,
                                                           results["settings"]["label_values"])
    # whether the teacher judges: its labels of the student's training pairs against their gold labels
    results["teacher_on_training_pairs"] = accuracy_block(read_queries(pairs), teacher_probs(labels_train)[0],
                                                          results["settings"]["label_values"], None).get("vs_gold")
    results["notes"] = _notes(teacher, labels_train, student, args, results["teacher_on_training_pairs"])
    manifest = json.loads((artifact / "manifest.json").read_text())
    results["notes"].append(f"`r3edge serve {artifact}` loads `{manifest['default']}` on the CPU: "
                            f"{manifest.get('default_reason', 'the manifest default')}.")
    results["settings"]["demo_wall_s"] = round(time.time() - t0, 1)
    paths = write_report(results, out)
    print(f"\ndemo finished in {time.time() - t0:.0f} s")
    for name, path in paths.items():
        print(f"{name}: {path}")
    print(f"serve it: r3edge serve {artifact} --host 127.0.0.1 --port 50051  (variant {manifest['default']}: "
          f"{manifest.get('default_reason', 'the manifest default')})")
    return 0


def _notes(teacher: Path, labels_train: Path, student: Path, args, on_train: dict | None) -> list[str]:
    """Where the teacher's quality comes from and what the student learned from, read from the run's own
    reports: every statement here is computed by this run (prose measured once belongs in the README)."""
    import json

    from r3edge.core.labels import read_manifest

    sft = json.loads((teacher / "sft_report.json").read_text())
    traces = sft["config"]["traces"]
    summary = read_manifest(labels_train).get("summary") or {}
    train = json.loads((student / "train_report.json").read_text())["config"]["train"]
    w = train.get("gold_weight", 0.0)
    learned = ("only the teacher's label distribution; it never saw a gold label" if not w else
               f"the teacher's label distribution (KL) mixed with cross-entropy on the same pairs' gold labels "
               f"at weight {w:g} (`train.gold_weight`): its ranking is not the teacher's alone")
    a = train.get("base_interpolation")
    mixed = ("" if not a else
             f" It was saved with each pretrained weight mixed back at {a:g} (`train.base_interpolation`, WiSE-FT: "
             f"{1 - a:g} of the base, {a:g} of the trained weights; the head as trained).")
    return [
        f"Where the teacher's judgement comes from: {sft['base_model']} cold-started (`{args.sft}`, judge "
        f"`{sft['judge']}`) on {sft['trained']} verdicts templated from the gold labels of {args.sft_queries} other "
        f"queries' posts (by label {sft['trained_by_label']}; reason `{traces.get('reason', 'fixed')}`; "
        f"{sft['epochs']:g} epochs, {sft['wall_time_s']:.0f} s). Templated traces teach the judge's format and the "
        "gold labels, not reasoning."
        + ("" if not on_train else
           f" On the {on_train['n']} training pairs it labelled for the student (other queries than the cold start's) its labels "
           f"score AUC 0/12 {on_train['auc_0_12']:.3f}, AUC 01/2 {on_train['auc_01_2']:.3f} and accuracy "
           f"{on_train['accuracy']:.3f} against their gold labels (chance: AUC 0.5)."),
        f"The student learned {learned}, on {summary.get('pairs')} training pairs "
        f"(teacher labels {summary.get('labels')}, {summary.get('format_failures')} not well formed, "
        f"{summary.get('repairs')} repaired)." + mixed,
        f"The teacher row covers the top {args.heldout_teacher_candidates} candidates of each held-back query "
        f"(`--heldout-teacher-candidates`); every student row covers all of them.",
    ]
