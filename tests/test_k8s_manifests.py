"""deploy/k8s: the kustomize base and overlays render, and what the server needs of them holds.

Rendered with ``kubectl kustomize`` (skipped where kubectl is absent; there is no cluster here, so nothing
is applied) and read as YAML: the probes and the Service reach the ports the server binds (its settings
resolved by :class:`ServeConfig` itself from the pod's env and the ConfigMap's file, as ``r3edge serve
--config`` would), the pod outlives the preStop sleep, the server's own pre-stop delay and its drain, it
runs as the image's non-root user on a read-only root, the ConfigMap's keys are ServeConfig's and none is
shadowed by an env variable, and the GPU overlay asks for a GPU and the CUDA device. Where the
``kubernetes-validate`` package (or its CLI) is installed, every rendered object is also checked against
the Kubernetes OpenAPI schema, strictly and offline.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from r3edge.serve.config import ServeConfig

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
TARGETS = {"base": K8S / "base", "gpu": K8S / "overlays" / "gpu", "tls": K8S / "overlays" / "tls"}
KUBECTL = shutil.which("kubectl")

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (with its built-in kustomize) is not installed")


def render(target: Path) -> list[dict]:
    out = subprocess.run([KUBECTL, "kustomize", str(target)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kubectl kustomize {target} failed: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def image_env() -> dict[str, str]:
    """The R3EDGE_* variables the Dockerfile's runtime stage sets (ENV a=b \\ c=d ...), build ARGs at their defaults."""
    text = DOCKERFILE.read_text().split("AS runtime", 1)[1]
    args = dict(re.findall(r"^ARG (\w+)=(\S*)$", text, re.M))
    block = re.search(r"^ENV (.*?)(?<!\\)$", text, re.S | re.M).group(1)
    env = dict(kv.split("=", 1) for kv in block.replace("\\\n", " ").split() if kv.startswith("R3EDGE_"))
    return {k: re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], v) for k, v in env.items()}


def image_uid() -> int:
    return int(re.search(r"^USER (\d+)", DOCKERFILE.read_text(), re.M).group(1))


@pytest.fixture(scope="module", params=sorted(TARGETS))
def rendered(request):
    return request.param, render(TARGETS[request.param])


def _pod(docs):
    dep = one(docs, "Deployment", "r3edge")
    pod = dep["spec"]["template"]
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "r3edge"]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    return dep, pod, container, env


def served_config(docs, container, env, tmp_path) -> tuple[ServeConfig, dict]:
    """ServeConfig as the pod's server resolves it: the image's env, the pod's env over it, and the
    ConfigMap's file at the path its --config argument names."""
    args = container.get("args", [])
    config_path = args[args.index("--config") + 1]
    (mount,) = [m for m in container["volumeMounts"] if config_path.startswith(m["mountPath"])]
    (volume,) = [v for v in _pod(docs)[1]["spec"]["volumes"] if v["name"] == mount["name"]]
    cm = one(docs, "ConfigMap", volume["configMap"]["name"])
    key = mount.get("subPath") or Path(config_path).name
    local = tmp_path / key
    local.write_text(cm["data"][key])
    file_values = yaml.safe_load(cm["data"][key]) or {}
    return ServeConfig.resolve({}, env={**image_env(), **env}, config_file=local), file_values


def test_ports_probes_and_service_agree_with_the_server(rendered, tmp_path):
    name, docs = rendered
    _, pod, container, env = _pod(docs)
    cfg, _ = served_config(docs, container, env, tmp_path)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": cfg.port, "http": cfg.http_port, "metrics": cfg.metrics_port}, name
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(cfg.metrics_port)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        spec = container[probe]
        if "grpc" in spec:  # kubelet's native gRPC health probe: plain text only
            assert spec["grpc"]["port"] == cfg.port, (name, probe)
            assert not cfg.tls_cert, f"{name}: a native grpc {probe} cannot reach a TLS port: use the exec health check"
        else:  # the image's health check, which reads the same env
            assert spec["exec"]["command"][-1] == "/opt/r3edge/healthcheck.py", (name, probe)
            assert "COPY healthcheck.py /opt/r3edge/healthcheck.py" in DOCKERFILE.read_text()
    labels = pod["metadata"]["labels"]
    for svc in (d for d in docs if d["kind"] == "Service"):
        assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), svc["metadata"]["name"]
        for port in svc["spec"]["ports"]:
            assert ports[port["targetPort"]] and port["port"] == ports[port["targetPort"]], (svc["metadata"]["name"], port)
    pdb = one(docs, "PodDisruptionBudget")
    assert all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items())
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "r3edge"}


def test_the_pod_outlives_the_drain(rendered, tmp_path):
    name, docs = rendered
    _, pod, container, env = _pod(docs)
    cfg, _ = served_config(docs, container, env, tmp_path)
    hook = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    assert "sleep" in hook and "R3EDGE_PRESTOP_DELAY_S" in hook, f"{name}: the preStop hook sleeps the server's pre-stop delay"
    assert env["R3EDGE_PRESTOP_DELAY_S"] and cfg.prestop_delay_s == float(env["R3EDGE_PRESTOP_DELAY_S"])
    # the hook's sleep, then (after SIGTERM) the server's own pre-stop delay, then its drain
    needed = 2 * cfg.prestop_delay_s + cfg.grace_period_s
    assert pod["spec"]["terminationGracePeriodSeconds"] > needed, (
        f"{name}: terminationGracePeriodSeconds {pod['spec']['terminationGracePeriodSeconds']} must exceed "
        f"2 x prestop {cfg.prestop_delay_s} + grace {cfg.grace_period_s}")


def test_non_root_read_only_and_secrets(rendered, tmp_path):
    name, docs = rendered
    _, pod, container, env = _pod(docs)
    pod_sc, sc = pod["spec"]["securityContext"], container["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] == image_uid() != 0, name
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, name
    assert sc["capabilities"]["drop"] == ["ALL"], name
    cfg, _ = served_config(docs, container, env, tmp_path)
    # the token file lies in the mounted Secret
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    secret_of = {path: volumes[vol]["secret"]["secretName"] for path, vol in mounts.items() if "secret" in volumes[vol]}
    token_dir = str(Path(cfg.auth_token_file).parent)
    assert secret_of.get(token_dir) == "r3edge-auth", f"{name}: {cfg.auth_token_file} is not in the r3edge-auth Secret"
    secret = one(docs, "Secret", "r3edge-auth")
    assert Path(cfg.auth_token_file).name in secret.get("stringData", secret.get("data", {}))
    if cfg.tls_cert:
        assert secret_of.get(str(Path(cfg.tls_cert).parent)) == "r3edge-tls" and not cfg.insecure, name


def test_configmap_is_serve_config_and_nothing_in_it_is_shadowed(rendered, tmp_path):
    name, docs = rendered
    _, _, container, env = _pod(docs)
    cfg, file_values = served_config(docs, container, env, tmp_path)  # ServeConfig refuses an unknown key or a bad value
    shadowed = {k for k in file_values if ServeConfig.env_name(k) in {**image_env(), **env}}
    assert not shadowed, f"{name}: {sorted(shadowed)} in the ConfigMap are overridden by env variables (env wins)"
    for key, value in file_values.items():
        assert getattr(cfg, key) == value, (name, key)
    # the server sizes its threads by CPU affinity, which a CPU limit does not narrow: workers x threads = the limit
    cpu_limit = float(container["resources"]["limits"]["cpu"])
    assert cfg.workers and cfg.threads and cfg.workers * cfg.threads <= cpu_limit, name


def test_gpu_overlay_asks_for_a_gpu_and_cuda(tmp_path):
    docs = render(TARGETS["gpu"])
    _, pod, container, env = _pod(docs)
    cfg, _ = served_config(docs, container, env, tmp_path)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert cfg.device == "cuda"
    assert container["image"].split(":")[0].endswith("r3edge-serve-gpu")
    base = _pod(render(TARGETS["base"]))[2]
    assert "nvidia.com/gpu" not in base["resources"]["limits"] and "gpu" not in base["image"]


def _validator():
    try:
        import kubernetes_validate  # noqa: F401

        return "module"
    except ImportError:
        return shutil.which("kubernetes-validate")


@pytest.mark.skipif(_validator() is None, reason="kubernetes-validate (PyPI) is not installed: the schema check needs it")
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_schema_valid(target, tmp_path):
    """Every rendered object against the Kubernetes 1.33 OpenAPI schema, strict (an unknown field fails);
    kubernetes-validate ships the schemas, so this runs offline."""
    path = tmp_path / f"{target}.yaml"
    path.write_text(subprocess.run([KUBECTL, "kustomize", str(TARGETS[target])], capture_output=True, text=True,
                                   check=True).stdout)
    validator = _validator()
    cmd = [sys.executable, "-m", "kubernetes_validate"] if validator == "module" else [validator]
    out = subprocess.run([*cmd, "-k", "1.33.0", "--strict", "--quiet", str(path)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
