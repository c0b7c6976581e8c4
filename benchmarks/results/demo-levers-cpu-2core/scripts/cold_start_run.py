"""One row of ``teacher-runs.jsonl``: the demo cold start with overrides, then the result labels DATA_DIR/pairs.jsonl
and its labels are scored against their gold labels.

Usage: ``python cold_start_run.py NAME DATA_DIR '{"teacher": "score-only-smollm2", "train.epochs": 1.5}'``
(DATA_DIR holds a demo run's sft-pairs.jsonl and pairs.jsonl; outputs go to runs/s53/exp/NAME)."""
import json
import sys
import time
from pathlib import Path

import yaml

from r3edge.benchmarks.systems import accuracy_block, teacher_probs
from r3edge.core.pairs import read_queries
from r3edge.distill.label.driver import label_pairs
from r3edge.distill.teacher.sft import load_sft_config, teacher_sft

name, data, over = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
out = Path("runs/s53/exp") / name
cfg = load_sft_config("r3a-smollm2-demo").model_dump()
for k, v in over.items():
    d = cfg
    *path, last = k.split(".")
    for p in path:
        d = d.setdefault(p, {}) if d.get(p) is not None else d.__setitem__(p, {}) or d[p]
    d[last] = v
out.mkdir(parents=True, exist_ok=True)
(out / "sft.yaml").write_text(yaml.safe_dump(cfg))
t0 = time.time()
teacher_sft(load_sft_config(out / "sft.yaml"), out / "teacher", gold=data / "sft-pairs.jsonl")
t1 = time.time()
lab = label_pairs(data / "pairs.jsonl", cfg["teacher"], out / "labels", teacher_model=out / "teacher")
t2 = time.time()
acc = accuracy_block(read_queries(data / "pairs.jsonl"), teacher_probs(lab)[0], [0.0, 1.0, 2.0], None).get("vs_gold")
rep = json.loads((out / "teacher" / "sft_report.json").read_text())
res = {"name": name, "over": over, "sft_s": round(t1 - t0, 1), "train_wall": rep["wall_time_s"], "steps": rep["steps"],
       "tok_computed": rep["tokens_computed"], "label_s": round(t2 - t1, 1),
       "auc_0_12": acc["auc_0_12"], "auc_01_2": acc["auc_01_2"], "acc": acc["accuracy"], "n": acc["n"]}
print("RESULT", json.dumps(res), flush=True)
with open("runs/s53/exp/results.jsonl", "a") as f:
    f.write(json.dumps(res) + "\n")
