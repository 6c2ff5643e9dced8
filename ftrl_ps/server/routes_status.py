"""``/v1/status`` (JSON overview of the shard) and ``/health``."""

from __future__ import annotations

import os
import time
from typing import Any

from fastapi import APIRouter

from ftrl_ps import __version__
from ftrl_ps.server.deps import StateDep

__all__ = ["router"]

router = APIRouter(tags=["status"])


@router.get("/v1/status", summary="layout, shard, workers, clock and counters")
def status(state: StateDep) -> dict[str, Any]:
    """Everything a launcher or a person wants to know about this shard.

    ``staleness`` null = asynchronous. ``clock`` is null on shards other than 0;
    on shard 0 it lists every worker (state live/finished/dead, clock, last
    stats), the minimum clock and ``max_gap_allowed`` (the largest
    ``clock - min_live_clock`` at which a wait was granted).
    """
    settings, store = state.settings, state.store
    counters = store.counters()
    counters["duplicate_pushes"] = state.dedup.duplicates
    counters["keys_with_state"] = store.keys_with_state()
    return {
        "version": __version__,
        "layout": state.layout.to_dict(),
        "shard": {
            "index": settings.shard_index,
            "pid": os.getpid(),
            "num_shards": settings.num_shards,
            "begin": store.begin,
            "end": store.end,
            "groups": [store.group_begin, store.group_end],
            "run": state.run_id,  # new unless restored from a checkpoint (ps.journal)
        },
        "dtype": settings.dtype,
        "model": settings.model_dict(),
        "staleness": settings.staleness,
        "clock_authority": state.clock is not None,
        "clock": state.clock.snapshot() if state.clock is not None else None,
        # the work handed out in units (--split units), on shard 0
        "work": state.work.summary() if state.clock is not None else None,
        "counters": counters,
        "initial_keys": state.initial_keys,
        "restored_from": state.restored_from,
        "checkpoint": state.checkpointer.status() if state.checkpointer is not None else None,
        "settings": settings.public_dict(),
        "uptime_s": round(time.time() - state.started_at, 3),
    }


@router.get("/ready", summary="readiness probe (no token needed)",
            responses={503: {"description": "not ready yet"}})
def ready(state: StateDep) -> dict[str, Any]:
    """``{"status": "ready", ...}`` once the shard serves its restored state
    (the restore happens before the server accepts connections)."""
    return {"status": "ready", "shard": state.settings.shard_index,
            "restored_from": state.restored_from}


@router.get("/health", summary="liveness probe (no token needed)")
def health(state: StateDep) -> dict[str, Any]:
    """``{"status": "ok", "shard": i}``."""
    return {"status": "ok", "shard": state.settings.shard_index}
