"""Quantization presets for the scoring graph (dataclasses, as optimum does).

``int8`` is static QDQ, not dynamic: dynamic INT8 picks one activation scale per batch, so a
pair's score moves with its batchmates (measured up to 0.9 logits here) — unacceptable for a
reranker fed by a batching server. Static scales come from calibration pairs formatted by the
Scorer, so they match what the server sends. Only MatMuls against constant weights are
quantized (attention's activation×activation MatMuls and everything else stay fp32: quantizing
all ops broke accuracy), activations are uint8 (s8·s8 is the slow path on x86), weights are
per-channel int8. ``int8-dynamic`` is kept for comparison only and says it is batch dependent.

Measured on SmolLM2-135M (untrained scorer, 16 built-in pairs, 2 loaded cores): static MinMax
``int8`` was 0.69x fp32's time but 7.6 logits off fp32 and moved 0.18 in score with padding
(massive activation outliers make MinMax ranges coarse), so export rejects it there;
``int8-weight`` was 0.5 logits / 0.02 score off, batch invariant (3e-6), but 1.6x slower than
fp32 on CPU. On the tiny test Qwen2, static ``int8`` is exactly batch invariant. A parity
failure of a quantized variant drops that variant from the artifact (see r3edge.export.onnx).

Static QDQ is row-independent on paper, yet on the trained demo student (SmolLM2, 8 layers) a
pair's score moved by up to 0.087 between alone and a left-padded batch (5 of 300 held-out
pairs). Cause: fp32 is not bit-exact across padding — ORT's Softmax sums over the padded key
axis with SIMD lanes whose alignment shifts with the padding (attention outputs differ by
~1e-7) — and a quantizer is a step function: a 1e-7 change that crosses a rounding boundary
becomes a whole quantization step (2.3 on a down_proj output whose MinMax range is ±585), which
the following layers carry to the logits. fp32 alone only moves 1e-6. So the ``int8`` graph
(1) takes each attention Softmax's row sums in float64 (exp(x - max) / sum; the fp32 probabilities
then come out identical for any padding except with ~1e-8 probability per element; the fp32 P·V
MatMul after it was measured bit-exact across padding; until 2026-11-27 the whole Softmax ran in
float64, at about 5x the cost, see :func:`_softmax_sums_in_float64`), and (2) quantizes only the MatMul
inputs, not their outputs (no Q/DQ on q/k/v/o/gate/up/down outputs: fewer rounding steps, and
0.11 instead of 0.29 max |Δscore| vs fp32 on the calibration pairs). Measured on the demo
student, 2 cores, 300 held-out + 64 calibration pairs: 0 pairs move at all (was 6, up to
0.087); 100 candidates in 3.3 s vs fp32's 4.4 s (median, load_runtime; with the whole Softmax in
float64); without any float64 step int8 takes ~1.8 s but is not batch invariant. Its accuracy vs fp32 on that causal student
was poor (Spearman of scores 0.29-0.54). ``int8`` is among the variants ``r3edge export`` builds when
none are named (:class:`r3edge.export.options.ExportOptions`), and every variant passes the same
parity gate; on the demo's encoder student ``int8-smooth`` (below) tracks fp32 closest, which is why
the demo builds and benchmarks it.

``int8-row`` (per-row dynamic, see :func:`_per_row_int8`) is batch invariant by construction and
needs no calibration. Measured on the trained demo encoder (all-MiniLM-L6-v2, fused graph, 1,000
held-out pairs of 10 queries vs fp32; 2 AVX2 cores shared with other jobs, so the timings are
noisy):

* accuracy vs fp32: max |Δlogit| 0.75, argmax agreement 0.981, Δ accuracy -0.7 pt, Δ nDCG@10
  -0.013, top-10 overlap 0.93; batch invariance 0.0 (a pair alone vs among 100). The static
  ``int8`` on the same pairs: 1.46, 0.960, +0.2 pt, -0.039, 0.89 from the unfused dynamo graph;
  0.43, 0.989, +0.5 pt, -0.001, 0.93 from the fused graph (no float64 Softmax needed there, batch
  invariance 0.0 too) but then 1.4x *slower* than fp32. Per top-100 in one contended run
  (benchmarks/results/speed-cpu-2core): int8-row 2,494 ms, fused fp32 3,159, unfused fp32 3,154,
  static int8 fused 4,456 / unfused 3,184, tuned torch fp32 3,835. Neither reaches the issue's
  98% top-10 overlap: this weak student's scores are close together, so small errors reorder
  positions 8-12. Leaving one MatMul group in fp32 (Q/K/V, attention output, FFN up, FFN down,
  first or last layer) gave 0.91-0.95 each: the error is spread over all of them, not one outlier.
* 8-bit weights with 7-bit activations (no saturation either): max |Δlogit| 1.32, top-10 0.91 —
  worse than 7-bit weights with 8-bit activations.
* ``MatMulNBits`` 8-bit with ``accuracy_level=4`` (its activations are quantized per row and
  block inside the kernel, so it is batch invariant too) ran at 0.5-0.7x fp32's speed on this
  AVX2 CPU (no int8 kernel for 8-bit weights here); 4-bit was about fp32's speed with 5x the
  error. Not kept.
* The cost of per-row scales: one ReduceMax pass and a blocked QuantizeLinear per distinct input
  and one Mul per MatMul; a 4300x384x1536 MatMul took 82 ms per-row vs 60 ms with one scale per
  tensor vs 116 ms in fp32 (same contended run).
* ``int8-smooth`` = ``int8-row`` after SmoothQuant (alpha 0.5; :func:`_per_row_int8`). On the
  gold-mixed demo student (fused graph, 50 held-out top-100 lists, calibration on the 10 training
  queries) against fp32: max |Δlogit| 0.36 vs int8-row's 0.48, argmax 0.986 vs 0.981, top-10
  overlap 0.952 vs 0.934, Δ accuracy +0.08 vs -0.08 pt, Δ nDCG@10 -0.011 vs +0.001 (nDCG on 50
  queries moves by ~0.01 either way), at the same speed (627 vs 622 ms per top-100; fp32 908).
  alpha 0.3, 0.4, 0.6, 0.7 did no better. The 98% top-10 goal is out of reach of 8-bit activations
  on this student: Gaussian noise of sd 0.01 on its fp32 logits already gives 0.986 overlap, and
  sd 0.03 gives 0.961 (its scores crowd around positions 8-12). Tried and not kept: 8-bit weights
  through the u8u8 kernels (no vpmaddubsw saturation; top-10 0.964, max |Δlogit| 0.25, but 763 vs
  639 ms), and one static per-tensor activation scale and zero point fed straight to the kernel
  (566-592 ms, but top-10 0.87-0.90).
* The GELU output (the FFN-down MatMul's input, 1536 wide) carries most of the error: on the
  demo student, 25 held-back top-100 lists, 2 AVX-512 cores, keeping those 6 MatMuls in fp32 lifts
  int8-smooth's top-10 overlap from 0.964 to 0.984 (max |Δlogit| 0.95 -> 0.37) but costs a third of
  the int8 speed-up (407 vs 307 ms per top-100). ``int8-smooth`` therefore quantizes it unsigned
  (``unsigned_gelu``: GELU >= -0.17, so shifted by 0.17 it fits [0, max] with zero point 0, and
  ``-0.17 · colsum(W)`` is added back): 0.972 top-10 overlap, max |Δlogit| 0.67, same speed.
  8-bit weights on top (VNNI has no vpmaddubsw saturation; 7 bits stay the default because an
  artifact may be served on an AVX2 box) give max |Δlogit| 0.29 but no better top-10 (0.964).
* Until the fused graph kept ``LayerNormalization`` unfused, the static ``int8`` variant had no
  activation quantized at all: onnxruntime's quantizer calibrates only tensors whose type onnx can
  infer, and every MatMul input was a contrib op's output. It was weight-only int8 (run by ORT as
  ``MatMulNBits`` with fp32 compute) under a static-QDQ name, which is why it kept accuracy
  (top-10 0.980) and gave no speed. Now 11 of 24 inputs (the LayerNorm outputs) get static
  scales, and top-10 falls to 0.93; the export report counts ``quantized_activation_inputs``.
* Weight rounding is most of ``int8-smooth``'s error on the demo student (50 held-back top-100
  lists vs ORT fp32, 2 AVX-512 cores): fake-quantized 7-bit weights with fp32 activations alone give
  mean |Δlogit| 0.017 of the real graph's 0.023 (8-bit: 0.006). ``int8-smooth`` therefore rounds its
  weights by GPTQ (Frantar et al., 2023; :func:`_gptq_round`) on the Gram matrices of the
  calibration inputs: mean |Δlogit| 0.023 -> 0.012, max 0.70 -> 0.34, top-10 overlap 0.954 -> 0.966
  on the 64 default calibration pairs (0.972 on 100; 512 or 2,000 pairs of 20 other queries did no
  better, 0.956-0.966), same graph, same speed. What is left is mostly the 8-bit activations
  (8-bit GPTQ weights: mean 0.010, top-10 0.970-0.976); no variant reaches the 98% goal. Tried and
  not kept: SmoothQuant alpha 0.3 / 0.65 / 0.8 with GPTQ (top-10 0.936 / 0.960 / 0.954); keeping one
  layer's FFN-down MatMul in fp32 (0.954-0.964 per layer) or all six (0.966).
* The static ``int8`` graph's whole-float64 Softmax (its batch-invariance fix until 2026-11-27) cost 25% of its kernel time
  on the unfused encoder graph (572 ms of Softmax per top-100 vs 30 ms in fp32); on the fused graph
  the softmax is inside MultiHeadAttention and nothing is rewritten. Only the row sums run in
  float64 now (:func:`_softmax_sums_in_float64`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from r3edge.core.errors import InvalidInput, R3EdgeError

#: How a preset quantizes: static QDQ (calibrated), per-row dynamic activations, per-batch dynamic,
#: weight-only, or an fp16 cast.
QuantKind = Literal["static_qdq", "dynamic_per_row", "dynamic", "weight_only", "fp16"]


@dataclass(frozen=True)
class QuantPreset:
    name: str
    kind: QuantKind
    batch_invariant: bool
    per_channel: bool = True
    activation_type: str = "QUInt8"
    weight_type: str = "QInt8"
    calibrate_method: str = "MinMax"
    weights_only_matmuls: bool = True
    weight_bits: int = 8
    activation_bits: int = 8
    #: SmoothQuant's migration strength (per-row presets): 0 = off; with α > 0 each quantized
    #: MatMul input is divided per channel by ``s = amax_x^α / amax_w^(1-α)`` and the weights'
    #: rows multiplied by it (calibrated amax_x), which flattens the activation outlier channels
    #: that set a per-row scale
    smooth_alpha: float = 0.0
    #: per-row presets: quantize GELU outputs (>= GELU_MIN) shifted to non-negative, with zero point 0
    unsigned_gelu: bool = False
    #: per-row presets: round the weights by GPTQ on the calibration inputs instead of to nearest
    gptq: bool = False
    #: fp16 presets: ONNX Runtime's packing mode on each fused encoder graph of the variant (:func:`_pack`;
    #: the single graph of an encoder student, the candidate graph of a cosine student), whose kernels exist
    #: on the CUDA provider only: the variant is validated and served there, never on the CPU
    packed: bool = False
    #: the export's parity gate on max |Δ expected score| vs torch fp32, for schemes whose only error is float
    #: rounding (fp16); None: recorded, not gated (the int8 schemes: their error is the quantizer's, judged by
    #: fidelity runs, see r3edge.export.parity)
    max_score_diff: float | None = None
    #: the batch-invariance limit (max |Δ score| of a pair alone vs in a batch) when it is not the export's
    #: default (``Tolerances.quant_batch_tol``): a variant validated on a GPU's fp16 kernels
    batch_tol: float | None = None
    description: str = ""

    def __post_init__(self):
        if self.kind not in get_args(QuantKind):
            raise InvalidInput(f"quantization preset {self.name!r}: kind {self.kind!r}",
                               f"use one of {', '.join(get_args(QuantKind))}", field="kind")

    def to_json(self) -> dict:
        return asdict(self)


#: The fp16 parity gate (max |Δ expected score| vs torch fp32 on the validation pairs). fp16 keeps 11 significant
#: bits (unit roundoff 4.9e-4); rounding every weight and activation of the MiniLM-L6 cosine student cost
#: 0.0035 in label logits on the CUDA provider (ENVIRONMENT.md, H200), and a logit error e moves an expected score
#: over labels 0..2 by at most ~e. 0.02 leaves 5x that for deeper students and other pairs, while what the
#: gate is for (a layer overflowing to inf, fp16 inputs fed fp32 data, a cast in the wrong place) moves scores
#: by tenths. On the CPU provider the check sees the fp16 weights and the fp16 tensors between ops, but
#: ONNX Runtime runs each op without an fp16 CPU kernel in fp32 behind inserted Casts, so a CPU pass is a
#: check of the graph, not of a GPU's fp16 kernels: the report names the provider (``validated_on``).
FP16_MAX_SCORE_DIFF = 0.02
#: The batch-invariance limit of a variant validated on the CUDA provider's fp16 kernels (fp16-packed). GPU
#: kernels pick their reduction order by shape, so a pair's fp16 score moves a little with its batchmates: on the
#: H200 the fp16 variant's max |Δ score| of a pair alone against among its top-100 was 5.0e-4 (the SemEval
#: student) and 1.3e-3 (the demo's), above the CPU variants' 1e-3 (benchmarks/results/gpu-students-h200-second-run).
#: fp16-packed, which removes the padding inside the graph, measured 0 for both in the third run
#: (benchmarks/results/gpu-students-h200-third-run).
#: 5e-3 gates what the check is for (padding or positions handled wrongly moves scores by tenths) and records
#: the rest (``batch_invariance_max_abs_score_diff`` in the report).
FP16_GPU_BATCH_TOL = 5e-3

PRESETS: dict[str, QuantPreset] = {
    "int8": QuantPreset(
        "int8", "static_qdq", batch_invariant=True,
        description="static QDQ: per-channel int8 weights on the weight MatMuls; uint8 activations (calibrated MinMax) "
        "only where onnx infers the activation's type (export report: quantized_activation_inputs)",
    ),
    "int8-row": QuantPreset(
        "int8-row", "dynamic_per_row", batch_invariant=True, calibrate_method="", weight_bits=7,
        description="per-row (per-token) dynamic uint8 activations, per-channel 7-bit weights, u8s8 MatMuls; "
        "batch invariant by construction, no calibration",
    ),
    "int8-smooth": QuantPreset(
        "int8-smooth", "dynamic_per_row", batch_invariant=True, calibrate_method="absmax", weight_bits=7,
        smooth_alpha=0.5, unsigned_gelu=True, gptq=True,
        description="int8-row after SmoothQuant (alpha 0.5): static per-channel factors from the calibration pairs "
        "move activation outliers into the weights; weights rounded by GPTQ on the calibration inputs; GELU outputs "
        "quantized shifted to non-negative (zero point 0); batch invariant by construction",
    ),
    "int8-dynamic": QuantPreset(
        "int8-dynamic", "dynamic", batch_invariant=False, per_channel=False, calibrate_method="",
        description="dynamic uint8/int8 MatMuls; a pair's score depends on its batchmates (comparison only)",
    ),
    "int8-weight": QuantPreset(
        "int8-weight", "weight_only", batch_invariant=True, per_channel=False, activation_type="",
        calibrate_method="", description="weight-only 8-bit MatMulNBits (block 32, fp32 compute): "
        "accurate and batch invariant, smaller, but slower than fp32 on CPU",
    ),
    "fp16": QuantPreset(
        "fp16", "fp16", batch_invariant=True, activation_type="", weight_type="", calibrate_method="",
        weights_only_matmuls=False, max_score_diff=FP16_MAX_SCORE_DIFF,
        description="fp16 weights and compute with fp32 inputs/outputs, fused for GPUs (BERT encoders: skip-LayerNorm "
        "too) and RMSNorm mean squares kept in fp32 (for GPUs; no gain on CPU)",
    ),
    "fp16-packed": QuantPreset(
        "fp16-packed", "fp16", batch_invariant=True, activation_type="", weight_type="", calibrate_method="",
        weights_only_matmuls=False, max_score_diff=FP16_MAX_SCORE_DIFF, packed=True, batch_tol=FP16_GPU_BATCH_TOL,
        description="fp16 (as above) in ONNX Runtime's packing mode, for encoder and cosine students on the CUDA "
        "provider: padding is removed before the first attention and restored after the last layer, so a "
        "micro-batch costs its real tokens, not batch x longest; the provider's own kernels (RemovePadding, "
        "PackedMultiHeadAttention), so it is validated and served on a GPU only",
    ),
}
VARIANTS = ("fp32", *PRESETS)


#: the minimum of GELU(x) = x·Φ(x) (at x ≈ -0.7518), rounded down
GELU_MIN = -0.17


def weight_matmuls(model_path: Path) -> list[str]:
    """Names of MatMul nodes whose second input is a constant (a weight), not an activation."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    consts = {i.name for i in model.graph.initializer}
    consts |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in consts]


class _FeedReader:
    """onnxruntime CalibrationDataReader over pre-built feeds."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]):
        self._feeds = feeds
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):
        """Entropy/Percentile calibrators read the data more than once."""
        self._it = iter(self._feeds)


def _pairs_in(feeds: list[dict[str, np.ndarray]]) -> int:
    """Rows (pairs) in calibration feeds: the batch size of each feed's first input."""
    return int(sum(next(iter(f.values())).shape[0] for f in feeds))


def _external(path: Path) -> bool:
    return path.stat().st_size > 1_800_000_000 or any(path.parent.glob(path.name + ".data"))


def _softmax_sums_in_float64(model_path: Path, external: bool) -> int:
    """Rewrite every Softmax of ``model_path`` as exp(x - max) / sum, the sum taken in float64; returns how many.

    Makes the fp32 attention probabilities bit-identical whether or not a row is padded, so the
    static quantizers downstream cannot turn 1-ulp padding noise into whole quantization steps: the
    max is exact in any order, exp and the division are elementwise, and only the sum depends on the
    order of its terms (its float64 rounding vanishes in the cast back to float32, except with ~1e-8
    probability). The whole Softmax in float64 did the same at about 5x the cost: on the SemEval cosine
    student (256-token documents) it took 2.4 s per top-100 (62% of int8-smooth's kernel time; this
    form's parts 0.45 s, fp32's Softmax 0.23 s) and made int8 slower than fp32
    (benchmarks/results/int8-softmax-xeon-2core)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(model_path))
    g = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    nodes, n, axes_inits = [], 0, {}
    for node in g.node:
        if node.op_type != "Softmax":
            nodes.append(node)
            continue
        if opset < 13:  # Softmax flattened its input from `axis` on before opset 13
            raise InvalidInput(f"{model_path.name}: opset {opset} Softmax cannot be rewritten row-wise",
                               "export the fp32 graph at opset 13 or later")
        axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
        x, y, p = node.input[0], node.output[0], (node.name or f"softmax{n}") + "_"
        if axis not in axes_inits:
            axes_inits[axis] = numpy_helper.from_array(np.array([axis], dtype=np.int64), f"r3edge_softmax_axis{axis}")
        axes = axes_inits[axis].name

        row_max = (helper.make_node("ReduceMax", [x], [p + "max"], axes=[axis], keepdims=1, name=p + "ReduceMax")
                   if opset < 18 else  # its axes were an attribute before opset 18
                   helper.make_node("ReduceMax", [x, axes], [p + "max"], keepdims=1, name=p + "ReduceMax"))
        nodes += [
            row_max,
            helper.make_node("Sub", [x, p + "max"], [p + "shifted"], name=p + "Sub"),
            helper.make_node("Exp", [p + "shifted"], [p + "exp"], name=p + "Exp"),
            helper.make_node("Cast", [p + "exp"], [p + "exp_f64"], to=TensorProto.DOUBLE, name=p + "to_f64"),
            helper.make_node("ReduceSum", [p + "exp_f64", axes], [p + "sum_f64"], keepdims=1, name=p + "ReduceSum"),
            helper.make_node("Cast", [p + "sum_f64"], [p + "sum"], to=TensorProto.FLOAT, name=p + "to_f32"),
            helper.make_node("Div", [p + "exp", p + "sum"], [y], name=p + "Div"),
        ]
        n += 1
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(axes_inits.values())
    if external:
        data = model_path.with_name(model_path.name + ".data")
        if data.exists():
            data.unlink()
        onnx.save(model, str(model_path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=data.name)
    else:
        onnx.save(model, str(model_path))
    return n


def _matmul_weight(node, inits: dict):
    """The float 2-D initializer ``node`` multiplies its input by, when ``node`` is a weight MatMul; else None."""
    from onnx import TensorProto

    w = inits.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
    return w if w is not None and len(w.dims) == 2 and w.data_type == TensorProto.FLOAT else None


def _weight_matmul_inputs(model) -> dict[str, list]:
    """Input name -> the float 2-D weight initializers of the MatMuls reading it (Q, K and V share one)."""
    inits = {i.name: i for i in model.graph.initializer}
    out: dict[str, list] = {}
    for node in model.graph.node:
        w = _matmul_weight(node, inits)
        if w is not None:
            out.setdefault(node.input[0], []).append(w)
    return out


@dataclass
class _ActivationStats:
    """Calibration statistics of one MatMul input over real (unpadded) tokens."""

    amax: np.ndarray  #: per-channel max |x|
    gram: np.ndarray | None = None  #: X^T X (float64), for GPTQ
    colsum: np.ndarray | None = None  #: 1^T X, to shift the Gram matrix (x - GELU_MIN)
    rows: int = 0

    def shifted_gram(self, shift: float, scale: np.ndarray | None) -> np.ndarray:
        """The Gram matrix of ``(x + shift) * scale`` (per channel)."""
        g = self.gram + shift * (self.colsum[:, None] + self.colsum[None, :]) + shift * shift * self.rows
        return g if scale is None else g * np.outer(scale, scale)


def _activation_stats(fp32_path: Path, feeds: list[dict[str, np.ndarray]], names: list[str],
                      gram: bool = False) -> dict[str, _ActivationStats]:
    """Per-channel max |x| (and with ``gram`` X^T X) of each named activation over the calibration feeds."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    model = onnx.load(str(fp32_path))
    inputs = {i.name for i in model.graph.input}
    computed = [n for n in names if n not in inputs]
    model.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in computed)
    stats: dict[str, _ActivationStats] = {}
    with tempfile.TemporaryDirectory(prefix="r3edge-calib-") as tmp:
        if _external(fp32_path):  # over protobuf's 2 GB: the session reads the weights from a file
            path = Path(tmp) / "calib.onnx"
            onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                      location="calib.onnx.data")
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        else:
            sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        for feed in feeds:
            mask = feed.get("attention_mask")
            values = {**{n: feed[n] for n in names if n in inputs}, **dict(zip(computed, sess.run(computed, feed)))}
            for name, x in values.items():
                rows = x.reshape(-1, x.shape[-1])
                if mask is not None and rows.shape[0] == mask.size:  # a row per token: padding left out
                    rows = rows[mask.reshape(-1) == 1]
                m = np.abs(rows).max(axis=0)
                st = stats.get(name)
                if st is None:
                    st = stats[name] = _ActivationStats(m)
                    if gram:
                        st.gram, st.colsum = np.zeros((m.size, m.size)), np.zeros(m.size)
                st.amax = np.maximum(st.amax, m)
                if gram:
                    r64 = rows.astype(np.float64)
                    st.gram += r64.T @ r64
                    st.colsum += r64.sum(axis=0)
                    st.rows += rows.shape[0]
    return stats


def _gptq_round(weight: np.ndarray, scale: np.ndarray, qmax: int, gram: np.ndarray, damp: float = 0.01,
                block: int = 128) -> np.ndarray:
    """Integer weights ``[K, N]`` rounded by GPTQ (Frantar et al., 2023) instead of to nearest.

    Rows of ``weight`` (input channels) are rounded one at a time and each one's rounding error is
    pushed onto the rows not yet rounded, weighted by the inverse of the calibration inputs' Gram
    matrix, so that ``x · W`` (not ``W`` itself) stays close for inputs like the calibration ones.
    The scales stay per output column; the graph is unchanged, so speed is too.
    """
    k = weight.shape[0]
    h = gram.astype(np.float64).copy()
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    h[np.diag_indices(k)] += damp * np.mean(np.diag(h))
    u = np.linalg.cholesky(np.linalg.inv(h)).T  # upper: H^-1 = U^T U
    w = weight.astype(np.float64).copy()
    w[dead] = 0.0
    q = np.empty(w.shape, np.int8)
    for i1 in range(0, k, block):
        i2 = min(i1 + block, k)
        err = np.zeros((i2 - i1, w.shape[1]))
        for j in range(i1, i2):
            qj = np.clip(np.round(w[j] / scale), -qmax, qmax)
            q[j] = qj
            e = (w[j] - qj * scale) / u[j, j]
            w[j + 1:i2] -= np.outer(u[j, j + 1:i2], e)
            err[j - i1] = e
        w[i2:] -= u[i1:i2, i2:].T @ err
    return q


def _activation_coverage(q_path: Path, fp32_path: Path) -> dict:
    """How many weight-MatMul inputs the static quantizer really quantized.

    onnxruntime's quantizer calibrates only tensors whose type onnx can infer; outputs of contrib
    ops (``MultiHeadAttention``, ``BiasGelu``) have none, so on the fused encoder their MatMuls
    get int8 weights but fp32 activations (ORT then runs them as weight-only ``MatMulNBits``).
    Before the fused graph kept ``LayerNormalization``, no activation at all was quantized and
    this variant was weight-only int8 under a static-QDQ name; the export report now says so.
    """
    import onnx

    model = onnx.load(str(q_path), load_external_data=False)
    q_out = {n.output[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    quantized = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in q_out}
    inputs = _weight_matmul_inputs(onnx.load(str(fp32_path)))
    used = {n.input[0] for n in model.graph.node if n.op_type == "MatMul"}
    return {"weight_matmul_inputs": len(inputs), "quantized_activation_inputs": len(quantized & used)}


def _row_quantizer(x: str, p: str, width: int, unsigned: bool, factor: np.ndarray | None,
                   nodes: list, consts: list, zero_points: dict, lead: tuple | None) -> tuple[str, str, str]:
    """Nodes quantizing ``x`` per row (appended to ``nodes``): ``(quantized, row scale, zero point)``.

    The row scale is ``max|x / s| / 127`` (``s``: the SmoothQuant factors, if any), or for GELU
    outputs ``max(x - GELU_MIN) / 255`` with zero point 0. ``lead`` is ``x``'s shape without its last
    dimension when it is known symbolically: inputs of one ``lead`` share one expanded zero point
    (``zero_points`` holds them).
    """
    from onnx import helper, numpy_helper

    src = x
    if unsigned:  # x - GELU_MIN >= 0: its max is the row's range, zero point 0
        nodes.append(helper.make_node("Add", [x, "r3_gelu_shift"], [p + "shifted"], name=p + "shift"))
        src = p + "shifted"
    if factor is not None:
        consts.append(numpy_helper.from_array((1.0 / factor).astype(np.float32), p + "inv_s"))
        nodes.append(helper.make_node("Mul", [src, p + "inv_s"], [p + "smoothed"], name=p + "smooth"))
        src = p + "smoothed"
    if not unsigned:
        nodes.append(helper.make_node("Abs", [src], [p + "abs"], name=p + "abs"))
    nodes.append(helper.make_node("ReduceMax", [src if unsigned else p + "abs", "r3_row_axes"], [p + "amax"],
                                  keepdims=1, name=p + "amax"))
    nodes += [helper.make_node("Mul", [p + "amax", "r3_row_inv255" if unsigned else "r3_row_inv127"], [p + "s0"],
                               name=p + "s0"),
              helper.make_node("Max", [p + "s0", "r3_row_eps"], [p + "scale"], name=p + "scale")]
    if unsigned:  # no zero point input: uint8 with zero point 0
        inputs, zp = [src, p + "scale"], "r3_zp0"
    else:  # blocked QuantizeLinear wants a zero point of its scale's shape (ORT rejects a scalar)
        if lead is None or lead not in zero_points:
            nodes += [helper.make_node("Shape", [p + "scale"], [p + "shape"], name=p + "shape"),
                      helper.make_node("Expand", ["r3_row_zp", p + "shape"], [p + "zp"], name=p + "zp")]
            if lead is not None:
                zero_points[lead] = p + "zp"
        inputs, zp = [src, p + "scale", zero_points.get(lead, p + "zp")], "r3_zp128"
    nodes.append(helper.make_node("QuantizeLinear", inputs, [p + "q"], axis=-1, block_size=width, name=p + "quantize"))
    return p + "q", p + "scale", zp


def _leading_dims(model) -> dict[str, tuple]:
    """Tensor name -> its shape without the last dimension, where ORT's symbolic shape inference
    (which knows the contrib ops of fused graphs) names every dimension; {} if it cannot run.

    The inference copies the model it is given, so it gets one without weights: float initializers
    become graph inputs of the same shape (a shape is all it reads of them), the rest stay.
    """
    from onnx import TensorProto, helper

    inits = model.graph.initializer
    weights = [i for i in inits if i.data_type == TensorProto.FLOAT]
    light = helper.make_model(
        helper.make_graph(model.graph.node, model.graph.name,
                          [*model.graph.input, *(helper.make_tensor_value_info(i.name, i.data_type, i.dims) for i in weights)],
                          model.graph.output, [i for i in inits if i.data_type != TensorProto.FLOAT]),
        opset_imports=model.opset_import, ir_version=model.ir_version)
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(light, auto_merge=True)
    except Exception:  # noqa: BLE001 - an optimisation only: every input then gets its own zero point
        return {}
    out = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info]:
        dims = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
        if len(dims) > 1 and all(dims):
            out[vi.name] = tuple(dims[:-1])
    return out


def _fold_into_bias(nodes: list, tensors: dict, consts: list) -> list:
    """Drop each ``*_unshift`` Add whose output only feeds an Add of a constant bias: the shift joins the bias.

    (The fused encoder adds the output projection's bias right after the MatMul: one pass over the
    activations less per layer.)
    """
    from onnx import numpy_helper

    readers: dict[str, list] = {}
    for nd in nodes:
        for i in nd.input:
            readers.setdefault(i, []).append(nd)
    dropped = set()
    for nd in nodes:
        if not nd.name.endswith("_unshift") or len(readers.get(nd.output[0], [])) != 1:
            continue
        add = readers[nd.output[0]][0]
        other = [i for i in add.input if i != nd.output[0]]
        bias = tensors.get(other[0]) if add.op_type == "Add" and len(other) == 1 else None
        shift = numpy_helper.to_array(tensors[nd.input[1]])
        if bias is None or tuple(bias.dims) != shift.shape:
            continue
        folded = numpy_helper.from_array(numpy_helper.to_array(bias) + shift, f"{other[0]}_r3{nd.input[1]}")
        consts.append(folded)
        add.input[:] = [nd.input[0] if i == nd.output[0] else folded.name for i in add.input]
        dropped.add(id(nd))
    return [nd for nd in nodes if id(nd) not in dropped]


def _smooth_factors(model, stats: dict[str, _ActivationStats], alpha: float) -> dict[str, np.ndarray]:
    """SmoothQuant's per-channel factor of every calibrated weight-MatMul input:
    ``s = amax_x^alpha / amax_w^(1-alpha)`` over all the weights that read it, clipped to [0.01, 100]."""
    from onnx import numpy_helper

    factors: dict[str, np.ndarray] = {}
    for x, ws in _weight_matmul_inputs(model).items():
        if x in stats:
            w_amax = np.max([np.abs(numpy_helper.to_array(w)).max(axis=1) for w in ws], axis=0)
            f = np.power(np.maximum(stats[x].amax, 1e-5), alpha) / np.power(np.maximum(w_amax, 1e-5), 1 - alpha)
            factors[x] = np.clip(f, 1e-2, 1e2).astype(np.float32)
    return factors


def _quantized_weight(exact: np.ndarray, qmax: int, factor: np.ndarray | None, stats: _ActivationStats | None,
                      unsigned: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(int8 weight, per-column scale)`` of one MatMul weight: its rows multiplied by the smoothing
    ``factor`` (if any), symmetric per output channel, rounded by GPTQ when its input's ``stats`` are
    given (the Gram matrix of what the kernel multiplies: ``(x [- GELU_MIN]) / s``), else to nearest."""
    weight = exact * factor[:, None] if factor is not None else exact
    scale = np.abs(weight).max(axis=0) / qmax
    scale[scale == 0] = 1.0
    if stats is not None:
        gram = stats.shifted_gram(-GELU_MIN if unsigned else 0.0, 1.0 / factor if factor is not None else None)
        return _gptq_round(weight, scale, qmax, gram), scale
    return np.clip(np.round(weight / scale), -qmax, qmax).astype(np.int8), scale


def _save_rewritten(model, nodes: list, consts: list, out_path: Path, external: bool) -> None:
    """Replace the graph's nodes, keep only the initializers something reads, raise the opsets the
    new nodes need (blocked QuantizeLinear: 21; MatMulIntegerToFloat: com.microsoft) and save."""
    import onnx
    from onnx import helper

    g = model.graph
    del g.node[:]
    g.node.extend(nodes)
    used = {i for nd in g.node for i in nd.input}
    kept = [i for i in g.initializer if i.name in used] + [c for c in consts if c.name in used]
    del g.initializer[:]
    g.initializer.extend(kept)
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx"):
            op.version = max(op.version, 21)
    if not any(op.domain == "com.microsoft" for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    model.ir_version = max(model.ir_version, 10)
    if external:
        onnx.save(model, str(out_path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=out_path.name + ".data")
    else:
        onnx.save(model, str(out_path))


def _per_row_int8(fp32_path: Path, out_path: Path, weight_bits: int, activation_bits: int, external: bool,
                  exclude: tuple[str, ...] = (), stats: dict[str, _ActivationStats] | None = None,
                  alpha: float = 0.0, gelu_unsigned: bool = False, gptq: bool = False) -> dict:
    """Rewrite every weight MatMul ``X·W`` of ``fp32_path`` as a per-row dynamic int8 MatMul.

    Per row of ``X`` (one token), in the graph: ``s = max|x| / 127``; ``xq = QuantizeLinear(x, s, 128)``
    (opset 21 blocked quantization with one block per row: one fused pass); then
    ``MatMulIntegerToFloat(xq, Wq, s, s_w, 128)`` (ORT's u8s8 GEMM with the per-column weight scale
    fused into its output; the ``[..., 1]``-shaped row scale ``s`` is applied inside the kernel: one
    node and one output-sized buffer less per MatMul than a separate ``Mul``, at the same measured
    speed). A row's scale depends on that row alone, so a pair's score cannot depend on its batchmates
    (unlike ``DynamicQuantizeLinear``, one scale per tensor = per batch). The activation zero point is
    the scalar 128 (symmetric), because ORT's int8 kernels take a scalar zero point for A; a per-row
    asymmetric zero point would need a rank-1 correction pass per MatMul. Weights are symmetric per
    output channel with ``weight_bits`` bits: 7, because on AVX2 without VNNI the u8s8 kernel
    (vpmaddubsw) adds two u8·s8 products in int16 and saturates once 2·255·|w| > 32767; 8-bit weights
    were measured 7x further from fp32 on random inputs (max |Δ| 0.72 vs 0.10 on a 4300x384x1536
    MatMul).
    Inputs shared by several MatMuls (Q, K and V read the same LayerNorm output) are quantized once.

    ``stats`` (input name -> calibration statistics) with ``alpha`` > 0 applies SmoothQuant (Xiao et al.,
    2023) first: ``x / s`` per channel feeds the quantizer and ``s`` is folded into the rows of every
    weight reading ``x``, ``s = amax_x^alpha / amax_w^(1-alpha)``. The product is unchanged in exact
    arithmetic; the outlier channels no longer set every token's scale. ``s`` is a constant, so the
    graph stays batch invariant. With ``gptq`` (and Gram matrices in ``stats``) the weights are
    rounded by :func:`_gptq_round` instead of to nearest.
    """
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(fp32_path))
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    qmax = 2 ** (weight_bits - 1) - 1
    amax, zp = 2 ** (activation_bits - 1) - 1, 2 ** (activation_bits - 1)
    consts = [
        numpy_helper.from_array(np.array([-1], np.int64), "r3_row_axes"),
        numpy_helper.from_array(np.array(1 / amax, np.float32), "r3_row_inv127"),
        numpy_helper.from_array(np.array(1e-30, np.float32), "r3_row_eps"),
        numpy_helper.from_array(np.array([zp], np.uint8), "r3_row_zp"),
        numpy_helper.from_array(np.array(zp, np.uint8), "r3_zp128"),
    ]
    # GELU outputs are >= GELU_MIN: shifted by -GELU_MIN they are non-negative, and a per-row
    # scale over [0, max] with zero point 0 uses all 256 uint8 steps instead of the ~128 a
    # symmetric scale leaves them (their negative side is only 0.17 deep); smoothing divides after the shift
    gelu_out = {o for nd in g.node if nd.op_type in ("BiasGelu", "Gelu") for o in nd.output} if gelu_unsigned else set()
    factors = _smooth_factors(model, stats, alpha) if stats and alpha else {}
    if gelu_out:
        consts += [numpy_helper.from_array(np.array(-GELU_MIN, np.float32), "r3_gelu_shift"),
                   numpy_helper.from_array(np.array(1 / (2 ** activation_bits - 1), np.float32), "r3_row_inv255"),
                   numpy_helper.from_array(np.array(0, np.uint8), "r3_zp0")]
    rows: dict[str, tuple[str, str, str]] = {}
    leads, zero_points = _leading_dims(model), {}
    nodes, n = [], 0
    for node in g.node:
        w = _matmul_weight(node, inits)
        if w is None or any(e in node.name for e in exclude):
            nodes.append(node)
            continue
        x, y = node.input[0], node.output[0]
        unsigned = x in gelu_out
        if x not in rows:
            rows[x] = _row_quantizer(x, f"r3_row{len(rows)}_", int(w.dims[0]), unsigned, factors.get(x), nodes, consts,
                                     zero_points, leads.get(x))
        xq, xs, xzp = rows[x]
        exact = numpy_helper.to_array(w).astype(np.float32)
        wq, scale = _quantized_weight(exact, qmax, factors.get(x), (stats or {}).get(x) if gptq else None, unsigned)
        wq_name, ws_name = f"{w.name}_r3q{n}", f"{w.name}_r3s{n}"
        consts += [numpy_helper.from_array(wq, wq_name), numpy_helper.from_array(scale.astype(np.float32), ws_name)]
        # the row scale [..., 1] is the A scale: ORT multiplies each output row by it inside the kernel
        out = y + "_r3shifted" if unsigned else y
        nodes.append(helper.make_node("MatMulIntegerToFloat", [xq, wq_name, xs, ws_name, xzp], [out],
                                      domain="com.microsoft", name=f"{node.name or y}_int8"))
        if unsigned:  # (x - GELU_MIN)·W + GELU_MIN·colsum(W) = x·W (the fp32 weights, a constant)
            fix = f"{w.name}_r3shift{n}"
            consts.append(numpy_helper.from_array((GELU_MIN * exact.sum(axis=0)).astype(np.float32), fix))
            nodes.append(helper.make_node("Add", [out, fix], [y], name=f"{node.name or y}_unshift"))
        n += 1
    nodes = _fold_into_bias(nodes, {c.name: c for c in [*g.initializer, *consts]}, consts)
    _save_rewritten(model, nodes, consts, out_path, external)
    return {"quantized_matmuls": n, "quantized_inputs": len(rows), "weight_bits": weight_bits,
            "unsigned_gelu_inputs": sum(1 for r in rows.values() if r[2] == "r3_zp0"),
            "unshift_adds": sum(1 for nd in nodes if nd.name.endswith("_unshift")),
            "activation_bits": activation_bits, "smoothed_inputs": len(factors), "gptq": bool(gptq and stats),
            **({"smooth_alpha": alpha} if factors else {})}


def _rms_variance_nodes(model) -> list[str]:
    """Names of the nodes that take an RMSNorm's mean square and its inverse root: each ``Pow`` ->
    ``ReduceMean`` -> ``Add`` (eps) -> ``Sqrt`` -> ``Reciprocal`` chain, as torch's export writes the
    Qwen2/Llama RMSNorm. In fp16 the mean square of a hidden state past 256 (Qwen2.5's outlier
    channels reach thousands) overflows 65,504 to inf and the layer's output to 0 or NaN; these few
    elementwise nodes stay fp32 (behind Casts) and the normalised product is fp16 again."""
    readers: dict[str, list] = {}
    for nd in model.graph.node:
        for i in nd.input:
            readers.setdefault(i, []).append(nd)
    names = []
    for nd in model.graph.node:
        if nd.op_type != "Pow":
            continue
        chain, cur = [nd], nd
        for op in ("ReduceMean", "Add", "Sqrt", "Reciprocal"):
            nxt = [r for r in readers.get(cur.output[0], []) if r.op_type == op]
            if len(nxt) != 1:
                break
            cur = nxt[0]
            chain.append(cur)
        else:
            for k, c in enumerate(chain):
                c.name = c.name or f"r3_rms{len(names)}_{k}"  # the converter blocks nodes by name
            names += [c.name for c in chain]
    return names


def _io_types(model) -> dict[str, int]:
    return {v.name: v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]}


def _drop_duplicate_nodes(model) -> int:
    """Remove nodes that repeat an earlier node exactly (and value_info entries that repeat a name);
    returns how many nodes went. onnxruntime 1.31's ``convert_float_to_float16`` inserts one
    ``{input}_cast_to_fp32_node`` per consumer of a value that feeds two fp32-kept nodes, all with the
    same name and output, which onnxruntime then refuses to load ("two nodes with same node name").
    It broke the 1.5B-shape causal export on the H200 (benchmarks/results/gpu-students-h200); 1.32 shares
    one Cast per value, and there this finds nothing."""
    seen: set[bytes] = set()
    keep = []
    for node in model.graph.node:
        key = node.SerializeToString(deterministic=True)
        if key not in seen:
            seen.add(key)
            keep.append(node)
    dropped = len(model.graph.node) - len(keep)
    if dropped:
        del model.graph.node[:]
        model.graph.node.extend(keep)
        infos = {}
        for v in model.graph.value_info:
            infos.setdefault(v.name, v)
        kept_infos = list(infos.values())
        del model.graph.value_info[:]
        model.graph.value_info.extend(kept_infos)
    return dropped


def _pack(model) -> tuple:
    """ONNX Runtime's packing mode (``onnxruntime.transformers.convert_to_packing_mode``) on a fused fp16
    encoder graph, in place: ``RemovePadding`` before the first attention's projections (it reads each
    row's length from the attention's key-padding lengths), ``PackedMultiHeadAttention`` for each
    ``MultiHeadAttention``, ``RestorePadding`` after the last layer norm, so the pooling and the head
    read ``[batch, sequence, hidden]`` again. Right padding only, which every encoder student uses.
    Returns ``(model, op counts)``; raises when the converter left the graph unpacked (it logs and
    returns on a graph it does not recognise)."""
    from onnxruntime.transformers.convert_to_packing_mode import PackingMode
    from onnxruntime.transformers.onnx_model import OnnxModel

    wrapped = OnnxModel(model)
    PackingMode(wrapped).convert(use_symbolic_shape_infer=False)
    ops = [n.op_type for n in wrapped.model.graph.node]
    counts = {op: ops.count(op) for op in ("RemovePadding", "PackedMultiHeadAttention", "RestorePadding",
                                           "MultiHeadAttention")}
    if counts["RemovePadding"] != 1 or counts["RestorePadding"] != 1 or counts["MultiHeadAttention"]:
        raise R3EdgeError(f"ONNX Runtime's packing mode left the fp16 graph unpacked ({counts})",
                          "use the fp16 variant (padded); packing needs every attention to share one key-padding mask")
    return wrapped.model, counts


def _to_fp16(fp32_path: Path, out_path: Path, external: bool, packed: bool = False) -> dict:
    """The ``fp16`` variant of a scoring (or candidate) graph: ONNX Runtime's
    ``convert_float_to_float16(keep_io_types=True)``, after :func:`r3edge.export.fusion.fuse_for_gpu` on a
    fused BERT graph, with the RMSNorm mean squares of a causal graph in fp32 (:func:`_rms_variance_nodes`);
    ``packed``: then in packing mode (:func:`_pack`, the ``fp16-packed`` variant) if it is a fused encoder
    graph; ``info["packing"]`` says what packing did, None for a graph without fused attention to pack
    (a causal student's, a cosine student's single graph) or one the converter left unpacked
    (``info["packing_error"]`` says why), which stays plain fp16.
    The graph reads only the label rows of the LM head because the fp32 graph does (the conversion
    rewrites types, not structure). Raises if an input or output changed type: the server feeds int64 ids
    (and an fp32 query embedding) and reads fp32 logits."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from r3edge.export.fusion import fuse_for_gpu, is_fused_encoder

    model = onnx.load(str(fp32_path))
    io = _io_types(model)
    info: dict = {}
    if is_fused_encoder(model):
        opt, info["gpu_fusion"] = fuse_for_gpu(model)
        model = opt.model
    block = _rms_variance_nodes(model)
    model = convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=True, node_block_list=block)
    info["repeated_nodes_dropped"] = _drop_duplicate_nodes(model)
    if packed:
        info["packing"] = None
        if "gpu_fusion" in info:
            try:
                model, info["packing"] = _pack(model)
            except R3EdgeError as exc:  # the variant is then rejected (r3edge.export.onnx), not the export
                info["packing_error"] = exc.what
    if _io_types(model) != io:
        raise R3EdgeError(f"the fp16 graph of {fp32_path.name} changed its input/output types {io} -> {_io_types(model)}",
                          "convert with keep_io_types=True (inputs and outputs stay those of the fp32 graph)")
    inits = [i.data_type for i in model.graph.initializer]
    info.update({"fp16_initializers": inits.count(onnx.TensorProto.FLOAT16),
                 "fp32_initializers": inits.count(onnx.TensorProto.FLOAT), "fp32_rmsnorm_nodes": len(block)})
    if external:
        onnx.save(model, str(out_path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=out_path.name + ".data")
    else:
        onnx.save(model, str(out_path))
    return info


def quantize(
    preset: QuantPreset,
    fp32_path: Path,
    out_path: Path,
    calib_feeds: Iterable[dict[str, np.ndarray]] | None,
    log=print,
) -> dict:
    """Write ``out_path`` from the fp32 graph; returns what was done, for the export report."""
    t0 = time.perf_counter()
    info: dict = {"preset": preset.to_json()}
    if preset.kind == "fp16":
        info.update(_to_fp16(fp32_path, out_path, _external(fp32_path), packed=preset.packed))
    elif preset.kind == "weight_only":
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

        # accuracy_level 0 keeps fp32 activations: level 4 (int8 compute) made scores move with
        # padding on SmolLM2-135M (0.028), level 0 stays at fp32's 3e-6.
        cfg = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, accuracy_level=0, bits=8)
        q = MatMulNBitsQuantizer(onnx.load(str(fp32_path)), algo_config=cfg)
        q.process()
        q.model.save_model_to_file(str(out_path), _external(fp32_path))
    elif preset.kind == "dynamic_per_row":
        stats = None
        if preset.smooth_alpha or preset.gptq:
            import onnx

            feeds = list(calib_feeds or [])
            if not feeds:
                raise InvalidInput(f"variant {preset.name} needs calibration pairs", "pass --calib PAIRS.jsonl (or use the built-in set)")
            names = list(_weight_matmul_inputs(onnx.load(str(fp32_path))))
            stats = _activation_stats(fp32_path, feeds, names, gram=preset.gptq)
            info["calibration_pairs"] = _pairs_in(feeds)
        info.update(_per_row_int8(fp32_path, out_path, preset.weight_bits, preset.activation_bits, _external(fp32_path),
                                  stats=stats, alpha=preset.smooth_alpha, gelu_unsigned=preset.unsigned_gelu,
                                  gptq=preset.gptq))
        # a no-op on fused encoder graphs (their softmax is inside MultiHeadAttention)
        info["float64_softmax_sums"] = _softmax_sums_in_float64(out_path, _external(fp32_path))
    elif preset.kind == "dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        nodes = weight_matmuls(fp32_path)
        quantize_dynamic(str(fp32_path), str(out_path), op_types_to_quantize=["MatMul"], nodes_to_quantize=nodes,
                         weight_type=QuantType.QInt8, per_channel=preset.per_channel,
                         use_external_data_format=_external(fp32_path))
        info["quantized_matmuls"] = len(nodes)
    elif preset.kind == "static_qdq":
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        feeds = list(calib_feeds or [])
        if not feeds:
            raise InvalidInput(f"variant {preset.name} needs calibration pairs", "pass --calib PAIRS.jsonl (or use the built-in set)")
        nodes = weight_matmuls(fp32_path)
        quantize_static(
            str(fp32_path), str(out_path), _FeedReader(feeds),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=nodes if preset.weights_only_matmuls else None,
            per_channel=preset.per_channel,
            activation_type=getattr(QuantType, preset.activation_type),
            weight_type=getattr(QuantType, preset.weight_type),
            calibrate_method=getattr(CalibrationMethod, preset.calibrate_method),
            use_external_data_format=_external(fp32_path),
            extra_options={"ActivationSymmetric": False, "WeightSymmetric": True,
                           "OpTypesToExcludeOutputQuantization": ["MatMul"]},
        )
        info["float64_softmax_sums"] = _softmax_sums_in_float64(out_path, _external(fp32_path))
        info["quantized_matmuls"] = len(nodes)
        info.update(_activation_coverage(out_path, fp32_path))
        info["calibration_batches"] = len(feeds)
        info["calibration_pairs"] = _pairs_in(feeds)
    else:
        # QuantPreset refuses a kind outside QuantKind, so reaching this is r3edge's bug
        raise R3EdgeError(f"quantize() has no branch for kind {preset.kind!r}", "report a bug")
    info["seconds"] = round(time.perf_counter() - t0, 2)
    log(f"[export] {preset.name}: {preset.description} ({info['seconds']} s)")
    return info
