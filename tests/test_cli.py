"""The CLI: every stage is there, every option is described, and --help stays cheap."""

from __future__ import annotations

import subprocess
import sys

import pytest

from r3edge.cli import COMMANDS, build_parser, main


def _subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices


def test_every_stage_of_the_design_is_a_subcommand():
    # one subcommand per stage (docs/ARCHITECTURE.md, "Stages"); written out here, not derived from COMMANDS
    assert set(_subparsers()) == {"pairs", "label", "teacher", "train", "eval", "calibrate", "export", "serve", "rerank",
                                  "bench", "fidelity", "demo"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_has_help(name, capsys):
    sub = _subparsers()[name]
    for action in sub._actions:
        if action.dest != "help":
            assert action.help and action.help.strip(), f"r3edge {name}: {action.dest} has no help text"
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: r3edge {name}")


def test_help_imports_no_heavy_stage_code():
    code = "import sys; from r3edge.cli import build_parser; build_parser(); " \
           "print(sorted(m for m in ('torch', 'transformers', 'onnxruntime', 'grpc') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_missing_extra_names_the_pip_install():
    from r3edge.core.errors import MissingExtraError, require

    with pytest.raises(MissingExtraError) as err:
        require("r3edge_no_such_module", "serve")
    assert "r3edge_no_such_module" in err.value.what
    assert "pip install 'r3edge[serve]'" in err.value.fix and "torch==2.13.0" in err.value.fix


@pytest.mark.parametrize("flag, n", [("--train-queries", 21), ("--sft-queries", 21), ("--heldout-queries", 11),
                                     ("--train-queries", 0)])
def test_demo_refuses_splits_that_would_share_a_query_text(flag, n, tmp_path, capsys):
    # the generator's query i is topic i % 10 in phrasing (i // 10) % 3 and the held-back requests are queries
    # 20-29: a 21st training or cold-start query would be query 20's text, an 11th held-back one query 0's.
    # Refused before any stage writes a file (the missing cold-start config stops a run that got past the
    # check at its second stage, after the pairs are written)
    assert main(["demo", "--out", str(tmp_path / "demo"), flag, str(n), "--sft", str(tmp_path / "no-such-sft.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {n} must be" in err and "held-back" in err
    assert not (tmp_path / "demo").exists()
