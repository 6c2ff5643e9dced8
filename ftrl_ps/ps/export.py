"""Export the model held by running servers: wait for the workers, read every
shard's state, write a model file, optionally evaluate it.

``ftrl-ps export`` and ``python -m services.export`` build an
:class:`ExportOptions` and call :func:`run_export`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ftrl_ps.core.jsonfile import write_json
from ftrl_ps.errors import ClockTimeoutError, ConfigError
from ftrl_ps.ps.auth import resolve_token
from ftrl_ps.ps.worker_main import WorkerOptions, adopt_model, params_with_defaults, parse_urls

__all__ = ["ExportOptions", "latest_registrations", "rows_applied", "run_export",
           "workers_done"]


@dataclass(frozen=True)
class ExportOptions:
    """Everything ``ftrl-ps export`` is told; field names are the flags' names."""

    server: str
    model: str
    token: str | None = field(default=None, repr=False)
    test: str | None = None
    wait: bool = False
    timeout: float = 86400.0
    metrics_json: str | None = None
    quiet: bool = False
    bits: int | None = None
    alpha: float | None = None
    beta: float | None = None
    l1: float | None = None
    l2: float | None = None
    dtype: str | None = None
    skip_bad_lines: bool = False
    chunk_mb: int = 4


def workers_done(snapshot: dict[str, Any]) -> bool:
    """True when shard 0's clock shows no live and no missing worker.

    >>> workers_done({"workers": [{"state": "finished"}], "missing_indices": []})
    True
    >>> workers_done({"workers": [{"state": "live"}]}), workers_done({"workers": []})
    (False, False)
    """
    workers = snapshot.get("workers", [])
    live = [w for w in workers if w.get("state") == "live"]
    return bool(workers) and not live and not snapshot.get("missing_indices")


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


def run_export(options: ExportOptions) -> dict[str, Any]:
    """Save the servers' model (after the workers, with ``wait``); the results."""
    import os

    from ftrl_ps.core.modelio import SavedModel, save_model
    from ftrl_ps.core.params import FTRLParams
    from ftrl_ps.learn.training import evaluate
    from ftrl_ps.ps.client import PSClient

    if options.test and not os.path.exists(options.test):
        raise ConfigError(f"test file not found: {options.test}")
    urls = parse_urls(options.server)
    with PSClient(urls, token=resolve_token(options.token)) as client:
        layout = client.layout
        model = client.server_model
        flags = WorkerOptions(server="", input="", num_workers=1, bits=options.bits,
                              dtype=options.dtype, alpha=options.alpha, beta=options.beta,
                              l1=options.l1, l2=options.l2)
        if model is not None:
            params = FTRLParams(**adopt_model(flags, model)["params"])
        else:  # servers of an older version: the flags say
            params = params_with_defaults(
                alpha=options.alpha, beta=options.beta, l1=options.l1, l2=options.l2
            )
        if options.wait:
            _wait_for_workers(client, options)
        keys, n, z = client.dump_state()
        snap = client.status().get("clock") or {}
        applied = rows_applied([client.streams(i) for i in range(len(urls))])
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
    # a superseded registration (its index registered again) is no dead worker
    dead = [w["index"] for w in latest_registrations(every) if w.get("state") == "dead"]
    path = save_model(options.model, saved, rows=rows, servers=len(urls), dead_workers=dead)
    print(f"model saved to {path} ({saved.keys.size:,} keys with state, {rows:,} rows trained)")
    if dead:
        print(f"warning: worker(s) {dead} were marked dead during the run", file=sys.stderr)
    results: dict[str, Any] = {"rows": rows, "dead_workers": dead, "keys": int(saved.keys.size)}
    if options.test:
        ev = evaluate(saved.to_ftrl(), options.test, chunk_bytes=options.chunk_mb << 20)
        print(
            f"test {options.test}: logloss {ev['logloss']:.5f}  AUC {ev['auc']:.5f}  "
            f"rows {ev['rows']:,}"
        )
        results.update({f"test_{k}": v for k, v in ev.items()})
    write_json(options.metrics_json, results)
    return results


def _wait_for_workers(client: Any, options: ExportOptions) -> None:
    deadline = time.monotonic() + options.timeout
    last = 0.0
    while True:
        snap = client.status().get("clock") or {}
        if workers_done(snap):
            return
        if time.monotonic() > deadline:
            raise ClockTimeoutError(f"workers still running after {options.timeout:g} s")
        if not options.quiet and time.monotonic() - last > 10:
            last = time.monotonic()
            states = [f"{w['index']}:{w['state']}@{w['clock']}" for w in snap.get("workers", [])]
            print(f"export: waiting for workers {' '.join(states)}", file=sys.stderr)
        time.sleep(0.5)
