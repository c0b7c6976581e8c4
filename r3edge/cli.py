"""The ``r3edge`` command: one subcommand per stage.

Each subcommand lives in ``r3edge/commands/<name>.py`` with ``configure(parser)`` (cheap, no heavy
imports, so ``--help`` is instant) and ``run(args) -> int`` (imports what the stage needs).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from r3edge.commands import HelpFormatter
from r3edge.commands.bench import TOOLS as BENCH_TOOLS
from r3edge.core.errors import R3EdgeError
from r3edge.core.version import __version__

COMMANDS = {
    "pairs": "write pairs: the embedded demo (UGC-style, graded 0/1/2), BM25 + run + click pools from a corpus, or "
             "a Parquet, datasets, BEIR or MS MARCO source converted (--from)",
    "label": "label pairs with a teacher judge (R³A two-round by default) into Parquet shards",
    "teacher": "train the teacher judge itself: `teacher sft` (cold start on traces in its judge's format) "
               "or `teacher grpo` (reinforcement on gold pairs with R³A's or Retro*'s reward)",
    "train": "distil teacher labels into a student (causal LM, cross-encoder or cosine bi-encoder) on their label distribution",
    "eval": "score labelled pairs with a student, an artifact or a server and report accuracy",
    "calibrate": "fit a temperature (and, with --bias, a per-label bias) on held-out gold labels into a scorer.json",
    "export": "export a student to an artifact (ONNX / OpenVINO variants, each checked against PyTorch) or another engine's format",
    "serve": "serve an artifact over gRPC (Rerank, ScorePairs, ModelInfo, health, reflection) and, with "
             "--http-port, Cohere-compatible HTTP (/v1/rerank, /v2/rerank), on one engine",
    "rerank": "send one rerank request to a running server and print the top-k",
    "bench": "benchmark judges, served students and floors on the same requests (latency, throughput, accuracy; "
             "a report and a plot), or run a tool: " + ", ".join(BENCH_TOOLS),
    "fidelity": "measure on SemEval-2016 CQA how the teacher ranks and how closely each student follows it (results.json, report, plot)",
    "demo": "run the whole chain on the embedded demo data and write its report (runs/demo/report.md by default)",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="r3edge",
        description="Turn a slow reasoning LLM relevance judge into a fast reranker: "
        "pairs -> label -> train -> export -> serve -> bench.",
    )
    parser.add_argument("--version", action="version", version=f"r3edge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<stage>", required=True)
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"r3edge.commands.{name}")
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip(),
                           formatter_class=HelpFormatter)
        module.configure(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._module.run(args) or 0)
    except R3EdgeError as exc:
        print(f"r3edge {args.command}: error: {exc.what}", file=sys.stderr)
        if exc.fix:
            print(f"  fix: {exc.fix}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"r3edge {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
