"""An in-process parameter-server client: one :class:`ParameterStore` behind the client's verbs.

Real :class:`~ftrl_ps.ps.worker.Worker` objects can train against it without
servers, HTTP or threads: the tests of the worker loop and the merge rules
do, and ``benchmarks/bench_late.py`` replays cluster schedules with it. There
is no SSP clock: :meth:`LocalClient.clock` only counts ticks.

>>> import numpy as np
>>> from ftrl_ps.ps.layout import Layout
>>> client = LocalClient(ParameterStore(Layout(4, group_size=4), dtype="float64"))
>>> keys = np.array([1, 3], dtype=np.uint32)
>>> client.push(keys, np.array([0.5, 1.0]), np.array([-0.1, 0.2]))
>>> client.pull(keys)[1].tolist(), client.pushes
([-0.1, 0.2], 1)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ftrl_ps.ps.store import ParameterStore

__all__ = ["LocalClient"]


class LocalClient:
    """``pull``/``pull_versioned``/``push``/``clock`` straight on ``store``.

    ``keep_pushed`` keeps every push's keys in :attr:`pushed_keys` (tests look
    at them); ``pushes`` and ``clocks`` count the calls.
    """

    def __init__(self, store: ParameterStore, *, keep_pushed: bool = False) -> None:
        self.store = store
        self.dtype = np.dtype(store.dtype)
        self.keep_pushed = keep_pushed
        self.pushed_keys: list[np.ndarray] = []
        self.pushes = 0
        self.clocks = 0
        self._settings: dict[str, Any] = {}

    @property
    def server_settings(self) -> dict[str, Any]:
        """What a shard would announce: the store's merge rule (a Worker adopts
        it), plus any settings assigned here (e.g. ``{"staleness": 3}``)."""
        return {"merge_rule": self.store.merge_rule, **self._settings}

    @server_settings.setter
    def server_settings(self, settings: dict[str, Any]) -> None:
        self._settings = dict(settings)

    def pull(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.store.pull(keys)

    def pull_versioned(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.store.pull_versioned(keys)

    def push(self, keys: np.ndarray, delta_n: np.ndarray, delta_z: np.ndarray,
             merge: Any = None, **progress: Any) -> None:
        self.store.push(keys, delta_n, delta_z, merge)
        self.pushes += 1
        if self.keep_pushed:
            self.pushed_keys.append(keys)

    def clock(self, stats: dict[str, Any] | None = None) -> None:
        self.clocks += 1

    def warm_done(self) -> None:  # no warm start in one process
        return None
