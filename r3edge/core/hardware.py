"""What this machine computes fast, read without torch (the server and the vLLM launcher ask too).

bf16 is the fast training and inference dtype on GPUs and on CPUs with native bf16 (AVX-512 BF16 or
AMX), and a slow emulation elsewhere: on an AVX2-only CPU a bf16 GEMM ran at 16 GFLOP/s against
111 GFLOP/s in fp32 (2 threads), and vLLM served SmolLM2 ~10x slower in bf16 than in fp32. Configs
therefore say ``dtype: auto`` and get bf16 only where it is native.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
from functools import cache
from pathlib import Path

_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: The SIMD extensions that decide CPU speed here: "AMD EPYC" alone names boxes from AVX2-only
#: (bf16 emulated, ~2 GFLOP/s) to AVX-512 with native bf16 and VNNI (~400 GFLOP/s bf16).
SIMD_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


@cache
def cpu_has_bf16() -> bool:
    """Whether the CPU has native bf16 instructions (Linux /proc/cpuinfo flags; False where unreadable)."""
    return any(flag in cpu_flags() for flag in _BF16_FLAGS)


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


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """Which of :data:`SIMD_FLAGS` this CPU has."""
    present = set((_cpuinfo("flags") or "").split())
    return [f for f in SIMD_FLAGS if f in present]


def cgroup_cpu_limit(root: str = "/sys/fs/cgroup") -> float | None:
    """The CPU quota of this process's cgroup in CPUs (a Kubernetes ``limits.cpu``, ``docker run --cpus``),
    or None when unlimited. cgroup v2's ``cpu.max`` (``"200000 100000"`` = 2 CPUs, ``"max 100000"`` =
    none), else v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1 = none)."""
    base = Path(root)
    try:
        quota, period = (base / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((base / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((base / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def usable_cores() -> int:
    """CPUs this process may use: its affinity (which taskset and cpusets narrow), capped by its cgroup's
    CPU quota rounded up (a pod limited to 2 CPUs on a 64-core node must not start 64 threads: the quota
    would throttle them)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return max(1, min(cores, math.ceil(limit))) if limit else cores


def gpus() -> list[str]:
    """``name, memory`` of each NVIDIA GPU nvidia-smi lists (none without it)."""
    return list(_gpus())


@cache
def _gpus() -> tuple[str, ...]:
    """nvidia-smi runs once per process: a judge benchmark asks for the machine identity per journal."""
    if not shutil.which("nvidia-smi"):
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in out.stdout.splitlines() if line.strip())


def compute_identity() -> dict:
    """What a latency measured here depends on: CPU model, its SIMD extensions, usable cores and GPUs.
    Timings taken on machines with different identities are not comparable (a benchmark resumed on
    another machine starts its measurements again)."""
    return {"cpu": cpu_model(), "cpu_flags": cpu_flags(), "cores_usable": usable_cores(), "gpus": gpus()}
