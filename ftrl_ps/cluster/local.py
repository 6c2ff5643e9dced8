"""The local cluster behind ``ftrl-ps train --workers N``.

:func:`run_cluster` takes a :class:`LocalClusterOptions`, starts M server
shards and N worker processes on 127.0.0.1, shows progress from shard 0's
status, waits for the workers, saves the model from the servers' state,
evaluates it, and stops every process it started: also when one of them fails
(with a message naming it and the tail of its log) or on Ctrl-C. A fresh
random token protects the servers during the run; it is passed through the
environment, never on a command line.

The processes are forked from this one after it has loaded the numba kernels
(see :mod:`ftrl_ps.cluster.launch`), so they start in milliseconds; set
``FTRL_PS_LAUNCH=exec`` to start each as a fresh interpreter instead (the
fallback where there is no ``os.fork``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ftrl_ps.cluster.launch import Launcher, preload
from ftrl_ps.cluster.local_options import LocalClusterOptions
from ftrl_ps.cluster.supervise import Cluster
from ftrl_ps.core.jsonfile import summary_stream, write_json
from ftrl_ps.core.metrics import auc_text
from ftrl_ps.core.modelio import SavedModel, load_model, save_model
from ftrl_ps.core.params import FTRLParams
from ftrl_ps.data.sources import cluster_split, estimate_rows
from ftrl_ps.errors import ConfigError, FTRLPSError, ServerError
from ftrl_ps.learn.logs import say
from ftrl_ps.learn.progress import Progress, report_workers_bad_lines
from ftrl_ps.ps.auth import TOKEN_ENV, resolve_token
from ftrl_ps.ps.export import rows_applied
from ftrl_ps.ps.kernels import load_kernels
from ftrl_ps.ps.layout import DEFAULT_GROUP_SIZE
from ftrl_ps.ps.overview import History, Overview
from ftrl_ps.ps.worker_main import WorkerOptions, params_with_defaults
from ftrl_ps.server.options import DEFAULT_BITS, ShardOptions

__all__ = [
    "LocalClusterOptions", "estimate_rows", "local_batch_size", "run_cluster", "workers_span",
]

log = logging.getLogger("ftrl_ps.cluster")


def _shard_options(opts: LocalClusterOptions, bits: int, dtype: str, index: int,
                   params: FTRLParams, ckpt: Path, warm_rounds: int) -> ShardOptions:
    return ShardOptions(
        bits=bits, dtype=dtype, shard_index=index, num_shards=opts.servers,
        num_workers=opts.workers, worker_timeout=opts.worker_timeout,
        staleness=opts.staleness, init_model=opts.resume, checkpoint_dir=str(ckpt),
        checkpoint_interval=opts.checkpoint_interval, merge_rule=opts.merge_rule,
        warm_rounds=warm_rounds, alpha=params.alpha, beta=params.beta, l1=params.l1,
        l2=params.l2, group_size=opts.group_size or DEFAULT_GROUP_SIZE,
    )


def _worker_options(opts: LocalClusterOptions, urls: list[str], params: FTRLParams,
                    bits: int, index: int, metrics: Path, dtype: str,
                    warm_push_step: int | None = None) -> WorkerOptions:
    return WorkerOptions(
        server=",".join(urls), input=opts.train, worker_index=index,
        num_workers=opts.workers, epochs=opts.epochs, bits=bits,
        batch_size=local_batch_size(opts), fetch_step=opts.fetch_step,
        push_step=opts.push_step, dense_fraction=opts.dense_fraction,
        adaptive_rounds=opts.adaptive_rounds, warm_push_step=warm_push_step,
        chunk_mb=opts.chunk_mb, metrics_json=str(metrics), quiet=True,
        skip_bad_lines=opts.skip_bad_lines, state_dir=str(metrics.parent / "state"),
        retry_seconds=opts.retry_seconds, dtype=dtype, straggle_prob=opts.straggle_prob,
        straggle_delay=opts.straggle_delay, straggle_workers=opts.straggle_workers,
        seed=opts.seed, split=opts.split, unit_mb=opts.unit_mb, alpha=params.alpha,
        beta=params.beta, l1=params.l1, l2=params.l2,
    )


#: seconds between two looks at the processes while the workers run: a worker's
#: end is seen this late at most (each look is a few waitpid calls, ~50 us)
HEAL_INTERVAL = 0.01

#: rounds (pull, train ``fetch_step`` steps, push) each worker should get at least
TARGET_ROUNDS = 20
#: the largest default batch: a round then trains at most 4 x 50,000 rows (a push that
#: would not fit in a shard's body limit is split, ps.pushsize), and the rounds of big
#: inputs stay few
MIN_BATCH, MAX_BATCH = 50, 50000


def local_batch_size(opts: LocalClusterOptions) -> int:
    """``--batch-size``, or by default one that gives each worker about 20 rounds.

    Between two syncs every worker trains ``batch_size x push_step`` rows from
    the same state; fewer, longer rounds are faster but a worker that trains
    its whole share in one or two rounds never sees the others' updates (a9a,
    4 workers, one round each: test logloss 0.39 instead of 0.324). The
    default is ``rows per worker / (20 x fetch_step)``, kept in [50, 50000]
    (with at most 5,000 a 20M-row input made 500 rounds per worker and ran 1.8x
    longer at the same test logloss, with at most 20,000 125 rounds and 1.2x
    longer: benchmarks/RESULTS.md, sessions 4 and 7).
    """
    if opts.batch_size is not None:
        return int(opts.batch_size)
    per_worker = estimate_rows(opts.train) * opts.epochs // max(opts.workers, 1)
    return min(MAX_BATCH, max(MIN_BATCH, per_worker // (TARGET_ROUNDS * opts.fetch_step)))


#: the warm start's rows at most: what it is for (the first moves from the initial
#: model) does not grow with the input, its cost (one worker training alone) does
MAX_WARM_ROWS = 50_000


def local_warm_start(opts: LocalClusterOptions) -> tuple[int, int | None]:
    """The warm start: the servers' warm rounds (1, or 0 without one), and the lone
    worker's steps per push while alone (None: its ``push_step``).

    ``--warm-fraction`` of the input, at most :data:`MAX_WARM_ROWS` rows, in
    whole pushes of ``push_step`` steps (at least one), trained by the lone worker
    in *one* push and one clock tick: the servers' warm start ends at its first
    tick. When the cap is below one push (big inputs: one push is 4 x 50,000
    rows at 20M rows) the lone worker pushes and ticks after
    ``ceil(MAX_WARM_ROWS / batch_size)`` steps instead, so that the others wait
    for 50,000 rows, not 200,000. (Until session 20 a warm start of R pushes was
    R rounds, each with a tick: a lone worker that was slow at every tick held
    the others for R of them; with R = 5 and 0.2 s per tick that doubled the
    pass of issue 12 item 4's straggler run whenever the straggler started first.)
    A lone worker's rounds are one process's training, however it pushes.

    At the default ~20 rounds per worker, 0.05 is about one round per worker. It
    took agaricus's runs worse than one process by more than 0.001 from 17 of 24
    to 2 (2, 4, 8 workers, s = 0 and 3, 4 row orders; docs/algorithm.md, section 13).
    """
    if opts.warm_fraction <= 0:
        return 0, None
    if opts.warm_push_step is not None:  # --warm-push-step given: its pushes, one tick
        return 1, opts.warm_push_step
    wanted = opts.warm_fraction * estimate_rows(opts.train) * opts.epochs
    steps = max(1, math.ceil(min(wanted, MAX_WARM_ROWS) / local_batch_size(opts)))
    if steps < opts.push_step and wanted > MAX_WARM_ROWS:
        return 1, steps  # the cap below one push
    pushes = math.ceil(steps / opts.push_step)
    return 1, (pushes * opts.push_step if pushes > 1 else None)


def _live_line(client: Any, progress: Progress, history: History, cluster: Cluster) -> None:
    """The one line of all workers: rows, rows/s over ~5 s, logloss, clocks, and the
    restarts of workers and of shards (the supervisor's counts, as in --metrics-json)."""
    o = Overview.from_clock(client.status().get("clock"))
    history.sample(o.rows, o.loss_sum)
    counts = cluster.restart_counts()
    restarts = (f"worker restarts {counts['worker_restarts']}  "
                f"shard restarts {counts['shard_restarts']}")
    progress.update(o.rows, o.loss_sum, rate=history.rate(), extra=o.extra(restarts))


def run_cluster(args: LocalClusterOptions) -> int:
    """Run ``ftrl-ps train`` as a local cluster; see the module docstring."""
    if args.train == "-":
        raise ConfigError("--workers needs a training file, not stdin")
    args.check()
    for warning in args.warnings():
        say(log, warning, level=logging.WARNING, prefix="ftrl-ps train: ")
    args = replace(args, split=cluster_split(args.train, args.split, args.workers))
    if args.resume:
        saved = load_model(args.resume)
        bits, dtype, params = saved.bits, saved.dtype, saved.params
    else:
        bits = args.bits if args.bits is not None else DEFAULT_BITS
        dtype = args.dtype or "float32"
        params = params_with_defaults(alpha=args.alpha, beta=args.beta, l1=args.l1, l2=args.l2)
    started = time.perf_counter()
    # --token or $FTRL_PS_TOKEN (so an operator can query the servers), else a fresh one
    token = resolve_token(args.token) or secrets.token_hex(16)
    env = dict(os.environ, **{TOKEN_ENV: token}, PYTHONUNBUFFERED="1")
    def warn(why: str) -> None:  # on a terminal on a line of its own, not after the live line
        progress.close()
        say(log, why, level=logging.WARNING, prefix="ftrl-ps train: ")

    launcher = Launcher(env, warn=warn)
    logdir = Path(tempfile.mkdtemp(prefix="ftrl-ps-cluster-"))  # after the checks above
    cluster = Cluster(logdir, launcher, max_restarts=args.max_restarts)
    progress = Progress(f"cluster ({args.workers} workers)", enabled=not args.quiet)
    ok = False
    try:
        # The batch size and the warm start once (each looks at the input, also a
        # remote one), not once per shard and per worker.
        args = replace(args, batch_size=local_batch_size(args))
        warm_rounds, warm_push_step = local_warm_start(args)
        # The servers go first, before this process has loaded numba (servers
        # do not use it): each imports its web stack on the other core while this
        # process loads the worker kernels once and forks the workers with them
        # (which start parsing their shares and wait for the servers).
        # shard 0 last: its dashboard learns the other shards' URLs (--peers)
        for i in [*range(1, args.servers), 0]:
            peers = ",".join(p.url for p in cluster.servers if p.url) if i == 0 else None
            shard = _shard_options(args, bits, dtype, i, params, logdir / "checkpoints",
                                   warm_rounds)
            cluster.start_server(i, replace(shard, peers=peers))
        cluster.servers.insert(0, cluster.servers.pop())  # back in shard order
        compile_seconds = load_kernels()  # fresh machine: say so, and keep it out of rows/s
        if launcher.method == "fork":
            preload()
        from ftrl_ps.ps.client import PSClient  # before forking: the workers use it too

        urls = [p.url for p in cluster.servers if p.url]
        # always: an operator (or a script) learns here where to query the servers
        say(log, f"servers: {', '.join(urls)}  (logs in {logdir}; "
                 f"dashboard {urls[0]}/dashboard)")
        metrics = [logdir / f"worker-{i}.json" for i in range(args.workers)]
        for i in range(args.workers):
            wopts = _worker_options(args, urls, params, bits, i, metrics[i], dtype,
                                    warm_push_step)
            cluster.start_worker(i, wopts)
        # no threads before this point (forking needs a single-threaded process)
        cluster.wait_servers()  # started meanwhile; a failure to start is reported here
        servers_ready = time.perf_counter() - started
        # the live line must not wait for a restarting shard: no retries
        _wait_for_workers(cluster, lambda: PSClient(urls, token=token, retries=0,
                                                    retry_seconds=0), progress)
        progress.close()
        with PSClient(urls, token=token, retry_seconds=args.retry_seconds) as client:
            keys, n, z = client.dump_state()
            status = client.status()
            shard_counters = [client.status(i).get("counters", {}) for i in range(len(urls))]
            streams = [client.streams(i) for i in range(len(urls))]
        train_seconds = time.perf_counter() - started - compile_seconds
        cluster.stop(discard=True)  # the state is here: no last checkpoint to wait for
        reports = [_read_json(m) for m in metrics]
        rows = sum(int(r.get("rows", 0)) for r in reports)
        loss_sum = sum(float(r.get("loss_sum", 0.0)) for r in reports)
        saved_model = SavedModel(
            bits=bits,
            params=params,
            dtype=dtype,
            keys=np.asarray(keys),
            n=np.asarray(n),
            z=np.asarray(z),
        )
        results = _finish(
            args, saved_model, rows, loss_sum, train_seconds, reports, status, started
        )
        results["shard_keys_pushed"] = [int(sc.get("keys_pushed", 0)) for sc in shard_counters]
        results["shard_keys_pulled"] = [int(sc.get("keys_pulled", 0)) for sc in shard_counters]
        results["cluster_seconds"] = time.perf_counter() - started
        results["compile_seconds"] = compile_seconds
        results["servers_ready_seconds"] = servers_ready
        results["launch"] = {"method": launcher.method, "reason": launcher.reason}
        results.update(cluster.restart_counts())  # restarts, worker_restarts, shard_restarts
        results["restart_events"] = [e.as_dict() for e in cluster.restarts]
        results["shard_streams"] = streams
        results["rows_applied"] = rows_applied(streams)
        write_json(args.metrics_json, results)
        ok = True
        return 0
    finally:
        cluster.stop()
        if ok or not any(logdir.iterdir()):  # success, or failed before any process logged
            shutil.rmtree(logdir, ignore_errors=True)
        elif not args.quiet:
            say(log, f"logs kept in {logdir}")


def _wait_for_workers(cluster: Cluster, connect: Any, progress: Progress) -> None:
    """Heal the cluster (restart dead shards and failed workers) until the workers end;
    the live line's client is made (again) when the shards answer."""
    last_poll, history, client = 0.0, History(maxlen=64), None
    try:
        while cluster.heal():
            now = time.monotonic()
            if progress.enabled and now - last_poll > 0.5:
                last_poll = now
                with contextlib.suppress(FTRLPSError):
                    client = client or connect()
                    _live_line(client, progress, history, cluster)
            time.sleep(HEAL_INTERVAL)
    finally:
        if client is not None:
            client.close()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise ServerError(f"worker report {path} missing or unreadable: {exc}") from exc


def workers_span(reports: list[dict[str, Any]]) -> float | None:
    """Seconds from the first worker's first step to the last worker's end (the
    ``started_at``/``finished_at`` wall clocks of their reports), None without them.

    >>> workers_span([{"started_at": 10.0, "finished_at": 12.5},
    ...               {"started_at": 10.5, "finished_at": 13.0}])
    3.0
    >>> workers_span([{"rows": 5}]) is None
    True
    """
    begun = [float(r["started_at"]) for r in reports if r.get("started_at") is not None]
    ended = [float(r["finished_at"]) for r in reports if r.get("finished_at") is not None]
    if not begun or not ended:
        return None
    return max(max(ended) - min(begun), 0.0)


def _finish(
    args: LocalClusterOptions,
    saved: SavedModel,
    rows: int,
    loss_sum: float,
    seconds: float,
    reports: list[dict[str, Any]],
    status: dict[str, Any],
    started: float,
) -> dict[str, Any]:
    plog = loss_sum / rows if rows else float("nan")
    bad_lines = report_workers_bad_lines(reports)  # skipped (--skip-bad-lines), as one process
    out = summary_stream(args.metrics_json)
    pushed = sum(int(r.get("keys_pushed", 0)) for r in reports)
    pulled = sum(int(r.get("keys_pulled", 0)) for r in reports)
    span = workers_span(reports)
    # the whole run (servers started, state read back) and, comparable with the
    # single process's figure (its training loop), the workers' own span
    during = (f"; the workers trained for {span:.2f} s ({rows / max(span, 1e-9):,.0f} rows/s)"
              if span is not None else "")
    print(
        f"trained {rows:,} rows with {args.workers} workers and {args.servers} server(s) "
        f"in {seconds:.2f} s from launch to state read back "
        f"({rows / max(seconds, 1e-9):,.0f} rows/s){during}; progressive logloss {plog:.5f}",
        file=out,
    )
    snap = status.get("clock") or {}
    results: dict[str, Any] = {
        "rows": rows,
        "train_seconds": seconds,
        "rows_per_second": rows / max(seconds, 1e-9),
        "workers_seconds": span,
        "progressive_logloss": plog,
        "bad_lines": bad_lines,
        "workers": args.workers,
        "servers": args.servers,
        "staleness": args.staleness,
        "split": args.split,
        "max_gap_allowed": snap.get("max_gap_allowed"),
        "warm_start": snap.get("warm_start"),
        "keys_pushed": pushed,
        "keys_pulled": pulled,
        "worker_reports": reports,
        "bits": saved.bits,
        "params": saved.params.as_dict(),
    }
    if args.model:
        path = save_model(
            args.model,
            saved,
            rows=rows,
            epochs=args.epochs,
            train=str(args.train),
            workers=args.workers,
            servers=args.servers,
            progressive_logloss=plog,
            **({"params_from": str(args.params_from)} if args.params_from else {}),
        )
        print(f"model saved to {path} ({saved.keys.size:,} keys with state)", file=out)
        results["saved_seconds"] = time.perf_counter() - started
    if args.test:
        from ftrl_ps.learn.training import evaluate

        ev = evaluate(
            saved.to_ftrl(),
            args.test,
            chunk_bytes=args.chunk_mb << 20,
            skip_bad_lines=args.skip_bad_lines,
        )
        print(
            f"test {args.test}: logloss {ev['logloss']:.5f}  AUC {auc_text(ev['auc'])}  "
            f"rows {ev['rows']:,}  positive rate {ev['positive_rate']:.4f}", file=out
        )
        results.update({f"test_{k}": v for k, v in ev.items()})
    return results
