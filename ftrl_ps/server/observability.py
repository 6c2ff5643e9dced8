"""What a shard shows about the cluster: ``/metrics``, ``/dashboard`` and their data.

:func:`observe` is the one call :func:`ftrl_ps.server.app.create_app` makes:
it instruments the app (:func:`ftrl_ps.server.metrics.instrument` with the
shard's :class:`~ftrl_ps.server.shard_metrics.ShardCollector`), adds the
dashboard routes (:mod:`ftrl_ps.server.routes_dashboard`) and returns an
:class:`Observer`, which the app's lifespan starts and closes.

The :class:`Observer` of shard 0 samples the cluster's totals every second
into a :class:`~ftrl_ps.ps.overview.History` (the dashboard's charts, the
current rows/s) and builds the dashboard's JSON (:meth:`Observer.feed`):
workers, cluster totals, the history, and per shard its keys and load. Shard
0 asks the other shards for their ``/v1/status`` when it knows their URLs
(``ftrl-ps server --peers URL,...``; the local cluster passes them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from ftrl_ps import __version__
from ftrl_ps.ps.overview import History, Overview
from ftrl_ps.ps.state import ServerState

__all__ = ["PEER_TIMEOUT", "Observer", "observe"]

#: seconds shard 0 waits for another shard's status when building the feed
PEER_TIMEOUT = 2.0
#: seconds between two samples of the cluster totals
SAMPLE_INTERVAL = 1.0


class Observer:
    """History sampling and the dashboard feed of one shard."""

    def __init__(self, state: ServerState, peers: Sequence[str] = ()) -> None:
        self.state = state
        self.peers = [p.rstrip("/") for p in peers]
        self.history = History()

    def overview(self) -> Overview:
        """The cluster summary from the clock (empty on shards other than 0)."""
        clock = self.state.clock
        return Overview.from_clock(clock.snapshot() if clock is not None else None)

    def start(self) -> None:
        """Start sampling the totals (shard 0 only)."""
        if self.state.clock is not None:
            def read() -> tuple[int, float]:
                o = self.overview()
                return o.rows, o.loss_sum

            self.history.start(read, SAMPLE_INTERVAL)

    def close(self) -> None:
        self.history.stop()

    def local_shard(self) -> dict[str, Any]:
        """This shard's row of the shards table."""
        store = self.state.store
        counters = store.counters()
        return {
            "index": self.state.settings.shard_index,
            "url": None,
            "up": True,
            "begin": store.begin,
            "end": store.end,
            "keys_with_state": store.keys_with_state(),
            "pushes": counters["pushes"],
            "pulls": counters["pulls"] + counters["group_pulls"],
            "keys_pushed": counters["keys_pushed"],
            "keys_pulled": counters["keys_pulled"],
            "duplicate_pushes": self.state.dedup.duplicates,
        }

    async def peer_shards(self) -> list[dict[str, Any]]:
        """The other shards' rows, fetched concurrently (``up: false`` with the error)."""
        if not self.peers:
            return []
        import httpx

        token = self.state.settings.token
        headers = {"Authorization": f"Bearer {token}"} if token else {}

        async def one(client: httpx.AsyncClient, i: int, url: str) -> dict[str, Any]:
            row: dict[str, Any] = {"index": i, "url": url, "up": False}
            try:
                resp = await client.get(f"{url}/v1/status", headers=headers)
                resp.raise_for_status()
                status = resp.json()
            except (httpx.HTTPError, ValueError) as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:200]
                return row
            shard, c = status.get("shard", {}), status.get("counters", {})
            row.update(
                up=True, index=shard.get("index", i), begin=shard.get("begin"),
                end=shard.get("end"), keys_with_state=c.get("keys_with_state"),
                pushes=c.get("pushes", 0),
                pulls=c.get("pulls", 0) + c.get("group_pulls", 0),
                keys_pushed=c.get("keys_pushed", 0), keys_pulled=c.get("keys_pulled", 0),
                duplicate_pushes=c.get("duplicate_pushes", 0),
            )
            return row

        async with httpx.AsyncClient(timeout=PEER_TIMEOUT, trust_env=False) as client:
            return list(await asyncio.gather(
                *(one(client, i + 1, url) for i, url in enumerate(self.peers))
            ))

    async def feed(self) -> dict[str, Any]:
        """The dashboard's JSON: cluster totals, workers, shards, history."""
        s = self.state.settings
        o = self.overview()
        local = await asyncio.to_thread(self.local_shard)  # may count keys: off the loop
        shards = [local, *await self.peer_shards()]
        return {
            "time": time.time(),
            "version": __version__,
            "shard_index": s.shard_index,
            "num_shards": s.num_shards,
            "clock_authority": self.state.clock is not None,
            "peers_known": bool(self.peers) or s.num_shards == 1,
            "cluster": {
                "rows": o.rows,
                "rows_per_second": self.history.rate(),
                "progressive_logloss": o.progressive_logloss if o.rows else None,
                "min_clock": o.min_clock,
                "max_clock": o.max_clock,
                "gap": o.gap,
                "staleness": o.staleness,
                "max_gap_allowed": o.max_gap_allowed,
                "restarts": o.restarts,
                "states": o.states,
                "num_workers": o.num_workers,
                "missing": o.missing,
            },
            "workers": [
                {
                    "index": w.index,
                    "worker_id": w.worker_id,
                    "state": w.state,
                    "clock": w.clock,
                    "rows": w.rows,
                    "rows_per_second": w.rows_per_second,
                    "progressive_logloss": w.progressive_logloss if w.rows else None,
                    "wait_seconds": w.stat("wait_seconds"),
                    "idle_seconds": w.stat("idle_seconds"),  # for want of units
                    "straggle_seconds": w.stats.get("straggle_seconds"),  # None: not injected
                    "seconds_since_seen": w.seconds_since_seen,
                }
                for w in o.workers
            ],
            "shards": shards,
            "history": self.history.points(),
            "uptime_s": round(time.time() - self.state.started_at, 3),
        }


def observe(app: Any, state: ServerState, peers: Sequence[str] = ()) -> Observer:
    """Add ``/metrics`` and ``/dashboard`` to a shard's app; the :class:`Observer`
    (start it in the app's lifespan, close it after)."""
    from ftrl_ps.server import routes_dashboard
    from ftrl_ps.server.deps import require_token
    from ftrl_ps.server.metrics import instrument
    from ftrl_ps.server.shard_metrics import ShardCollector

    observer = Observer(state, peers)
    instrument(app, collectors=[ShardCollector(state, observer.history)], auth=require_token,
               component="server")
    app.state.observer = observer
    app.include_router(routes_dashboard.router)
    return observer
