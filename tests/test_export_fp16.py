"""The fp16 variant (issue 46): a GPU variant exported and parity-checked on the CPU.

Real parts: tiny random students (a BERT cosine student with the real MiniLM tokenizer, the tiny Qwen2
causal student with the real Qwen2.5 tokenizer) exported by ``export_artifact``, graphs read back with
onnx, scored by ONNX Runtime's CPU provider. What a CPU cannot show (fp16 speed, the CUDA provider's
fp16 kernels) is measured by benchmarks/gpu; here: the graph has fp16 weights and fp32 inputs/outputs,
the fused encoder graph gets the GPU fusions, a causal graph keeps RMSNorm's mean square in fp32 and
reads only the label rows, and parity is gated and recorded with the provider that ran it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE_QUERIES, tiny_bi_config

pytestmark = pytest.mark.slow  # real models exported through torch

QUERIES = [q["query"] for q in SAMPLE_QUERIES for _ in q["candidates"]]
DOCS = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]
QUIET = {"log": lambda *a, **k: None}


def _graph(path: Path):
    import onnx

    return onnx.load(str(path))


def _io(model) -> dict[str, int]:
    return {v.name: v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]}


def _float_initializers(model) -> dict[int, int]:
    import onnx

    counts = {onnx.TensorProto.FLOAT: 0, onnx.TensorProto.FLOAT16: 0}
    for init in model.graph.initializer:
        if init.data_type in counts:
            counts[init.data_type] += 1
    return counts


@pytest.fixture(scope="module")
def cosine_artifact(tmp_path_factory) -> Path:
    """bert-tiny as an untrained cosine student, exported fp32 + fp16 (+ fp16-packed, which a machine without
    the CUDA provider leaves out) with its prefix-reuse graphs."""
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.export.onnx import export_artifact
    from r3edge.model.student import create_student, save_student

    tmp = tmp_path_factory.mktemp("fp16bi")
    student = save_student(*create_student(load_yaml(tiny_bi_config(tmp), StudentConfig)), tmp / "student")
    return export_artifact(student, tmp / "artifact", variants=("fp32", "fp16", "fp16-packed"), prefix_reuse=True,
                           **QUIET)


@pytest.fixture(scope="module")
def causal_artifact(tiny_student, tmp_path_factory) -> Path:
    from r3edge.export.onnx import export_artifact

    return export_artifact(tiny_student, tmp_path_factory.mktemp("fp16qw") / "artifact", variants=("fp32", "fp16"), **QUIET)


def test_cosine_fp16_graphs_have_fp16_weights_fp32_io_and_the_gpu_fusions(cosine_artifact):
    import onnx

    manifest = json.loads((cosine_artifact / "manifest.json").read_text())
    assert manifest["variants"]["fp16"] == "model.fp16.onnx"
    assert manifest["prefix_graphs"]["fp16"]["candidate"] == "candidate.fp16.onnx"
    layers = json.loads((cosine_artifact / "export_report.json").read_text())["prefix_reuse"]["fp32"]["candidate_graph"][
        "fused"]["MultiHeadAttention"]
    for fp32, fp16 in [("model.fp32.onnx", "model.fp16.onnx"), ("candidate.fp32.onnx", "candidate.fp16.onnx")]:
        g32, g16 = _graph(cosine_artifact / fp32), _graph(cosine_artifact / fp16)
        assert _io(g16) == _io(g32)  # int64 ids and mask, fp32 query embedding in; fp32 label_logits out
        assert _io(g16)["label_logits"] == onnx.TensorProto.FLOAT
        counts = _float_initializers(g16)
        assert counts[onnx.TensorProto.FLOAT] == 0 and counts[onnx.TensorProto.FLOAT16] >= 4 * layers
    cand = _graph(cosine_artifact / "candidate.fp16.onnx")
    ops = [n.op_type for n in cand.graph.node]
    # the CPU graph leaves residual + LayerNorm unfused; the fp16 (GPU) graph fuses them
    assert "SkipLayerNormalization" not in [n.op_type for n in _graph(cosine_artifact / "candidate.fp32.onnx").graph.node]
    assert ops.count("SkipLayerNormalization") == 2 * layers and ops.count("MultiHeadAttention") == layers


def test_fp16_parity_is_gated_and_names_the_provider(cosine_artifact, causal_artifact):
    from r3edge.export.quantize import FP16_MAX_SCORE_DIFF

    for art, views in [(cosine_artifact, ("variants", "prefix_reuse")), (causal_artifact, ("variants",))]:
        report = json.loads((art / "export_report.json").read_text())
        assert set(report["rejected"]) <= {"fp16-packed"}  # built only where the CUDA provider runs it
        for view in views:
            rep = report[view]["fp16"]
            assert rep["validated_on"] == "CPUExecutionProvider"
            assert rep["tolerances"]["max_score_diff"] == FP16_MAX_SCORE_DIFF
            assert 0 < rep["max_abs_score_diff"] <= FP16_MAX_SCORE_DIFF  # fp16 rounding: close, never identical
            assert report[view]["fp32"]["validated_on"] == "CPUExecutionProvider"


def test_the_fp16_gate_rejects_scores_beyond_its_tolerance(causal_artifact):
    """The gate itself: the same fp16 graph held to a tolerance below its rounding error fails, naming the provider."""
    from r3edge.core.onnx_runtime import open_session
    from r3edge.core.scoring import Scorer, score_pairs
    from r3edge.export.parity import ScoreDiffError, check_variant

    def runner(path: Path):
        sess = open_session(path)

        def run(ids, mask):
            return sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]

        run.providers = sess.get_providers()
        return run

    scorer = Scorer.load(causal_artifact)
    ref = score_pairs(scorer, runner(causal_artifact / "model.fp32.onnx"), QUERIES, DOCS)
    run = runner(causal_artifact / "model.fp16.onnx")
    ok = check_variant("fp16", scorer, run, ref, QUERIES, DOCS, exact=False, batch_invariant=True, max_score_diff=0.02)
    assert ok["validated_on"] == "CPUExecutionProvider"
    with pytest.raises(ScoreDiffError, match="CPUExecutionProvider"):
        check_variant("fp16", scorer, run, ref, QUERIES, DOCS, exact=False, batch_invariant=True,
                      max_score_diff=ok["max_abs_score_diff"] / 2)


def test_a_gpu_validated_variant_has_its_own_batch_invariance_limit(causal_artifact):
    """fp16-packed is checked on the CUDA provider, whose fp16 kernels move a pair's score with its batchmates by
    ~1e-3 (the H200 runs): its preset carries a looser batch-invariance limit than the CPU variants' 1e-3, and the
    gate applies it. Shown with a runner whose scores move by a set amount in a batch of more than one pair."""
    from r3edge.core.fidelity import Tolerances, batch_invariance
    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.scoring import Scorer, score_pairs
    from r3edge.export.parity import BatchInvarianceError, check_variant
    from r3edge.export.quantize import FP16_GPU_BATCH_TOL, PRESETS

    assert PRESETS["fp16-packed"].batch_tol == FP16_GPU_BATCH_TOL > Tolerances().quant_batch_tol
    assert PRESETS["fp16"].batch_tol is None
    scorer = Scorer.load(causal_artifact)
    fp16 = OnnxRuntime(causal_artifact, "fp16", device="cpu")

    def moving(ids, mask):
        out = np.array(fp16(ids, mask), dtype=np.float32)
        out[:, -1] += 0.01 if len(ids) > 1 else 0.0  # the top label's logit, in batches only
        return out

    moved = batch_invariance(scorer, moving, QUERIES, DOCS)
    assert Tolerances().quant_batch_tol < moved < FP16_GPU_BATCH_TOL
    ref = score_pairs(scorer, fp16, QUERIES, DOCS)
    kw = {"exact": False, "batch_invariant": True, "max_score_diff": 0.02}
    with pytest.raises(BatchInvarianceError):
        check_variant("fp16", scorer, moving, ref, QUERIES, DOCS, **kw)
    rep = check_variant("fp16-packed", scorer, moving, ref, QUERIES, DOCS, batch_tol=FP16_GPU_BATCH_TOL, **kw)
    assert rep["batch_invariance_max_abs_score_diff"] == pytest.approx(moved)


def test_causal_fp16_reads_only_the_label_rows_and_keeps_rmsnorm_in_fp32(causal_artifact, tiny_student):
    import onnx

    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.scoring import score_pairs
    from r3edge.export.onnx import check_no_vocab_projection

    cfg = json.loads((tiny_student / "config.json").read_text())
    scorer_n = json.loads((causal_artifact / "manifest.json").read_text())["n_labels"]
    g32, g16 = _graph(causal_artifact / "model.fp32.onnx"), _graph(causal_artifact / "model.fp16.onnx")
    assert _io(g16) == _io(g32)
    check_no_vocab_projection(causal_artifact / "model.fp16.onnx", cfg["vocab_size"], scorer_n)  # raises on a [.., vocab] tensor
    info = json.loads((causal_artifact / "export_report.json").read_text())["quantization"]["fp16"]
    norms = 2 * cfg["num_hidden_layers"] + 1  # two per layer and the final norm
    assert info["fp32_rmsnorm_nodes"] == 5 * norms
    # each RMSNorm's Pow reads its fp16 input through a Cast to fp32
    producers = {o: n for n in g16.graph.node for o in n.output}
    pows = [n for n in g16.graph.node if n.op_type == "Pow"]
    assert len(pows) == norms
    for p in pows:
        cast = producers[p.input[0]]
        assert cast.op_type == "Cast" and cast.attribute[0].i == onnx.TensorProto.FLOAT
    fp16 = OnnxRuntime(causal_artifact, "fp16", device="cpu")
    fp32 = OnnxRuntime(causal_artifact, "fp32", device="cpu")
    got, ref = (r.scorer.relevance(score_pairs(r.scorer, r, QUERIES, DOCS))[1] for r in (fp16, fp32))
    assert 0 < np.abs(got - ref).max() <= 0.02


def test_repeated_casts_of_an_older_fp16_converter_are_dropped_so_onnxruntime_loads_the_graph():
    """onnxruntime 1.31's converter adds one identical ``{value}_cast_to_fp32_node`` per fp32-kept consumer
    of a value; onnxruntime refuses such a graph (it broke the 1.5B causal export on the H200). The export
    drops the repeats; the graph then loads and computes the same."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from r3edge.export.quantize import _drop_duplicate_nodes

    cast = helper.make_node("Cast", ["x16"], ["x16_cast_to_fp32"], to=TensorProto.FLOAT, name="x16_cast_to_fp32_node")
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16, name="to16"), cast, cast,
         helper.make_node("Add", ["x16_cast_to_fp32", "x16_cast_to_fp32"], ["y"], name="add")],
        "repeats", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        value_info=[helper.make_tensor_value_info("x16_cast_to_fp32", TensorProto.FLOAT, [2])] * 2)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(Exception, match="same node name"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    assert _drop_duplicate_nodes(model) == 1
    assert [n.name for n in model.graph.node] == ["to16", "x16_cast_to_fp32_node", "add"]
    assert len(model.graph.value_info) == 1
    onnx.checker.check_model(model)
    out = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.array([1.5, -2.0], np.float32)})[0]
    np.testing.assert_array_equal(out, [3.0, -4.0])
    assert _drop_duplicate_nodes(model) == 0  # what onnxruntime 1.32's converter writes: nothing to drop


CUDA_HERE = "CUDAExecutionProvider" in pytest.importorskip("onnxruntime").get_available_providers()


def test_packing_mode_removes_the_padding_of_the_fused_fp16_graph(cosine_artifact, causal_artifact, tmp_path, monkeypatch):
    """fp16-packed's graph: ONNX Runtime's packing mode on the fused fp16 candidate graph. Padding goes before
    the first attention and comes back after the last layer norm; every attention reads the packed tokens'
    offsets and cumulative lengths; inputs and outputs stay the server's. Its kernels exist on the CUDA
    provider only, so the CPU provider cannot load it (the variant is validated and served on a GPU). A
    graph without fused attention (a causal student's; a cosine student's single graph) stays plain fp16,
    and a student with no graph to pack is refused before any work, with the reason."""
    from r3edge.core.errors import FormatError
    from r3edge.core.onnx_runtime import open_session
    from r3edge.core.scoring import Scorer
    from r3edge.export.onnx import _gpu_only_unbuildable
    from r3edge.export.quantize import _to_fp16

    out = tmp_path / "candidate.fp16-packed.onnx"
    info = _to_fp16(cosine_artifact / "candidate.fp32.onnx", out, False, packed=True)
    g, g16 = _graph(out), _graph(cosine_artifact / "candidate.fp16.onnx")
    assert _io(g) == _io(g16)
    ops = [n.op_type for n in g.graph.node]
    layers = [n.op_type for n in g16.graph.node].count("MultiHeadAttention")
    assert layers >= 2 and "MultiHeadAttention" not in ops
    assert info["packing"] == {"RemovePadding": 1, "PackedMultiHeadAttention": layers, "RestorePadding": 1,
                               "MultiHeadAttention": 0}
    remove = next(n for n in g.graph.node if n.op_type == "RemovePadding")
    for att in (n for n in g.graph.node if n.op_type == "PackedMultiHeadAttention"):
        assert list(att.input[4:6]) == list(remove.output[1:3])  # token_offset, cumulative_sequence_length
    for art in (cosine_artifact, causal_artifact):
        assert _to_fp16(art / "model.fp32.onnx", tmp_path / "plain.onnx", False, packed=True)["packing"] is None
    # a fused graph the converter leaves unpacked: plain fp16 and the reason, so the export rejects the variant
    # (r3edge.export.onnx._packed_graphs) instead of failing
    from onnxruntime.transformers.convert_to_packing_mode import PackingMode

    monkeypatch.setattr(PackingMode, "convert", lambda self, **kw: None)
    left = _to_fp16(cosine_artifact / "candidate.fp32.onnx", tmp_path / "left.onnx", False, packed=True)
    assert left["packing"] is None and "left the fp16 graph unpacked" in left["packing_error"]
    causal = _gpu_only_unbuildable("fp16-packed", causal_artifact / "model.fp32.onnx", Scorer.load(causal_artifact), True)
    assert "label_rows head" in causal and "has none" in causal
    cosine = _gpu_only_unbuildable("fp16-packed", cosine_artifact / "model.fp32.onnx", Scorer.load(cosine_artifact), False)
    assert "--prefix-reuse" in cosine
    assert _gpu_only_unbuildable("fp16", causal_artifact / "model.fp32.onnx", Scorer.load(causal_artifact), False) is None
    if not CUDA_HERE:
        with pytest.raises(FormatError, match="RemovePadding"):
            open_session(out)


@pytest.mark.skipif(CUDA_HERE, reason="this onnxruntime build has the CUDA provider: fp16-packed is built here")
def test_without_the_cuda_provider_fp16_packed_is_left_out_and_says_where_to_export_it(cosine_artifact):
    report = json.loads((cosine_artifact / "export_report.json").read_text())
    manifest = json.loads((cosine_artifact / "manifest.json").read_text())
    rejected = report["rejected"]["fp16-packed"]
    assert rejected["check"] == "device" and "export it on the GPU machine" in rejected["what"]
    assert "fp16-packed" not in manifest["variants"] and "fp16-packed" not in manifest.get("prefix_graphs", {})
    assert not list(cosine_artifact.glob("*fp16-packed*"))
    assert manifest["default"] in ("fp32", "fp16")


def test_a_packed_variant_whose_served_graph_was_not_packed_is_rejected_and_its_files_go(tmp_path):
    """The manifest lists the graphs packing rewrote; a fp16-packed variant that would serve an unpacked graph
    (its candidate graph when it has prefix-reuse graphs, else its single graph) is dropped, files and all:
    it would be fp16 under another name."""
    from r3edge.export.onnx import _packed_graphs

    entry = {"prefix": "prefix.fp32.onnx", "candidate": "candidate.fp16-packed.onnx", "layers": 0}

    def case(candidate_packing, single_packing=None):
        for f in ("model.fp16-packed.onnx", "candidate.fp16-packed.onnx"):
            (tmp_path / f).write_bytes(b"graph")
        names = ["fp32", "fp16-packed"]
        report = {"variants": {"fp32": {}, "fp16-packed": {}}, "rejected": {},
                  "prefix_reuse": {"fp32": {}, "fp16-packed": {"candidate_quantization": {"packing": candidate_packing}}}}
        prefix = {"fp32": {}, "fp16-packed": dict(entry)}
        packed = _packed_graphs(tmp_path, names, {"fp16-packed": {"packing": single_packing}}, report, prefix)
        return packed, names, report, prefix

    packed, names, report, prefix = case({"RemovePadding": 1})  # a cosine student: the candidate graph packed
    assert packed == ["candidate.fp16-packed.onnx"] and "fp16-packed" in names and not report["rejected"]
    packed, names, report, prefix = case(None, {"RemovePadding": 1})  # served through the (unpacked) candidate graph
    assert packed == [] and names == ["fp32"] and report["rejected"]["fp16-packed"]["check"] == "packing"
    assert "no fused attention" in report["rejected"]["fp16-packed"]["what"]
    assert "fp16-packed" not in report["variants"] and "fp16-packed" not in prefix
    assert not list(tmp_path.glob("*fp16-packed*"))

