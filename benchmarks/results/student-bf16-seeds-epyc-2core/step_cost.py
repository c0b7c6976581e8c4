"""Forward + backward of minilm-cqa-bi-rank-wise-q1 training batches (C train labels, query groups of 8, batch 16,
the recipe's sampler order) in fp32 and under CPU bf16 autocast (what the Trainer's bf16=True does on a CPU; master
weights fp32), alternating batch by batch on the same weights (no optimiser step); also the single cosine graph in
fp32 as the link to train-query-once-cpu-2core. Prints seconds per batch and the loss difference."""

import statistics
import sys
import time

import torch

from r3edge.core.config import StudentConfig, load_yaml, resolve_config
from r3edge.core.labels import read_labels
from r3edge.distill.student.query_once import QueryOnceCosine
from r3edge.distill.student.train import (
    DistillCollator,
    QueryGroupSampler,
    build_dataset,
    distillation_loss,
    teacher_targets,
)
from r3edge.model.loading import native_bf16
from r3edge.model.student import create_student, scoring_module

n_batches = int(sys.argv[1]) if len(sys.argv) > 1 else 12
cfg = load_yaml(resolve_config("minilm-cqa-bi-rank-wise-q1", "student"), StudentConfig)
tp = cfg.train
print(f"native bf16: {native_bf16()}, threads {torch.get_num_threads()}, torch {torch.__version__}")
torch.manual_seed(0)
lm, scorer = create_student(cfg)
table = read_labels("benchmarks/results/judge-qwen-coder-cold-start-lora-h100/labels/train")
qids = table.column("qid").to_pylist()
index = {q: i for i, q in enumerate(dict.fromkeys(qids))}
dataset = build_dataset(scorer, table.column("query").to_pylist(), table.column("text").to_pylist(),
                        teacher_targets(table, scorer.spec.n_labels, "labels"), groups=[index[q] for q in qids])
order = list(QueryGroupSampler(dataset["group"], tp.query_group_size, tp.seed))
graph = scoring_module(lm, scorer).train()
once = QueryOnceCosine(graph, right_padded=scorer.spec.padding_side == "right").train()
systems = {"q1 fp32": (once, DistillCollator(scorer, query_once=True), False),
           "q1 bf16 autocast": (once, DistillCollator(scorer, query_once=True), True),
           "single fp32": (graph, DistillCollator(scorer), False)}
settings = dict(label_values=scorer.spec.label_values, listwise_weight=tp.listwise_weight,
                margin_mse_weight=tp.margin_mse_weight)
times = {k: [] for k in systems}
losses = {k: [] for k in systems}
names = list(systems)
for b in range(n_batches):
    rows = [dataset[i] for i in order[b * tp.batch_size:(b + 1) * tp.batch_size]]
    for name in names[b % 3:] + names[:b % 3]:
        model, collator, bf16 = systems[name]
        inputs = collator(rows)
        torch.manual_seed(b)  # the same dropout draws for both q1 rows of a batch
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, _ = distillation_loss(model, inputs, **settings)
        loss.backward()
        times[name].append(time.perf_counter() - t0)
        losses[name].append(float(loss.detach()))
        lm.zero_grad(set_to_none=True)
for name in systems:
    print(f"{name}: median {statistics.median(times[name]):.3f} s/batch, mean {statistics.fmean(times[name]):.3f}, "
          f"batches {len(times[name])}")
d = [abs(a - b) for a, b in zip(losses["q1 fp32"], losses["q1 bf16 autocast"])]
print(f"|loss fp32 - loss bf16| per batch: median {statistics.median(d):.4f}, max {max(d):.4f} "
      f"(losses median {statistics.median(losses['q1 fp32']):.3f})")
print(f"ratio q1 fp32 / q1 bf16 (median): {statistics.median(times['q1 fp32']) / statistics.median(times['q1 bf16 autocast']):.2f}")
print(f"ratio single fp32 / q1 fp32 (median): {statistics.median(times['single fp32']) / statistics.median(times['q1 fp32']):.2f}")
