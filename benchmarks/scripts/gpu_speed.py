"""GPU speed of the Qwen2.5-1.5B student scoring a top-100 request, against a naive forward and against
reasoning judges (Qwen2.5-7B and a 1.5B of the student's size) generating with `transformers.generate`.

Speed only: every model has random weights (no network, no checkpoints), so no number here says anything
about ranking quality. Imports no r3edge code on purpose (torch, transformers, numpy, pyyaml, stdlib; the
student architecture is read from the checkout's configs/student/qwen2.5-1.5b-random.yaml) so it can run on a
bare GPU machine:  python3 benchmarks/scripts/gpu_speed.py --out DIR      (about 5 minutes on one H100)
CPU check with tiny models:  python benchmarks/scripts/gpu_speed.py --smoke --out /tmp/gs
Writes DIR/gpu_speed.json and DIR/gpu_speed.md (rewritten after every system, so a run cut short keeps
what it measured) and prints the markdown at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import transformers
import yaml
from transformers import AutoModelForCausalLM, DynamicCache, Qwen2Config

PAD, EOS, LABEL_IDS = 0, 151643, (15, 16, 17)  # pad id; Qwen's <|endoftext|>; three label-token rows
HEAD_LEN, QUERY_LEN, TAIL_LEN = 30, 20, 6  # template head + query = the shared prefix; template tail
DOC_MIN, DOC_MAX, MAX_TOTAL = 40, 448, 576
# the student architecture is the project's own config (one definition of Qwen2.5-1.5B's shape)
_STUDENT_YAML = Path(__file__).resolve().parents[2] / "configs" / "student" / "qwen2.5-1.5b-random.yaml"
STUDENT = {k: v for k, v in yaml.safe_load(_STUDENT_YAML.read_text())["model"]["architecture"].items() if k != "model_type"}
TEACHER = dict(
    vocab_size=152064,
    hidden_size=3584,
    intermediate_size=18944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    max_position_embeddings=32768,
    rope_theta=1e6,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)
TINY = dict(
    vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)  # --smoke: every model shrinks to this
SYSTEMS = ("naive", "sdpa", "packed", "prefix", "judge_1p5b", "teacher_7b", "compile")
STUDENT_SYSTEMS = ("naive", "sdpa", "packed", "prefix", "compile")
EST_S = dict(naive=30, sdpa=10, packed=10, prefix=10, judge_1p5b=30, teacher_7b=60, compile=150)


def log(*a):
    print(f"[{time.perf_counter() - T0:6.1f}s]", *a, flush=True)


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def free():
    gc.collect()
    if DEV.type == "cuda":
        torch.cuda.empty_cache()


def build(spec, dtype, seed, attn="sdpa"):
    """Random-init model built directly on the device (initialising 7B params on CPU would take minutes)."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(**{**spec, **(TINY if ARGS.smoke else {})})
    with DEV:
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attn)
    return model.to(DEV).eval()


def body_params(model):
    # Parameters every token passes through: all but the embedding table (the head is counted separately).
    return sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n and "lm_head" not in n)


def body_flops(model, new, past):
    """FLOPs for `new` tokens appended causally after `past` cached tokens: 2*params per token plus attention
    (QK^T and AV, 2 FLOPs per multiply-add each, per layer, over the keys each query actually sees)."""
    c = model.config
    keys = new * past + new * (new + 1) / 2
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return 2 * body_params(model) * new + 4 * c.num_hidden_layers * c.num_attention_heads * head_dim * keys


def make_workload(n, seed, vocab):
    """One top-100 request: one query (shared prefix = template head + query), n documents, template tail."""
    rng = np.random.default_rng(seed)
    tok = lambda k: rng.integers(100, min(vocab, EOS), size=k, dtype=np.int64)  # noqa: E731
    prefix = tok(HEAD_LEN + QUERY_LEN)
    # Document lengths: a beta skewed towards short documents, scaled to [40, 448], mean ~200 tokens.
    doc_lens = np.round(DOC_MIN + (DOC_MAX - DOC_MIN) * rng.beta(2.0, 3.1, size=n)).astype(int)
    tail = tok(TAIL_LEN)
    seqs = [np.concatenate([prefix, tok(d), tail]) for d in doc_lens]
    assert max(map(len, seqs)) <= MAX_TOTAL
    return prefix, seqs


def plan(lengths, budget, len_mult=1, bs_mult=1):
    """Length-sorted micro-batches with at most ~budget padded tokens each; lengths and batch sizes may be rounded
    up (bucketed) so that a compiled scorer sees a bounded set of shapes."""
    up = lambda x, m: -(-x // m) * m  # noqa: E731
    batches, cur, cur_len = [], [], 0
    for i in np.argsort(lengths)[::-1]:  # longest first
        L = min(up(int(lengths[i]), len_mult), up(MAX_TOTAL, len_mult))
        if cur and max(cur_len, L) * up(len(cur) + 1, bs_mult) > budget:
            batches.append((cur, cur_len, up(len(cur), bs_mult)))
            cur, cur_len = [], 0
        cur.append(int(i))
        cur_len = max(cur_len, L)
    batches.append((cur, cur_len, up(len(cur), bs_mult)))
    return batches


def right_pad(seqs, idx, L, b):
    """Right padding: the last real token sits at len-1, and under a causal mask real tokens never attend to the
    padding after them, so no attention mask is needed at all (SDPA can take its is_causal / flash path)."""
    arr, last = np.full((b, L), PAD, dtype=np.int64), np.zeros(b, dtype=np.int64)
    for r, i in enumerate(idx):
        arr[r, : len(seqs[i])], last[r] = seqs[i], len(seqs[i]) - 1
    return torch.from_numpy(arr).to(DEV), torch.from_numpy(last).to(DEV)


def last_label_logits(model, label_w, ids, last):
    """Student head: final hidden state at the last real token only, times the 3 label rows of the LM head."""
    h = model.model(input_ids=ids, use_cache=False).last_hidden_state
    return h[torch.arange(h.shape[0], device=h.device), last] @ label_w.T


def score_padded(seqs, fn, budget, len_mult=1, bs_mult=1):
    out = []
    for idx, L, b in plan(np.array([len(s) for s in seqs]), budget, len_mult, bs_mult):
        ids, last = right_pad(seqs, idx, L, b)
        if hasattr(torch.compiler, "cudagraph_mark_step_begin"):
            torch.compiler.cudagraph_mark_step_begin()  # lets CUDA-graph replays reuse their memory safely
        out.append((idx, fn(ids, last)[: len(idx)].float()))  # .float() copies out of any CUDA-graph pool
    scores = np.zeros((len(seqs), len(LABEL_IDS)), dtype=np.float32)
    for idx, s in out:
        scores[idx] = s.cpu().numpy()
    return scores


def once(fn):
    """(result, ms) of one call, with the device synchronised on both sides so queued GPU work is counted."""
    sync()
    t = time.perf_counter()
    out = fn()
    sync()
    return out, 1e3 * (time.perf_counter() - t)


def timed(fn, warmup, repeats):
    warm = [once(fn)[1] for _ in range(warmup)]
    runs = [once(fn) for _ in range(repeats)]
    return [ms for _, ms in runs], warm, runs[-1][0]


def summarise(times, flops, n_pairs, in_tokens, gen_tokens=0, **extra):
    p50 = float(np.percentile(times, 50))
    tflops = flops / (p50 / 1e3) / 1e12
    return dict(
        status="ok",
        latency_ms_p50=round(p50, 2),
        latency_ms_p95=round(float(np.percentile(times, 95)), 2),
        latency_ms_all=[round(t, 2) for t in times],
        pairs_per_s=round(n_pairs / p50 * 1e3, 1),
        input_tokens_per_s=round(in_tokens / p50 * 1e3),
        gen_tokens_per_s=round(gen_tokens / p50 * 1e3),
        tflops_per_request=float(f"{flops / 1e12:.4g}"),
        achieved_tflops=float(f"{tflops:.4g}"),
        frac_of_gemm_peak=round(tflops / PEAK, 4) if PEAK else None,
        **extra,
    )


def gemm_peak():
    n, iters = (256, 5) if ARGS.smoke else (8192, 20)
    a, b = (torch.randn(n, n, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    for _ in range(3):
        a @ b

    def burst():
        for _ in range(iters):
            a @ b

    best_s = min(once(burst)[1] for _ in range(5)) / 1e3 / iters
    return 2 * n**3 / best_s / 1e12


# --------------------------------------------------------------------------------------------- systems
def sys_naive(seqs):
    """What a user writes first: fp32, one right-padded batch of all pairs, default attention, full-vocabulary
    logits at every position (under inference_mode, which anyone would add), then pick 3 labels at the last token."""
    model = build(STUDENT, torch.float32, ARGS.seed)
    ids, last = right_pad(seqs, list(range(len(seqs))), max(map(len, seqs)), len(seqs))
    mask = (torch.arange(ids.shape[1], device=DEV)[None] <= last[:, None]).long()  # 1 on real tokens

    def run():
        logits = model(input_ids=ids, attention_mask=mask).logits
        return logits[torch.arange(len(seqs), device=DEV), last][:, list(LABEL_IDS)].float().cpu().numpy()

    times, _, scores = timed(run, 1, min(ARGS.repeats, 3))
    flops = sum(body_flops(model, len(s), 0) for s in seqs)
    STATE["naive_scores"] = scores
    return summarise(
        times, flops, len(seqs), sum(map(len, seqs)), notes=f"fp32, 1 batch padded to {ids.shape[1]}, full-vocab logits at all positions"
    )


def student_bf16():
    if "student" not in STATE:
        STATE["student"] = build(STUDENT, torch.bfloat16, ARGS.seed)
    return STATE["student"]


def sys_sdpa(seqs):
    model = student_bf16()
    lw = model.lm_head.weight[list(LABEL_IDS)]
    fn = lambda ids, last: last_label_logits(model, lw, ids, last)  # noqa: E731
    n_mb = len(plan(np.array([len(s) for s in seqs]), ARGS.token_budget))
    times, _, scores = timed(lambda: score_padded(seqs, fn, ARGS.token_budget), 2, ARGS.repeats)
    STATE["sdpa_scores"] = scores
    extra = {}
    if "naive_scores" in STATE:
        extra["max_abs_diff_vs_naive_fp32"] = float(np.abs(scores - STATE["naive_scores"]).max())
    return summarise(
        times,
        sum(body_flops(model, len(s), 0) for s in seqs),
        len(seqs),
        sum(map(len, seqs)),
        max_abs_label_logit=float(np.abs(scores).max()),
        **extra,
        notes=f"bf16 SDPA, {n_mb} length-sorted micro-batches <= {ARGS.token_budget} tokens, "
        "right-padded without mask (causal), last token x 3 label rows",
    )


def sys_packed(seqs):
    try:
        import flash_attn  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return dict(
            status="skipped",
            notes=f"flash_attn not importable ({type(e).__name__}); transformers' SDPA "
            "path would need a dense block-diagonal mask over each packed row (quadratic), so not run",
        )
    model = student_bf16()
    model.set_attn_implementation("flash_attention_2")
    lw = model.lm_head.weight[list(LABEL_IDS)]

    def run():
        out = []
        for idx, _, _ in plan(np.array([len(s) for s in seqs]), ARGS.token_budget):
            ids = torch.from_numpy(np.concatenate([seqs[i] for i in idx])).to(DEV)[None]
            # position_ids restarting per sequence make transformers call flash_attn's varlen kernel
            pos = torch.from_numpy(np.concatenate([np.arange(len(seqs[i])) for i in idx])).to(DEV)[None]
            last = torch.from_numpy(np.cumsum([len(seqs[i]) for i in idx]) - 1).to(DEV)
            h = model.model(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state[0]
            out.append((idx, (h[last] @ lw.T).float()))
        scores = np.zeros((len(seqs), len(LABEL_IDS)), dtype=np.float32)
        for idx, s in out:
            scores[idx] = s.cpu().numpy()
        return scores

    try:
        times, _, scores = timed(run, 2, ARGS.repeats)
    finally:
        model.set_attn_implementation("sdpa")
    extra = {"max_abs_diff_vs_sdpa": float(np.abs(scores - STATE["sdpa_scores"]).max())} if "sdpa_scores" in STATE else {}
    return summarise(
        times,
        sum(body_flops(model, len(s), 0) for s in seqs),
        len(seqs),
        sum(map(len, seqs)),
        notes="bf16, no padding: sequences packed per micro-batch, flash_attention_2 varlen",
        **extra,
    )


def sys_prefix(prefix, seqs):
    """Shared prefix (template head + query) computed once per request; each document+tail suffix then attends
    to a batch-expanded copy of its KV cache."""
    model = student_bf16()
    lw = model.lm_head.weight[list(LABEL_IDS)]
    P, sufs = len(prefix), [s[len(prefix) :] for s in seqs]

    def run():
        pre = model.model(input_ids=torch.from_numpy(prefix).to(DEV)[None], use_cache=True).past_key_values
        kv = [(layer.keys, layer.values) for layer in pre.layers]
        out = []
        for idx, L, b in plan(np.array([len(s) for s in sufs]), ARGS.token_budget):
            ids, last = right_pad(sufs, idx, L, b)
            cache = DynamicCache(config=model.config)
            for li, (k, v) in enumerate(kv):
                cache.update(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1), li)
            pos = torch.arange(P, P + L, device=DEV)[None].expand(b, -1)
            h = model.model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True).last_hidden_state
            out.append((idx, (h[torch.arange(b, device=DEV), last] @ lw.T).float()))
        scores = np.zeros((len(seqs), len(LABEL_IDS)), dtype=np.float32)
        for idx, s in out:
            scores[idx] = s.cpu().numpy()
        return scores

    times, _, scores = timed(run, 2, ARGS.repeats)
    flops = body_flops(model, P, 0) + sum(body_flops(model, len(s), P) for s in sufs)
    extra = {}
    if "sdpa_scores" in STATE:
        extra["max_abs_diff_vs_sdpa"] = float(np.abs(scores - STATE["sdpa_scores"]).max())
        extra["max_abs_label_logit"] = float(np.abs(STATE["sdpa_scores"]).max())
    return summarise(
        times,
        flops,
        len(seqs),
        sum(map(len, seqs)),
        **extra,
        notes=f"prefix of {P} tokens once + suffixes vs expanded DynamicCache; FLOPs count the work actually done (prefix once)",
    )


def sys_compile(seqs):
    """System 2 under torch.compile. dynamic=True compiles once for all shapes; lengths are bucketed to multiples of
    64 and batch sizes to multiples of 8 so CUDA graphs (reduce-overhead) are recorded for a bounded set of shapes."""
    model = student_bf16()
    lw = model.lm_head.weight[list(LABEL_IDS)]
    backend = ARGS.compile_backend or ("eager" if ARGS.smoke and DEV.type == "cpu" else "inductor")
    kw = dict(mode=ARGS.compile_mode) if backend == "inductor" else {}  # modes only apply to inductor
    fn = torch.compile(lambda ids, last: last_label_logits(model, lw, ids, last), backend=backend, dynamic=True, **kw)
    shapes = {(L, b) for _, L, b in plan(np.array([len(s) for s in seqs]), ARGS.token_budget, 64, 8)}
    run = lambda: score_padded(seqs, fn, ARGS.token_budget, 64, 8)  # noqa: E731
    # Warm-up 1 compiles; 2 records CUDA graphs (reduce-overhead warms each shape eagerly first); 3 replays.
    times, warm, scores = timed(run, 3, ARGS.repeats)
    extra = {"max_abs_diff_vs_sdpa": float(np.abs(scores - STATE["sdpa_scores"]).max())} if "sdpa_scores" in STATE else {}
    res = summarise(
        times,
        sum(body_flops(model, len(s), 0) for s in seqs),
        len(seqs),
        sum(map(len, seqs)),
        compile_s_first_request=round(warm[0] / 1e3, 1),
        warmup_ms=[round(w, 1) for w in warm],
        **extra,
        notes=f"torch.compile backend={backend}{' mode=' + kw['mode'] if kw else ''} dynamic=True; {len(shapes)} bucket "
        f"shapes; first request (compile) {warm[0] / 1e3:.1f}s",
    )
    torch._dynamo.reset()
    return res


def generate_judge(model, seqs, new_tokens_list, name):
    """A reasoning judge: all pairs in one left-padded batch, greedy, exactly G new tokens each (min=max)."""
    L = max(map(len, seqs))
    ids = np.full((len(seqs), L), PAD, dtype=np.int64)
    mask = np.zeros_like(ids)
    for r, s in enumerate(seqs):
        ids[r, L - len(s) :], mask[r, L - len(s) :] = s, 1
    ids, mask = torch.from_numpy(ids).to(DEV), torch.from_numpy(mask).to(DEV)

    def gen(G, cache):
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=G,
            min_new_tokens=G,
            do_sample=False,
            cache_implementation=cache,
            disable_compile=True,
            pad_token_id=PAD,
            eos_token_id=EOS,
        )
        assert out.shape[1] == L + G, out.shape
        return out

    cache, cache_note = "static", "static cache"
    try:
        gen(4, cache)  # warm-up (and probe the static cache)
    except Exception as e:  # noqa: BLE001
        cache, cache_note = "dynamic", f"dynamic cache (static failed: {type(e).__name__}: {str(e)[:200]})"
        gen(4, cache)
    results = {}
    for G in new_tokens_list:
        log(f"  {name}: generating {G} tokens x {len(seqs)} pairs ({cache})")
        times, _, _ = timed(lambda G=G: gen(G, cache), 0, ARGS.gen_repeats)
        flops = sum(body_flops(model, len(s), 0) + body_flops(model, G - 1, len(s)) for s in seqs)
        flops += 2 * model.config.hidden_size * model.config.vocab_size * G * len(seqs)  # full-vocab head per token
        results[f"{name}_gen{G}"] = summarise(
            times,
            flops,
            len(seqs),
            sum(map(len, seqs)),
            gen_tokens=G * len(seqs),
            new_tokens=G,
            notes=f"transformers generate (NOT vLLM), bf16 SDPA eager, {cache_note}, greedy, batch {len(seqs)} "
            f"left-padded to {L}, exactly {G} new tokens",
        )
    return results


# --------------------------------------------------------------------------------------------- report
def ratios(res):
    ok = lambda k: k in res and res[k].get("status") == "ok"  # noqa: E731
    p50 = lambda k: res[k]["latency_ms_p50"]  # noqa: E731
    r = {}
    if ok("naive"):
        for k in STUDENT_SYSTEMS[1:]:
            if ok(k):
                r[f"{k}_speedup_vs_naive"] = round(p50("naive") / p50(k), 2)
    students = [k for k in STUDENT_SYSTEMS[1:] if ok(k)]
    if students:
        best = min(students, key=p50)
        r["best_student"] = best
        for k in res:
            if k.startswith(("teacher_7b_gen", "judge_1p5b_gen")) and ok(k):
                r[f"best_student_speedup_vs_{k}"] = round(p50(k) / p50(best), 1)
    return r


def write(out, meta, res):
    doc = dict(meta, results=res, ratios=ratios(res), wall_s=round(time.perf_counter() - T0, 1))
    (out / "gpu_speed.json").write_text(json.dumps(doc, indent=2, default=str))
    m = meta["machine"]
    lines = [
        f"# GPU speed: student scorer vs reasoning judges ({m['device_name']})",
        "",
        f"torch {m['torch']}, transformers {m['transformers']}, CUDA {m['cuda']}; measured bf16 GEMM peak "
        f"({m['gemm_peak_shape']}): **{m['gemm_peak_tflops']:.4g} TFLOP/s**{' (SMOKE: tiny models, CPU)' if ARGS.smoke else ''}",
        "",
        f"Workload: {meta['workload']['description']}",
        "",
        "| system | status | p50 ms | p95 ms | pairs/s | input tok/s | gen tok/s | TFLOP/s | % GEMM peak | notes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for k, v in res.items():
        if v.get("status") == "ok":
            pct = f"{100 * v['frac_of_gemm_peak']:.1f}" if v.get("frac_of_gemm_peak") is not None else ""
            lines.append(
                f"| {k} | ok | {v['latency_ms_p50']:.1f} | {v['latency_ms_p95']:.1f} | {v['pairs_per_s']:.0f} | "
                f"{v['input_tokens_per_s']} | {v['gen_tokens_per_s'] or ''} | {v['achieved_tflops']:.3g} | "
                f"{pct} | {v.get('notes', '')} |"
            )
        else:
            lines.append(f"| {k} | {v['status']} | | | | | | | | {v.get('error') or v.get('notes', '')} |")
    lines += [
        "",
        "Ratios (p50 latency): " + ", ".join(f"{k} = {v}" for k, v in ratios(res).items()),
        "",
        "**What this is and is not.** Speed only, with random weights: it says how fast these architectures "
        "run this workload on this GPU, nothing about ranking quality. The judges are timed with Hugging Face "
        "`transformers.generate` (eager, no torch.compile, no paged attention or continuous batching), **not "
        "vLLM** or another serving engine, so they are an upper bound on judge latency (how much a serving engine "
        "would take off was not measured here). TFLOP/s counts useful work only (real tokens, the label rows or the generated "
        "tokens' heads), not padding or the naive run's full-vocabulary logits.",
    ]
    (out / "gpu_speed.md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def main():
    global ARGS, DEV, PEAK, STATE, T0
    T0, STATE, PEAK = time.perf_counter(), {}, None
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--smoke", action="store_true", help="tiny models and counts, runs on CPU in well under a minute")
    ap.add_argument("--only", default=",".join(SYSTEMS), help=f"comma-separated subset of {','.join(SYSTEMS)}")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per student system (default 5)")
    ap.add_argument("--gen-repeats", type=int, default=1, help="timed repeats per judge generation")
    ap.add_argument("--pairs", type=int, default=None, help="pairs per request (default 100)")
    ap.add_argument("--token-budget", type=int, default=None, help="padded tokens per micro-batch (default 16384)")
    ap.add_argument("--gen-tokens", default=None, help="judge new-token counts (default 200,24)")
    ap.add_argument("--compile-mode", default="reduce-overhead")
    ap.add_argument("--compile-backend", default=None, help="default inductor (eager for --smoke on CPU)")
    ap.add_argument("--budget-s", type=float, default=330, help="skip systems that would start past this wall time")
    ap.add_argument("--seed", type=int, default=0)
    ARGS = ap.parse_args()
    s = ARGS.smoke
    ARGS.repeats = ARGS.repeats or (2 if s else 5)
    ARGS.pairs = ARGS.pairs or (8 if s else 100)
    ARGS.token_budget = ARGS.token_budget or (1024 if s else 16384)
    gen_tokens = [int(g) for g in (ARGS.gen_tokens or ("8,3" if s else "200,24")).split(",")]
    only = [x.strip() for x in ARGS.only.split(",") if x.strip()]
    if bad := set(only) - set(SYSTEMS):
        ap.error(f"unknown systems {bad}; choose from {SYSTEMS}")
    DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if DEV.type == "cpu" and not s:
        ap.error("no CUDA device: full-size runs need a GPU (use --smoke to check the script on CPU)")
    ARGS.out.mkdir(parents=True, exist_ok=True)
    transformers.logging.set_verbosity_error()
    torch.set_grad_enabled(False)

    log(f"device {DEV}; gemm peak ...")
    PEAK = gemm_peak()
    n = 256 if s else 8192
    vocab = TINY["vocab_size"] if s else STUDENT["vocab_size"]
    prefix, seqs = make_workload(ARGS.pairs, ARGS.seed, vocab)
    lens = np.array([len(x) for x in seqs])
    meta = dict(
        kind="speed-only",
        smoke=s,
        random_weights=True,
        machine=dict(
            device_name=torch.cuda.get_device_name(0) if DEV.type == "cuda" else platform.processor() or "cpu",
            torch=torch.__version__,
            transformers=transformers.__version__,
            numpy=np.__version__,
            cuda=torch.version.cuda,
            python=sys.version.split()[0],
            gemm_peak_shape=f"bf16 {n}^3",
            gemm_peak_tflops=float(f"{PEAK:.4g}"),
            gpu_mem_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if DEV.type == "cuda" else None,
        ),
        workload=dict(
            pairs=len(seqs),
            prefix_tokens=len(prefix),
            tail_tokens=TAIL_LEN,
            label_ids=LABEL_IDS,
            seq_len_min=int(lens.min()),
            seq_len_mean=round(float(lens.mean()), 1),
            seq_len_max=int(lens.max()),
            total_tokens=int(lens.sum()),
            token_budget=ARGS.token_budget,
            seed=ARGS.seed,
            description=f"one top-{len(seqs)} request: {len(seqs)} (query, document) pairs of random token ids, "
            f"shared prefix {len(prefix)} tokens (template head {HEAD_LEN} + query {QUERY_LEN}), "
            f"document {DOC_MIN}-{DOC_MAX} tokens (seeded beta), tail {TAIL_LEN}; sequence "
            f"length min/mean/max {lens.min()}/{lens.mean():.0f}/{lens.max()}, {lens.sum()} tokens",
        ),
        models=dict(student=STUDENT, teacher=TEACHER, smoke_override=TINY if s else None),
        args={k: str(v) for k, v in vars(ARGS).items()},
    )
    log(f"gemm peak {PEAK:.1f} TFLOP/s; {meta['workload']['description']}")

    res = {}
    for name in [x for x in SYSTEMS if x in only]:
        if not s and time.perf_counter() - T0 + EST_S[name] > ARGS.budget_s:
            res[name] = dict(status="skipped", notes=f"wall-time budget {ARGS.budget_s:.0f}s would be exceeded")
            continue
        if name == "teacher_7b":  # free the 1.5B before building the 7B; compile (after) rebuilds it
            STATE.pop("student", None)
            free()
        log(f"system {name} ...")
        if DEV.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        try:
            if name == "naive":
                out = {name: sys_naive(seqs)}
            elif name == "sdpa":
                out = {name: sys_sdpa(seqs)}
            elif name == "packed":
                out = {name: sys_packed(seqs)}
            elif name == "prefix":
                out = {name: sys_prefix(prefix, seqs)}
            elif name == "compile":
                out = {name: sys_compile(seqs)}
            elif name == "judge_1p5b":
                out = generate_judge(student_bf16(), seqs, gen_tokens[:1], name)
            else:
                teacher = build(TEACHER, torch.bfloat16, ARGS.seed + 1)
                try:
                    out = generate_judge(teacher, seqs, gen_tokens, name)
                finally:
                    del teacher
        except Exception as e:  # noqa: BLE001  one failure (OOM, compile error) must not lose the rest
            traceback.print_exc()
            out = {name: dict(status="error", error=f"{type(e).__name__}: {str(e)[:400]}")}
        if DEV.type == "cuda":
            for v in out.values():
                v["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        res.update(out)
        free()
        for k, v in out.items():
            log(f"  {k}: {v.get('status')} p50={v.get('latency_ms_p50')} ms {v.get('error') or ''}")
        write(ARGS.out, meta, res)
    print(write(ARGS.out, meta, res), flush=True)


if __name__ == "__main__":
    main()
