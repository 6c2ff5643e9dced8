"""Compile every numba kernel once, on the first run of a machine, and say so.

numba compiles a kernel the first time a process calls it and keeps the
machine code in its on-disk cache (``__pycache__`` next to the kernels, or
``$NUMBA_CACHE_DIR``); later processes load it in well under a second. On a
fresh machine the first command would otherwise compile inside its timed
training loop (the README's demo once showed 903 rows/s at 24 % for that
reason). :func:`load_kernels` checks the cache first
(:func:`ftrl_ps._kernels._config.uncached_kernels`, a few milliseconds): when
every kernel is cached it does nothing; otherwise it logs
``compiling kernels (first run only)`` and compiles *all* of them on tiny
inputs through the same code paths as real runs, so the first command of a
fresh clone pays for everything once and reports rows/s without it.
"""

from __future__ import annotations

import io
import logging
import threading
import time

import numpy as np

__all__ = ["NOTICE", "PRELOADED", "describe", "load_kernels", "warm_all", "warm_training",
           "warm_up"]

NOTICE = "compiling kernels (first run only)"
#: when the cache cannot be inspected: say the notice if loading takes longer
SLOW_LOAD_SECONDS = 3.0

log = logging.getLogger("ftrl_ps.kernels")

#: True in a launcher that has checked and loaded the kernels before forking its
#: workers (:func:`ftrl_ps.cluster.launch.preload`), and so in those workers:
#: :func:`load_kernels` has nothing left to check there (~20 ms per process saved)
PRELOADED = False


def warm_all() -> None:
    """Call every kernel on tiny inputs (compiling or loading it)."""
    from ftrl_ps.core.ftrl import FTRL
    from ftrl_ps.data.hashing import slots_of
    from ftrl_ps.data.synth import SynthConfig, format_rows, make_design

    make_design(SynthConfig(rows=1, test_rows=1, bits=8, fields=3))  # mix64_array
    format_rows(np.array([1, 0], np.uint8), np.array([[1500], [0]]),
                np.array([[3, 9], [1, 2]]))
    slots_of(["user=1", "site"], 8)
    for dtype in ("float32", "float64"):
        warm_training(dtype)
        FTRL(4, dtype=dtype).weights()
    from ftrl_ps.core.ftrl import logloss_sum

    logloss_sum(np.array([1.0, 0.0]), np.array([0.9, 0.2]))
    warm_up()  # the worker's round: key numbering and compact training
    from ftrl_ps.core.multi import warm_up as warm_multi

    warm_multi()  # ftrl-ps tune's K-model kernels


def warm_training(dtype: str) -> None:
    """Load the kernels of a single-process run with a ``dtype`` state (the
    parser, FTRL's fit and predict) by calling them on tiny inputs and a
    throw-away model.

    :func:`load_kernels` compiles only what the cache lacks; a cached kernel is
    still loaded at its first call, and a process's first call of any kernel
    also sets up numba's target (~0.5 s together on a 2-core machine). ``ftrl-ps
    train`` calls this before it opens the file, while the state's pages are
    faulted in on the other core, so that work is neither inside the first rows
    nor in the rows/s it reports.
    """
    from ftrl_ps.core.ftrl import FTRL
    from ftrl_ps.data.libsvm import LibsvmReader

    data = b"1 1:1 3:0.5 user=7\n0 2:1\n1 2:1 site_x:2\n"
    model = FTRL(4, dtype=dtype)
    for batch in LibsvmReader(io.BytesIO(data), 4):
        model._fit(batch.labels, batch.indptr, batch.indices, batch.values)
        model._predict(batch.indptr, batch.indices, batch.values)


def load_kernels() -> float:
    """Make sure every kernel is compiled; the seconds spent compiling (0 if cached).

    When this machine's ahead-of-time module (:mod:`ftrl_ps._kernels.aot`) is
    there, nothing is checked or loaded (numba is not even imported). Otherwise
    the first run builds it (unless a build failed here before: then the
    kernels run through numba's JIT, and its cache, as ever), then compiles
    what numba's cache lacks. Logs :data:`NOTICE` (logger ``ftrl_ps.kernels``,
    level INFO) before compiling and how long it took after.
    """
    from ftrl_ps._kernels import aot

    if PRELOADED or aot.load() is not None:
        return 0.0
    from ftrl_ps._kernels._config import uncached_kernels

    start = time.perf_counter()
    built = _build_ahead_of_time()
    missing = uncached_kernels()
    if missing == [] and not built:
        return 0.0
    if missing is None and not built:  # unknown: warn only if it turns out slow
        done = threading.Event()
        def notice() -> None:
            if not done.is_set():
                log.info("%s ...", NOTICE)

        timer = threading.Timer(SLOW_LOAD_SECONDS, notice)
        timer.daemon = True
        timer.start()
        try:
            warm_all()
        finally:
            done.set()
            timer.cancel()
            timer.join()  # no thread left behind: a launcher forks after this
        seconds = time.perf_counter() - start
        return seconds if seconds > SLOW_LOAD_SECONDS else 0.0
    if missing and built:  # those compiled ahead of time are not compiled again
        compiled = {f"{e.module}.{e.name}" for e in aot.EXPORTS}
        missing = [name for name in missing if name not in compiled]
        if missing:
            log.info("%s: %d more through numba ...", NOTICE, len(missing))
    elif missing:
        log.info("%s: %d kernels ...", NOTICE, len(missing))
    warm_all()
    seconds = time.perf_counter() - start
    log.info("kernels compiled in %.1f s; later runs load them from the cache", seconds)
    return seconds


def describe() -> str:
    """One line: how this process would run the kernels, and why."""
    from ftrl_ps._kernels import aot, aot_build

    if not aot.enabled():
        return f"kernels: numba's JIT ({aot.AOT_ENV}=0)"
    if aot.load() is not None:
        return f"kernels: compiled ahead of time for this CPU ({aot.module_path()})"
    reason = aot_build.failed_reason()
    if reason is not None:
        return (f"kernels: numba's JIT; the ahead-of-time build failed here ({reason}); "
                f"delete {aot_build.marker_path()} to try again")
    return "kernels: numba's JIT until the next command compiles them ahead of time"


def _build_ahead_of_time() -> bool:
    """Build this machine's ahead-of-time module if enabled, absent and never
    failed here; True if built."""
    from ftrl_ps._kernels import aot, aot_build

    if not aot.enabled() or aot.load() is not None or aot_build.failed_reason() is not None:
        return False
    log.info("%s: ahead of time, for this machine's CPU ...", NOTICE)
    try:
        aot_build.build()
    except Exception as exc:  # noqa: BLE001 -- any failure: numba's JIT still runs every kernel
        log.warning("kernels not compiled ahead of time (%s); they run through numba's JIT "
                    "(each process then loads numba, ~0.6 s more start-up). Delete %s to "
                    "try again.", exc, aot_build.marker_path())
        return False
    return aot.load() is not None


def warm_up() -> None:
    """Load (or compile) every numba kernel a worker calls, on tiny inputs.

    A launcher that forks its workers calls this once before forking, so the
    children do not each load the kernels again.
    """
    from typing import Any

    from ftrl_ps.core.params import FTRLParams
    from ftrl_ps.data.libsvm import LibsvmReader as _Reader
    from ftrl_ps.ps.worker import Worker, WorkerConfig

    class _Null:
        def pull(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return np.zeros(keys.size, np.float32), np.zeros(keys.size, np.float32)

        def pull_versioned(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return (*self.pull(keys), np.zeros(keys.size, np.uint32))

        def push(self, keys: np.ndarray, delta_n: np.ndarray, delta_z: np.ndarray,
                 merge: Any = None, **progress: Any) -> None:
            return None

        def clock(self, stats: dict[str, Any] | None = None) -> None:
            return None

        def warm_done(self) -> None:
            return None

    data = io.BytesIO(b"1 1:1 3:0.5\n0 2:1\n1 2:1\n")
    # the contraction rule: the one whose pushes call a kernel of their own
    worker = Worker(_Null(), 4, FTRLParams(), WorkerConfig(batch_size=1, fetch_step=2, push_step=1,
                                                           merge_rule="contraction"))
    worker.train_batches(iter(_Reader(data, 4)))
    worker.push()
