#!/bin/bash
# The causal CPU student's starting points, scored zero-shot on C dev: its 6 layers untrained and the whole
# SmolLM2-135M-Instruct (30 layers). Run from anywhere; writes runs/causal-zs/ in the repository.
set -e
cd "$(dirname "$0")/../../.."
mkdir -p runs/causal-zs
L=benchmarks/results/judge-qwen-coder-cold-start-lora-h100/labels
sed '/keep_layers/d; s/^name: smollm2-cqa-rank/name: smollm2-cqa-rank-30l/' configs/student/smollm2-cqa-rank.yaml > runs/causal-zs/smollm2-30l.yaml
.venv/bin/python - <<'PY'
from r3edge.core.config import StudentConfig, load_yaml
from r3edge.model.student import create_student, save_student
for name, cfg in (("init-6l", "smollm2-cqa-rank"), ("base-30l", "runs/causal-zs/smollm2-30l.yaml")):
    lm, scorer = create_student(load_yaml(cfg, StudentConfig))
    save_student(lm, scorer, f"runs/causal-zs/{name}")
PY
for n in init-6l base-30l; do
  .venv/bin/r3edge eval $L/dev --student runs/causal-zs/$n --json runs/causal-zs/$n.json > runs/causal-zs/$n.log 2>&1
done
