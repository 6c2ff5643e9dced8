"""``ftrl-ps train``: train a model on a libsvm file, evaluate it, save it."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import TYPE_CHECKING

from ftrl_ps.cli import _common as c
from ftrl_ps.core.jsonfile import summary_stream, write_json
from ftrl_ps.core.metrics import auc_text
from ftrl_ps.errors import ConfigError, DataError
from ftrl_ps.learn.progress import Progress, report_bad_lines
from ftrl_ps.ps.auth import TOKEN_ENV

__all__ = [
    "DESCRIPTION",
    "HELP",
    "NAME",
    "add_arguments",
    "add_local_cluster_arguments",
    "apply_params_from",
    "build_model",
    "run",
]

log = logging.getLogger("ftrl_ps.cli.train")

if TYPE_CHECKING:
    from ftrl_ps.core.ftrl import FTRL

# numba-backed modules (ftrl, train) are imported where used: the local cluster
# launcher forks its servers before it loads them (see ftrl_ps.cluster.local)

NAME = "train"
HELP = "train a model on a libsvm file (one process, or a local cluster with --workers)"
DESCRIPTION = """\
Train a sparse logistic-regression model with FTRL-Proximal on libsvm data
(`label idx:val ...`; labels -1/+1 or 0/1): a file (.gz is fine), a directory
or glob of part files, an fsspec URL (s3://..., gs://..., file://...; the
protocol's fsspec backend installed), or `-` for stdin. A directory is read
whole, its files in sorted order, also in sub-directories, except those whose
name (or folder's) starts with `.` or `_` (_SUCCESS, .crc, _tmp/); every other
file is data (a README stops the run); symlinked sub-directories are not
followed (symlinked files are). --test takes the same forms.

While it trains it shows progressive-validation log loss (each row is scored
before the model learns from it, as Vowpal Wabbit reports it) and rows/s on
stderr. At the end it prints the training summary, the test log loss and AUC
(with --test), and saves the model (with --model).

With --workers N the servers and workers are forked from this process (the
workers after it has loaded the numba kernels once), so they start at once;
set the environment variable FTRL_PS_LAUNCH=exec to start each of them as a
fresh Python interpreter instead.

examples:
  ftrl-ps train data/train.svm --test data/test.svm --model model.ftrl
  ftrl-ps train data/train.svm --bits 24 --l1 2 --epochs 2 --model model.ftrl
  ftrl-ps train data/train.svm --params-from tuned.ftrl --workers 4 --model model.ftrl
  zcat big.svm.gz | ftrl-ps train - --model model.ftrl
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("train", metavar="TRAIN", help="training data (libsvm): a file, "
                        "directory, glob or fsspec URL; '-' = stdin")
    parser.add_argument(
        "--test", metavar="TEST", help="evaluate on this libsvm data after training (a "
        "file, directory, glob or URL, as TRAIN)"
    )
    parser.add_argument(
        "--epochs", type=c.positive_int, default=None,
        help="passes over TRAIN (default 1, or the passes of --params-from)",
    )
    parser.add_argument("--model", metavar="OUT", help="save the trained model here (atomic write)")
    parser.add_argument(
        "--metrics-json", metavar="FILE", help="also write the results as JSON ('-' = stdout)"
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    c.add_model_arguments(parser, params_from=True)
    c.add_input_arguments(parser)
    add_local_cluster_arguments(parser)


def add_local_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "local cluster (with --workers N >= 1: servers and workers as processes on 127.0.0.1)"
    )
    g.add_argument(
        "--workers",
        type=c.non_negative_int,
        default=0,
        help="worker processes; 0 (default) trains in this process",
    )
    g.add_argument(
        "--servers", type=c.positive_int, default=1, help="parameter-server shards (default 1)"
    )
    g.add_argument(
        "--staleness",
        type=c.staleness_arg,
        default=3,
        metavar="S",
        help="SSP bound: 0 = BSP lockstep, N = at most N clocks ahead of the slowest live "
        "worker, inf = fully asynchronous (default 3)",
    )
    g.add_argument(
        "--group-size", type=c.positive_int, default=None, help="keys per lock-striped group"
    )
    from ftrl_ps.ps.merge import DEFAULT_RULE, RULES

    g.add_argument(
        "--merge-rule",
        choices=RULES,
        default=DEFAULT_RULE,
        help="how the servers merge the workers' deltas (docs/algorithm.md): 'contraction' "
        "(default) scales the keys in at least --dense-fraction of a push's rows and the "
        "bias between their mean over the workers and their sum, by how much the push's rows "
        "contract them, and sums the others; 'threshold' averages those keys; 'compose', "
        "'compose-late', 'compose-n' and 'curvature' "
        "compose concurrent pushes, 'sum' adds them: kept for experiments "
        "(benchmarks/bench_merge.py)",
    )
    g.add_argument(
        "--warm-fraction",
        type=c.finite_float,
        default=0.05,
        metavar="F",
        help="warm start: one worker trains about this share of the input alone (at most "
        "50,000 rows, in whole rounds, at least one) before the others begin, so that the "
        "first, largest moves "
        "from the initial model are made once, not by every worker (docs/algorithm.md, "
        "section 13; its pushes are merged as one worker's); 0 = none (default 0.05)",
    )
    g.add_argument(
        "--worker-timeout",
        type=c.positive_float,
        default=30.0,
        metavar="SECONDS",
        help="a worker silent this long is marked dead (default 30)",
    )
    g.add_argument(
        "--max-restarts",
        type=c.non_negative_int,
        default=3,
        metavar="N",
        help="restart a shard that dies (from its checkpoint) or a worker that fails (from "
        "its last pushed row) at most N times in all, then fail (default 3)",
    )
    g.add_argument(
        "--checkpoint-interval",
        type=c.positive_float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between the shards' checkpoints (default 10)",
    )
    g.add_argument(
        "--retry-seconds",
        type=c.positive_float,
        default=120.0,
        metavar="SECONDS",
        help="how long workers wait for a restarting shard (default 120)",
    )
    g.add_argument(
        "--token",
        default=None,
        help=f"bearer token of the servers, so that you can query them during the run "
        f"(default: ${TOKEN_ENV}, else a random one)",
    )
    from ftrl_ps.cli.worker_cmd import add_cluster_arguments, add_straggle_arguments

    add_cluster_arguments(parser, local=True)
    add_straggle_arguments(parser)


def build_model(args: argparse.Namespace) -> FTRL:
    """A fresh model from the flags, or the --resume model (flags must agree with it)."""
    from ftrl_ps.core.ftrl import FTRL
    from ftrl_ps.core.modelio import load_model

    if args.resume:
        saved = load_model(args.resume)
        explicit = {
            k: getattr(args, k)
            for k in ("bits", "dtype", "alpha", "beta", "l1", "l2")
            if getattr(args, k) is not None
        }
        have = {"bits": saved.bits, "dtype": saved.dtype, **saved.params.as_dict()}
        clash = {k: v for k, v in explicit.items() if have[k] != v}
        if clash:
            pairs = ", ".join(f"--{k} {v} (model has {have[k]})" for k, v in clash.items())
            raise ConfigError(f"--resume {args.resume}: flags disagree with the model: {pairs}")
        return saved.to_ftrl()
    bits = args.bits if args.bits is not None else c.DEFAULT_BITS
    return FTRL(bits, c.params_from(args), dtype=args.dtype or "float32")


#: titles of the argument groups that only a local cluster uses
CLUSTER_GROUPS = ("local cluster", "worker communication", "fault injection")


def cluster_flags_given(args: argparse.Namespace) -> list[str]:
    """The local-cluster flags set to something other than their defaults."""
    given = []
    for group in args._parser._action_groups:
        if (group.title or "").startswith(CLUSTER_GROUPS):
            given += [a.option_strings[0] for a in group._group_actions
                      if a.option_strings and getattr(args, a.dest, a.default) != a.default]
    return given


def apply_params_from(args: argparse.Namespace) -> None:
    """Fill the hyper-parameters, passes, bits and dtype not given from ``--params-from``."""
    if args.params_from:
        if args.resume:
            raise ConfigError("--params-from and --resume exclude each other: a resumed "
                              "model keeps its own settings")
        from ftrl_ps.learn.tune import tuned_settings

        tuned = tuned_settings(args.params_from)
        given = {**tuned.params.as_dict(), "epochs": tuned.epochs, "bits": tuned.bits,
                 "dtype": tuned.dtype}
        for name, value in given.items():
            if getattr(args, name, None) is None:
                setattr(args, name, value)
    if args.epochs is None:
        args.epochs = 1


def _passes(epochs: int) -> str:
    """How a summary tells the rows of several passes (their total, not per pass).

    >>> _passes(1), _passes(2)
    ('', ' (2 passes of the input)')
    """
    return "" if epochs == 1 else f" ({epochs} passes of the input)"


def run(args: argparse.Namespace) -> int:
    with c.sigterm_as_interrupt():  # `kill PID`: 'interrupted', exit 130, as for Ctrl-C
        return _run(args)  # (a local cluster's children are stopped then)


def _run(args: argparse.Namespace) -> int:
    for flag, path in (("--resume", args.resume), ("--params-from", args.params_from)):
        if path:
            c.check_model(path, f"{flag} model")
    c.check_input(args.train, "training data")
    if args.test:
        c.check_input(args.test, "test data")
        if args.test == "-" == args.train:
            raise ConfigError("TRAIN and --test cannot both be stdin ('-')")
    c.check_outputs((args.model, "--model"), (args.metrics_json, "--metrics-json"),
                    inputs=((args.train, "the training data"), (args.test, "the test data")))
    apply_params_from(args)
    ignored = [] if getattr(args, "workers", 0) else cluster_flags_given(args)
    if ignored:
        log.warning("%s: for a local cluster only (--workers N); one process ignores %s",
                    ", ".join(ignored), "it" if len(ignored) == 1 else "them")
    if getattr(args, "workers", 0):
        from ftrl_ps.cluster.local import LocalClusterOptions, run_cluster

        return run_cluster(c.options_from(LocalClusterOptions, args))
    from ftrl_ps.core.memory import populate_async
    from ftrl_ps.core.modelio import SavedModel, save_model
    from ftrl_ps.learn.training import evaluate, train
    from ftrl_ps.ps.kernels import load_kernels, warm_training

    load_kernels()  # compile (fresh machine) before the clock of rows/s starts
    model = build_model(args)
    populate_async(model.state)  # a fresh state's pages are faulted in beside the start-up
    warm_training(model.dtype)  # and, meanwhile, the kernels are loaded before the file opens
    chunk = args.chunk_mb << 20
    progress = Progress("train", enabled=not args.quiet)
    report = train(
        model,
        args.train,
        epochs=args.epochs,
        chunk_bytes=chunk,
        skip_bad_lines=args.skip_bad_lines,
        progress=progress,
    )
    report_bad_lines(report.bad_lines, report.bad_examples)
    if not report.rows:  # nothing learned: no model to save, no metric to give
        raise DataError(f"{args.train}: no rows to train on"
                        + (" (every line was skipped)" if report.bad_lines else ""))
    out = summary_stream(args.metrics_json)
    print(
        f"trained {report.rows:,} rows{_passes(report.epochs)} in {report.seconds:.2f} s "
        f"({report.rows_per_second:,.0f} rows/s); progressive logloss "
        f"{report.progressive_logloss:.5f}",
        file=out,
    )
    results: dict[str, object] = {
        "rows": report.rows,
        "epochs": report.epochs,
        "train_seconds": report.seconds,
        "rows_per_second": report.rows_per_second,
        "progressive_logloss": report.progressive_logloss,
        "bad_lines": report.bad_lines,
        "bits": model.bits,
        "params": model.params.as_dict(),
    }
    # the keys with state, found once (a pass over all 2**bits keys): for the count of
    # non-zero weights and for the model file
    keys, n, z, results["nonzero_weights"] = model.touched_state()
    if args.model:  # saved first: a bad --test file must not cost the training
        t_save = time.perf_counter()
        saved = SavedModel.from_ftrl(model, touched=(keys, n, z))
        path = save_model(
            args.model,
            saved,
            rows=report.rows,
            epochs=report.epochs,
            train=str(args.train),
            progressive_logloss=report.progressive_logloss,
            **({"params_from": str(args.params_from)} if args.params_from else {}),
        )
        results["save_seconds"] = time.perf_counter() - t_save
        print(f"model saved to {path} ({saved.keys.size:,} keys with state)", file=out)
    if args.test:
        ev = evaluate(model, args.test, chunk_bytes=chunk, skip_bad_lines=args.skip_bad_lines)
        print(
            f"test {args.test}: logloss {ev['logloss']:.5f}  AUC {auc_text(ev['auc'])}  "
            f"rows {ev['rows']:,}  positive rate {ev['positive_rate']:.4f}",
            file=out,
        )
        results.update({f"test_{k}": v for k, v in ev.items()})
    write_json(args.metrics_json, results)
    sys.stdout.flush()
    return 0
