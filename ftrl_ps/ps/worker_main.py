"""One worker process from typed options: connect, register, train its share, report.

``ftrl-ps worker``, ``python -m services.worker`` and the local cluster all
build a :class:`WorkerOptions` and call :func:`run_worker`. The training loop
itself is :class:`ftrl_ps.ps.worker.Worker`. With ``start_timeout`` the worker
first waits for its servers and its input file (:mod:`ftrl_ps.ps.waiting`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field, replace
from typing import Any

from ftrl_ps.core.jsonfile import write_json
from ftrl_ps.core.params import DTYPES, FTRLParams, check_bits
from ftrl_ps.errors import ConfigError
from ftrl_ps.learn.progress import report_bad_lines
from ftrl_ps.ps.auth import resolve_token
from ftrl_ps.ps.option_groups import InputFields, ModelFields, TrainingFields
from ftrl_ps.ps.straggle import Straggler
from ftrl_ps.ps.waiting import wait_to_start

__all__ = ["WorkerOptions", "adopt_model", "check_against_servers", "final_line",
           "finished_indices", "model_params", "params_with_defaults", "parse_urls",
           "run_worker", "worker_config"]

log = logging.getLogger("ftrl_ps.worker")


def parse_urls(text: str) -> list[str]:
    """Shard URLs from ``URL[,URL...]`` in shard order.

    >>> parse_urls(" http://a:1, http://b:2 ,")
    ['http://a:1', 'http://b:2']
    """
    urls = [u.strip() for u in text.split(",") if u.strip()]
    if not urls:
        raise ConfigError("no server URL given")
    return urls


def params_with_defaults(**given: float | None) -> FTRLParams:
    """:class:`FTRLParams` from the values given (None = the default)."""
    defaults = FTRLParams().as_dict()
    return FTRLParams(**{**defaults, **{k: v for k, v in given.items() if v is not None}})


@dataclass(frozen=True)
class WorkerOptions(TrainingFields, InputFields, ModelFields):
    """Everything ``ftrl-ps worker`` is told; field names are the flags' names (the
    model, input and training flags: :mod:`ftrl_ps.ps.option_groups`).

    ``worker_index`` None means ``auto`` (the servers assign the lowest free
    index); ``batch_size`` None means 500; ``bits`` None means the servers'.
    ``start_timeout`` > 0: wait that long for the servers and the input file.
    """

    server: str
    input: str
    num_workers: int
    worker_index: int | None = None
    start_timeout: float = 0.0
    token: str | None = field(default=None, repr=False)
    epochs: int = 1
    metrics_json: str | None = None
    quiet: bool = False
    #: ``--input -`` (a stream): push at least this often (seconds)
    push_interval: float = 0.5
    state_dir: str | None = None
    supersede: bool = False
    #: a stable name of this worker's slot ("hostname": the host's name), see identity_of
    identity: str | None = None

    def resolved(self) -> WorkerOptions:
        """These options with ``split="auto"`` decided for the input as it is now."""
        from ftrl_ps.data.sources import split_for

        return self if self.split != "auto" else replace(self, split=split_for(self.input))

    def check(self) -> None:
        """Raise :class:`ConfigError` for options that cannot work."""
        if self.num_workers >= 1:  # (else refused below)
            self.check_training(self.num_workers)
        if self.split not in ("auto", "units", "shares"):
            raise ConfigError(f"split must be 'auto', 'units' or 'shares', got {self.split!r}")
        if self.split == "shares":  # a directory, glob, URL or .gz file: refused now
            from ftrl_ps.data.sources import check_shares

            check_shares(self.input)
        if self.input == "-":
            if self.split == "units":
                raise ConfigError("--input - (a stream) is read as it comes, not handed out "
                                  "in units: drop --split units")
            if self.epochs != 1:
                raise ConfigError("--input - (a stream) is read once: --epochs must be 1")
            if not self.push_interval > 0:
                raise ConfigError(f"--push-interval must be > 0, got {self.push_interval}")
        elif self.start_timeout == 0 and self.resolved().split == "units":
            from ftrl_ps.data.sources import expand

            expand(self.input)  # a file, directory, glob or fsspec URL with files
        elif self.start_timeout == 0 and not os.path.isfile(self.input):
            hint = ("" if self.split == "auto" else " ('--split shares' reads byte ranges of "
                    "one plain file; --split auto or units takes a directory, glob or URL)")
            raise ConfigError(f"input file not found: {self.input}{hint}")
        if self.start_timeout < 0:
            raise ConfigError(f"start_timeout must be >= 0, got {self.start_timeout}")
        if self.num_workers < 1:
            raise ConfigError(f"num_workers must be >= 1, got {self.num_workers}")
        if self.worker_index is not None and not 0 <= self.worker_index < self.num_workers:
            raise ConfigError(
                f"--worker-index {self.worker_index} must be in [0, {self.num_workers})"
            )
        if self.retry_seconds < 0:
            raise ConfigError(f"--retry-seconds must be >= 0, got {self.retry_seconds}")
        if self.identity is not None and not 0 < len(self.identity.strip()) <= 200:
            raise ConfigError("--identity must be 1 to 200 characters")
        self._check_ranges()

    def _check_ranges(self) -> None:
        """Values the command line's flag types check, checked here for the services'
        env too: before any wait for the servers, not after it."""
        if not 1 <= self.chunk_mb <= 1024:
            raise ConfigError(f"--chunk-mb must be in [1, 1024] (MiB), got {self.chunk_mb}")
        worker_config(self)  # batch size, steps, epochs, dense fraction
        params_with_defaults(alpha=self.alpha, beta=self.beta, l1=self.l1, l2=self.l2)
        if self.bits is not None:
            check_bits(self.bits)
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ConfigError(f"--dtype must be one of {DTYPES}, got {self.dtype!r}")

    def identity_of(self) -> str | None:
        """The identity sent at registration: ``hostname`` stands for this host's
        name (a container's, unique per container and kept across its restarts).

        >>> WorkerOptions("u", "f", 1, identity="w-7").identity_of()
        'w-7'
        """
        if self.identity is None:
            return None
        name = self.identity.strip()
        return socket.gethostname() if name == "hostname" else name


def adopt_model(options: WorkerOptions, model: dict[str, Any]) -> dict[str, Any]:
    """The servers' model settings (``/v1/status`` ``model``), checked against the
    worker's explicit flags: a flag that differs is a ConfigError.

    >>> m = {"bits": 20, "dtype": "float32", "params": {"alpha": 0.1, "beta": 1.0,
    ...      "l1": 1.0, "l2": 1.0}}
    >>> adopt_model(WorkerOptions("u", "f", 1, alpha=0.1), m)["params"]["alpha"]
    0.1
    """
    given = {"bits": options.bits, "dtype": options.dtype, "alpha": options.alpha,
             "beta": options.beta, "l1": options.l1, "l2": options.l2}
    return check_against_servers(given, model)


def check_against_servers(given: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """``model`` (the servers' ``/v1/status`` ``model``), if every flag in ``given``
    that is not None equals it; else a ConfigError naming the flags that differ."""
    held = {"bits": model["bits"], "dtype": model["dtype"], **model["params"]}
    clash = [f"--{k.replace('_', '-')} {v} (the servers have {held[k]})"
             for k, v in given.items() if v is not None and v != held[k]]
    if clash:
        raise ConfigError(
            "the servers own the model; " + ", ".join(clash)
            + " differ: drop these flags or restart the servers with them"
        )
    return model


def worker_config(options: WorkerOptions) -> Any:
    """The :class:`~ftrl_ps.ps.worker.WorkerConfig` of the options."""
    from ftrl_ps.ps.worker import WorkerConfig

    return WorkerConfig(
        batch_size=options.batch_size if options.batch_size is not None
        else WorkerConfig.batch_size,
        fetch_step=options.fetch_step,
        push_step=options.push_step,
        epochs=options.epochs,
        chunk_bytes=options.chunk_mb << 20,
        skip_bad_lines=options.skip_bad_lines,
        num_workers=options.num_workers,
        dense_fraction=options.dense_fraction,
        adaptive_rounds=options.adaptive_rounds,
        warm_push_step=options.warm_push_step,
    )


def _train_units(worker: Any, client: Any, index: int, options: WorkerOptions) -> None:
    """Load the plan of units into shard 0 and train units until none is left."""
    from ftrl_ps.ps.handout import WorkClient, plan, train_units

    units, plan_id = plan(options.input, options.num_workers, options.epochs,
                          None if options.unit_mb is None else int(options.unit_mb * (1 << 20)))
    work = WorkClient(client)
    work.load(units, plan_id)
    started = time.perf_counter()
    train_units(worker, work, index)
    worker.report.seconds = time.perf_counter() - started


def _warm_start_turn(client: Any, worker: Any, settings: dict[str, Any]) -> None:
    """Wait for this worker's turn in the servers' warm start (one worker trains
    alone first); the one that trains alone makes its first ``warm_rounds - clock``
    pushes as the only worker pushing."""
    if client.wait_turn():
        worker.alone_until = max(0, int(settings["warm_rounds"]) - client.worker_clock)


def run_worker(options: WorkerOptions) -> dict[str, Any]:
    """Train this worker's share against the servers (or, with ``input == "-"``, the
    stream on stdin: :mod:`ftrl_ps.ps.stream_worker`); its report (also written to
    ``metrics_json``)."""
    from ftrl_ps.ps.kernels import load_kernels

    options.check()
    for warning in options.warnings():
        log.warning("%s", warning)
    load_kernels()  # a fresh machine compiles here, once, and says so
    who = "worker" if options.worker_index is None else f"worker {options.worker_index}"
    wait_to_start(parse_urls(options.server), [options.input], timeout=options.start_timeout,
                  who=who)  # (stdin and a URL count as there: opened when read)
    options = options.resolved()  # "auto" decided on the input there now
    if options.input == "-":
        from ftrl_ps.ps.stream_worker import run_stream_worker

        streamed = run_stream_worker(options)
        report_bad_lines(streamed["bad_lines"], streamed.pop("bad_examples"))
        write_json(options.metrics_json, streamed)
        return streamed
    try:
        return _train_share(options)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (docker stop, a pod deleted)
        log.warning("stopped: this worker left the cluster%s; started again with the same "
                    "flags (its --state-dir too, if it has one) it resumes after the rows it "
                    "pushed", " and the other workers take over the units it held"
                    if options.split == "units" else "")
        raise


def _train_share(options: WorkerOptions) -> dict[str, Any]:
    """:func:`run_worker` for a file input: register, train, finish; the report."""
    from ftrl_ps.ps.client import PSClient
    from ftrl_ps.ps.layout import Layout
    from ftrl_ps.ps.shares import read_share, share_of
    from ftrl_ps.ps.worker import Worker

    urls = parse_urls(options.server)
    cfg = worker_config(options)
    index_wanted = options.worker_index
    started = None
    if options.split == "shares" and index_wanted is not None and options.bits is not None:
        # parse the first chunks while the servers start up / answer
        started = read_share(options.input, share_of(options.input, index_wanted,
                                                     options.num_workers), options.bits, cfg)
    # units: shard 0 hands a dead worker's units on after its last push there
    with PSClient(urls, token=resolve_token(options.token), state_dir=options.state_dir,
                  retry_seconds=options.retry_seconds,
                  commit_on_shard0=options.split == "units") as client:
        params = model_params(options, client.server_model)
        server_layout = client.layout
        layout = Layout(
            bits=options.bits if options.bits is not None else server_layout.bits,
            group_size=server_layout.group_size,
            num_shards=len(urls),
        )
        clock_status = client.status().get("clock") or {}
        finished = finished_indices(clock_status)
        # an auto index: the one this identity held (a container killed right after it
        # finished comes back with the same hostname), else any free one
        mine = (index_wanted if index_wanted is not None
                else _identity_index(clock_status, options.identity_of()))
        if (mine in finished if mine is not None else len(finished) >= options.num_workers):
            log.warning(
                "worker %s: the servers say this share was already trained (a restarted "
                "worker that had finished, or a run restored from its checkpoints); nothing "
                "to do. For a new run, start the servers on an empty --checkpoint-dir",
                "auto" if mine is None else mine)
            result: dict[str, Any] = {"worker_index": index_wanted, "rows": 0,
                                      "already_finished": True}
            write_json(options.metrics_json, result)
            return result
        client.register(index_wanted, options.num_workers, layout, supersede=options.supersede,
                        identity=options.identity_of())
        index = client.worker_index if client.worker_index is not None else index_wanted
        assert index is not None
        client.start_heartbeat()
        settings = client.server_settings
        straggle = options.straggle()
        worker = Worker(client, layout.bits, params, cfg,
                        Straggler(straggle, index) if straggle.enabled else None)
        if settings.get("warm_rounds"):
            worker.first_pull_gate = lambda: _warm_start_turn(client, worker, settings)
        resumed, loss_sum = client.resume_point()
        counted = resumed  # rows of an earlier process in the report (journal: loss known)
        if resumed:
            worker.resume(resumed, loss_sum)
            log.info("worker %d: resuming after %s rows already pushed", index, f"{resumed:,}")
        elif client.shards_position:  # no journal here: the shards' records agree
            resumed = client.shards_position
            worker.resume(resumed, None)  # (not in the report: their loss is unknown)
            log.info("worker %d: resuming after %s rows already pushed (the shards' records; "
                     "no journal here)", index, f"{resumed:,}")
        began = time.time()
        if options.split == "units":  # the work queue knows what is left: skip nothing
            worker.skip_rows = 0
            _train_units(worker, client, index, options)
            report = worker.report
        else:
            byte_range = share_of(options.input, index, options.num_workers)
            if index != index_wanted or resumed:
                started = None  # not the share begun above, or read again and skipped
            report = worker.run(options.input, byte_range, started=started)
        ended = time.time()
        worker.pass_gate()  # (a share with no rows: its turn still taken, as before)
        client.finish(worker.stats())  # the last push had no tick: its progress goes here
    report_bad_lines(report.bad_lines, report.bad_examples)
    if not options.quiet:
        log.info("%s", final_line(index, options.num_workers, report, counted, resumed))
    result = {
        "worker_index": index,
        "rows": report.rows,
        "loss_sum": report.loss_sum,
        "seconds": report.seconds,
        "pushes": report.pushes,
        "pulls": report.pulls,
        "keys_pushed": report.keys_pushed,
        "keys_pulled": report.keys_pulled,
        "bad_lines": report.bad_lines,
        "bad_examples": report.bad_examples[:10],  # (line or "part:line", token, reason)
        "wait_seconds": report.wait_seconds,
        "idle_seconds": report.idle_seconds,  # for want of units others held (--split units)
        "straggle_seconds": report.straggle_seconds,
        "straggles": report.straggles,
        "pushes_alone": report.pushes_alone,
        "started_at": began,  # wall clock (epoch seconds) of the first and the last step
        "finished_at": ended,
        "resumed_rows": resumed,
        "stream_totals": [[c, f"{d:016x}"] for c, d in client.stream_totals()],
        # rows trained over time: [wall clock, rows] at round starts and step ends
        "timeline": [[round(p["t"] or 0.0, 4), p["rows"]] for p in worker.timeline.points()],
    }
    write_json(options.metrics_json, result)
    return result


def final_line(index: int, num_workers: int, report: Any, counted: int, resumed: int) -> str:
    """The line a worker logs at its end: its rows, loss and traffic, and the seconds it
    waited idle for work units other workers held (``--split units``), if any.

    >>> from ftrl_ps.ps.worker import WorkerReport
    >>> r = WorkerReport(rows=1000, seconds=2.0, loss_sum=400.0, pushes=3, pulls=3,
    ...                  keys_pushed=900, keys_pulled=950, idle_seconds=1.34)
    >>> final_line(1, 2, r, 0, 0)
    'worker 1/2: 1,000 rows in 2.00 s, progressive logloss 0.40000, 3 pushes (900 keys), \
3 pulls (950 keys), idle 1.3 s for units others held'
    """
    return (
        f"worker {index}/{num_workers}: {report.rows - counted:,} rows in {report.seconds:.2f} s"
        + (f" (after {resumed:,} rows an earlier process pushed)" if resumed else "")
        + f", progressive logloss {report.progressive_logloss:.5f}"
        + (f" (over the index's {report.rows:,} rows)" if counted else "")
        + f", {report.pushes} pushes ({report.keys_pushed:,} keys), {report.pulls} pulls "
        f"({report.keys_pulled:,} keys)"
        + (f", idle {report.idle_seconds:.1f} s for units others held"
           if report.idle_seconds >= 0.05 else ""))


def finished_indices(clock: dict[str, Any]) -> set[int]:
    """Worker indices whose newest registration has finished (``/v1/status`` clock)."""
    latest: dict[int, dict[str, Any]] = {}
    for w in clock.get("workers", []):
        if w["index"] not in latest or w["worker_id"] > latest[w["index"]]["worker_id"]:
            latest[w["index"]] = w
    return {i for i, w in latest.items() if w.get("state") == "finished"}


def _identity_index(clock: dict[str, Any], identity: str | None) -> int | None:
    """The index of the newest registration made with ``identity`` (None: none)."""
    held = [w for w in clock.get("workers", []) if identity and w.get("identity") == identity]
    return max(held, key=lambda w: w["worker_id"])["index"] if held else None


def model_params(options: WorkerOptions, model: dict[str, Any] | None) -> FTRLParams:
    """The servers' hyper-parameters (checked against the flags), or for servers that
    do not report them, the flags'."""
    if model is not None:
        return FTRLParams(**adopt_model(options, model)["params"])
    return params_with_defaults(alpha=options.alpha, beta=options.beta, l1=options.l1,
                                l2=options.l2)
