"""Export a student directory to a validated ONNX scoring-graph artifact.

The graph takes input_ids/attention_mask and returns label_logits [batch, n_labels] (never the
full vocabulary). Every variant is checked against PyTorch on pairs formatted by the scorer;
the artifact directory appears only when fp32 parity passed. Variants: fp32 (reference),
int8 (static QDQ, batch invariant, calibrated on --calib pairs), int8-row (per-row dynamic
activation scales: batch invariant by construction, no calibration), int8-smooth (int8-row after
SmoothQuant's per-channel factors from the --calib pairs), int8-dynamic (comparison only:
scores depend on batchmates), fp16 (for GPUs), fp16-packed (fp16 without padding, on ONNX
Runtime's CUDA provider only: exported on the GPU machine). Encoder (BERT) students get ONNX Runtime's fused
graph (r3edge.export.fusion) as fp32, which the quantized variants start from.
"""

from __future__ import annotations


def configure(parser):
    import argparse

    from r3edge.export.options import ExportOptions

    parser.add_argument("student_dir", metavar="STUDENT_DIR",
                        help="student directory written by `r3edge train` (weights + scorer.json + tokenizer.json)")
    parser.add_argument("--out", required=True, metavar="ARTIFACT_DIR",
                        help="artifact directory to write (replaced only when the export passes parity); with --format "
                        "hf-seq-cls the checkpoint directory, with --format triton the model repository")
    # every other flag is an ExportOptions field: its default and help text live there, once
    for name, field in ExportOptions.model_fields.items():
        default = field.default
        shown = ",".join(default) if isinstance(default, tuple) else default
        kw = {"action": "store_true"} if field.annotation in (bool, "bool") else {}
        # SUPPRESS: an absent flag is "not given", so ExportOptions' own default applies
        parser.add_argument(ExportOptions.flag(name), dest=name, default=argparse.SUPPRESS,
                            help=field.description + ("" if shown is None or kw else f" (default {shown})"), **kw)


def run(args) -> int:
    from r3edge.core.config import validated
    from r3edge.export.onnx import export_artifact
    from r3edge.export.options import ExportOptions

    # validated before anything heavy loads: a typo in --variants fails at once, naming the flag
    opts = validated(ExportOptions, {name: getattr(args, name) for name in ExportOptions.model_fields if hasattr(args, name)},
                     lambda field: (ExportOptions.flag(field), f"see `r3edge export --help` for {ExportOptions.flag(field)}"))
    if opts.format == "hf-seq-cls":
        from r3edge.export.seq_cls import export_seq_cls

        export_seq_cls(args.student_dir, args.out, calib_pairs=opts.calib_pairs, max_calib=opts.max_calib)
    elif opts.format == "triton":
        from r3edge.export.triton import export_triton

        export_triton(args.student_dir, args.out, opts)
    else:
        export_artifact(args.student_dir, args.out, opts)
    return 0
