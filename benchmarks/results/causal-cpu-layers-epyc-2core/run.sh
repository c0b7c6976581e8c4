#!/bin/bash
# Issue 47's causal CPU student at 12 of SmolLM2-135M-Instruct's 30 layers instead of 6: the shipped
# smollm2-cqa-rank config with only keep_layers (and the name) changed, trained on the same 6,700 labels of the
# 0.490 judge and evaluated on C dev in torch, then its 12 layers untrained scored zero-shot as
# ../chain-semeval-c-cpu-2core/zero_shot.sh did for 6. Run from anywhere; writes runs/causal-12l/ and the JSONs here;
# layers.py tabulates, within_question.py splits the agreement (SEMEVAL: the semeval2016-cqa folder, for the
# first-stage ranks). About 1 h 50 min on 2 cores.
set -e
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/../../.."
OUT=runs/causal-12l
L=benchmarks/results/judge-qwen-coder-cold-start-lora-h100/labels
mkdir -p $OUT
sed -e 's/^name: smollm2-cqa-rank$/name: smollm2-cqa-rank-12l/' -e 's/keep_layers: 6/keep_layers: 12/' \
    configs/student/smollm2-cqa-rank.yaml > $OUT/smollm2-cqa-rank-12l.yaml
.venv/bin/r3edge train $L/train --student $OUT/smollm2-cqa-rank-12l.yaml --out $OUT/student --eval-labels $L/dev \
    --checkpoints $OUT/ckpt
cp $OUT/student/train_report.json "$HERE/smollm2-cqa-rank-12l-train_report.json"
.venv/bin/python - <<'PY'
from r3edge.core.config import StudentConfig, load_yaml
from r3edge.model.student import create_student, save_student
lm, scorer = create_student(load_yaml("runs/causal-12l/smollm2-cqa-rank-12l.yaml", StudentConfig))
save_student(lm, scorer, "runs/causal-12l/init-12l")
PY
.venv/bin/r3edge eval $L/dev --student $OUT/init-12l --json "$HERE/smollm2-cqa-rank-12l-init-zero-shot.json"
.venv/bin/python "$HERE/layers.py"
# the reference for within_question.py: the MiniLM student of the same labels (about 25 min)
.venv/bin/r3edge train $L/train --student minilm-cqa-bi-rank-wise-q1 --out $OUT/minilm
.venv/bin/python "$HERE/within_question.py" smollm2-cqa-rank-12l=$OUT/student minilm-cqa-bi-rank-wise-q1=$OUT/minilm \
    --semeval "${SEMEVAL:-../shared/data/semeval2016-cqa}"
