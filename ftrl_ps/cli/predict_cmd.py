"""``ftrl-ps predict``: one probability per input row."""

from __future__ import annotations

import argparse
import sys

from ftrl_ps.cli import _common as c

__all__ = ["DESCRIPTION", "HELP", "NAME", "add_arguments", "run"]

NAME = "predict"
HELP = "write P(click) for every row of a libsvm file, one per line"
DESCRIPTION = """\
Score every row of INPUT with MODEL and write one probability per line (to
stdout, or to --output). Labels in INPUT are required by the libsvm format but
ignored.

example:
  ftrl-ps predict model.ftrl data/test.svm -o preds.txt
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="a model file written by 'ftrl-ps train'")
    parser.add_argument("input", metavar="INPUT", help="libsvm file to score ('-' = stdin)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    c.add_input_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from ftrl_ps.core.modelio import load_model
    from ftrl_ps.learn.training import predict
    from ftrl_ps.ps.kernels import load_kernels

    c.check_input(args.input)
    load_kernels()  # on a fresh machine: compile every kernel now, once, and say so
    model = load_model(args.model).to_ftrl()
    kw = {"chunk_bytes": args.chunk_mb << 20, "skip_bad_lines": args.skip_bad_lines}
    if args.output:
        with open(args.output, "w") as out:
            rows = predict(model, args.input, out, **kw)
        print(f"wrote {rows:,} predictions to {args.output}", file=sys.stderr)
    else:
        predict(model, args.input, sys.stdout, **kw)
    return 0
