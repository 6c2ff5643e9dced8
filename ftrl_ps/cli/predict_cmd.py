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

--output is written whole or not at all: to a temporary file beside it, renamed
over it at the end (a failed or interrupted run leaves an old file as it was;
INPUT or MODEL as the output is refused: it would be replaced). With
--skip-bad-lines a malformed line has no output line, so later lines no longer
match INPUT's line by line: the command says so, with the first skipped lines.

example:
  ftrl-ps predict model.ftrl data/test.svm -o preds.txt
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="a model file written by 'ftrl-ps train'")
    parser.add_argument("input", metavar="INPUT", help="libsvm file to score ('-' = stdin)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write here instead of stdout ('-' = stdout)")
    c.add_input_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from ftrl_ps.core.modelio import load_model
    from ftrl_ps.core.outfile import replacing
    from ftrl_ps.learn.progress import report_bad_lines
    from ftrl_ps.learn.training import predict
    from ftrl_ps.ps.kernels import load_kernels

    c.check_model(args.model)
    c.check_input(args.input)
    to_file = args.output not in (None, "-")
    c.check_outputs((args.output, "--output"),
                    inputs=((args.input, "the input"), (args.model, "the model")))
    load_kernels()  # on a fresh machine: compile every kernel now, once, and say so
    model = load_model(args.model).to_ftrl()
    kw = {"chunk_bytes": args.chunk_mb << 20, "skip_bad_lines": args.skip_bad_lines}
    if to_file:
        with replacing(args.output) as out:
            stats = predict(model, args.input, out, **kw)
        print(f"wrote {stats.rows:,} predictions to {args.output}", file=sys.stderr)
    else:
        stats = predict(model, args.input, sys.stdout, **kw)
    if stats.bad_lines:
        report_bad_lines(stats.bad_lines, stats.bad_examples)
        print(f"warning: the {stats.bad_lines:,} skipped line(s) have no prediction: from "
              f"the first one on, output lines do not match input lines", file=sys.stderr)
    return 0
