"""The live cluster as the source of a prediction service: refresh only what changed.

:class:`ClusterModelSource` keeps a full local copy of the cluster's
``n``/``z`` in a :class:`~ftrl_ps.learn.serving.ServingModel` and refreshes
it every ``interval`` seconds with ``GET /v1/changes?since=V`` on each shard
(see :mod:`ftrl_ps.ps.changes`): the answer holds only the touched keys of
the parameter groups written since the version ``V`` it saw last, so a
refresh moves what changed, not the whole state. A shard that restarted
(another change-log instance) is read again in full and its key range
cleared first. The hyper-parameters (alpha, beta, l1, l2) are the
servers' (``/v1/status`` ``model``; they own the model): the weights are
derived from ``n``/``z`` with them, and a value the service was given that
differs is a ConfigError, as for a worker.

A failed refresh keeps the model being served and is reported in
:meth:`ClusterModelSource.status`; the next refresh tries again. The first
failure after a success logs one warning (the source is unhealthy), the first
success after failures one info line (healthy again): one line per change of
health, not one per refresh.
:meth:`ClusterModelSource.refresh_soon` asks for a refresh now (the online
learner calls it after each push, so learned rows show up sooner).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.core.params import FTRLParams
from ftrl_ps.errors import FTRLPSError, LayoutMismatchError
from ftrl_ps.learn.serving import ServingModel
from ftrl_ps.ps import wire
from ftrl_ps.ps.changes import INSTANCE_HEADER, VERSION_HEADER
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.shards import ShardConnections

__all__ = ["ClusterModelSource"]

log = logging.getLogger(__name__)


class ClusterModelSource:
    """Serve the live cluster at ``urls`` (shard order), refreshed every ``interval`` s.

    The first full read happens at construction (errors raise:
    :class:`~ftrl_ps.errors.TransportError` if a shard cannot be reached).
    ``on_refreshed(started)`` is called after every successful refresh with
    the ``time.monotonic()`` at which it began.
    """

    def __init__(self, served: ServingModel, urls: Sequence[str], *, params: FTRLParams,
                 token: str | None = None, interval: float = 0.5, timeout: float = 30.0,
                 on_refreshed: Callable[[float], None] | None = None,
                 on_restart: Callable[[int], None] | None = None,
                 given: dict[str, Any] | None = None) -> None:
        self.served = served
        self.interval = float(interval)
        self.on_refreshed = on_refreshed
        #: called with the shard's index when a shard is seen to have restarted
        self.on_restart = on_restart
        self.shard_restarts = 0  # restarts seen (another change-log instance)
        self._net = ShardConnections(urls, token=token, timeout=timeout, retries=2)
        self.urls = self._net.urls
        try:
            self.layout, dtype, held = self._read_layout()
            #: the servers' hyper-parameters (they own the model; ``given``: the
            #: flags given, each must equal them), ``params`` for servers without
            self.params = params
            if held is not None:
                from ftrl_ps.ps.worker_main import check_against_servers

                self.params = FTRLParams(**check_against_servers(given or {}, held)["params"])
            model = FTRL(self.layout.bits, self.params, dtype=dtype)
            self._since = [0] * len(self.urls)
            self._instance: list[str | None] = [None] * len(self.urls)
            self.refreshes = 0
            self.failed_refreshes = 0
            self._failing_since: float | None = None  # monotonic time of the first failure
            self._outage_failures = 0  # failed refreshes since the last success
            self.keys_pulled = 0
            self.last_keys = 0
            self.last_error: str | None = None
            self.last_error_at: float | None = None
            self.refreshed_at: float | None = None
            self._wake = threading.Event()
            self._stop = threading.Event()
            self._thread: threading.Thread | None = None
            self._lock = threading.Lock()
            entries = [self._changes(i) for i in range(len(self.urls))]
            for keys, n, z, _ in entries:
                model.state[keys.astype(np.int64), 0] = n
                model.state[keys.astype(np.int64), 1] = z
            served.install(model, source=f"cluster {','.join(self.urls)}")
            self._count(entries, time.monotonic())
        except BaseException:
            self._net.close()
            raise

    def _read_layout(self) -> tuple[Layout, str, dict[str, Any] | None]:
        statuses = [self._net.request(i, "GET", "/v1/status").json()
                    for i in range(len(self.urls))]
        layout = Layout.from_dict(statuses[0]["layout"])
        if layout.num_shards != len(self.urls):
            raise LayoutMismatchError(f"the servers form {layout.num_shards} shard(s) but "
                                      f"{len(self.urls)} URL(s) were given")
        for i, st in enumerate(statuses):
            if st["shard"]["index"] != i:
                raise LayoutMismatchError(f"{self.urls[i]} is shard {st['shard']['index']}, "
                                          f"expected shard {i}: list the URLs in shard order")
        return layout, str(statuses[0]["dtype"]), statuses[0].get("model")

    def _get_changes(self, shard: int, since: int) -> Any:
        return self._net.request(shard, "GET", "/v1/changes", params={"since": since},
                                 headers={"Accept": wire.BINARY_MEDIA_TYPE})

    def _changes(self, shard: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """This shard's changes since the last look, and whether its range must be
        cleared first (the shard restarted: then everything it holds is read)."""
        resp = self._get_changes(shard, self._since[shard])
        instance = resp.headers.get(INSTANCE_HEADER)
        restarted = self._instance[shard] is not None and instance != self._instance[shard]
        if restarted and self._since[shard] != 0:
            resp = self._get_changes(shard, 0)
            instance = resp.headers.get(INSTANCE_HEADER)
        self._instance[shard] = instance
        if restarted:
            self.shard_restarts += 1
            if self.on_restart is not None:
                self.on_restart(shard)
        self._since[shard] = int(resp.headers.get(VERSION_HEADER, "0"))
        msg = wire.decode(resp.content, wire.ENTRIES)
        assert msg.keys is not None and msg.values is not None
        return msg.keys, msg.values[0], msg.values[1], restarted

    def refresh(self) -> int:
        """Pull and apply what changed on every shard; the number of keys applied."""
        with self._lock:
            started = time.monotonic()
            entries = [self._changes(shard) for shard in range(len(self.urls))]
            for shard, (keys, n, z, restarted) in enumerate(entries):
                clear = self.layout.shard_range(shard) if restarted else None
                if keys.size or clear is not None:
                    self.served.apply(keys, n, z, clear=clear)
            self._count(entries, started)
            return self.last_keys

    def _count(self, entries: list[tuple[Any, ...]], started: float) -> None:
        self.last_keys = int(sum(e[0].size for e in entries))
        self.keys_pulled += self.last_keys
        self.refreshes += 1
        self.refreshed_at = time.time()
        self.last_error = None
        if self.on_refreshed is not None:
            self.on_refreshed(started)

    def poll(self) -> bool:
        """One refresh as the refreshing thread does it: a failure is kept (and
        logged when it makes the source unhealthy), not raised; True on success."""
        try:
            self.refresh()
        except FTRLPSError as exc:
            self.failed_refreshes += 1
            self._outage_failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.last_error_at = time.time()
            if self._failing_since is None:
                self._failing_since = time.monotonic()
                log.warning("cluster source unhealthy: refresh failed (%s); still serving "
                            "model version %d", self.last_error, self.served.version)
            return False
        if self._failing_since is not None:
            log.info("cluster source healthy again after %.1f s (%d failed refreshes); "
                     "serving model version %d", time.monotonic() - self._failing_since,
                     self._outage_failures, self.served.version)
            self._failing_since, self._outage_failures = None, 0
        return True

    def refresh_soon(self) -> None:
        """Refresh now instead of at the end of the interval."""
        self._wake.set()

    def start(self) -> None:
        """Refresh every ``interval`` seconds (or when woken) in a daemon thread."""
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.is_set():
                self._wake.wait(self.interval)
                self._wake.clear()
                if self._stop.is_set():
                    return
                self.poll()

        self._thread = threading.Thread(target=loop, name="ftrl-ps-refresh", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop refreshing and close the connections."""
        thread, self._thread = self._thread, None
        self._stop.set()
        self._wake.set()
        if thread is not None:
            thread.join()
        self._net.close()

    def status(self) -> dict[str, Any]:
        """What ``/v1/status`` shows of the source."""
        return {
            "kind": "cluster",
            "servers": self.urls,
            "refresh_interval": self.interval,
            "refreshes": self.refreshes,
            "failed_refreshes": self.failed_refreshes,
            "keys_pulled": self.keys_pulled,
            "last_refresh_keys": self.last_keys,
            "refreshed_at": self.refreshed_at,
            "shard_versions": list(self._since),
            "shard_restarts": self.shard_restarts,
            "refresh_error": self.last_error,
            "refresh_error_at": self.last_error_at,
            "healthy": self.last_error is None,
        }

