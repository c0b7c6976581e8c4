"""What this machine computes fast, read without torch (the server and the vLLM launcher ask too).

bf16 is the fast training and inference dtype on GPUs and on CPUs with native bf16 (AVX-512 BF16 or
AMX), and a slow emulation elsewhere: on an AVX2-only CPU a bf16 GEMM ran at 16 GFLOP/s against
111 GFLOP/s in fp32 (2 threads), and vLLM served SmolLM2 ~10x slower in bf16 than in fp32. Configs
therefore say ``dtype: auto`` and get bf16 only where it is native.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@cache
def cpu_has_bf16() -> bool:
    """Whether the CPU has native bf16 instructions (Linux /proc/cpuinfo flags; False where unreadable)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags for flag in _BF16_FLAGS)
