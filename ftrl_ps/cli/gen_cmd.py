"""``ftrl-ps gen``: write a seeded synthetic CTR data set (see :mod:`ftrl_ps.data.synth`)."""

from __future__ import annotations

import argparse

from ftrl_ps.cli._common import options_from

__all__ = ["DESCRIPTION", "HELP", "NAME", "add_arguments", "run"]

NAME = "gen"
HELP = "generate a synthetic Criteo-like CTR data set with a known true model"
DESCRIPTION = """\
Write OUTDIR/train.svm, OUTDIR/test.svm (libsvm, labels 1/0, indices ascending
and < 2**bits) and OUTDIR/truth.json (the true sparse logistic model, the
Bayes-optimal test logloss and the true model's test AUC).

By default a row has 39 fields: 13 numeric count fields (slots 0-12, value
log1p(count), zeros omitted) and 26 categorical fields with power-law
distributions (cardinalities 10 .. 10**6) one-hot hashed into [13, 2**bits).
Labels are Bernoulli(sigmoid(bias + w.x)); the bias is calibrated to the
requested positive rate. The same seed always gives byte-identical files, and
a smaller --rows gives a prefix of a larger one.

example:
  ftrl-ps gen data/synth --rows 1000000 --test-rows 100000 --seed 0 --bits 22
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("outdir", metavar="OUTDIR", help="output folder (created if missing)")
    parser.add_argument("--rows", type=int, default=1_000_000,
                        help="training rows (default: %(default)s)")
    parser.add_argument("--test-rows", type=int, default=100_000,
                        help="test rows (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    parser.add_argument("--bits", type=int, default=22,
                        help="hash space is 2**BITS slots, 8..30 (default: %(default)s)")
    parser.add_argument("--fields", type=int, default=39,
                        help="fields per row; a third are numeric (default: %(default)s)")
    parser.add_argument("--positive-rate", type=float, default=0.2,
                        help="expected share of positive labels, 0.01..0.99 (default: %(default)s)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress lines on stderr")


def run(args: argparse.Namespace) -> int:
    from ftrl_ps.data.gen import GenOptions, run_gen
    from ftrl_ps.ps.kernels import load_kernels

    load_kernels()  # on a fresh machine: compile every kernel now, once, and say so
    run_gen(options_from(GenOptions, args))
    return 0
