#!/usr/bin/env bash
set -euo pipefail
cd /work/main
W=runs/s74/x1p5b
[ -f $W/student/scorer.json ] || .venv/bin/python - <<'PY'
import torch
from r3edge.core.config import StudentConfig, load_yaml
from r3edge.model.student import create_student, save_student
torch.manual_seed(0)
lm, scorer = create_student(load_yaml("configs/student/qwen2.5-1.5b-random.yaml", StudentConfig))
save_student(lm, scorer, "runs/s74/x1p5b/student")
PY
rm -rf $W/artifact
/usr/bin/time -v -o $W/time-export.txt .venv/bin/python -m r3edge export $W/student --out $W/artifact --variants fp16 --max-calib 4 --prefix-reuse --default-variant fp16 > $W/export.log 2>&1
du -sh $W/artifact/* > $W/sizes.txt
echo done > $W/DONE
