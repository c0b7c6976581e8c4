"""benchmarks/gpu/label_100k's outbox: what one device call returns stays within the call's limits (at most 8 files,
16 MiB each, 64 MiB in all) and what does not fit is shipped by the next call, each file once."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "label_100k" / "label_100k.py"


@pytest.fixture
def mod(monkeypatch):
    m = load_script(SCRIPT, "label_100k_outbox")
    # the real limits scaled down 1,000 times: bundles of ~15 KiB, 60 KiB per call
    monkeypatch.setattr(m, "BUNDLE", 15 * 1024)
    monkeypatch.setattr(m, "OUT_BYTES", 60 * 1024)
    return m


def _shipped(out: Path) -> list[str]:
    names = []
    for b in sorted(out.glob("bundle-*.tar")):
        with tarfile.open(b) as t:
            names += t.getnames()
    return names


def test_outbox_ships_within_a_calls_limits_and_the_rest_next_call(mod, tmp_path):
    work, out1, out2 = tmp_path / "work", tmp_path / "out1", tmp_path / "out2"
    box = mod.Outbox(work, out1)
    src = tmp_path / "src"
    src.mkdir()
    for i in range(12):  # 12 files of 6 KiB: 72 KiB, over one call's 60 KiB
        f = src / f"labels-shard-{i:02d}.tar"
        f.write_bytes(bytes([i]) * 6144)
        box.put(f)
    waiting = box.ship()
    bundles = sorted(out1.glob("bundle-*.tar"))
    assert len(bundles) <= mod.MAX_BUNDLES and all(b.stat().st_size <= mod.BUNDLE for b in bundles)
    assert sum(b.stat().st_size for b in bundles) <= mod.OUT_BYTES
    first = _shipped(out1)
    assert waiting and sorted(first + waiting) == sorted(f"labels-shard-{i:02d}.tar" for i in range(12))
    assert not list(out1.glob("*.tmp"))
    # the next call (a fresh $OUT, the same machine): only what was waiting, each once
    assert mod.Outbox(work, out2).ship() == []
    second = _shipped(out2)
    assert sorted(second) == sorted(waiting) and not set(first) & set(second)
    with tarfile.open(sorted(out2.glob("bundle-*.tar"))[0]) as t:
        name = t.getnames()[0]
        assert t.extractfile(name).read() == (src / name).read_bytes()


def test_pieces_wait_for_the_calls_end_and_labels_and_reports_go_first(mod, tmp_path):
    """The adapter's and a student's weights' pieces (NAME.tar.NN) ship last; labels, reports and checksums first."""
    work, out = tmp_path / "work", tmp_path / "out"
    box = mod.Outbox(work, out)
    src = tmp_path / "src"
    src.mkdir()
    pieces = ["adapter.tar.00", "adapter.tar.01", "student-100k.tar.00"]
    for name in (*pieces, "labels-dev.tar", "student-100k.train_report.json", "student-100k.sha256"):
        (src / name).write_bytes(b"x" * 4096)
        box.put(src / name)
    assert sorted(box.ship()) == pieces  # mid-call: no piece
    assert sorted(_shipped(out)) == ["labels-dev.tar", "student-100k.sha256", "student-100k.train_report.json"]
    assert box.ship(final=True) == []
    assert _shipped(out)[3:] == pieces


# Run in its own interpreter: the check arms the process's real-time timer (SIGALRM), which a test worker
# shares with pytest-timeout and every earlier test's state; a stray alarm there must not take the worker down.
_BUDGET_CHECK = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("label_100k", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
t0, caught_inside = time.monotonic(), 0
try:
    with mod._deadline(1.0):
        while time.monotonic() - t0 < 10:
            try:
                time.sleep(0.05)
            except Exception:  # what a library may do around a step
                caught_inside += 1
except mod._OutOfTime:
    stopped = time.monotonic() - t0
else:
    sys.exit("the budget never fired")
assert caught_inside == 0 and stopped < 5, (caught_inside, stopped)
with mod._deadline(None):  # no budget: nothing is armed
    time.sleep(1.2)
time.sleep(1.2)  # and nothing fires after a block has ended (an armed timer would end this process)
print("ok", round(stopped, 2))
"""


def test_a_calls_budget_ends_labelling_even_through_code_that_catches_exception():
    """`_deadline` stops `Run.label` at the call's budget; library code on the way (model loading) that catches
    `Exception` must not swallow it, or the call runs past its limit and ships nothing. After the block nothing
    stays armed."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _BUDGET_CHECK, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok"), (done.returncode, done.stdout, done.stderr[-2000:])
