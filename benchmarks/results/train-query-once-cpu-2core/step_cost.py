"""Forward + backward of minilm-cqa-bi-rank-wise training batches (C train labels, query groups of 8, batch 16,
the recipe's sampler order), through the single cosine graph and through train.query_once's graphs, alternating
batch by batch on the same weights (no optimiser step); prints seconds per batch and tokens per batch."""

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
from r3edge.model.student import create_student, scoring_module

n_batches = int(sys.argv[1]) if len(sys.argv) > 1 else 12
cfg = load_yaml(resolve_config("minilm-cqa-bi-rank-wise", "student"), StudentConfig)
tp = cfg.train
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
collate = {"single": (graph, DistillCollator(scorer)), "query_once": (once, DistillCollator(scorer, query_once=True))}
settings = dict(label_values=scorer.spec.label_values, listwise_weight=tp.listwise_weight,
                margin_mse_weight=tp.margin_mse_weight)
times = {k: [] for k in collate}
tokens = {k: [] for k in collate}
for b in range(n_batches):
    rows = [dataset[i] for i in order[b * tp.batch_size:(b + 1) * tp.batch_size]]
    for name in (("single", "query_once") if b % 2 == 0 else ("query_once", "single")):
        model, collator = collate[name]
        inputs = collator(rows)
        tokens[name].append(int(inputs["input_ids"].numel()) + sum(int(p.numel()) for p in inputs.get("query_prefixes", [])))
        t0 = time.perf_counter()
        loss, _ = distillation_loss(model, inputs, **settings)
        loss.backward()
        times[name].append(time.perf_counter() - t0)
        lm.zero_grad(set_to_none=True)
for name in collate:
    print(f"{name}: median {statistics.median(times[name]):.3f} s/batch, mean {statistics.fmean(times[name]):.3f}, "
          f"tokens/batch (padded) {statistics.fmean(tokens[name]):.0f}, batches {len(times[name])}")
print(f"ratio single/query_once (median): {statistics.median(times['single']) / statistics.median(times['query_once']):.2f}")
