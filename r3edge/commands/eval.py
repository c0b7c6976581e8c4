"""Score labelled pairs with a student, an exported artifact or a running server, and report metrics.

Three comparisons from one labels directory: the teacher against gold labels (where the pairs had
them), the model against gold (per-class F1, AUC 0/12, AUC 01/2, accuracy, nDCG@10), and the model
against the teacher (argmax agreement, KL, Spearman of expected scores). The model's probabilities
are calibrated by its scorer.json temperature, as served; ``--reliability`` draws their reliability
diagram against gold (the bins of the top-label ECE the table reports).
"""

from __future__ import annotations


def configure(parser):
    parser.add_argument("labels_dir", metavar="LABELS_DIR", help="labels directory written by `r3edge label`")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--student", metavar="DIR", help="student directory written by `r3edge train` (scored in PyTorch)")
    what.add_argument("--artifact", metavar="DIR", help="artifact directory written by `r3edge export` (scored with its runtime)")
    what.add_argument("--server", metavar="HOST:PORT", help="address of a running `r3edge serve`")
    parser.add_argument("--variant", default=None, metavar="NAME",
                        help="artifact variant to score (fp32, int8-smooth, ov-int8, ...: any the artifact lists; "
                        "default: its default), in the runtime its manifest names; only with --artifact")
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the metrics as JSON to this file")
    parser.add_argument("--reliability", default=None, metavar="PNG",
                        help="also draw the model's reliability diagram against the gold labels (its ECE's bins)")


def run(args) -> int:
    import json

    from r3edge.core.errors import InvalidInput
    from r3edge.core.fileio import atomic_write_text
    from r3edge.distill.student.evaluate import artifact_score_fn, evaluate, print_table, server_score_fn, torch_student_score_fn

    if args.variant and not args.artifact:
        raise InvalidInput("--variant applies only to --artifact", "drop --variant, or evaluate an artifact with --artifact DIR")
    if args.student:
        score_fn = torch_student_score_fn(args.student)
    elif args.artifact:
        score_fn = artifact_score_fn(args.artifact, args.variant)
    else:
        score_fn = server_score_fn(args.server)
    try:
        result = evaluate(args.labels_dir, score_fn)
    finally:
        score_fn.close()
    print_table(result)
    if args.reliability:
        from r3edge.core.calibration import plot_reliability

        rel = result.get("student_reliability")
        if rel is None:
            raise InvalidInput(f"{args.labels_dir} has no pair with a gold label: no reliability diagram",
                               "evaluate on labels that carry gold labels, or drop --reliability", field="--reliability")
        t = result["temperature"]
        name = f"{result['scored_by']}" + (f" (T={t:.2f})" if t is not None else "")
        plot_reliability({name: rel}, args.reliability, f"reliability on {rel['n']} gold-labelled pairs")
        print(f"wrote {args.reliability}")
    if args.json:
        out = atomic_write_text(args.json, json.dumps(result, indent=2) + "\n")
        print(f"wrote {out}")
    return 0
