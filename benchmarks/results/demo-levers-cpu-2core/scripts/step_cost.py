"""Seconds per step of cold-start settings: a few steps of ``teacher_sft`` each, on the same data.

Usage: ``python step_cost.py DATA_DIR STEPS '{"lora.r": 16}' ...`` (each argument overrides the demo config).
``train.prefix_gradients`` (af2aded) was run from the working tree before that commit, with the same code."""
import json
import shutil
import sys
from pathlib import Path

from r3edge.core.config import SFTConfig
from r3edge.distill.teacher.sft import load_sft_config, teacher_sft

data, steps = Path(sys.argv[1]), int(sys.argv[2])
for spec in sys.argv[3:]:
    over = json.loads(spec)
    cfg = load_sft_config("r3a-smollm2-demo").model_dump()
    for k, v in over.items():
        a, b = k.split(".")
        if cfg.get(a) is None:
            cfg[a] = {}
        cfg[a][b] = v
    out = Path("runs/s53/speed") / str(abs(hash(spec)))
    shutil.rmtree(out, ignore_errors=True)
    teacher_sft(SFTConfig(**cfg), out, gold=data / "sft-pairs.jsonl", max_steps=steps, log=lambda *a, **k: None)
    r = json.loads((out / "sft_report.json").read_text())
    print("SPEED", spec, r["seconds_per_step"], r["tokens_per_s"], r["trainable_parameters"], flush=True)
