#!/usr/bin/env bash
# Two sittings of the MiniLM recipe (minilm-cqa-bi-rank-wise) on the committed C train labels of the
# cold-started 1.5B judge, each cut by --max-seconds, the second resumed: what a sitting costs besides its
# steps (loading, tokenising, the cosine head's fit, the checkpoint), and what a step costs on this box.
# Usage: benchmarks/results/train-resume-cpu-2core/run.sh OUT [SECONDS]
set -euo pipefail
out=${1:?OUT}; secs=${2:-300}
labels=benchmarks/results/judge-qwen-coder-cold-start-lora-h100/labels/train
mkdir -p "$out"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/Flags:.*\(avx512[a-z_]*\).*/Flags: has \1/' > "$out/machine.txt"
for sitting in 1 2; do
  resume=(); [ "$sitting" = 2 ] && resume=(--resume)
  /usr/bin/time -v -o "$out/time-$sitting.txt" .venv/bin/python -m r3edge train "$labels" \
      --student minilm-cqa-bi-rank-wise --out "$out/student" --checkpoints "$out/ckpt" \
      --max-seconds "$secs" "${resume[@]}" 2>&1 | tee "$out/log-$sitting.txt"
  cp "$out/student/train_report.json" "$out/train_report-$sitting.json"
  du -sb "$out"/ckpt/checkpoint-* > "$out/checkpoint-size-$sitting.txt"
done
