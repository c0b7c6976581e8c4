"""What machine a benchmark ran on: numbers without it cannot be compared or reproduced.

Versions are read from package metadata, not by importing, so describing the machine never
imports torch into a torch-free server process.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata

PACKAGES = ("r3edge", "onnxruntime", "torch", "transformers", "numpy", "tokenizers", "grpcio", "protobuf")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def _gpus() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def machine_info() -> dict:
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cpu": _cpu_model(),
        "cores_logical": os.cpu_count(),
        "cores_usable": usable,
        "ram_gib": _ram_gib(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "versions": versions,
        "gpus": _gpus(),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
    }
