"""Run ``python -m ftrl_ps ARGS`` with the CPU time of a worker's main steps accounted.

Used by ``bench_cluster_cpu.py --functions``: every forked worker of a local
cluster adds the thread CPU time (``time.thread_time``, so time waiting for a
core or the network does not count) of a few functions to a table and appends
it, with its process CPU time, as one JSON line to ``$FTRL_PS_CPU_REPORT`` when
it ends. The functions are disjoint except ``train_round``, the main thread's
whole round (numbering, pull, fit, push payload). Not part of the package: it
wraps attributes of ftrl_ps modules before the command runs.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import sys
import time
from typing import Any

import ftrl_ps._kernels

ftrl_ps._kernels.SKIP_BLAS_PROBE = True  # as the command line does

from ftrl_ps.cli import main  # noqa: E402
from ftrl_ps.core import ftrl as _ftrl  # noqa: E402, F401
from ftrl_ps.data import libsvm  # noqa: E402
from ftrl_ps.ps import client, worker, worker_main, workingset  # noqa: E402

SECONDS: collections.Counter[str] = collections.Counter()
CALLS: collections.Counter[str] = collections.Counter()

#: (owner, attribute, label) of every function accounted
ACCOUNTED = [
    (worker.Worker, "train_round", "main thread: train_round (all below on it)"),
    (workingset.KeyNumbering, "number", "  key numbering"),
    (client.PSClient, "pull", "  pull (request, answer)"),
    (worker, "fit_compact", "  fit_compact (FTRL on the working set)"),
    (worker.Worker, "_push_async", "  push payload (merge rule, journal entry)"),
    (client.PSClient, "push", "push thread: push"),
    (client.PSClient, "clock", "push thread: clock tick"),
    (libsvm.LibsvmReader, "_kernel", "parser thread: parse"),
]


def _accounted(fn: Any, label: str) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            SECONDS[label] += time.thread_time() - start
            CALLS[label] += 1
    return wrapper


def _report() -> None:
    path = os.environ.get("FTRL_PS_CPU_REPORT")
    if path and SECONDS:
        line = {"pid": os.getpid(), "process_cpu": time.process_time(),
                "seconds": dict(SECONDS), "calls": dict(CALLS)}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


def _run_worker(options: Any, _run: Any = worker_main.run_worker) -> Any:
    SECONDS.clear()  # forked from the launcher: its warm-up calls are not the worker's
    CALLS.clear()
    try:
        return _run(options)
    finally:
        _report()  # a forked child ends with os._exit: no atexit


for owner, name, label in ACCOUNTED:
    setattr(owner, name, _accounted(getattr(owner, name), label))
worker_main.run_worker = _run_worker

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
