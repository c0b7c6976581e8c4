"""The serving image, built from this checkout and run with a real artifact, checked from the host.

Runs deploy/docker/smoke.py's checks (gRPC health and Rerank, HTTP /v2/rerank, /metrics, Docker's
HEALTHCHECK on a read-only root, no torch in the image, a SIGTERM drain with requests in flight, and the
probes in ../shared/probes where that folder exists, the stress probe with 200 fuzzed requests instead of
1,000) on the tiny exported student. Needs a Docker daemon
and the local base image (deploy/docker/base-image.sh); skipped with the reason otherwise: CI machines
have no dockerd, and this test does not install one. Building the image takes minutes: marked slow.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLE_QUERIES, load_script

PROBES = ROOT.parent / "shared" / "probes"


def _smoke():
    return load_script(ROOT / "deploy" / "docker" / "smoke.py", "r3edge_container_smoke")


smoke = _smoke()


def _skip_reason() -> str | None:
    if why := smoke.docker_ready():
        return why
    base = subprocess.run(["docker", "image", "inspect", "r3edge-base:bookworm"], capture_output=True, timeout=60)
    if base.returncode:
        return "no base image r3edge-base:bookworm: run deploy/docker/base-image.sh (debootstrap, a few minutes)"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "")]


@pytest.fixture(scope="module")
def heldout(tmp_path_factory) -> Path:
    """Candidate lists of 100 (what the probes and the drain send), made of the sample texts."""
    path = tmp_path_factory.mktemp("container") / "heldout.jsonl"
    texts = [c["text"] for q in SAMPLE_QUERIES for c in q["candidates"]]
    lines = [{"qid": q["qid"], "query": q["query"],
              "candidates": [{"docid": f"{q['qid']}-{i}", "text": f"{texts[i % len(texts)]} #{i}"} for i in range(100)]}
             for q in SAMPLE_QUERIES]
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    return path


@pytest.mark.timeout(2400)  # the image build, two containers, the probes and a drain: ~10 minutes on 2 busy cores
def test_image_serves_and_drains(tiny_artifact, heldout):
    smoke.build(log=print)
    results = smoke.run_smoke(f"r3edge-serve:{smoke.version()}", tiny_artifact, heldout,
                              probes=PROBES if (PROBES / "grpc_probe.py").is_file() else None,
                              fuzz=200)  # the stress probe's 1,000 fuzzed requests take ~8 minutes on 2 busy cores
    names = {row["check"] for row in results["checks"]}
    assert {"gRPC Rerank", "HTTP /v2/rerank", "/metrics counts both requests",
            "SIGTERM: the in-flight requests complete, the last during the drain"} <= names
    assert not results["failed"], "\n".join(f"{r['check']}: {r['detail']}" for r in results["checks"] if not r["ok"])
