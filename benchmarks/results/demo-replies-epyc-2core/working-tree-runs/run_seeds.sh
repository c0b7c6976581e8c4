#!/usr/bin/env bash
# three demo seeds with the cold start's rows' context outside autograd too (only the replies back-propagated)
set -u
cd /work/main
for s in 0 1 2; do
  /usr/bin/time -f "r3edge demo --seed $s: %e s" -o runs/s63/time-seed$s.txt \
    .venv/bin/r3edge demo --seed $s --out runs/s63/demo-seed$s --sft runs/s63/sft-replies.yaml > runs/s63/demo-seed$s.log 2>&1
  echo "seed $s rc $?" >> runs/s63/done.txt
done
