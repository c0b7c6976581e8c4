"""The docs match the code: the README's quickstart runs as written, every `r3edge` command the docs
show takes the flags they give it, and every file they cite exists."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, free_port

README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
QUICKSTART = re.compile(r"<!-- quickstart -->(.*?)<!-- /quickstart -->", re.S)
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)
PORTS = ("50051", "8080")  # the quickstart's gRPC and HTTP ports, replaced by free ones


def quickstart_blocks() -> list[tuple[str, str]]:
    """The (language, code) fences between the README's quickstart markers."""
    found = QUICKSTART.findall(README.read_text(encoding="utf-8"))
    assert len(found) == 1, "README.md needs one <!-- quickstart --> ... <!-- /quickstart --> section"
    blocks = FENCE.findall(found[0])
    assert blocks, "the quickstart section holds no code block"
    return blocks


def shell_commands(code: str) -> list[str]:
    """One string per command of a bash block: comments dropped, backslash continuations joined."""
    commands, current = [], ""
    for line in code.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip().removesuffix("\\") + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            commands.append(current.strip())
            current = ""
    return commands


def test_readme_is_a_landing_page():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines: move detail into docs/ and link it"


@pytest.mark.slow
def test_readme_quickstart_runs_as_written(tiny_artifact, tmp_path):
    """Each quickstart command runs for real, in a directory laid out as `make demo` leaves it (the demo
    artifact is the session's tiny one); only the ports are replaced."""
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    (tmp_path / "runs" / "demo" / "artifact").symlink_to(tiny_artifact)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    ports = {p: str(free_port()) for p in PORTS}

    def localise(text: str) -> str:
        return re.sub("|".join(PORTS), lambda m: ports[m.group(0)], text)

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    log = tmp_path / "background.log"  # what the commands started with `&` print (a file: a pipe could fill)
    background, ran = [], []
    with log.open("w") as log_file:
        try:
            for lang, code in quickstart_blocks():
                if lang == "python":
                    steps = [[".venv/bin/python", "-c", localise(code)]]
                else:
                    assert lang in ("bash", "sh"), f"quickstart block in {lang!r}: only bash and python run"
                    steps = [["bash", "-c", localise(cmd)] for cmd in shell_commands(code)]
                for argv in steps:
                    if argv[-1].endswith("&"):
                        argv[-1] = argv[-1].removesuffix("&")
                        background.append(subprocess.Popen(argv, cwd=tmp_path, env=env, start_new_session=True,
                                                           stdout=log_file, stderr=subprocess.STDOUT))
                        continue
                    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
                    ran.append(argv[-1])
                    assert done.returncode == 0, (f"{argv[-1]}\nexit {done.returncode}\n{done.stdout}{done.stderr}"
                                                  f"\nbackground:\n{log.read_text()}")
                    check_output(argv[-1], done.stdout)
        finally:
            for proc in background:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
    assert background and ran, "the quickstart starts a server and sends it requests"
    assert all(proc.returncode == 0 for proc in background), log.read_text()


def check_output(command: str, out: str) -> None:
    """What a quickstart command must print besides exiting 0: curl's reranks answer with results."""
    assert out.strip(), f"{command} printed nothing"
    if command.startswith("curl") and "/rerank" in command:
        body = json.loads(out)
        assert body.get("results"), f"{command} answered {body}"
        wanted = re.search(r'"top_n":\s*(\d+)', command)
        assert not wanted or len(body["results"]) == int(wanted.group(1)), body


COMMAND = re.compile(r"(?<![\w.-])r3edge(?=\s|$)(.*)")


def shown_commands() -> list[tuple[str, str]]:
    """(where, text) of each `r3edge ...` the docs show: code-block commands and inline code spans."""
    shown = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for _, code in FENCE.findall(text):
            shown += [(doc.name, cmd) for cmd in shell_commands(code) if COMMAND.search(cmd)]
        prose = FENCE.sub("", text)
        shown += [(doc.name, span) for span in re.findall(r"`([^`\n]+)`", prose) if COMMAND.search(span)]
    # serving.md's settings table: the flags in each row's first cell are `r3edge serve`'s
    serving = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    shown += [("serving.md", "r3edge serve " + cell) for cell in re.findall(r"^\| *(`--[^|]*)\|", serving, re.M)]
    return shown


def test_every_r3edge_command_in_the_docs_takes_the_flags_shown():
    """`r3edge serve --device` was documented for months and never existed: each flag the docs give a
    command must be one of that command's (or its parent's) options."""
    import argparse

    from r3edge.cli import build_parser

    top, wrong = build_parser(), []
    for where, text in shown_commands():
        tokens = COMMAND.search(text).group(1).split()
        parser, options, path = top, set(), ["r3edge"]
        while True:
            options |= set(parser._option_string_actions)
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if not (tokens and subs and tokens[0] in subs[0].choices):
                break
            path.append(tokens[0])
            parser = subs[0].choices[tokens.pop(0)]
        for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", re.split(r"&&|;|\s\|\s", " ".join(tokens))[0]):
            if flag not in options:
                wrong.append(f"{where}: `{text}`: {flag} is not an option of {' '.join(path)}")
    assert not wrong, "\n".join(wrong)


def test_every_cited_file_exists():
    """Results are cited by their folder under benchmarks/results/, code by its path, and guides link each
    other: each must exist (distill/ was just split into rooms; a moved file leaves no stale path here)."""
    missing = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for path in re.findall(r"\]\(([^)#\s]+)", text):
            if not path.startswith(("http://", "https://", "mailto:")) and not (doc.parent / path).exists():
                missing.append(f"{doc.name}: link {path}")
        for path in re.findall(r"(?<![\w/])benchmarks/(?:results|scripts)/[\w.-]+(?:/[\w.-]+)*", text):
            if not (ROOT / path).exists():
                missing.append(f"{doc.name}: {path}")
        for path in re.findall(r"`((?:distill|serve|export|r3edge|configs|tests|benchmarks|docs)/[^`<\s]+)`", text):
            if not any(ROOT.glob(path)):  # a file, a folder, or a glob such as configs/student/*.yaml
                missing.append(f"{doc.name}: {path}")
    assert not missing, "\n".join(missing)


def test_the_results_index_lists_every_results_folder_and_only_those():
    """benchmarks/results/README.md is where a reader finds a run: a folder committed without its row is lost to
    them, and a row whose folder is gone points nowhere."""
    results = ROOT / "benchmarks" / "results"
    index = (results / "README.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([\w.-]+)/` \|", index, re.M))
    folders = {p.name for p in results.iterdir() if p.is_dir()}
    assert not folders - rows, f"benchmarks/results/README.md has no row for {sorted(folders - rows)}"
    assert not rows - folders, f"benchmarks/results/README.md lists missing folders {sorted(rows - folders)}"


STAGE_DIRS = {"distill": "distill", "serve": "serve", "export": "export", "benchmarks": "benchmarks", "configs": "configs"}


def module_file(parts: list[str]) -> Path | None:
    """The file or package folder of a dotted ``r3edge`` module path, or None."""
    base = ROOT / STAGE_DIRS[parts[1]] if len(parts) > 1 and parts[1] in STAGE_DIRS else ROOT / "r3edge" / "/".join(parts[1:2])
    path = base.joinpath(*parts[2:]) if len(parts) > 2 else base
    for found in (path.with_suffix(".py"), path / "__init__.py", path):
        if found.exists():
            return found
    return None


def test_every_cited_python_name_exists():
    """`r3edge.serve.server.STATUS_OF` was cited after the table had moved to grpc_api.py: each dotted
    `r3edge.…` name the docs give is a module, or a name defined in its module (read, not imported)."""
    missing = []
    for doc in DOCS:
        for dotted in sorted(set(re.findall(r"`(r3edge(?:\.\w+)+)", doc.read_text(encoding="utf-8")))):
            parts = dotted.split(".")
            if parts[1] == "v1":  # the .proto's package, not a Python module
                continue
            cut = next((i for i in range(len(parts), 0, -1) if module_file(parts[:i])), 0)
            source = module_file(parts[:cut]) if cut else None
            names = parts[cut:]
            text = source.read_text(encoding="utf-8") if source and source.is_file() else ""
            if not source or any(not re.search(rf"^\s*(?:def|class)\s+{n}\b|^{n}\s*[:=]", text, re.M) for n in names):
                missing.append(f"{doc.name}: {dotted}")
    assert not missing, "\n".join(missing)
