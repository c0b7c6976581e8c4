"""A resumable student run's directory (``r3edge train --checkpoints DIR [--resume]``).

The Trainer writes its latest ``checkpoint-N`` there (weights, optimiser, schedule, RNG, the step
reached; :class:`~r3edge.distill.hf_trainer.CheckpointClock` says when). Beside it, :data:`RUN_FILE`
says what the run was started with and where each sitting ended. So ``--resume`` refuses to go on with
another run's weights (other labels, another config, another step limit), a finished run is not trained
twice, and a directory that holds a run is never overwritten by a fresh start. Why it exists: a MiniLM
epoch over 100k labelled pairs takes longer on 2 CPU cores than one session lasts.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from r3edge.core.errors import InvalidInput

RUN_FILE = "run.json"
#: limits of one sitting, left out of the config's digest: a resumed sitting may change them
SITTING_LIMITS = ("max_seconds", "checkpoint_seconds")


def run_identity(config: dict, table, *, max_steps: int | None, drop_unformatted: bool) -> dict:
    """What makes two sittings one run: digests of the config (less its sitting limits) and of the
    labelled records (ids, texts, teacher distributions, gold), and the step limit: what a resumed
    sitting must share with the first."""
    config = {**config, "train": {k: v for k, v in config["train"].items() if k not in SITTING_LIMITS}}
    labels = hashlib.sha256()
    for col in ("qid", "docid", "query", "text", "probs", "gold"):
        if col in table.column_names:
            labels.update(json.dumps(table.column(col).to_pylist()).encode())
    return {"config": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16],
            "labels": labels.hexdigest()[:16], "max_steps": max_steps, "drop_unformatted": drop_unformatted}


def open_run(directory: Path, identity: dict, *, resume: bool) -> tuple[str | None, dict]:
    """``(checkpoint to resume from or None, the run's record)``; refuses what would lose or mix work.
    Reads only: every process checks the same files, and the caller writes a new run's record."""
    run_file = directory / RUN_FILE
    latest = last_complete_checkpoint(directory)
    if not resume:
        if latest is not None or run_file.exists():
            held = Path(latest).name if latest is not None else RUN_FILE
            raise InvalidInput(f"--checkpoints {directory} already holds a run ({held})",
                               "pass --resume to continue it, or point --checkpoints at a new directory to start afresh")
        return None, {**identity, "sittings": []}
    if not run_file.is_file():
        raise InvalidInput(f"--resume: {directory} holds no run ({RUN_FILE} is missing)",
                           "run without --resume to start one there")
    record = json.loads(run_file.read_text())
    for key, now in identity.items():
        if record.get(key) != now:
            raise InvalidInput(f"--resume: the run in {directory} was started with another {key} "
                               f"({record.get(key)!r} there, {now!r} now)",
                               "resume with the same labels, student config, --max-steps and --drop-unformatted, "
                               "or start afresh in a new --checkpoints directory")
    if record.get("finished_at_step") is not None:
        raise InvalidInput(f"--resume: the run in {directory} finished at step {record['finished_at_step']} and saved "
                           f"its student to {record.get('out')}",
                           "nothing is left to train; start afresh in a new --checkpoints directory to train again")
    return latest, record


def last_complete_checkpoint(directory: Path) -> str | None:
    """The Trainer's newest ``checkpoint-N`` that was written whole: its ``trainer_state.json`` is the last
    file the Trainer writes, so a sitting killed while saving leaves the previous one (the Trainer removes
    that only after the new one is complete)."""
    if not directory.is_dir():
        return None
    done = [p for p in directory.glob("checkpoint-*")
            if p.name.removeprefix("checkpoint-").isdigit() and (p / "trainer_state.json").is_file()]
    return str(max(done, key=lambda p: int(p.name.removeprefix("checkpoint-")))) if done else None


def write_record(directory: Path, record: dict) -> None:
    """``run.json``, replaced atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{RUN_FILE}.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, directory / RUN_FILE)
