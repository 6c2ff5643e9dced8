"""Export the model held by running servers: wait for the workers, read every
shard's state, write a model file, optionally evaluate it.

``ftrl-ps export`` and ``python -m services.export`` build an
:class:`ExportOptions` and call :func:`run_export`.

With ``wait`` the export waits until every configured worker index has
finished its share (:mod:`ftrl_ps.ps.completion`). A run in which some never
registered, or died and were not replaced, is *incomplete*: the export says
so on stderr and keeps waiting for them (a restarted worker takes over a
dead one's index) until ``timeout``, then fails with
:class:`~ftrl_ps.errors.IncompleteRunError`; ``allow_incomplete`` exports
what there is instead, with a warning and ``"complete": false`` in the
results and the model file.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ftrl_ps.core.jsonfile import write_json
from ftrl_ps.core.metrics import auc_text
from ftrl_ps.errors import ClockTimeoutError, ConfigError, IncompleteRunError
from ftrl_ps.learn.logs import say
from ftrl_ps.ps.auth import resolve_token
from ftrl_ps.ps.completion import RunProgress
from ftrl_ps.ps.option_groups import InputFields, ModelFields
from ftrl_ps.ps.waiting import wait_to_start
from ftrl_ps.ps.worker_main import WorkerOptions, adopt_model, params_with_defaults, parse_urls

log = logging.getLogger(__name__)

__all__ = ["ExportOptions", "lacking_pushes", "latest_registrations", "rows_applied",
           "run_export"]

#: seconds between two progress lines while waiting for the workers
_REPORT_EVERY = 10.0


@dataclass(frozen=True)
class ExportOptions(InputFields, ModelFields):
    """Everything ``ftrl-ps export`` is told; field names are the flags' names (the
    model and input flags: :mod:`ftrl_ps.ps.option_groups`)."""

    server: str
    model: str
    token: str | None = field(default=None, repr=False)
    test: str | None = None
    wait: bool = False
    timeout: float = 86400.0
    allow_incomplete: bool = False
    start_timeout: float = 0.0
    metrics_json: str | None = None
    quiet: bool = False


def rows_applied(streams: list[list[dict[str, Any]]]) -> int:
    """Input rows whose updates the shards applied: per worker index, the position
    of its last push applied (the furthest shard), summed.

    >>> rows_applied([[{"worker": 0, "position": 5}], [{"worker": 0, "position": 7},
    ...                                               {"worker": 1, "position": 3}]])
    10
    """
    best: dict[int, int] = {}
    for shard in streams:
        for rec in shard:
            best[rec["worker"]] = max(best.get(rec["worker"], 0), int(rec["position"]))
    return sum(best.values())


def lacking_pushes(workers: list[dict[str, Any]],
                   streams: list[list[dict[str, Any]]]) -> dict[int, list[int]]:
    """Per shard, the finished worker indices whose pushes it lacks: a shard that
    lost them after the worker finished (restarted without its checkpoint, or the
    checkpoint's volume lost), which no worker is left to replay.

    A finished registration says (``sent_to``) the last seq it sent to each shard,
    and every shard held those in a checkpoint when it finished; without it (an
    older worker) shard 0, which gets a part of every push, must be at least as far
    as any other shard.

    >>> lacking_pushes([{"index": 0, "worker_id": 5, "state": "finished", "sent_to": [9, 8]}],
    ...                [[{"worker": 0, "last_seq": 9}], []])
    {1: [0]}
    """
    seqs = [{int(r["worker"]): int(r["last_seq"]) for r in shard} for shard in streams]
    out: dict[int, list[int]] = {}
    for w in latest_registrations(workers):
        if w.get("state") != "finished":
            continue
        index, sent = w["index"], w.get("sent_to")
        if sent is None or len(sent) != len(seqs):  # shard 0 must hold the most
            sent = [max(s.get(index, 0) for s in seqs)] + [0] * (len(seqs) - 1)
        for shard, have in enumerate(seqs):
            if have.get(index, 0) < sent[shard]:
                out.setdefault(shard, []).append(index)
    return out


def latest_registrations(workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per worker index, its newest registration (the one whose state counts).

    >>> ws = [{"index": 0, "worker_id": 5}, {"index": 0, "worker_id": 9},
    ...       {"index": 1, "worker_id": 6}]
    >>> [w["worker_id"] for w in latest_registrations(ws)]
    [9, 6]
    """
    latest: dict[int, dict[str, Any]] = {}
    for w in workers:
        old = latest.get(w["index"])
        if old is None or w["worker_id"] > old["worker_id"]:
            latest[w["index"]] = w
    return [latest[i] for i in sorted(latest)]


def _server_params(client: Any, options: ExportOptions) -> Any:
    """The servers' hyper-parameters; export flags that differ are a ConfigError."""
    from ftrl_ps.core.params import FTRLParams

    model = client.server_model
    if model is None:  # servers of an older version: the flags say
        return params_with_defaults(alpha=options.alpha, beta=options.beta, l1=options.l1,
                                    l2=options.l2)
    flags = WorkerOptions(server="", input="", num_workers=1, bits=options.bits,
                          dtype=options.dtype, alpha=options.alpha, beta=options.beta,
                          l1=options.l1, l2=options.l2)
    return FTRLParams(**adopt_model(flags, model)["params"])


def run_export(options: ExportOptions) -> dict[str, Any]:
    """Save the servers' model (after the workers, with ``wait``); the results."""
    from ftrl_ps.core.modelio import SavedModel, save_model
    from ftrl_ps.data.sources import expand
    from ftrl_ps.learn.training import evaluate
    from ftrl_ps.ps.client import PSClient

    if options.start_timeout < 0 or options.timeout < 0:
        raise ConfigError("start_timeout and timeout must be >= 0")
    urls = parse_urls(options.server)
    # a wrong URL fails now, not after the client's retry_seconds
    wait_to_start(urls, [options.test] if options.test else [],
                  timeout=options.start_timeout, who="export")
    if options.test:  # a file, directory, glob or fsspec URL, as train --test and eval
        expand(options.test)  # ConfigError naming it when nothing matches
    with PSClient(urls, token=resolve_token(options.token)) as client:
        layout = client.layout
        params = _server_params(client, options)
        waited = _wait_for_workers(client, options) if options.wait else None
        keys, n, z = client.dump_state()
        status = client.status()
        snap = status.get("clock") or {}
        streams = [client.streams(i) for i in range(len(urls))]
    applied = rows_applied(streams)
    progress = RunProgress.from_snapshot(snap, status.get("work"))
    if waited is not None and waited.complete and not progress.complete:
        # complete when the wait ended, so the state dumped since holds every row; a
        # worker registering in between (a restart with nothing left) changes nothing
        progress = waited
    if lacking := lacking_pushes(snap.get("workers", []), streams):
        lost = "; ".join(f"shard {i} ({urls[i]}) lacks pushes of finished worker(s) {w}"
                         for i, w in sorted(lacking.items()))
        if not options.allow_incomplete:
            raise IncompleteRunError(
                f"the run is incomplete: {lost} (did it restart without its checkpoint?); "
                "no model written (restart it from its --checkpoint-dir, or export what "
                "there is with --allow-incomplete / FTRL_PS_ALLOW_INCOMPLETE=1)")
        progress = replace(progress, lost=lost)
    dtype = str(client.dtype)  # what the servers store: float64 stays float64
    saved = SavedModel(
        bits=layout.bits,
        params=params,
        dtype=dtype,
        keys=np.asarray(keys),
        n=np.asarray(n),
        z=np.asarray(z),
    )
    every = snap.get("workers", [])
    # rows whose pushes the shards applied (exact); without worker streams (anonymous
    # pushes) what the workers reported at their clock ticks
    rows = applied or int(sum(w.get("stats", {}).get("rows", 0) for w in every))
    rows += progress.online_rows  # serve --learn
    # a superseded registration (its index registered again) is no dead worker
    dead = [w["index"] for w in latest_registrations(every) if w.get("state") == "dead"]
    path = save_model(options.model, saved, rows=rows, servers=len(urls), dead_workers=dead,
                      complete=progress.complete, workers_finished=list(progress.finished))
    print(f"model saved to {path} ({saved.keys.size:,} keys with state, {rows:,} rows trained)")
    if dead:
        say(log, f"worker(s) {dead} were marked dead during the run", level=logging.WARNING,
            prefix="warning: ")
    if progress.online_only:  # nothing of a batch run to be missing
        say(log, f"an online-learning cluster: {progress.describe()}", prefix="export: ")
    elif not progress.complete:
        say(log, f"INCOMPLETE RUN: {progress.describe()}; the model has not seen their "
            "shares of the data", level=logging.WARNING, prefix="warning: ")
    results: dict[str, Any] = {
        "rows": rows, "dead_workers": dead, "keys": int(saved.keys.size),
        "complete": progress.complete, "workers_expected": progress.expected,
        "workers_finished": list(progress.finished),
    }
    if options.test:
        ev = evaluate(saved.to_ftrl(), options.test, chunk_bytes=options.chunk_mb << 20)
        print(
            f"test {options.test}: logloss {ev['logloss']:.5f}  AUC {auc_text(ev['auc'])}  "
            f"rows {ev['rows']:,}"
        )
        results.update({f"test_{k}": v for k, v in ev.items()})
    write_json(options.metrics_json, results)
    return results


def _wait_for_workers(client: Any, options: ExportOptions) -> RunProgress:
    """Until every configured worker finished (or, with ``allow_incomplete``, none
    is live any more); where the run stood then. :class:`IncompleteRunError` /
    :class:`ClockTimeoutError` after ``options.timeout`` seconds."""
    deadline = time.monotonic() + options.timeout
    said, said_at = "", 0.0
    while True:
        status = client.status()
        progress = RunProgress.from_snapshot(status.get("clock") or {}, status.get("work"))
        if progress.complete or (progress.stalled and options.allow_incomplete):
            return progress
        text = progress.describe()
        now = time.monotonic()
        if now > deadline:
            if not progress.live:
                raise IncompleteRunError(
                    f"the run is incomplete after {options.timeout:g} s: {text}; no model "
                    "written (start the missing workers, or export what there is with "
                    "--allow-incomplete / FTRL_PS_ALLOW_INCOMPLETE=1)")
            raise ClockTimeoutError(f"workers still running after {options.timeout:g} s: {text}")
        if progress.stalled:
            # loud, and again every minute: this run does not finish by itself
            if text != said or now - said_at >= 60:
                say(log, f"WARNING: the run is incomplete: {text}. Waiting for them (up to "
                    f"{options.timeout:g} s); is every worker started, with the same "
                    "--num-workers (FTRL_PS_NUM_WORKERS for the services) as the servers? "
                    "--allow-incomplete exports what there is", level=logging.WARNING,
                    prefix="export: ")
                said, said_at = text, now
        elif not options.quiet and (text != said or now - said_at >= _REPORT_EVERY):
            say(log, f"waiting for the workers: {text}", prefix="export: ")
            said, said_at = text, now
        time.sleep(0.5)
