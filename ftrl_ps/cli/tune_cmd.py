"""``ftrl-ps tune``: search FTRL settings on a training file and save the best model."""

from __future__ import annotations

import argparse

from ftrl_ps.cli import _common as c
from ftrl_ps.core.params import DTYPES

__all__ = ["DESCRIPTION", "HELP", "NAME", "add_arguments", "run"]

NAME = "tune"
HELP = "search alpha, beta, l1, l2 and the passes on TRAIN alone; save the best model"
DESCRIPTION = """\
Search the FTRL-Proximal hyper-parameters (alpha, beta, l1, l2) and the number
of passes for TRAIN, using TRAIN alone: no test data is read. TRAIN is parsed
once into memory; every candidate setting is trained in the same passes over
it by a kernel that updates all of them at once.

Validation: every 5th row of TRAIN (with --holdout 0.2) is held back and only
scored; the others train, in file order. With --validation tail the last 20 %
of the rows are held back instead (for time-ordered logs). After each pass each
candidate's log loss on the held-back rows is recorded; the best (setting,
passes) wins. The candidates are the defaults plus a Halton sequence over
log-ranges of alpha (0.01-20), l2 (0.001-30), l1 (0.001-3) and beta (0.1-10);
successive halving gives the better half more passes (1, 2, 4, ... up to
--max-epochs).

--budget N lets the whole run cost at most N default 'ftrl-ps train TRAIN'
runs (counted with a fixed cost model, so the same data and budget always give
the same search); it decides how many settings start and how many passes the
best get.

It prints the table of settings and held-out losses, then trains a new model
on ALL rows of TRAIN with the winner and saves it to OUT; the model header
records the chosen settings. With --metrics-json - the table and the summary
go to stderr, so stdout is the JSON alone (as for train).

Memory: TRAIN's rows are held in memory, about 8 bytes per feature (7.4 GB of
generated text took 7.2 GB). For a larger file, --max-rows N searches on the
first N rows only (the budget then counts default runs on those rows); the
model is still trained on all of TRAIN, read as 'ftrl-ps train' reads it.

'ftrl-ps train TRAIN --params-from OUT' (also with --workers N) trains with the
chosen settings again.

examples:
  ftrl-ps tune data/train.svm --model tuned.ftrl
  ftrl-ps eval tuned.ftrl data/test.svm
  ftrl-ps tune big.svm --model tuned.ftrl --budget 16 --max-epochs 4 --validation tail
  ftrl-ps tune huge.svm --model tuned.ftrl --max-rows 5000000
  ftrl-ps train big.svm --params-from tuned.ftrl --workers 4 --model cluster.ftrl
"""


def _holdout(text: str) -> float:
    value = c.finite_float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("train", metavar="TRAIN", help="training data (libsvm): a file, folder, "
                        "glob or URL of parts, as for train; not stdin")
    parser.add_argument("--model", metavar="OUT", required=True,
                        help="save the model trained with the best settings here")
    g = parser.add_argument_group("search")
    g.add_argument("--budget", type=c.positive_float, default=8.0, metavar="N",
                   help="cost at most N default training runs on TRAIN (default 8)")
    g.add_argument("--max-epochs", type=c.positive_int, default=16, metavar="E",
                   help="at most this many passes over TRAIN (default 16)")
    g.add_argument("--holdout", type=_holdout, default=0.2, metavar="SHARE",
                   help="share of TRAIN's rows held back for scoring (default 0.2)")
    g.add_argument("--validation", choices=("every", "tail"), default="every",
                   help="hold back every k-th row (default) or the last rows (time order)")
    g.add_argument("--max-rows", type=c.positive_int, default=None, metavar="N",
                   help="search on the first N rows of TRAIN only (default: all); the "
                   "model is then trained on all of TRAIN, streamed")
    g.add_argument("--threads", type=c.positive_int, default=1,
                   help="train the settings in this many groups side by side (default 1; "
                   "the same result; on a 2-vCPU machine 2 threads were slower)")
    m = parser.add_argument_group("model")
    m.add_argument("--bits", type=c.bits_arg, default=None,
                   help=f"feature space of 2**BITS slots plus a bias (default {c.DEFAULT_BITS})")
    m.add_argument("--dtype", choices=DTYPES, help="storage type of the saved model's n/z "
                   "(default float32)")
    parser.add_argument("--metrics-json", metavar="FILE",
                        help="also write the table and the choice as JSON ('-' = stdout)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    c.add_input_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from ftrl_ps.learn.tune import TuneOptions, run_tune
    from ftrl_ps.ps.kernels import load_kernels

    c.check_input(args.train, "training data")
    c.check_outputs((args.model, "--model"), (args.metrics_json, "--metrics-json"),
                    inputs=((args.train, "the training data"),))
    options = c.options_from(TuneOptions, args)
    load_kernels()  # a fresh machine compiles here, once, and says so
    return run_tune(options)
