"""One module per CLI subcommand: ``configure(parser)`` and ``run(args) -> int``; and the help
formatter every subcommand's parser uses."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` to a flag's help only where it tells something: not for a default of
    ``None`` (the flag is simply unset, and its help says what then happens), and not where the help
    already names its default in words ("(default: the config's)"), which argparse would follow with a
    contradicting "(default: None)"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        if action.default is None or "(default" in help_text:
            return help_text
        return super()._get_help_string(action)
