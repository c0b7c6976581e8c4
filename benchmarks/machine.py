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

PACKAGES = ("r3edge", "onnxruntime", "openvino", "torch", "transformers", "numpy", "tokenizers", "grpcio", "protobuf",
            "bm25s", "scikit-learn")


def _cpuinfo(field: str) -> str | None:
    """The first ``field`` line of /proc/cpuinfo (Linux), its value only."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


#: The SIMD extensions that decide CPU speed here: "AMD EPYC" alone names boxes from AVX2-only
#: (bf16 emulated, ~2 GFLOP/s) to AVX-512 with native bf16 and VNNI (~400 GFLOP/s bf16).
SIMD_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def _cpu_flags() -> list[str]:
    present = set((_cpuinfo("flags") or "").split())
    return [f for f in SIMD_FLAGS if f in present]


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
        "cpu_flags": _cpu_flags(),
        "cores_logical": os.cpu_count(),
        "cores_usable": usable,
        "ram_gib": _ram_gib(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "versions": versions,
        "gpus": _gpus(),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
    }
