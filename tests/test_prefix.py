"""Prefix reuse for causal students: the template head + query once per request, then the candidates.

A tiny Qwen2 with the real Qwen2.5 tokenizer and random weights at init std 0.2 (at the default 0.02,
attention is near-uniform and position or padding bugs hide), exported with `--prefix-reuse` through
the CLI; real ONNX Runtime sessions and a real gRPC server on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from conftest import SAMPLE_QUERIES, TINY_STUDENT, free_port

from r3edge.core.errors import R3EdgeError

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier

LONG = "Beach day at Sealine 🌊☀️ #weekend #qatar " * 30  # cut to the document budget


def _pairs():
    qs = [q["query"] for q in SAMPLE_QUERIES for _ in q["candidates"]]
    ds = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]
    return qs + [qs[0], "ok?", "ok?"], ds + [LONG, "x", LONG]


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.model.student import create_student, save_student

    cfg = load_yaml(TINY_STUDENT, StudentConfig)
    arch = {**cfg.model.architecture, "initializer_range": 0.2}
    cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"architecture": arch})})
    lm, scorer = create_student(cfg)
    return save_student(lm, scorer, tmp_path_factory.mktemp("student") / "student")


@pytest.fixture(scope="module")
def artifact(student, sample_pairs_file, tmp_path_factory):
    from r3edge.cli import main

    out = tmp_path_factory.mktemp("artifact") / "art"
    assert main(["export", str(student), "--out", str(out), "--variants", "fp32", "--calib", str(sample_pairs_file),
                 "--prefix-reuse"]) == 0
    return out


@pytest.fixture(scope="module")
def runtime(artifact):
    from r3edge.core.onnx_runtime import OnnxRuntime

    return OnnxRuntime(artifact, threads=1)


def test_split_concatenates_to_the_single_graph_ids(runtime):
    scorer = runtime.scorer
    qs, ds = _pairs()
    enc = scorer.encode_batch(qs, ds)
    assert any(e.doc_tokens_dropped for e in enc)  # truncation is exercised
    groups = scorer.split(enc)
    assert [len(idx) for _, idx in groups] == [5, 3, 2]  # one prefix per distinct query, first-seen order
    assert sorted(i for _, idx in groups for i in idx) == list(range(len(enc)))
    for prefix, idx in groups:
        for i in idx:
            assert prefix + enc[i].suffix == enc[i].input_ids
            assert enc[i].prefix == prefix
    # the prefix is the template head + the whole query + the mid piece; the suffix the cut document + tail
    tpl = scorer.spec.template
    e = enc[-1]
    assert scorer.tokenizer.decode(e.prefix, skip_special_tokens=False) == tpl.head + "ok?" + tpl.mid
    assert scorer.tokenizer.decode(e.suffix, skip_special_tokens=False).endswith(tpl.tail)


def test_split_refuses_an_encoder_head(runtime):
    from r3edge.core.scoring import Scorer

    spec = dataclasses.replace(runtime.scorer.spec, head="classifier", label_token_ids=())
    enc_scorer = Scorer(spec, runtime.scorer.tokenizer)
    with pytest.raises(R3EdgeError, match="causal or cosine student"):
        enc_scorer.split(enc_scorer.encode_batch(["q"], ["d"]))


def test_manifest_and_export_report(artifact):
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["prefix_graphs"] == {"fp32": {"prefix": "prefix.fp32.onnx", "candidate": "candidate.fp32.onnx",
                                                  "layers": 2}}
    report = json.loads((artifact / "export_report.json").read_text())
    rep = report["prefix_reuse"]["fp32"]
    assert rep["max_abs_logit_diff"] <= 1e-4 and rep["max_abs_logit_diff_vs_single_graph"] <= 1e-4
    assert rep["batch_invariance_max_abs_score_diff"] <= 1e-5 and rep["argmax_agreement"] == 1.0
    assert report["rejected"] == {}


class TorchPrefixRunner:
    """A :class:`r3edge.core.scoring.PrefixRunner` on the torch modules the export traces, so a mismatch
    can be told apart from an ONNX conversion fault."""

    def __init__(self, lm, label_token_ids):
        import torch

        from r3edge.model.prefix import CandidateGraph, PrefixGraph

        self.torch = torch
        self.prefix_graph = PrefixGraph(lm).eval()
        self.candidate_graph = CandidateGraph(lm, label_token_ids).eval()

    def prefix(self, input_ids):
        with self.torch.no_grad():
            return self.prefix_graph(self.torch.from_numpy(input_ids))

    def candidates(self, cache, input_ids, attention_mask):
        with self.torch.no_grad():
            out = self.candidate_graph(self.torch.from_numpy(input_ids), self.torch.from_numpy(attention_mask), list(cache))
        return out.float().numpy()


def test_torch_prefix_graphs_equal_the_torch_single_graph(student):
    from r3edge.core.scoring import score_pairs
    from r3edge.model.student import lm_score_fn, load_student

    lm, scorer = load_student(student)
    qs, ds = _pairs()
    ref = lm_score_fn(lm, scorer)(qs, ds)
    got = score_pairs(scorer, None, qs, ds, prefix=TorchPrefixRunner(lm.eval(), scorer.spec.label_token_ids))
    assert np.abs(ref).max() > 1.0  # the weights are not near-uniform: positions and masks matter
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)


def test_onnx_prefix_graphs_equal_the_single_graph(runtime, student):
    from r3edge.core.scoring import score_pairs
    from r3edge.model.student import lm_score_fn, load_student

    assert runtime.prefix is not None and runtime.info()["prefix_reuse"] is True
    qs, ds = _pairs()
    stats: dict = {}
    got = score_pairs(runtime.scorer, None, qs, ds, prefix=runtime.prefix, stats=stats)
    assert stats["n_prefixes"] == 3 and stats["truncated_docs"] == 2
    single = score_pairs(runtime.scorer, runtime, qs, ds)
    np.testing.assert_allclose(got, single, atol=1e-4, rtol=0)
    lm, scorer = load_student(student)
    np.testing.assert_allclose(got, lm_score_fn(lm, scorer)(qs, ds), atol=1e-4, rtol=0)


def test_state_kept_as_ort_values_scores_as_the_host_path(runtime):
    """The GPU path (the cache stays in OrtValues between the prefix and candidate graphs), run here on
    the CPU provider: the same scores as the numpy path."""
    from r3edge.core.scoring import score_pairs

    qs, ds = _pairs()
    assert runtime.prefix.state_on_device is False  # the CPU provider leads here
    host = score_pairs(runtime.scorer, None, qs, ds, prefix=runtime.prefix)
    runtime.prefix.state_on_device = True
    try:
        assert type(runtime.prefix.prefix(np.asarray([[1, 2, 3]], dtype=np.int64))[0]).__name__ == "OrtValue"
        np.testing.assert_array_equal(score_pairs(runtime.scorer, None, qs, ds, prefix=runtime.prefix), host)
    finally:
        runtime.prefix.state_on_device = False


def test_prefix_parity_check_fails_a_wrong_cache(runtime):
    """The export's check catches a candidate graph fed a cache that is not its prefix's."""
    from r3edge.core.scoring import score_pairs
    from r3edge.export.parity import ParityCheck, ParityError
    from r3edge.export.prefix import check_prefix_graphs

    class ShortPrefix:  # drops the template's mid piece from the cache
        def prefix(self, ids):
            return runtime.prefix.prefix(ids[:, :-3])

        def candidates(self, cache, ids, mask):
            return runtime.prefix.candidates(cache, ids, mask)

    qs, ds = _pairs()
    ref = score_pairs(runtime.scorer, runtime, qs, ds)
    assert check_prefix_graphs(runtime.scorer, runtime.prefix, ref, qs, ds)["max_abs_logit_diff"] <= 1e-4
    with pytest.raises(ParityError) as exc:
        check_prefix_graphs(runtime.scorer, ShortPrefix(), ref, qs, ds)
    assert exc.value.check is ParityCheck.ATOL and exc.value.variant == "prefix"


@pytest.mark.parametrize("side", ["left", "right"])
def test_candidate_graph_is_batch_invariant(runtime, side):
    """A candidate scored alone equals it scored among candidates of other lengths, padded on either side."""
    from r3edge.core.scoring import Scorer, score_pairs

    scorer = Scorer(dataclasses.replace(runtime.scorer.spec, padding_side=side), runtime.scorer.tokenizer)
    qs, ds = _pairs()
    q = qs[0]
    docs = ds
    lengths = {len(e.suffix) for e in scorer.encode_batch([q] * len(docs), docs)}
    assert len(lengths) > 5
    alone = score_pairs(scorer, None, [q] * len(docs), docs, prefix=runtime.prefix, max_batch_size=1)
    together = score_pairs(scorer, None, [q] * len(docs), docs, prefix=runtime.prefix, max_batch_size=len(docs),
                           max_batch_tokens=1 << 30)
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=0)
    np.testing.assert_allclose(together, score_pairs(runtime.scorer, runtime, [q] * len(docs), docs), atol=1e-4, rtol=0)


def test_runtime_without_prefix_reuse_and_bad_manifest(artifact, tmp_path):
    import shutil

    from r3edge.core.onnx_runtime import OnnxRuntime

    single = OnnxRuntime(artifact, threads=1, prefix_reuse=False)
    assert single.prefix is None and single.session is not None
    # with prefix reuse the single graph is checked at start-up, then reopened only when asked for
    rt = OnnxRuntime(artifact, threads=1)
    assert rt.prefix is not None and rt.session is None
    ids, mask = rt.scorer.collate(rt.scorer.encode_batch(["q"], ["d"]))
    np.testing.assert_array_equal(rt.label_logits(ids, mask), single.label_logits(ids, mask))
    assert rt.session is not None
    bad = tmp_path / "bad"
    shutil.copytree(artifact, bad)
    (bad / "candidate.fp32.onnx").unlink()
    with pytest.raises(R3EdgeError, match="candidate.fp32.onnx"):
        OnnxRuntime(bad, threads=1)


def test_server_uses_prefix_graphs_and_ranks_like_the_single_graph(artifact):
    from r3edge.api.client import RerankerClient
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    texts = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]
    cands = [(f"c{i}", f"{texts[i % len(texts)]} (post {i})" * (1 + i % 4)) for i in range(100)]
    query = SAMPLE_QUERIES[1]["query"]
    results, infos = {}, {}
    for reuse in (True, False):
        cfg = ServeConfig(artifact=str(artifact), port=free_port(), max_batch_tokens=2048, max_batch_size=16,
                          prefix_reuse=reuse)
        with BackgroundServer(cfg) as srv, RerankerClient(srv.target, timeout=120) as client:
            client.wait_ready(60)
            infos[reuse] = json.loads(client.model_info().runtime_info_json)
            results[reuse] = client.rerank_raw(query, cands, top_k=0).results
    assert infos[True]["prefix_reuse"] is True and infos[True]["files"]["candidate"] == "candidate.fp32.onnx"
    assert infos[False]["prefix_reuse"] is False
    reuse, single = results[True], results[False]
    by_id = {r.id: r.score for r in single}
    np.testing.assert_allclose([r.score for r in reuse], [by_id[r.id] for r in reuse], atol=1e-5, rtol=0)
    # same ranking, up to ties closer than float noise
    scores = np.array([by_id[r.id] for r in reuse])
    assert np.all(np.diff(scores) <= 1e-5)
    assert len({r.score for r in single}) > 50  # scores really differ between candidates
    assert [r.id for r in reuse][:10] == [r.id for r in single][:10]


def test_one_request_runs_its_prefix_once_and_spreads_its_candidates_over_the_workers(artifact):
    """On the prefix path a request's micro-batches go to every worker (not one worker per request), and
    its prefix graph runs once (in the prefix thread) and every worker waits for that one state."""
    import asyncio
    import threading
    import time

    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.serve.engine import Engine
    from r3edge.serve.metrics import ServeMetrics

    runtime = OnnxRuntime(artifact, threads=1)
    runner = runtime.prefix
    prefixes, threads = [], set()
    prefix_fn, candidates_fn = runner.prefix, runner.candidates

    def prefix(ids):
        prefixes.append(threading.current_thread().name)
        time.sleep(0.1)  # the other worker reaches the job meanwhile and must wait for this state
        return prefix_fn(ids)

    def candidates(cache, ids, mask):
        threads.add(threading.current_thread().name)
        time.sleep(0.05)
        return candidates_fn(cache, ids, mask)

    runner.prefix, runner.candidates = prefix, candidates
    engine = Engine(runtime, ServeMetrics(), max_batch_tokens=1 << 20, max_batch_size=4, max_batch_wait_s=0.0,
                    max_queue_delay_s=30.0, max_concurrent_requests=8, max_candidates=100, overflow="truncate",
                    workers=2)
    engine.start()
    try:
        prefixes.clear()
        threads.clear()
        qs, ds = _pairs()
        scored = asyncio.run(engine.score(qs[0], ds))
    finally:
        engine.stop()
    assert len(prefixes) == 1, prefixes
    assert threads == {"r3edge-batcher-0", "r3edge-batcher-1"}, threads
    from r3edge.core.scoring import score_pairs

    ref = runtime.scorer.relevance(score_pairs(runtime.scorer, None, [qs[0]] * len(ds), ds, prefix=runner))[1]
    np.testing.assert_allclose(scored.scores, ref, atol=1e-5, rtol=0)


def test_the_prefix_path_never_waits_for_a_fuller_batch(artifact):
    """A prefix-reuse micro-batch holds the oldest request's pairs only, so waiting ``max_batch_wait_s``
    for more pairs cannot fill it: a request under the budget (as a top-100 is under the GPU budget) is
    scored at once, not after the wait. The single graph, which mixes requests, still waits."""
    import asyncio

    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.serve.engine import Engine
    from r3edge.serve.metrics import ServeMetrics

    wait_s = 600.0  # a wait this long would outlast the test's patience below by far
    runtime = OnnxRuntime(artifact, threads=1)
    qs, ds = _pairs()

    def score(prefix_reuse: bool, patience_s: float):
        engine = Engine(runtime, ServeMetrics(), max_batch_tokens=1 << 20, max_batch_size=128, max_batch_wait_s=wait_s,
                        max_queue_delay_s=3600.0, max_concurrent_requests=8, max_candidates=100, overflow="truncate",
                        prefix_reuse=prefix_reuse, workers=1)
        engine.start()
        try:
            return asyncio.run(asyncio.wait_for(engine.score(qs[0], ds), timeout=patience_s))
        finally:
            engine.stop(timeout=1)

    assert score(prefix_reuse=True, patience_s=30).queue_ms < 30e3
    with pytest.raises(TimeoutError):  # still waiting after 3 s of its 600
        score(prefix_reuse=False, patience_s=3)
    runtime.close()


def test_the_prefix_graph_runs_while_the_documents_are_tokenised(artifact):
    """At concurrency 1 a request's prefix graph (its query) overlaps the tokenising of its documents
    instead of waiting for it: here the documents' encoding waits for the prefix graph to have started,
    which it never does if the prefix runs only after tokenising. Scores stay those of score_pairs."""
    import asyncio
    import threading

    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.scoring import score_pairs
    from r3edge.serve.engine import Engine
    from r3edge.serve.metrics import ServeMetrics

    runtime = OnnxRuntime(artifact, threads=1)
    runner, scorer = runtime.prefix, runtime.scorer
    engine = Engine(runtime, ServeMetrics(), max_batch_tokens=1 << 20, max_batch_size=128, max_batch_wait_s=0.0,
                    max_queue_delay_s=3600.0, max_concurrent_requests=8, max_candidates=100, overflow="truncate", workers=1)
    engine.start()
    prefix_fn, encode_fn = runner.prefix, scorer.encode_batch
    started, seen = threading.Event(), []

    def prefix(ids):
        started.set()
        return prefix_fn(ids)

    def encode_batch(queries, documents, **kw):
        if len(documents) > 1:  # the request's documents
            seen.append(started.wait(timeout=20))
        return encode_fn(queries, documents, **kw)

    runner.prefix, scorer.encode_batch = prefix, encode_batch
    qs, ds = _pairs()
    try:
        scored = asyncio.run(engine.score(qs[0], ds))
    finally:
        engine.stop()
        runner.prefix, scorer.encode_batch = prefix_fn, encode_fn
    assert seen == [True]
    ref = scorer.relevance(score_pairs(scorer, None, [qs[0]] * len(ds), ds, prefix=runner))[1]
    np.testing.assert_allclose(scored.scores, ref, atol=1e-5, rtol=0)
    runtime.close()


def test_a_failing_prefix_graph_fails_its_request_and_the_engine_serves_the_next(artifact):
    """The prefix graph now runs in its own thread: its error still reaches the request (as the
    runtime's other errors do, naming what failed), and the next request is scored."""
    import asyncio

    from r3edge.core.errors import R3EdgeError
    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.serve.engine import Engine
    from r3edge.serve.metrics import ServeMetrics

    runtime = OnnxRuntime(artifact, threads=1)
    runner = runtime.prefix
    engine = Engine(runtime, ServeMetrics(), max_batch_tokens=1 << 20, max_batch_size=128, max_batch_wait_s=0.0,
                    max_queue_delay_s=3600.0, max_concurrent_requests=8, max_candidates=100, overflow="truncate", workers=2)
    engine.start()
    prefix_fn = runner.prefix

    def broken(ids):
        raise RuntimeError("the prefix graph broke")

    qs, ds = _pairs()
    try:
        runner.prefix = broken
        with pytest.raises(R3EdgeError, match="the prefix graph broke"):
            asyncio.run(asyncio.wait_for(engine.score(qs[0], ds), timeout=60))
        runner.prefix = prefix_fn
        assert len(asyncio.run(asyncio.wait_for(engine.score(qs[0], ds), timeout=60)).scores) == len(ds)
    finally:
        runner.prefix = prefix_fn
        engine.stop()
    runtime.close()
