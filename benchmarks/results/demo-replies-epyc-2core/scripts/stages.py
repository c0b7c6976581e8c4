"""Stage seconds of a demo run: differences between its stage outputs' file times (as demo-lean-epyc-2core did)."""
import json
import os
import sys
from pathlib import Path

run = Path(sys.argv[1])
marks = [("pairs", "sft-pairs.jsonl"), ("cold start", "teacher/sft_report.json"), ("label train", "labels/train/manifest.json"),
         ("label held-back", "labels/heldout/manifest.json"), ("student", "student/train_report.json"),
         ("export", "artifact/export_report.json"), ("bench", "report.md")]
t = [(k, os.path.getmtime(run / f)) for k, f in marks]
out = {k: round(b - a) for (_, a), (k, b) in zip(t, t[1:])}
sft = json.loads((run / "teacher/sft_report.json").read_text())
print(json.dumps(out), "| sft wall", sft["wall_time_s"], "s/step", sft["seconds_per_step"])
