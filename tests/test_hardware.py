"""The CPUs a server sizes its threads by: affinity capped by the cgroup's CPU quota (a container limit)."""

from __future__ import annotations

import os

import pytest

from r3edge.core import hardware


@pytest.mark.parametrize(("files", "want"), [
    ({"cpu.max": "200000 100000\n"}, 2.0),                      # cgroup v2, 2 CPUs
    ({"cpu.max": "max 100000\n"}, None),                        # cgroup v2, unlimited
    ({"cpu/cpu.cfs_quota_us": "150000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1.5),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),     # v1 unlimited
    ({}, None),                                                 # no cgroup files
])
def test_cgroup_cpu_limit_reads_v2_and_v1(tmp_path, files, want):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert hardware.cgroup_cpu_limit(str(tmp_path)) == want


def test_usable_cores_is_the_affinity_capped_by_the_quota_rounded_up(monkeypatch):
    affinity = len(os.sched_getaffinity(0))
    for limit, want in ((None, affinity), (0.5, 1), (affinity - 0.5, affinity), (affinity + 64, affinity),
                        (1.0, 1)):
        monkeypatch.setattr(hardware, "cgroup_cpu_limit", lambda limit=limit: limit)
        assert hardware.usable_cores() == want, limit
