"""``ftrl-ps worker --input -``: a worker that learns from an unbounded stream on stdin.

``tail -F events.svm | ftrl-ps worker --input - ...`` (or any message-queue
consumer that writes libsvm lines to a pipe) trains on the lines as they
arrive (:func:`~ftrl_ps.data.linestream.stream_batches`) with a
:class:`~ftrl_ps.ps.stream.StreamLearner`, which pushes every ``push_step``
mini-batches and at least every ``push_interval`` seconds, the same time rule
as ``ftrl-ps serve --learn``. When the stream ends it pushes the rest and
finishes like any worker. Reading waits while the learner is behind
(back-pressure on the pipe), so memory stays bounded.

A stream worker is an SSP worker whose pushes are exactly-once: rows it
cannot push (the cluster stays unreachable for ``--retry-seconds``) end the
run with an error saying how many rows read were not pushed, as a file
worker's failure does. Ctrl-C or SIGTERM stops reading at once, gives the
learner :data:`STOP_GRACE` seconds to push what it holds, then stops its
retries, logs what was not pushed and leaves (shard 0 is told).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from ftrl_ps.data.libsvm import ReaderStats
from ftrl_ps.data.linestream import stream_batches
from ftrl_ps.data.minibatch import slice_rows
from ftrl_ps.errors import UnavailableError, UpdatesLostError, WorkerStateError
from ftrl_ps.ps.auth import resolve_token

__all__ = ["run_stream_worker"]

#: how long reading waits for room in the learner's queue before giving up
SUBMIT_TIMEOUT = 3600.0
#: seconds an interrupted stream worker gives its learner to push what it holds
STOP_GRACE = 3.0

log = logging.getLogger("ftrl_ps.worker")


def run_stream_worker(options: Any, source: Any = None) -> dict[str, Any]:
    """Train from ``source`` (default: standard input) until it ends; the report.

    ``options`` is a :class:`~ftrl_ps.ps.worker_main.WorkerOptions` with
    ``input == "-"``.
    """
    from ftrl_ps.ps.client import PSClient
    from ftrl_ps.ps.layout import Layout
    from ftrl_ps.ps.stream import StreamLearner
    from ftrl_ps.ps.worker_main import (
        finished_indices,
        model_params,
        parse_urls,
        worker_config,
    )

    stream = source if source is not None else sys.stdin.buffer
    cfg = worker_config(options)
    stats = ReaderStats()
    with PSClient(parse_urls(options.server), token=resolve_token(options.token),
                  state_dir=options.state_dir, retry_seconds=options.retry_seconds) as client:
        params = model_params(options, client.server_model)  # the servers' (they own it)
        lay = client.layout
        layout = Layout(options.bits if options.bits is not None else lay.bits,
                        lay.group_size, lay.num_shards)
        if options.worker_index in finished_indices(client.status().get("clock") or {}):
            raise WorkerStateError(
                f"worker index {options.worker_index} has finished: a stream worker finishes "
                "its index when its input ends, and a finished index does not train again "
                "in this run. Learn from a new stream under another index (servers with a "
                "larger --num-workers), or through 'ftrl-ps serve --learn'")
        # stdin cannot be read again from a row: no position to resume from
        client.register(options.worker_index, options.num_workers, layout,
                        supersede=options.supersede, identity=options.identity_of(),
                        positional=False)
        client.start_heartbeat()
        learner = StreamLearner(client, layout.bits, params, cfg,
                                push_interval=options.push_interval,
                                max_queue_rows=max(cfg.batch_size * cfg.fetch_step * 8, 1),
                                submit_timeout=SUBMIT_TIMEOUT, drop_failed=False)
        learner.start()
        try:
            for batch in stream_batches(stream, layout.bits, max_bytes=options.chunk_mb << 20,
                                        skip_bad_lines=options.skip_bad_lines, stats=stats):
                size = learner.max_queue_rows  # a larger chunk is queued in pieces
                for start in range(0, batch.rows, size):
                    try:
                        learner.submit(slice_rows(batch, start, min(start + size, batch.rows)))
                    except UnavailableError:
                        if learner.error is None:
                            raise
                        break  # reported below
                if learner.error is not None:
                    break
            lost = learner.stop(timeout=None)  # the retries bound it (--retry-seconds)
        except BaseException:  # Ctrl-C, SIGTERM, a bad line: stop in bounded time
            if learner.stop(timeout=STOP_GRACE):
                log.warning("worker %s: %s rows read from stdin were not pushed (the servers "
                            "do not have them)", client.worker_index,
                            f"{learner.rows_dropped:,}")
            client.abort()  # leaving makes one attempt; nothing else retries
            raise
        if lost:
            client.abort()
            raise UpdatesLostError(
                f"{lost:,} rows read from stdin were not pushed (the servers do not have "
                f"them): {learner.error or learner.last_failure}")
        if learner.error is not None:
            raise learner.error
        client.finish()
    report = learner.worker.report
    status = learner.status()
    if not options.quiet:
        log.info(
            "worker %s/%d (stdin): %s rows, progressive logloss %.5f, %d pushes",
            client.worker_index, options.num_workers, f"{report.rows:,}",
            report.progressive_logloss, report.pushes)
    return {
        "worker_index": client.worker_index,
        "rows": report.rows,
        "loss_sum": report.loss_sum,
        "pushes": report.pushes,
        "pulls": report.pulls,
        "keys_pushed": report.keys_pushed,
        "keys_pulled": report.keys_pulled,
        "bad_lines": stats.bad_lines,
        "bad_examples": stats.bad_examples,
        "requests": status["requests"],
    }
