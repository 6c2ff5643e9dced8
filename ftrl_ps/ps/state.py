"""Everything one shard server holds: settings, parameter store, SSP clock, dedup,
telemetry."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ftrl_ps.errors import ConfigError, ModelFormatError, ProtocolError
from ftrl_ps.ps.clock import SSPClock
from ftrl_ps.ps.dedup import PushDeduper
from ftrl_ps.ps.shard_settings import ServerSettings
from ftrl_ps.ps.store import ParameterStore
from ftrl_ps.ps.telemetry import Telemetry
from ftrl_ps.ps.workqueue import WorkQueue

__all__ = ["ServerState", "load_initial_model"]

#: threads that block in SSP waits (kept apart from the request threadpool so
#: that waiting workers never starve pushes and pulls)
WAIT_THREADS = 64


class ServerState:
    """The state of one shard, shared by all request handlers.

    Shard 0 is the *clock authority*: it owns the worker registry and the SSP
    clock (:attr:`clock`). On other shards :attr:`clock` is None and worker
    routes answer 400 (ConfigError) naming shard 0.
    """

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.layout = settings.layout
        self.store = ParameterStore(self.layout, settings.shard_index, settings.dtype)
        self.clock: SSPClock | None = None
        if settings.is_clock_authority:
            self.clock = SSPClock(
                settings.staleness,
                num_workers=settings.num_workers,
                worker_timeout=settings.worker_timeout,
                registration_timeout=settings.registration_timeout,
            )
        self.dedup = PushDeduper()
        self.work = WorkQueue()  # hand-out of input units (used on shard 0)
        #: measurements and gauge hooks exported by /metrics (see ps.telemetry)
        self.telemetry = Telemetry()
        self.started_at = time.time()
        self.wait_executor = ThreadPoolExecutor(WAIT_THREADS, thread_name_prefix="ssp-wait")
        self.initial_keys = 0
        if settings.init_model:
            self.initial_keys = load_initial_model(self.store, settings.init_model)

    def start(self) -> None:
        """Start the dead-worker sweeper."""
        if self.clock is not None:
            self.clock.start_sweeper()

    def close(self) -> None:
        """Release waiters and stop background threads."""
        if self.clock is not None:
            self.clock.close()
        self.wait_executor.shutdown(wait=False, cancel_futures=True)

    def require_clock(self) -> SSPClock:
        """The SSP clock, or ConfigError on shards other than 0."""
        if self.clock is None:
            raise ConfigError(
                f"shard {self.settings.shard_index} is not the clock authority; "
                "send worker registration and clock requests to shard 0"
            )
        return self.clock

    def touch(self, worker_id: int | None) -> None:
        """Count a request from ``worker_id`` as a heartbeat (shard 0 only).

        Raises UnknownWorkerError / WorkerStateError for unknown, dead or
        finished workers on shard 0; other shards do not know the workers.
        """
        if worker_id is not None and self.clock is not None:
            self.clock.heartbeat(worker_id)


def load_initial_model(store: ParameterStore, path: str | Path) -> int:
    """Load the keys of ``store``'s shard range from a model file; returns how many.

    Uses :func:`ftrl_ps.core.modelio.load_model` (``.bits``, ``.keys``, ``.n``, ``.z``).
    """
    try:
        from ftrl_ps.core.modelio import load_model
    except ImportError as exc:  # pragma: no cover - modelio is part of the package
        raise ConfigError("--init-model needs ftrl_ps.core.modelio (not available)") from exc
    model = load_model(path)
    if int(model.bits) != store.layout.bits:
        raise ConfigError(
            f"--init-model {path} has bits={model.bits}, the server has bits={store.layout.bits}"
        )
    keys = np.asarray(model.keys)
    lo, hi = np.searchsorted(keys, [store.begin, store.end])
    try:
        store.load(keys[lo:hi], np.asarray(model.n)[lo:hi], np.asarray(model.z)[lo:hi])
    except ProtocolError as exc:
        raise ModelFormatError(f"model file {path}: {exc}") from exc
    return int(hi - lo)
