"""Export stage and the torch-free ONNX Runtime runtime, on the tiny real student."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, SAMPLE_QUERIES

from r3edge.core.errors import R3EdgeError

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier


def _pairs():
    qs = [q["query"] for q in SAMPLE_QUERIES for _ in q["candidates"]]
    ds = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]
    return qs, ds


@pytest.fixture(scope="session")
def artifact(tiny_student, sample_pairs_file, tmp_path_factory):
    """One export through the CLI, shared by every test (the slow part)."""
    from r3edge.cli import main

    out = tmp_path_factory.mktemp("artifact") / "art"
    rc = main(["export", str(tiny_student), "--out", str(out), "--variants", "fp32,int8,int8-weight,fp16",
               "--calib", str(sample_pairs_file)])
    assert rc == 0
    return out


@pytest.fixture(scope="session")
def torch_scorer(tiny_student):
    import torch

    from r3edge.model.student import load_student, scoring_module

    lm, scorer = load_student(tiny_student)
    model = scoring_module(lm, scorer).eval()

    def run(ids, mask):
        with torch.no_grad():
            return model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()

    return scorer, run


def test_artifact_layout_manifest_and_report(artifact):
    names = {p.name for p in artifact.iterdir()}
    assert {"model.fp32.onnx", "model.int8.onnx", "model.fp16.onnx", "scorer.json", "tokenizer.json",
            "manifest.json", "export_report.json"} <= names
    assert not artifact.with_name(artifact.name + ".partial").exists()
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["variants"] == {"fp32": "model.fp32.onnx", "int8": "model.int8.onnx",
                                    "int8-weight": "model.int8-weight.onnx", "fp16": "model.fp16.onnx"}
    assert manifest["n_labels"] == 3
    report = json.loads((artifact / "export_report.json").read_text())
    # the default is the fastest variant that kept fp32's top 10 and batch invariance, timed at export
    rows = report["default_variant"]["rows"]
    assert set(rows) == set(manifest["variants"]) and manifest["default"] == report["default_variant"]["chosen"]
    passing = {n: r["p50_ms"] for n, r in rows.items() if not r["fidelity_failures"]}
    assert manifest["default"] in passing and passing[manifest["default"]] == min(passing.values())
    # the calibration requests have 4 and 3 candidates: no top 10 to compare, the reason says which gates held
    assert all(r["top10_overlap"] is None for r in rows.values())
    assert manifest["default_reason"].startswith("fastest variant that passed the export's parity gates")
    assert f"{manifest['default']} {rows[manifest['default']]['p50_ms']:.1f} ms" in manifest["default_reason"]
    fp32 = report["variants"]["fp32"]
    assert fp32["max_abs_logit_diff"] <= 1e-4 and fp32["argmax_agreement"] == 1.0
    assert report["variants"]["int8"]["batch_invariance_max_abs_score_diff"] <= 1e-4
    assert report["graph_check"]["full_vocab_tensors"] == 0 and report["rejected"] == {}
    assert report["pairs_source"] == "pairs.jsonl"


def test_artifact_holds_no_local_paths(artifact, tiny_student, sample_pairs_file):
    """An artifact is shipped to other machines: no file in it may name a directory of this one."""
    local = [str(tiny_student.parent), str(artifact.parent), str(sample_pairs_file.parent), str(ROOT)]
    for path in artifact.iterdir():
        if path.suffix in (".json", ".txt", ".md", ".yaml"):
            text = path.read_text()
            assert not [d for d in local if d in text], f"{path.name} names a local directory"


def test_int8_graph_softmax_sums_float64_and_matmul_outputs_unquantized(artifact):
    # Padding changes fp32 Softmax sums by an ulp; a static quantizer downstream turns that into
    # a whole step (0.087 in score on the trained demo student). Each Softmax becomes exp(x - max) / sum
    # with the sum in float64, and MatMul outputs carry no Q/DQ, so the int8 graph is bit-exact across
    # padding. Only the sum is float64: a whole float64 Softmax cost about 5x as much (2.4 s per top-100).
    import onnx

    g = onnx.load(str(artifact / "model.int8.onnx"), load_external_data=False).graph
    prod = {o: n for n in g.node for o in n.output}
    assert not [n for n in g.node if n.op_type == "Softmax"]
    divs = [n for n in g.node if n.op_type == "Div" and n.name.endswith("_Div") and n.input[1] in prod
            and prod[n.input[1]].op_type == "Cast"]
    assert divs
    for div in divs:
        exp, back = prod[div.input[0]], prod[div.input[1]]
        total = prod[back.input[0]]
        to64 = prod[total.input[0]]
        assert exp.op_type == "Exp" and prod[exp.input[0]].op_type == "Sub" and total.op_type == "ReduceSum"
        assert to64.op_type == "Cast" and to64.input[0] == exp.output[0]
        assert [a.i for a in to64.attribute if a.name == "to"] == [onnx.TensorProto.DOUBLE]
        assert [a.i for a in back.attribute if a.name == "to"] == [onnx.TensorProto.FLOAT]
    quantized_outputs = [n.name for n in g.node if n.op_type == "QuantizeLinear"
                         and n.input[0] in prod and prod[n.input[0]].op_type == "MatMul"]
    assert quantized_outputs == []
    report = json.loads((artifact / "export_report.json").read_text())
    assert report["quantization"]["int8"]["float64_softmax_sums"] == len(divs)


def test_softmax_rewrite_matches_onnx_softmax_whatever_the_padding(tmp_path):
    """The rewrite computes Softmax (axis -1 and an inner axis, opsets 17 and 21, -inf masks included), and
    a row's probabilities do not change when masked columns are appended to it."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from r3edge.export.quantize import _softmax_sums_in_float64

    def graph(axis: int, opset: int) -> Path:
        path = tmp_path / f"softmax{axis}-{opset}.onnx"
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        model = helper.make_model(helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], "g", [x], [y]),
                                  opset_imports=[helper.make_opsetid("", opset)])
        onnx.save(model, str(path))
        return path

    rng = np.random.default_rng(0)
    for axis, opset in ((-1, 21), (1, 21), (-1, 17)):  # before opset 18 ReduceMax takes its axes as an attribute
        path = graph(axis, opset)
        x = (rng.standard_normal((3, 5, 37)) * 4).astype(np.float32)
        x[0, :, 30:] = -np.inf  # a masked tail
        want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
        assert _softmax_sums_in_float64(path, external=False) == 1
        assert [n.op_type for n in onnx.load(str(path)).graph.node] == [
            "ReduceMax", "Sub", "Exp", "Cast", "ReduceSum", "Cast", "Div"]
        sess = ort.InferenceSession(str(path))
        got = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
        if axis == -1:  # padding: the same rows with 27 more masked columns give bit-identical probabilities
            padded = np.concatenate([x, np.full((3, 5, 27), -np.inf, np.float32)], axis=-1)
            assert np.array_equal(sess.run(None, {"x": padded})[0][..., :37], got)


def test_ort_fp32_matches_torch(artifact, torch_scorer):
    from r3edge.core.scoring import score_pairs
    from r3edge.model.runtimes import load_runtime

    scorer, torch_run = torch_scorer
    rt = load_runtime(artifact, "fp32", threads=1)
    qs, ds = _pairs()
    ref = score_pairs(scorer, torch_run, qs, ds)
    got = score_pairs(rt.scorer, rt, qs, ds)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)
    assert rt.scorer.spec.fingerprint() == scorer.spec.fingerprint()


@pytest.mark.parametrize("variant", ["fp32", "int8", "int8-weight", "fp16"])
def test_output_contract_dynamic_batch_and_length(artifact, variant):
    from r3edge.model.runtimes import load_runtime

    rt = load_runtime(artifact, variant, threads=1)
    inputs = {i.name: (i.type, len(i.shape)) for i in rt.session.get_inputs()}
    assert inputs == {"input_ids": ("tensor(int64)", 2), "attention_mask": ("tensor(int64)", 2)}
    (out,) = rt.session.get_outputs()
    assert (out.name, out.type, out.shape[1]) == ("label_logits", "tensor(float)", 3)
    qs, ds = _pairs()
    for n, k in ((1, 0), (5, 2)):
        ids, mask = rt.scorer.collate(rt.scorer.encode_batch(qs[k:k + n], ds[k:k + n]))
        logits = rt.label_logits(ids, mask)
        assert logits.shape == (n, 3) and logits.dtype == np.float32 and np.isfinite(logits).all()
    info = rt.info()
    assert info["variant"] == variant and info["providers"][-1] == "CPUExecutionProvider"
    assert rt.name == f"onnxruntime-cpu:{variant}"


@pytest.mark.parametrize("variant,tol", [("fp32", 1e-5), ("int8", 1e-6), ("int8-weight", 1e-5)])
def test_batch_invariance(artifact, variant, tol):
    from r3edge.export.parity import batch_invariance
    from r3edge.model.runtimes import load_runtime

    rt = load_runtime(artifact, variant, threads=1)
    qs, ds = _pairs()
    lengths = {len(e.input_ids) for e in rt.scorer.encode_batch(qs, ds)}
    assert len(lengths) > 3  # the batch really mixes lengths, so padding is exercised
    assert batch_invariance(rt.scorer, rt, qs, ds) <= tol


def test_quantized_variant_fails_exact_parity_with_typed_error(artifact, torch_scorer):
    from r3edge.core.errors import ErrorKind
    from r3edge.core.scoring import score_pairs
    from r3edge.export.parity import AtolError, ParityCheck, ParityError, ShapeError, check_variant
    from r3edge.model.runtimes import load_runtime

    scorer, torch_run = torch_scorer
    qs, ds = _pairs()
    ref = score_pairs(scorer, torch_run, qs, ds)
    int8 = load_runtime(artifact, "int8", threads=1)
    with pytest.raises(ParityError) as exc:
        check_variant("int8", scorer, int8, ref, qs, ds, exact=True, batch_invariant=True)
    assert isinstance(exc.value, AtolError) and exc.value.check is ParityCheck.ATOL and exc.value.variant == "int8"
    assert exc.value.kind is ErrorKind.QUALITY
    with pytest.raises(ParityError) as exc:
        check_variant("fp32", scorer, int8, ref[:2], qs, ds, exact=True, batch_invariant=True)
    assert isinstance(exc.value, ShapeError) and exc.value.check is ParityCheck.SHAPE


def test_label_token_mismatch_is_a_clear_error(artifact, tmp_path):
    from r3edge.model.runtimes import load_runtime

    bad = tmp_path / "bad"
    shutil.copytree(artifact, bad)
    spec = json.loads((bad / "scorer.json").read_text())
    spec["label_token_ids"] = list(reversed(spec["label_token_ids"]))
    (bad / "scorer.json").write_text(json.dumps(spec))
    with pytest.raises(R3EdgeError, match="label token") as exc:
        load_runtime(bad)
    assert "re-export" in exc.value.fix


def test_edited_scorer_json_is_rejected(artifact, tmp_path):
    from r3edge.model.runtimes import load_runtime

    bad = tmp_path / "edited"
    shutil.copytree(artifact, bad)
    spec = json.loads((bad / "scorer.json").read_text())
    spec["max_doc_tokens"] += 1
    (bad / "scorer.json").write_text(json.dumps(spec))
    with pytest.raises(R3EdgeError, match="fingerprint"):
        load_runtime(bad)


def test_unknown_variant_and_missing_manifest(artifact, tiny_student):
    from r3edge.export.options import parse_variants
    from r3edge.model.runtimes import load_runtime

    with pytest.raises(R3EdgeError, match="no variant 'int8-dynamic'") as exc:
        load_runtime(artifact, "int8-dynamic")
    assert "--variants int8-dynamic" in exc.value.fix
    with pytest.raises(R3EdgeError, match="unknown export variant"):
        parse_variants("fp32,int4")
    with pytest.raises(R3EdgeError, match="no manifest.json"):
        load_runtime(tiny_student)
    with pytest.raises(R3EdgeError, match="unknown runtime backend"):
        load_runtime(artifact, backend="tensorflow")


def test_student_without_scorer_json(tiny_student, tmp_path, capsys):
    from r3edge.cli import main

    bare = tmp_path / "bare"
    shutil.copytree(tiny_student, bare)
    (bare / "scorer.json").unlink()
    out = tmp_path / "art"
    assert main(["export", str(bare), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "has no scorer.json" in err and "fix:" in err
    assert not out.exists() and not out.with_name("art.partial").exists()


def test_full_vocab_projection_is_refused(tmp_path):
    """A graph that projects hidden states onto the whole vocabulary must fail contract 4."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from r3edge.export.onnx import check_no_vocab_projection

    vocab, hidden = 50, 4
    w = numpy_helper.from_array(np.zeros((hidden, vocab), np.float32), "lm_head")
    rows = numpy_helper.from_array(np.zeros((vocab, 3), np.float32), "pick")
    g = helper.make_graph(
        [helper.make_node("Cast", ["input_ids"], ["h0"], to=TensorProto.FLOAT),
         helper.make_node("MatMul", ["h0", "lm_head"], ["full"], name="full_vocab"),
         helper.make_node("MatMul", ["full", "pick"], ["label_logits"]),
         helper.make_node("Identity", ["attention_mask"], ["unused"])],
        "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", hidden]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", hidden])],
        [helper.make_tensor_value_info("label_logits", TensorProto.FLOAT, ["batch", 3])],
        [w, rows],
    )
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g), str(path))
    with pytest.raises(R3EdgeError, match="full vocabulary"):
        check_no_vocab_projection(path, vocab, 3)
    assert check_no_vocab_projection(path, vocab + 1, 3)["full_vocab_tensors"] == 0


def _one_matmul(tmp_path, k=48, n=32):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(1).standard_normal((k, n)).astype(np.float32) * 0.1
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", n])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "mm.onnx"
    onnx.save(model, str(path))
    return path, w


def test_per_row_int8_is_batch_invariant_by_construction(tmp_path):
    """int8-row: a row's quantization scale is its own, so its output does not move, bit for bit,
    when another row of 100x its magnitude joins the batch; one dynamic scale per tensor
    (``DynamicQuantizeLinear``, what ``int8-dynamic`` does) moves it."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from r3edge.export.quantize import PRESETS, quantize

    src, w = _one_matmul(tmp_path)
    row_path, dyn_path = tmp_path / "row.onnx", tmp_path / "dyn.onnx"
    info = quantize(PRESETS["int8-row"], src, row_path, None, log=lambda *a: None)
    assert info["quantized_matmuls"] == 1 and info["weight_bits"] == 7
    ops = [nd.op_type for nd in onnx.load(str(row_path)).graph.node]
    assert "MatMulIntegerToFloat" in ops and "DynamicQuantizeLinear" not in ops and "MatMul" not in ops
    quantize_dynamic(str(src), str(dyn_path), weight_type=QuantType.QInt8)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 5, 48)).astype(np.float32)
    loud = 100 * rng.standard_normal((1, 5, 48)).astype(np.float32)
    both = np.concatenate([x, loud])
    for path, invariant in ((row_path, True), (dyn_path, False)):
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        alone, batched = sess.run(None, {"x": x})[0], sess.run(None, {"x": both})[0][:1]
        assert np.array_equal(alone, batched) is invariant, path.name
    # and it is an int8 approximation of the fp32 product (7-bit weights, 8-bit rows)
    sess = ort.InferenceSession(str(row_path), providers=["CPUExecutionProvider"])
    ref = both @ w
    got = sess.run(None, {"x": both})[0]
    assert np.abs(got - ref).max() <= 0.03 * np.abs(ref).max()


def test_smoothquant_flattens_an_outlier_channel_and_stays_batch_invariant(tmp_path):
    """int8-smooth: with one input channel 50x louder than the rest (the LayerNorm outlier channels
    of trained transformers), a per-row scale is set by that channel and the others lose their
    resolution; SmoothQuant's calibrated per-channel factors move the outlier into the weights, so
    the int8 product is closer to fp32, and a row's output still does not move with its batchmates."""
    import onnxruntime as ort

    from r3edge.export.quantize import PRESETS, quantize

    src, w = _one_matmul(tmp_path)
    rng = np.random.default_rng(0)
    loudness = np.ones(48, np.float32)
    loudness[0] = 50.0

    def batch(n):
        return (rng.standard_normal((n, 5, 48)) * loudness).astype(np.float32)

    calib = [{"x": batch(4)} for _ in range(3)]
    row_path, smooth_path = tmp_path / "row.onnx", tmp_path / "smooth.onnx"
    quantize(PRESETS["int8-row"], src, row_path, None, log=lambda *a: None)
    info = quantize(PRESETS["int8-smooth"], src, smooth_path, calib, log=lambda *a: None)
    assert info["smoothed_inputs"] == 1 and info["smooth_alpha"] == 0.5 and info["calibration_pairs"] == 12
    x = batch(8)
    ref = x @ w
    err = {}
    for path in (row_path, smooth_path):
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = sess.run(None, {"x": x})[0]
        err[path.name] = float(np.abs(got - ref).mean())
        assert np.array_equal(sess.run(None, {"x": x[:1]})[0], got[:1])  # batch invariant, bit for bit
    assert err["smooth.onnx"] < 0.5 * err["row.onnx"], err
    # a graph whose weights live in an external data file (models over 2 GB) calibrates the same
    import onnx

    ext = tmp_path / "ext"
    ext.mkdir()
    onnx.save(onnx.load(str(src)), str(ext / "mm.onnx"), save_as_external_data=True, size_threshold=0,
              location="mm.onnx.data")
    quantize(PRESETS["int8-smooth"], ext / "mm.onnx", ext / "smooth.onnx", calib, log=lambda *a: None)
    assert (ext / "smooth.onnx.data").exists()
    outs = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            for p in (smooth_path, ext / "smooth.onnx")]
    assert np.array_equal(*outs)
    with pytest.raises(R3EdgeError, match="calibration pairs"):
        quantize(PRESETS["int8-smooth"], src, tmp_path / "none.onnx", None, log=lambda *a: None)


def test_gelu_outputs_are_quantized_unsigned_and_closer_to_fp32(tmp_path):
    """A GELU output is >= -0.17, so a symmetric per-row scale leaves its negative half of the uint8
    steps nearly unused; shifted to non-negative with zero point 0 (the shift's product, a constant,
    added back) the same MatMul is closer to fp32, and still batch invariant bit for bit."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from r3edge.export.quantize import _per_row_int8

    k, n = 64, 32
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((k, n)) * 0.1).astype(np.float32)
    b = (rng.standard_normal(k) * 0.1).astype(np.float32)
    g = helper.make_graph(  # BiasGelu -> MatMul -> Add(bias), as in the fused encoder's FFN
        [helper.make_node("BiasGelu", ["x", "b"], ["h"], domain="com.microsoft"),
         helper.make_node("MatMul", ["h", "w"], ["hw"], name="down"),
         helper.make_node("Add", ["bias", "hw"], ["y"], name="down_bias")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), "bias")])
    src = tmp_path / "gelu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]),
              str(src))
    x = (rng.standard_normal((8, 5, k)) * 2).astype(np.float32)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    err = {}
    for unsigned in (False, True):
        path = tmp_path / f"q{unsigned}.onnx"
        info = _per_row_int8(src, path, 8, 8, False, gelu_unsigned=unsigned)  # 8-bit weights: the activations dominate
        assert info["unsigned_gelu_inputs"] == int(unsigned)
        assert info["unshift_adds"] == 0  # the shift's constant product joined the bias instead of a pass of its own
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = sess.run(None, {"x": x})[0]
        err[unsigned] = float(np.abs(got - ref).mean())
        assert np.array_equal(sess.run(None, {"x": x[:1]})[0], got[:1])
    assert err[True] < 0.85 * err[False], err  # measured 0.77x


def test_gptq_rounding_keeps_the_product_closer_than_rounding_to_nearest(tmp_path):
    """int8-smooth rounds its weights by GPTQ: each input channel's rounding error is pushed onto the
    channels not yet rounded through the calibration inputs' Gram matrix. On inputs whose channels are
    correlated (as a LayerNorm's are), x·W stays closer to fp32 on new inputs of the same kind than
    with round-to-nearest, at the same graph (so the same speed); still batch invariant bit for bit."""
    import dataclasses

    import onnxruntime as ort

    from r3edge.export.quantize import PRESETS, quantize

    src, w = _one_matmul(tmp_path)
    rng = np.random.default_rng(5)
    # channels mixed by a rotation after a decaying spectrum: correlated, as hidden states are
    mix = (np.linalg.qr(rng.standard_normal((48, 48)))[0] / np.arange(1, 49)[:, None]).astype(np.float32)

    def batch(n):
        return (rng.standard_normal((n, 5, 48)).astype(np.float32) @ mix).astype(np.float32)

    calib = [{"x": batch(8)} for _ in range(8)]
    x = batch(16)
    ref = x @ w
    err = {}
    for gptq in (False, True):
        preset = dataclasses.replace(PRESETS["int8-smooth"], gptq=gptq, weight_bits=4)  # coarse: the weights dominate
        path = tmp_path / f"g{gptq}.onnx"
        info = quantize(preset, src, path, calib, log=lambda *a: None)
        assert info["gptq"] is gptq
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = sess.run(None, {"x": x})[0]
        err[gptq] = float(np.abs(got - ref).mean())
        assert np.array_equal(sess.run(None, {"x": x[:1]})[0], got[:1])
    assert err[True] < 0.7 * err[False], err  # measured 0.44x


def test_runtime_imports_without_torch():
    code = ("import sys; import r3edge.model.runtimes, r3edge.core.artifact, r3edge.core.onnx_runtime; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_export_flags_derive_from_export_options(capsys):
    """`r3edge export`'s flags are ExportOptions' fields: an absent flag takes the model's default, a
    given one is validated there (naming the flag) before anything heavy loads."""
    from r3edge.cli import build_parser, main
    from r3edge.core.errors import InvalidInput
    from r3edge.export import options as export_options
    from r3edge.export.openvino import OV_PRESETS
    from r3edge.export.options import ExportOptions
    from r3edge.export.quantize import PRESETS

    assert export_options.VARIANTS == ("fp32", *PRESETS, *OV_PRESETS)
    args = build_parser().parse_args(["export", "student", "--out", "art"])
    given = {n: getattr(args, n) for n in ExportOptions.model_fields if hasattr(args, n)}
    assert given == {}  # nothing restated by argparse: ExportOptions decides every default
    args = build_parser().parse_args(["export", "student", "--out", "art", "--calib", "p.jsonl", "--max-calib", "8",
                                      "--default-variant", "int8-row", "--variants", "int8-row", "--prefix-reuse"])
    opts = ExportOptions.model_validate({n: getattr(args, n) for n in ExportOptions.model_fields if hasattr(args, n)})
    assert (opts.calib_pairs, opts.max_calib, opts.default, opts.variants, opts.prefix_reuse) == (
        "p.jsonl", 8, "int8-row", ("fp32", "int8-row"), True)
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"(default {ExportOptions().max_calib})" in help_text and ExportOptions.model_fields["atol"].description in help_text
    assert main(["export", "no-such-student", "--out", "art", "--max-calib", "0"]) == 2
    assert "--max-calib" in capsys.readouterr().err
    with pytest.raises(InvalidInput) as exc:
        ExportOptions(variants="fp32", default="int8")
    assert exc.value.field == "default"
    # `r3edge demo` and `r3edge fidelity` hand export_artifact a pathlib.Path
    assert ExportOptions(calib_pairs=Path("runs/demo/pairs.jsonl")).calib_pairs == "runs/demo/pairs.jsonl"
