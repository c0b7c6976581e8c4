"""The package as users get it: one `r3edge` namespace with configs and committed gRPC stubs,
torch-free serving, shipped configs found by name, versioned manifests, one error-to-status table."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT


def test_committed_grpc_stubs_match_the_proto(tmp_path):
    """The .proto is the source of truth: regenerate and compare byte for byte (fix: `make proto`)."""
    from r3edge.api.protogen import API_DIR, generate

    for fresh in generate(tmp_path):
        committed = API_DIR / fresh.name
        assert committed.is_file(), f"{committed.name} is not committed; run `make proto`"
        assert committed.read_bytes() == fresh.read_bytes(), f"{committed.name} is stale; run `make proto`"


def test_serving_modules_import_neither_torch_nor_protoc():
    """Every module of r3edge.serve and r3edge.api, imported in a fresh interpreter."""
    code = (
        "import importlib, pkgutil, sys\n"
        "import r3edge.serve, r3edge.api\n"
        "for pkg in (r3edge.serve, r3edge.api):\n"
        "    for m in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if not m.name.endswith('protogen'):\n"
        "            importlib.import_module(m.name)\n"
        "print(sorted(n for n in ('torch', 'transformers', 'grpc_tools.protoc', 'r3edge.distill', 'r3edge.model')"
        " if n in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True)
    (path,) = out.glob("r3edge-*.whl")
    return path


def test_wheel_holds_only_the_r3edge_namespace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"r3edge"}
    for must in ("r3edge/configs/teacher/r3a-7b.yaml", "r3edge/configs/student/smollm2-demo.yaml",
                 "r3edge/configs/serve/default.yaml", "r3edge/api/reranker.proto", "r3edge/api/reranker_pb2.py",
                 "r3edge/api/reranker_pb2_grpc.py", "r3edge/api/reranker_pb2.pyi", "r3edge/serve/server.py",
                 "r3edge/distill/label/driver.py", "r3edge/distill/teacher/sft.py", "r3edge/distill/student/train.py",
                 "r3edge/distill/data/pooling.py", "r3edge/export/onnx.py", "r3edge/benchmarks/systems.py",
                 "r3edge/benchmarks/peer_side/sentence_transformers_peers.py"):
        assert must in names, must


def test_unpacked_wheel_finds_its_configs_and_serves_torch_free(wheel, tmp_path):
    """From a directory outside the checkout, with only the wheel's files on the path."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import sys, r3edge\n"
        "from r3edge.core.config import TeacherConfig, load_yaml, resolve_config\n"
        "import r3edge.serve.server\n"
        f"assert r3edge.__file__.startswith({str(site)!r}), r3edge.__file__\n"
        "assert str(resolve_config('r3a-7b', 'teacher')).startswith(r3edge.__path__[0])\n"
        "print(load_yaml('r3a-smollm2', TeacherConfig).name, 'torch' in sys.modules)\n"
    )
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["r3a-smollm2", "False"]


def test_configs_by_name_or_path_and_a_clear_error(tmp_path):
    from r3edge.core.config import StudentConfig, TeacherConfig, load_yaml
    from r3edge.core.errors import R3EdgeError

    assert load_yaml("r3a-tiny", TeacherConfig).name == "r3a-tiny"
    assert load_yaml(ROOT / "configs" / "student" / "qwen2-tiny.yaml", StudentConfig).name
    with pytest.raises(R3EdgeError) as err:
        load_yaml("r3a-nope", TeacherConfig)
    assert "r3a-nope" in err.value.what and "r3a-smollm2" in err.value.fix
    with pytest.raises(R3EdgeError, match="neither a YAML file"):
        load_yaml(tmp_path / "missing.yaml", StudentConfig)


def test_every_shipped_student_config_loads_under_its_own_name():
    """A shipped student is named by its file (``--student minilm-demo-64``) and every report names it by
    ``name``: the two must agree, and each file must validate."""
    from r3edge.core.config import StudentConfig, load_yaml

    files = sorted((ROOT / "configs" / "student").glob("*.yaml"))
    assert len(files) > 10
    for path in files:
        assert load_yaml(path.stem, StudentConfig).name == path.stem, path


def test_label_and_artifact_manifests_carry_a_checked_format_version(tmp_path):
    from r3edge.core import artifact, labels
    from r3edge.core.errors import ErrorKind, R3EdgeError

    labels.write_manifest(tmp_path, {"complete": False})
    assert labels.read_manifest(tmp_path)["format"] == labels.LABELS_FORMAT
    (tmp_path / labels.MANIFEST).write_text(json.dumps({"format": "r3edge-labels/99", "complete": True}))
    with pytest.raises(R3EdgeError) as err:
        labels.read_manifest(tmp_path)
    assert err.value.kind is ErrorKind.FORMAT and "r3edge-labels/99" in err.value.what

    art = tmp_path / "art"
    art.mkdir()
    artifact.write_manifest(art, {"variants": {"fp32": "model.fp32.onnx"}, "default": "fp32"})
    assert artifact.read_manifest(art)["format"] == artifact.ARTIFACT_FORMAT
    (art / artifact.MANIFEST_FILE).write_text(json.dumps({"variants": {"fp32": "m.onnx"}, "default": "fp32"}))
    with pytest.raises(R3EdgeError, match="has format None") as err:
        artifact.read_manifest(art)
    assert err.value.kind is ErrorKind.FORMAT


def test_every_error_kind_has_one_grpc_status_and_one_http_status():
    import grpc

    from r3edge.core.errors import ErrorKind, InvalidInput, Overloaded
    from r3edge.serve.grpc_api import STATUS_OF, status_of
    from r3edge.serve.http_api import HTTP_STATUS_OF

    assert set(STATUS_OF) == set(ErrorKind) == set(HTTP_STATUS_OF)
    assert HTTP_STATUS_OF[ErrorKind.OVERLOADED] == 429 and HTTP_STATUS_OF[ErrorKind.INVALID_INPUT] == 400
    assert status_of(Overloaded("busy", "retry"))[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    code, message = status_of(InvalidInput("query is empty", "send one", field="query"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message == "query is empty; fix: send one"


def test_an_error_blames_the_caller_only_when_it_says_so():
    """A bare R3EdgeError is r3edge's own failure (INTERNAL, which a client may retry); only an
    explicit InvalidInput answers INVALID_ARGUMENT; a failed parity check is a QUALITY error."""
    import grpc

    from r3edge.core.errors import ErrorKind, InvalidInput, R3EdgeError
    from r3edge.export.parity import AtolError, ParityCheck, ParityError
    from r3edge.serve.grpc_api import status_of

    assert status_of(R3EdgeError("the runtime returned no logits"))[0] == grpc.StatusCode.INTERNAL
    assert status_of(InvalidInput("query is empty"))[0] == grpc.StatusCode.INVALID_ARGUMENT
    err = AtolError("fp32", "max |Δlogit| 0.1 > atol 0.001", "report a bug")
    assert isinstance(err, ParityError) and err.kind is ErrorKind.QUALITY and err.check is ParityCheck.ATOL
    assert "(atol)" in str(err)


def test_the_shipped_serve_yaml_is_generated_from_serve_config():
    """configs/serve/default.yaml restates no default: it is ServeConfig's template, every line a comment."""
    from importlib import resources

    from r3edge.serve.config import ServeConfig

    shipped = (resources.files("r3edge.configs") / "serve" / "default.yaml").read_text()
    assert shipped == ServeConfig.yaml_template(), "regenerate it: python -c 'from r3edge.serve.config import " \
        "ServeConfig; print(ServeConfig.yaml_template(), end=\"\")' > configs/serve/default.yaml"
    assert all(not line or line.startswith("#") for line in shipped.splitlines())
    assert ServeConfig.resolve({"artifact": "a"}, env={}, config_file="default") == ServeConfig(artifact="a")
