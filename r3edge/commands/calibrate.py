"""Fit temperature scaling on held-out gold labels and store it in a student's or artifact's scorer.json.

Reads a labels directory whose pairs carry gold labels (held out from training: fitting on the
training pairs would make the probabilities look better than they are), scores it with the student
(PyTorch) or the artifact (its runtime), fits the temperature that minimises the gold labels'
negative log-likelihood (r3edge.core.calibration) and writes it into ``DIR/scorer.json``. Argmax
labels do not change; every scorer that reads that scorer.json (evaluation, the server) then reports
calibrated ``label_probs`` and ``score``. ``--bias`` fits a per-label bias with the temperature, for a
student whose label prior is wrong: it moves argmax labels (that is the point) and may reorder scores.
Prints the top-label ECE before and after and, with ``--plot``, draws the reliability diagram.
"""

from __future__ import annotations


def configure(parser):
    parser.add_argument("labels_dir", metavar="LABELS_DIR",
                        help="held-out labelled pairs with gold labels (written by `r3edge label`)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--student", metavar="DIR", help="student directory written by `r3edge train`")
    what.add_argument("--artifact", metavar="DIR", help="artifact directory written by `r3edge export`")
    parser.add_argument("--plot", default=None, metavar="PNG", help="also draw the reliability diagram before/after")
    parser.add_argument("--bias", action="store_true",
                        help="fit a per-label bias with the temperature (vector scaling with one scale): for a student "
                             "whose label prior is wrong, where a temperature alone cannot calibrate")
    parser.add_argument("--dry-run", action="store_true", help="report the fitted temperature without writing it")


def run(args) -> int:
    import dataclasses
    import json
    from pathlib import Path

    from r3edge.core.calibration import fit_temperature, fit_temperature_and_bias, plot_reliability, reliability
    from r3edge.core.errors import InvalidInput
    from r3edge.core.fileio import atomic_write_text
    from r3edge.core.scoring import SCORER_FILE, Scorer
    from r3edge.distill.student.evaluate import artifact_score_fn, evaluate, torch_student_score_fn

    directory = Path(args.student or args.artifact)
    score_fn = torch_student_score_fn(directory) if args.student else artifact_score_fn(directory)
    try:
        result = evaluate(args.labels_dir, score_fn, return_logits=True)
    finally:
        score_fn.close()
    has_gold = result["_has_gold"]
    if not has_gold.any():
        raise InvalidInput(f"{args.labels_dir} has no pair with a gold label", "calibrate on held-out pairs that carry labels",
                           field="labels_dir")
    logits, gold = result["_logits"][has_gold], result["_gold"][has_gold]
    scorer = Scorer.load(directory)
    before = dataclasses.replace(scorer.spec, temperature=1.0, label_bias=None)
    if args.bias:
        t, bias = fit_temperature_and_bias(logits, gold)
        fitted = dataclasses.replace(scorer.spec, temperature=t, label_bias=bias)
    else:
        fitted = dataclasses.replace(scorer.spec, temperature=fit_temperature(logits, gold), label_bias=None)
    what = f"temperature {fitted.temperature:.3f}" + (
        f", label bias {[round(b, 3) for b in fitted.label_bias]}" if fitted.label_bias else "")
    rows = {name: reliability(Scorer(spec, scorer.tokenizer).probabilities(logits), gold)
            for name, spec in (("uncalibrated", before), ("calibrated", fitted))}
    print(f"{int(has_gold.sum())} gold-labelled pairs: {what}; top-label ECE "
          f"{rows['uncalibrated']['ece']:.4f} uncalibrated -> {rows['calibrated']['ece']:.4f} calibrated")
    if args.plot:
        after = f"calibrated (T={fitted.temperature:.2f}{', bias' if fitted.label_bias else ''})"
        plot_reliability({"uncalibrated": rows["uncalibrated"], after: rows["calibrated"]},
                         args.plot, f"reliability ({rows['calibrated']['n']} gold-labelled pairs)")
        print(f"wrote {args.plot}")
    if not args.dry_run:
        atomic_write_text(directory / SCORER_FILE, json.dumps(fitted.to_json(), indent=2) + "\n")
        print(f"wrote {what} into {directory / SCORER_FILE}")
    return 0
