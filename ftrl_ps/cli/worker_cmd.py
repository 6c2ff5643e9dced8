"""``ftrl-ps worker``: train on a share of a libsvm file against parameter servers."""

from __future__ import annotations

import argparse

from ftrl_ps.cli import _common as c

__all__ = [
    "DESCRIPTION",
    "HELP",
    "NAME",
    "add_arguments",
    "add_cluster_arguments",
    "add_straggle_arguments",
    "run",
]

NAME = "worker"
HELP = "train on a share of libsvm input (or units handed out) against parameter servers"
DESCRIPTION = """\
Run one worker of a parameter-server cluster. Worker i of N reads the i-th
of N line-aligned byte ranges of INPUT, one plain file (no line is lost or
read twice); any other INPUT (a directory or glob of part files, plain or
.gz, a .gz file or an fsspec URL), or any INPUT with --split units, is cut
into small units that shard 0 hands out as the workers ask (faster workers
take more). The worker trains a local FTRL copy
in mini-batches of --batch-size rows (one step = one mini-batch), pulls the
state of the keys it is about to use every --fetch-step steps, pushes its
accumulated n/z deltas every --push-step steps, and then ticks its SSP clock
(which may wait for slower workers).

The servers own the model: the layout (bits, group size, shards), --dtype and
the hyper-parameters come from them; a flag given here must match them.

With --state-dir the worker journals its pushes there: a worker restarted with
the same index and directory replays what the shards lack and resumes after
the rows it already pushed (add --supersede when its predecessor may still be
registered as live). Shard restarts are ridden out for --retry-seconds; a
server that does not answer at start-up is an error at once, unless
--start-timeout gives it time.

--input - reads an unbounded stream from stdin (e.g. 'tail -n +1 -F events.svm |'
or a message-queue consumer writing lines): lines are trained as they
arrive and pushed every --push-step steps and at least every
--push-interval seconds, so a slow stream still publishes. Give the cluster
a staleness that lets a stream run: --staleness inf (with one worker any
staleness works).

example:
  ftrl-ps worker --server http://127.0.0.1:7000 --input train.svm \\
      --worker-index 0 --num-workers 2
  tail -n +1 -F events.svm | ftrl-ps worker --server http://127.0.0.1:7000 --input - \\
      --worker-index 0 --num-workers 1
"""


def _worker_index(text: str) -> int | None:
    if text.strip().lower() == "auto":
        return None
    return c.non_negative_int(text)


def _unit_mb(text: str) -> float:
    from ftrl_ps.data.sources import check_unit_mb
    from ftrl_ps.errors import ConfigError

    value = c.positive_float(text)
    try:
        check_unit_mb(value)  # (a warning for a big one is said when the run starts)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_cluster_arguments(parser: argparse.ArgumentParser, *, local: bool = False) -> None:
    """Batching and communication flags shared by ``worker`` and ``train --workers``
    (``local``: the help as ``train`` says it)."""
    g = parser.add_argument_group("worker communication")
    g.add_argument(
        "--dense-fraction",
        type=c.finite_float,
        default=0.5,
        metavar="F",
        help="a key in at least this share of the rows of a push (and the bias) is "
        "dense, for every merge rule but 'curvature' and 'sum': 'contraction' (the default) "
        "scales its deltas by how much the push's rows contract it, 'threshold' divides them "
        "by the number of workers, 'compose' and 'compose-n' take it as pinned down by the "
        "round (share of a full push's rows), 'compose-late' likewise (share of the push's "
        "own rows); default 0.5",
    )
    g.add_argument(
        "--batch-size",
        type=c.positive_int,
        default=None,
        help="rows per step (default 500; 'train --workers N' picks one that gives each "
        "worker about 20 rounds, within 50..50000). A worker trains batch-size x "
        "push-step rows on state the others have not seen yet; one that does its whole "
        "share in a round or two learns little from the others",
    )
    g.add_argument(
        "--split",
        choices=("auto", "shares", "units"),
        default="auto",
        help="'shares': worker i of N reads the i-th of N byte ranges of one plain file; "
        "'units': the input (also a directory, glob, fsspec URL or .gz parts) is cut into "
        "small line-aligned units that shard 0 hands out as workers ask, so faster "
        "workers take more; each unit is trained exactly once through kill -9 of a "
        "worker or of shard 0 (docs/durability.md, section 4). 'auto' (default): shares "
        "for one plain file, units for anything else",
    )
    g.add_argument(
        "--unit-mb",
        type=_unit_mb,
        default=None,
        metavar="MB",
        help="size of a hand-out unit in MiB, at least 0.0625 (64 KiB); over 64 MiB is "
        "warned about (default: about 16 units per worker, 64 KiB..64 MiB)",
    )
    g.add_argument(
        "--fetch-step",
        type=c.positive_int,
        default=4,
        help="pull fresh state for the next N steps' keys every N steps (default 4)",
    )
    g.add_argument(
        "--push-step",
        type=c.positive_int,
        default=4,
        help="push accumulated deltas and tick the SSP clock every N steps (default 4)",
    )
    g.add_argument(
        "--adaptive-rounds",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a worker that keeps waiting for slower ones at the SSP bound makes its "
        "rounds (fetch-step and push-step) up to 16x longer, so it ticks at their pace "
        "and trains instead of waiting; the rounds shrink back when the waits stop "
        "(default: on at a staleness of 1 or more, off at 0 and inf; see "
        "docs/algorithm.md)",
    )
    g.add_argument(
        "--warm-push-step",
        type=c.positive_int,
        default=None,
        metavar="N",
        help=(
            "the warm start's lone worker pushes every N steps instead of --push-step; "
            "the warm start ends at its first tick, after max(N, --push-step) steps "
            "(default: from --warm-fraction: its rows in one push; needs a warm start)"
        ) if local else (
            "while this worker trains alone at the start (the servers' --warm-rounds), "
            "push and tick every N steps instead of --push-step: fewer for a warm start "
            "shorter than one push, more to train it in one push and one tick (default: "
            "--push-step)"
        ),
    )


def _worker_list(text: str) -> str:
    from ftrl_ps.errors import ConfigError
    from ftrl_ps.ps.straggle import parse_worker_list

    try:
        parse_worker_list(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _straggle_delay(text: str) -> float:
    from ftrl_ps.ps.straggle import MAX_DELAY

    value = c.non_negative_float(text)
    if value > MAX_DELAY:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_DELAY:g} seconds, got {text!r}")
    return value


def _probability(text: str) -> float:
    value = c.finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a probability in [0, 1], got {text!r}")
    return value


def add_straggle_arguments(parser: argparse.ArgumentParser) -> None:
    """Fault injection for experiments, shared by ``worker`` and ``train --workers``."""
    g = parser.add_argument_group(
        "fault injection (experiment tooling: makes workers straggle on purpose)"
    )
    g.add_argument("--straggle-prob", type=_probability, default=0.0, metavar="P",
                   help="before each clock tick a chosen worker sleeps with probability P "
                   "(default 0: never; give --straggle-delay too)")
    g.add_argument("--straggle-delay", type=_straggle_delay, default=0.0,
                   metavar="SECONDS", help="how long a straggling worker sleeps, at most 3600 "
                   "(default 0)")
    g.add_argument("--straggle-workers", type=_worker_list, default=None, metavar="I,J,...",
                   help="the worker indices that may straggle, each below the number of "
                   "workers (default: all)")
    g.add_argument("--seed", type=c.non_negative_int, default=0,
                   help="seed (>= 0) of the straggling draws, combined with the worker index: "
                   "each worker's sequence of sleep-or-not decisions, tick after tick, is "
                   "the same in every run; the number of ticks depends on timing (adaptive "
                   "rounds, the warm start), so a run's sleeps repeat exactly only with "
                   "--no-adaptive-rounds and no warm start (train: --warm-fraction 0; "
                   "servers: --warm-rounds 0) (default 0)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    c.add_server_arguments(parser)
    parser.add_argument("--input", required=True, metavar="INPUT",
                        help="training data (libsvm): a file, a directory or glob of part "
                        "files (plain or .gz; a directory's files whose names start with '.' "
                        "or '_' are skipped, symlinked sub-directories not followed), an "
                        "fsspec URL (s3://..., gs://..., file://...), or '-' for an unbounded "
                        "stream on stdin (read as it comes: not with --split units)")
    parser.add_argument(
        "--worker-index",
        type=_worker_index,
        required=True,
        metavar="I|auto",
        help="this worker's index, 0-based; 'auto': the server assigns the lowest free one "
        "(never registered, or its worker was marked dead), e.g. for replicated containers",
    )
    parser.add_argument(
        "--num-workers", type=c.positive_int, required=True, help="how many workers share INPUT"
    )
    c.add_start_timeout_argument(parser, "INPUT")
    parser.add_argument("--epochs", type=c.positive_int, default=1, help="passes over the share")
    parser.add_argument(
        "--metrics-json", metavar="FILE", help="write this worker's report as JSON ('-' = stdout)"
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    parser.add_argument(
        "--push-interval",
        type=c.positive_float,
        default=0.5,
        metavar="SECONDS",
        help="--input - (a stream): also push at least this often while something learned "
        "is unpushed (default 0.5)",
    )
    g = parser.add_argument_group("durability")
    g.add_argument("--state-dir", metavar="DIR", default=None,
                   help="keep the push journal here (worker-INDEX.journal) so that a restarted "
                        "worker replays and resumes (default: in memory only)")
    g.add_argument("--retry-seconds", type=c.finite_float, default=120.0, metavar="SECONDS",
                   help="once the worker has reached its servers, keep retrying an "
                        "unreachable shard this long, e.g. while it restarts (default 120; "
                        "at start-up --start-timeout applies)")
    g.add_argument("--supersede", action="store_true",
                   help="take over this index from a registered worker known to be gone")
    g.add_argument("--identity", metavar="NAME", default=None,
                   help="a name unique to this worker's slot and kept across its restarts, "
                   "e.g. 'hostname' (this host's name: a container's is unique and survives "
                   "container restarts): with --worker-index auto a restarted worker takes "
                   "back its index at once, superseding its previous process (default: none)")
    add_cluster_arguments(parser)
    add_straggle_arguments(parser)
    c.add_model_arguments(parser, resumable=False)
    c.add_input_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from ftrl_ps.ps.worker_main import WorkerOptions, run_worker

    c.check_outputs((args.metrics_json, "--metrics-json"))
    with c.sigterm_as_interrupt():  # `kill PID`: it leaves the cluster, as for Ctrl-C
        run_worker(c.options_from(WorkerOptions, args))
    return 0
