"""Fused fp32 scoring graph for BERT-style encoder students (ONNX Runtime's transformer fusions).

The dynamo export of a BERT encoder leaves attention as ~20 small ops per layer (Reshape,
Transpose, Where, IsNaN, Softmax, two MatMuls), and ONNX Runtime's BERT optimizer
(``onnxruntime.transformers.optimizer``) recognises none of them: measured on the demo student
(all-MiniLM-L6-v2), it fused 0 of 6 attentions on the dynamo graph, with either SDPA or eager
attention. The TorchScript exporter (``dynamo=False``) with eager attention emits the pattern the
optimizer was written for, and it fuses the whole encoder: ``EmbedLayerNormalization`` (word +
position + segment embeddings and the first LayerNorm in one kernel, the key-padding mask as
``mask_index``), 6 ``MultiHeadAttention`` (softmax with the mask inside one kernel) and 6
``BiasGelu``. Residual + LayerNorm is left as ``Add`` + ``LayerNormalization`` on purpose: the fused
``SkipLayerNormalization`` CPU kernel was ~5x slower here (4.3 vs 0.86 ms on [50, 85, 384]), 12 of
them ~60 ms of the int8 graph's ~400 per top-100; sessions keep onnxruntime from re-fusing them
(``r3edge.core.onnx_runtime.DISABLED_OPTIMIZERS``). What is left are the 36 weight MatMuls, which
stay plain ``MatMul`` nodes on purpose: the quantizers (r3edge.export.quantize) rewrite exactly
those. ``MultiHeadAttention`` rather than ``Attention`` is asked for for the same reason:
``Attention`` packs the Q/K/V projections inside the op, where no quantizer can reach them.

Speed: in a quick A/B the fused fp32 graph took 0.85x the dynamo graph's time per top-100, but in
the contended side-by-side run (benchmarks/results/speed-cpu-2core) both took ~3.15 s: the fusion
pays off mainly through the int8 variant built from it (int8-row: 0.79x fused fp32's time).

The ``fp16`` variant (a GPU variant) is built from the fused graph by :func:`fuse_for_gpu`, which runs the
optimizer once more with ``SkipLayerNormalization`` allowed: the ~5x CPU penalty above is the CPU kernel's,
and on a GPU the fused kernel is what ONNX Runtime's BERT recipe uses (the issue-46 H200 probe, whose fp16
graph of the MiniLM-L6 shape with 12 ``SkipLayerNormalization`` ran a top-100 in 1.69 ms).

The fused graph replaces the dynamo graph as ``model.fp32.onnx`` and is held to the same fp32
parity as any export (max |Δlogit| vs PyTorch within ``atol``, batch invariance). Any other model
type, or a fusion that does not find every layer's attention, falls back to the dynamo export.
"""

from __future__ import annotations

from pathlib import Path

from r3edge.core.artifact import INPUT_NAMES, OUTPUT_NAME
from r3edge.core.errors import R3EdgeError

#: model_type of a Hugging Face config -> the onnxruntime optimizer's model type
FUSABLE = {"bert": "bert"}


def fusable(config) -> bool:
    return getattr(config, "model_type", None) in FUSABLE


def export_fused_encoder(encoder, scoring_model, example: tuple, out_path: Path, opset: int = 17,
                         input_names: tuple[str, ...] = INPUT_NAMES) -> dict:
    """Write the fused fp32 graph of ``scoring_model`` (an EncoderScorer, or a cosine student's
    DocumentCosineGraph, around ``encoder``) to ``out_path``.

    ``example`` holds one torch tensor per name of ``input_names``: ``input_ids`` and
    ``attention_mask`` (two rows of different lengths, so no shape is baked in), then any input of
    fixed shape (the cosine candidate graph's query embedding). Returns the fusion counts for the
    export report; raises :class:`R3EdgeError` when the optimizer did not fuse every layer (the
    caller falls back).
    """
    import tempfile

    import torch
    from onnxruntime.transformers.fusion_options import AttentionOpType, FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    cfg = encoder.config
    if not fusable(cfg):
        raise R3EdgeError(f"no fused graph for model_type {getattr(cfg, 'model_type', None)!r}",
                          f"fusion covers {', '.join(FUSABLE)}; the dynamo export is used")
    previous = getattr(cfg, "_attn_implementation", None)
    encoder.set_attn_implementation("eager")  # the pattern the optimizer matches
    try:
        with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
            raw = Path(tmp) / "raw.onnx"
            axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
            torch.onnx.export(scoring_model, example, str(raw), input_names=list(input_names),
                              output_names=[OUTPUT_NAME], dynamic_axes={**axes, OUTPUT_NAME: {0: "batch"}},
                              opset_version=opset, dynamo=False)
            options = FusionOptions(FUSABLE[cfg.model_type])
            options.use_multi_head_attention = True
            options.attention_op_type = AttentionOpType.MultiHeadAttention
            # Residual + LayerNorm stay Add + LayerNormalization: onnxruntime's CPU
            # SkipLayerNormalization kernel is ~5x slower (r3edge.core.onnx_runtime.DISABLED_OPTIMIZERS)
            options.enable_skip_layer_norm = False
            options.enable_bias_skip_layer_norm = False
            opt = optimize_model(str(raw), model_type=FUSABLE[cfg.model_type], num_heads=cfg.num_attention_heads,
                                 hidden_size=cfg.hidden_size, optimization_options=options, opt_level=0)
    finally:
        if previous:
            encoder.set_attn_implementation(previous)
    stats = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
    layers = cfg.num_hidden_layers
    if stats.get("MultiHeadAttention", 0) + stats.get("Attention", 0) != layers:
        raise R3EdgeError(f"the BERT optimizer fused {stats} for {layers} layers", "the dynamo export is used")
    opt.save_model_to_file(str(out_path))
    return {"exporter": "torchscript+onnxruntime.transformers.optimizer", "fused": stats}


#: com.microsoft ops only :func:`export_fused_encoder` writes: a graph holding one was fused by it
FUSED_ENCODER_OPS = frozenset({"MultiHeadAttention", "Attention", "EmbedLayerNormalization"})


def is_fused_encoder(model) -> bool:
    """Whether the loaded onnx ``model`` is a fused BERT graph of :func:`export_fused_encoder`."""
    return any(n.domain == "com.microsoft" and n.op_type in FUSED_ENCODER_OPS for n in model.graph.node)


def fuse_for_gpu(model) -> tuple:
    """``(OnnxModel, fused-op counts)``: the fused fp32 encoder graph (a loaded onnx model) with residual +
    LayerNorm fused into ``SkipLayerNormalization`` as well, for the fp16 variant (r3edge.export.quantize).

    The attention, embedding and GELU fusions are already in the graph; the optimizer finds them again and
    adds the skip-LayerNorm fusion the CPU graph leaves out. The heads and hidden size are read from the
    fused nodes (0 = detect).
    """
    from onnxruntime.transformers.fusion_options import AttentionOpType, FusionOptions
    from onnxruntime.transformers.onnx_model_bert import BertOnnxModel

    options = FusionOptions("bert")
    options.use_multi_head_attention = True
    options.attention_op_type = AttentionOpType.MultiHeadAttention
    opt = BertOnnxModel(model, num_heads=0, hidden_size=0)
    opt.optimize(options)
    stats = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
    return opt, stats
