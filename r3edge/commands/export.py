"""Export a student directory to a validated ONNX scoring-graph artifact.

The graph takes input_ids/attention_mask and returns label_logits [batch, n_labels] (never the
full vocabulary). Every variant is checked against PyTorch on pairs formatted by the scorer;
the artifact directory appears only when fp32 parity passed. Variants: fp32 (reference),
int8 (static QDQ, batch invariant, calibrated on --calib pairs), int8-row (per-row dynamic
activation scales: batch invariant by construction, no calibration), int8-smooth (int8-row after
SmoothQuant's per-channel factors from the --calib pairs), int8-dynamic (comparison only:
scores depend on batchmates), fp16 (for GPUs). Encoder (BERT) students get ONNX Runtime's fused
graph (r3edge.export.fusion) as fp32, which the quantized variants start from.
"""

from __future__ import annotations


def configure(parser):
    parser.add_argument("student_dir", metavar="STUDENT_DIR",
                        help="student directory written by `r3edge train` (weights + scorer.json + tokenizer.json)")
    parser.add_argument("--out", required=True, metavar="ARTIFACT_DIR",
                        help="artifact directory to write (replaced only when the export passes parity)")
    parser.add_argument("--variants", default="fp32,int8",
                        help="comma-separated variants: fp32, int8 (static QDQ), int8-row (per-row dynamic), "
                             "int8-smooth (int8-row + SmoothQuant), int8-weight (weight-only), int8-dynamic, fp16; "
                             "fp32 is always built; a quantized variant that fails its checks is left out and reported")
    parser.add_argument("--default-variant", default=None, metavar="NAME",
                        help="variant the server loads when none is named (default: fp32)")
    parser.add_argument("--calib", default=None, metavar="PAIRS.jsonl",
                        help="pairs file for int8 calibration and parity validation (default: a small built-in set; "
                             "use pairs like those you will serve)")
    parser.add_argument("--max-calib", type=int, default=64, metavar="N",
                        help="use at most N pairs from --calib for calibration and validation")
    parser.add_argument("--atol", type=float, default=1e-3,
                        help="max |Δ label logit| allowed between ONNX fp32 and PyTorch")
    parser.add_argument("--opset", type=int, default=None, help="ONNX opset (default: the exporter's)")
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads for parity checks")
    parser.add_argument("--prefix-reuse", action="store_true",
                        help="causal students: also export a prefix graph (template head + query -> key/value cache) "
                             "and a candidate graph (cache + document + tail -> label_logits), so the server computes "
                             "a request's shared prefix once instead of once per candidate (fp32)")


def run(args) -> int:
    from r3edge.core.errors import InvalidInput
    from r3edge.export.onnx import export_artifact, parse_variants

    parse_variants(args.variants)  # fail on a typo before loading anything heavy
    if args.max_calib <= 0:
        raise InvalidInput(f"--max-calib {args.max_calib}", "pass a positive number of pairs")
    export_artifact(
        args.student_dir, args.out, variants=args.variants, calib_pairs=args.calib, max_calib=args.max_calib,
        opset=args.opset, atol=args.atol, default=args.default_variant, threads=args.threads,
        prefix_reuse=args.prefix_reuse,
    )
    return 0
