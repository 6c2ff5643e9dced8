"""``ftrl-ps eval``: log loss and AUC of a saved model on a libsvm file."""

from __future__ import annotations

import argparse
import sys

from ftrl_ps.cli import _common as c
from ftrl_ps.core.jsonfile import summary_stream, write_json
from ftrl_ps.core.metrics import auc_text
from ftrl_ps.errors import DataError

__all__ = ["DESCRIPTION", "HELP", "NAME", "add_arguments", "run"]

NAME = "eval"
HELP = "evaluate a saved model on libsvm data (log loss, AUC)"
DESCRIPTION = """\
Score every row of TEST with MODEL and print log loss, ROC AUC, the row count
and the positive rate.

example:
  ftrl-ps eval model.ftrl data/test.svm
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="a model file written by 'ftrl-ps train'")
    parser.add_argument("test", metavar="TEST", help="libsvm data to score: a file (.gz is "
                        "fine), a directory or glob of part files, an fsspec URL, or '-' = "
                        "stdin")
    parser.add_argument(
        "--json", metavar="FILE", help="also write the results as JSON ('-' = stdout)"
    )
    c.add_input_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from ftrl_ps.core.modelio import load_model
    from ftrl_ps.learn.training import evaluate
    from ftrl_ps.ps.kernels import load_kernels

    c.check_model(args.model)
    c.check_input(args.test, "test data")
    c.check_outputs((args.json, "--json"),
                    inputs=((args.test, "the test data"), (args.model, "the model")))
    load_kernels()  # on a fresh machine: compile every kernel now, once, and say so
    model = load_model(args.model).to_ftrl()
    ev = evaluate(
        model, args.test, chunk_bytes=args.chunk_mb << 20, skip_bad_lines=args.skip_bad_lines
    )
    if ev["bad_lines"]:
        print(f"skipped {ev['bad_lines']:,} malformed line(s)", file=sys.stderr)
    if not ev["rows"]:
        raise DataError(f"{args.test}: no rows to evaluate")
    print(
        f"logloss {ev['logloss']:.5f}  AUC {auc_text(ev['auc'])}  rows {ev['rows']:,}  "
        f"positive rate {ev['positive_rate']:.4f}",
        file=summary_stream(args.json),
    )
    write_json(args.json, ev)
    return 0
