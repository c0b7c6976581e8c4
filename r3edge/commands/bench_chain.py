"""The distillation chain in one report: the teachers of a chain config (by their labels), its students (each
artifact served by a child `r3edge serve`), rows measured on another machine (their results.json) and the floors
(first-stage order, BM25, each base encoder by cosine), on one gold-labelled split. Quality: nDCG@10, accuracy,
macro F1, ECE and the ECE after `r3edge calibrate --bias`'s fit on a second split's gold labels. Latency per
request, each row on its own hardware. Writes OUT/results.json, OUT/report.md and OUT/chain.png
(r3edge.benchmarks.chain)."""

from __future__ import annotations

import argparse
import shlex
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="chain config: a YAML path or a shipped name (configs/bench/, e.g. chain-semeval-c)")
    parser.add_argument("--semeval", default=None, metavar="DIR",
                        help="SemEval-2016 CQA folder: evaluate on subtask C dev, calibrate on subtask C train")
    parser.add_argument("--pairs", default=None, help="instead of --semeval: the evaluation split, candidate-list JSONL "
                        "with gold labels")
    parser.add_argument("--fit-pairs", default=None, help="with --pairs: the calibration split (gold labels, other pairs)")
    parser.add_argument("--max-queries", type=int, default=None, help="use only the first N queries of each split")
    parser.add_argument("--threads", type=int, default=None, help="threads of each served student (default: the server's)")
    parser.add_argument("--device", default=None, help="`r3edge serve --device` of the served students (default: its own)")
    parser.add_argument("--out", default="runs/bench-chain", help="output directory")


def _splits(args) -> tuple[list, list | None, str, str | None]:
    from r3edge.core.errors import InvalidInput

    if (args.semeval is None) == (args.pairs is None):
        raise InvalidInput("give exactly one of --semeval or --pairs", "e.g. --semeval ../shared/data/semeval2016-cqa",
                           field="--semeval")
    if args.fit_pairs and not args.pairs:
        raise InvalidInput("--fit-pairs goes with --pairs (--semeval calibrates on subtask C train)",
                           "drop --fit-pairs, or give the evaluation split as --pairs", field="--fit-pairs")
    if args.semeval:
        from r3edge.distill.data.datasets import semeval_queries

        dev = semeval_queries(args.semeval, "C", "dev")[: args.max_queries]
        fit = semeval_queries(args.semeval, "C", "train")[: args.max_queries]
        return dev, fit, "SemEval-2016 CQA subtask C dev", "SemEval-2016 CQA subtask C train (gold)"
    from r3edge.core.pairs import read_queries

    dev = read_queries(args.pairs)[: args.max_queries]
    fit = read_queries(args.fit_pairs)[: args.max_queries] if args.fit_pairs else None
    return dev, fit, str(args.pairs), args.fit_pairs


def _check_inputs(path: str, config) -> None:
    """Every file the config names exists before the first row runs: a missing one is an error naming its field."""
    from pathlib import Path

    from r3edge.core.errors import InvalidInput

    wanted = [(f"teachers[{i}].labels", t.labels, "manifest.json") for i, t in enumerate(config.teachers)]
    wanted += [(f"teachers[{i}].fit_labels", t.fit_labels, "manifest.json") for i, t in enumerate(config.teachers) if t.fit_labels]
    wanted += [(f"students[{i}].artifact", s.artifact, "manifest.json") for i, s in enumerate(config.students)]
    wanted += [(f"imported[{i}].results", m.results, None) for i, m in enumerate(config.imported)]
    for field, where, inside in wanted:
        if not (Path(where) / inside if inside else Path(where)).is_file():
            what = {"manifest.json": "a labels directory or artifact (no manifest.json)", None: "a file"}[inside]
            raise InvalidInput(f"{path}: {field} {where} is not {what}",
                               "build it first (the config's comments give the commands), or move the row to not_run",
                               field=field)


def _command(args) -> str:
    """The command that wrote the report, from its parsed flags (the reproduce line)."""
    parts = ["r3edge", "bench", "chain", args.config]
    for flag, value in (("--semeval", args.semeval), ("--pairs", args.pairs), ("--fit-pairs", args.fit_pairs),
                        ("--max-queries", args.max_queries), ("--threads", args.threads), ("--device", args.device),
                        ("--out", args.out)):
        if value is not None:
            parts += [flag, str(value)]
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    from r3edge.benchmarks import chain
    from r3edge.benchmarks.machine import machine_info
    from r3edge.benchmarks.systems import hardware_axis
    from r3edge.core.config import ChainConfig, StudentConfig, load_yaml
    from r3edge.core.errors import InvalidInput
    from r3edge.core.progress import Progress
    from r3edge.core.scoring import SPEC_DEFAULTS
    from r3edge.distill.data.pooling import bm25_scores
    from r3edge.model.student import base_cosine_scoring

    config = load_yaml(args.config, ChainConfig)
    _check_inputs(args.config, config)
    dev, fit, split, fit_split = _splits(args)
    bases = []  # built first: a config that cannot score fails before the long rows
    for name in config.base_students:
        scoring = base_cosine_scoring(load_yaml(name, StudentConfig))
        if scoring is None:
            raise InvalidInput(f"{args.config}: base_students names {name!r}, which has no pretrained encoder to rank "
                               "by cosine", "name a cosine (biencoder) or encoder student config", field="base_students")
        bases.append(scoring)
    machine = machine_info()
    axis = hardware_axis(machine)
    values = list(SPEC_DEFAULTS["label_values"])
    steps = len(config.teachers) + len(config.students) + len(config.imported) + 1
    progress = Progress(steps, "chain rows", stream=sys.stderr)
    rows = []
    for t in config.teachers:
        rows.append(chain.teacher_row(t.name, t.labels, t.fit_labels if fit is not None else None, dev, fit,
                                      t.hardware, values))
        progress.update(1)
    for s in config.students:
        rows.append(chain.served_row(s.name, s.artifact, s.variant, dev, fit, requests=config.requests, axis=axis,
                                     learnt_from=s.learnt_from, threads=args.threads, device=args.device))
        progress.update(1)
    for imp in config.imported:
        rows.append(chain.imported_row(imp.results, imp.name, imp.learnt_from))
        progress.update(1)
    rows += chain.floor_rows(dev, values, axis=axis, bm25=bm25_scores, base=bases)
    progress.update(1)
    progress.close()
    results = {
        "machine": machine,
        "settings": {"config": config.model_dump(), "title": config.title, "split": split, "fit_split": fit_split,
                     "n_queries": len(dev), "n_pairs": sum(len(q.candidates) for q in dev),
                     "fit_n_pairs": sum(len(q.candidates) for q in fit) if fit is not None else None,
                     "not_run": list(config.not_run), "command": _command(args)},
        "rows": rows,
    }
    paths = chain.write_chain_report(results, args.out)
    print(paths["report"].read_text())
    print(f"wrote {paths['results']}, {paths['report']}, {paths['plot']}")
    return 0
