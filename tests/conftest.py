"""Shared fixtures: tiny real models built from configs, the real Qwen2.5 tokenizer, real files."""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
SHARED_DATA = ROOT.parent / "shared" / "data"
TINY_STUDENT = CONFIGS / "student" / "qwen2-tiny.yaml"
TINY_TEACHER = CONFIGS / "teacher" / "r3a-tiny.yaml"

def load_script(path: Path, name: str):
    """A script outside the package (benchmarks/, deploy/, examples/, a generated Triton model) imported from its file,
    under ``name`` in sys.modules (pydantic resolves annotations through it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


SAMPLE_QUERIES = [
    {
        "qid": "q1",
        "query": "best bank in doha for expats?",
        "aux": ["Looking for a bank 🏦 #doha #expatlife", "QNB vs CBQ, which one?"],
        "candidates": [
            {"docid": "d1", "text": "Commercial Bank is great for expats, no minimum balance 👍 #banking", "label": 2, "rank": 1},
            {"docid": "d2", "text": "I opened an account at QNB last year, the app is ok but fees are high.", "label": 1, "rank": 2},
            {"docid": "d3", "text": "lol my cat just knocked over my coffee ☕😹 #mondays", "label": 0, "rank": 3},
            {"docid": "d4", "text": "Anyone know a good vet in Al Wakra?? my dog is sick 🐶", "label": 0, "rank": 4},
        ],
    },
    {
        "qid": "q2",
        "query": "how to renew residence permit qatar",
        "candidates": [
            {"docid": "e1", "text": "Renew your RP online via Metrash2: upload passport, pay 500 QR, done in 2 days ✅",
             "label": 2, "rank": 1},
            {"docid": "e2", "text": "My company PRO handled my RP, no idea how it works tbh", "label": 1, "rank": 2},
            {"docid": "e3", "text": "Beach day at Sealine 🌊☀️ #weekend #qatar " * 5, "label": 0, "rank": 3},
        ],
    },
]


@pytest.fixture(scope="session")
def sample_pairs_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    path.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in SAMPLE_QUERIES))
    return path


@pytest.fixture(scope="session")
def tiny_student(tmp_path_factory):
    """An untrained tiny Qwen2 student saved as a real student directory (weights + scorer.json)."""
    from r3edge.core.config import StudentConfig, load_yaml
    from r3edge.model.student import create_student, save_student

    lm, scorer = create_student(load_yaml(TINY_STUDENT, StudentConfig))
    out = save_student(lm, scorer, tmp_path_factory.mktemp("student") / "student")
    return out


def tiny_bi_config(tmp_path: Path, **train) -> Path:
    """bert-tiny (random weights, real MiniLM tokenizer) as a biencoder student."""
    raw = yaml.safe_load((CONFIGS / "student" / "bert-tiny.yaml").read_text())
    raw["name"] = "bert-tiny-bi"
    raw["model"]["kind"] = "biencoder"
    raw["scorer"]["max_total_tokens"] = 180  # [CLS] q [SEP] [CLS] d [SEP]: 4 fixed tokens
    raw["train"].update(train)
    path = tmp_path / "bert-tiny-bi.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_artifact(tiny_student, tmp_path_factory) -> Path:
    """The tiny student exported once per session (fp32 + int8 ONNX), for the server and benchmarks."""
    from r3edge.export.onnx import export_artifact

    return export_artifact(tiny_student, tmp_path_factory.mktemp("artifact") / "artifact",
                           variants=("fp32", "int8"), calib_pairs=None, log=lambda *a, **k: None)
