"""`accelerate launch --num_processes 2` trains as one process does: `r3edge train` and `r3edge teacher sft`
run once in this process and once as two processes (gloo on the CPU), and the two runs' loss curves and
final weights agree to within float rounding.

Why they can agree: the config's batch × accumulation is the global batch of a step whatever the number of
processes (r3edge.distill.hf_trainer.per_device_batches), the length-grouped order is drawn for that global
batch, accelerate deals each step's rows out to the processes and DDP averages their gradients.

What may still differ is rounding. The student's micro-batch is 2 rows instead of 4 (other GEMM shapes,
padding to another width), each process runs one thread instead of two, and a step's gradient is the
gloo average of two half-batch means instead of one mean: each a change of a few fp32 ulps (2^-23 ≈
1.2e-7 relative) per reduction. So LOSS_RTOL, the bound on every logged loss, is 1e-5 (~80 ulps);
measured on the 2-core EPYC: 3.4e-7 for the student, 0 for the cold start, whose micro-batch is the same
chunk either way and whose ×2 / ÷2 over two processes is exact. The weights are compared as
||w_2proc − w_1proc|| / ||w_1proc − w_init|| (how far apart the runs end, against how far training moved
them): AdamW divides each gradient by sqrt(v) + eps, so a rounding error in a gradient near zero is
amplified by up to 1/eps = 1e8 in that weight's update. WEIGHT_RTOL is 1e-3; measured 7.9e-6 for the
student, 0 for the cold start. Broken on purpose, the loss curves moved far outside LOSS_RTOL (relative):
every process given all the data (student) 1.3; transformers' per-process length grouping instead of the
global one (student) 0.73; the cold start's step run beside DDP (no gradient average) 1.5e-2; its loss not
scaled by the number of processes 0.5.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE_QUERIES, TINY_STUDENT, TINY_TEACHER

from r3edge.core.labels import write_manifest, write_shard

pytestmark = pytest.mark.slow  # real models, and two launches of two processes each

ACCELERATE = Path(sys.executable).with_name("accelerate")
LOSS_RTOL = 1e-5
WEIGHT_RTOL = 1e-3
STUDENT_STEPS = 6  # 8 pairs, a global batch of 4: two steps an epoch, so three epochs (three shuffles)
SFT_STEPS = 3  # 2 shared-prefix chunks, 2 of them a step: one step an epoch
TOY = {"qid": "q1", "query": "renew residence permit qatar", "candidates": [
    {"docid": "a", "text": "Renew it online in Metrash2. It takes 2 days.", "label": 2},
    {"docid": "b", "text": "My PRO renewed my permit, no idea how.", "label": 1},
    {"docid": "c", "text": "Beach day at Sealine!", "label": 0}]}


@pytest.fixture
def cpu_launcher():
    import torch

    if not ACCELERATE.exists():
        pytest.skip(f"accelerate's launcher is not installed next to {sys.executable}")
    if torch.cuda.is_available():
        pytest.skip("compares runs on the CPU (gloo); with a GPU the in-process run would train on it")


def launch_two(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``accelerate launch --multi_gpu --num_processes 2 -m r3edge ARGS``: torchrun under accelerate (gloo on a CPU);
    ``--cpu`` would start one process, not two (its multi-CPU path needs mpirun)."""
    cmd = [str(ACCELERATE), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0", "-m", "r3edge", *args]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=420,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return done


def weights(directory: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def relative_distance(a: dict, b: dict, start: dict) -> float:
    """||a - b|| / ||b - start|| over every weight: how far apart two runs end, against how far training went."""
    diff = sum(float((a[k].double() - b[k].double()).square().sum()) for k in b)
    moved = sum(float((b[k].double() - start[k].double()).square().sum()) for k in b)
    assert moved > 0, "training did not move the weights"
    return (diff / moved) ** 0.5


def assert_same_curve(one: dict, two: dict) -> None:
    steps1, steps2 = [s for s, _ in one["loss_log"]], [s for s, _ in two["loss_log"]]
    assert steps1 == steps2 and one["steps"] == two["steps"], (one["loss_log"], two["loss_log"])
    worst = max(abs(b - a) / abs(a) for (_, a), (_, b) in zip(one["loss_log"], two["loss_log"]))
    assert worst <= LOSS_RTOL, f"loss curves differ by {worst:.2e} (relative): {one['loss_log']} vs {two['loss_log']}"
    assert one["loss_log"][-1][1] < one["loss_log"][0][1]  # it trained


def one_line(pattern: str, text: str) -> None:
    """The line appears once: from the main process only."""
    hits = re.findall(pattern, text, flags=re.MULTILINE)
    assert len(hits) == 1, (pattern, hits, text[-3000:])


def test_two_processes_train_the_student_one_process_trains(tmp_path, cpu_launcher):
    from r3edge.cli import main
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.model.student import create_student

    records = []
    queries = [*SAMPLE_QUERIES, {"qid": "q3", "query": "visa on arrival qatar",
                                  "candidates": [{"docid": "f1", "text": "Most EU passports get 90 days on arrival.", "label": 2}]}]
    for q in queries:
        for c in q["candidates"]:
            p = [0.15, 0.15, 0.15]
            p[c["label"]] = 0.7
            records.append(dict(qid=q["qid"], docid=c["docid"], query=q["query"], text=c["text"], gold=c["label"],
                                judge="r3a", teacher_model="unit", prompt_hash="feed", probs=p, score=c["label"], format_ok=True))
    assert len(records) == 8
    labels = tmp_path / "labels"
    labels.mkdir()
    write_shard(labels, records)
    write_manifest(labels, {"judge": "r3a", "teacher_model": "unit", "prompt_hash": "feed", "n_pairs": 8, "n_done": 8,
                            "complete": True})
    config = tmp_path / "student.yaml"
    config.write_text(TINY_STUDENT.read_text().replace("  batch_size: 8\n  logging_steps: 2",
                                                       "  batch_size: 4\n  logging_steps: 1\n  warmup_ratio: 0.0"))
    args = ["train", str(labels), "--student", str(config), "--max-steps", str(STUDENT_STEPS)]

    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    two = launch_two([*args, "--out", str(tmp_path / "two")], tmp_path)

    r1 = json.loads((tmp_path / "one" / "train_report.json").read_text())
    r2 = json.loads((tmp_path / "two" / "train_report.json").read_text())
    assert (r1["processes"], r1["per_device_batch_size"]) == (1, 4)
    assert (r2["processes"], r2["per_device_batch_size"], r2["per_device_gradient_accumulation_steps"]) == (2, 2, 1)
    assert_same_curve(r1, r2)
    one_line(r"^trained 8 pairs, 6 steps .*saved", two.stdout)
    one_line(rf"^train \(loss [0-9.]+\): {STUDENT_STEPS}/{STUDENT_STEPS} \(.*elapsed", two.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels", "one", "student.yaml", "two"]

    start = create_student(load_yaml(config, StudentConfig))[0].state_dict()
    distance = relative_distance(weights(tmp_path / "two"), weights(tmp_path / "one"), start)
    assert distance <= WEIGHT_RTOL, f"the two runs' weights are {distance:.2e} of the training distance apart"


def test_two_processes_cold_start_the_teacher_as_one_process_does(tmp_path, cpu_launcher):
    from r3edge.cli import main
    from r3edge.core.config import TeacherConfig, load_yaml
    from r3edge.model.loading import load_model

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps(TOY) + "\n")
    teacher = tmp_path / "teacher.yaml"  # no auxiliary posts: shorter prompts
    teacher.write_text(TINY_TEACHER.read_text().replace("n_aux: 2", "n_aux: 0"))
    config = tmp_path / "sft.yaml"  # an intent chunk and a verdict chunk of 3 rows: 2 chunks a step, one per process
    config.write_text(f"name: mp\nteacher: {teacher}\ntrain:\n  learning_rate: 1.0e-3\n  batch_size: 4\n"
                      "  gradient_accumulation_steps: 2\n  warmup_ratio: 0.0\n  logging_steps: 1\n  bf16: false\n")
    args = ["teacher", "sft", "--config", str(config), "--gold", str(pairs), "--max-steps", str(SFT_STEPS)]

    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    two = launch_two([*args, "--out", str(tmp_path / "two")], tmp_path)

    r1 = json.loads((tmp_path / "one" / "sft_report.json").read_text())
    r2 = json.loads((tmp_path / "two" / "sft_report.json").read_text())
    assert (r1["processes"], r1["per_device_gradient_accumulation_steps"]) == (1, 2)
    assert (r2["processes"], r2["per_device_gradient_accumulation_steps"]) == (2, 1)
    assert_same_curve(r1, r2)
    one_line(r"^sft: .* steps in .*saved", two.stdout)
    one_line(r"^sft: training on ", two.stdout)
    one_line(rf"^sft \(loss [0-9.]+\): {SFT_STEPS}/{SFT_STEPS} \(.*elapsed", two.stderr)

    start = load_model(load_yaml(teacher, TeacherConfig).model).state_dict()
    distance = relative_distance(weights(tmp_path / "two"), weights(tmp_path / "one"), start)
    assert distance <= WEIGHT_RTOL, f"the two runs' weights are {distance:.2e} of the training distance apart"


def test_a_batch_that_does_not_split_over_the_processes_is_refused_with_the_fields_to_change():
    from r3edge.core.errors import InvalidInput
    from r3edge.distill.hf_trainer import per_device_batches

    assert per_device_batches(8, 1, 2) == (4, 1) and per_device_batches(6, 4, 4) == (6, 1)
    assert per_device_batches(8, 2, 2, unit=8) == (8, 1)  # whole query groups stay on one process
    assert per_device_batches(1, 4, 2, batch_field=None) == (1, 2)
    with pytest.raises(InvalidInput, match="train.batch_size 6 × train.gradient_accumulation_steps 1 cannot be split") as err:
        per_device_batches(6, 1, 4)
    assert "multiple of 4" in err.value.fix
    with pytest.raises(InvalidInput, match="gradient_accumulation_steps 1 .*shared-prefix chunk"):
        per_device_batches(1, 1, 2, batch_field=None)
