"""``/v1/work``: the input's units handed out to workers as they ask (shard 0 only).

See :mod:`ftrl_ps.ps.workqueue`. Other shards answer 400 (ConfigError) naming
shard 0, as the worker routes do.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints

from ftrl_ps.ps.clock import DEAD
from ftrl_ps.ps.state import ServerState
from ftrl_ps.server.deps import AuthDep, StateDep
from ftrl_ps.server.fields import Count

__all__ = ["router"]

router = APIRouter(prefix="/v1/work", tags=["work"])


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UnitModel(_Strict):
    id: Count
    part: Annotated[str, StringConstraints(min_length=1, max_length=4096)]
    start: Count
    end: Count
    gzip: StrictBool
    #: several small parts read whole as one unit: (name, size, gzip) each
    parts: list[tuple[Annotated[str, StringConstraints(min_length=1, max_length=4096)],
                      Count, StrictBool]] | None = Field(default=None, max_length=1_000_000)


class PlanRequest(_Strict):
    plan_id: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    units: list[UnitModel] = Field(max_length=1_000_000)


class NextRequest(_Strict):
    worker_index: Count
    done: list[tuple[Count, Count]] = Field(
        default_factory=list, description="(unit, rows) of units whose pushes all applied")
    holding: list[Count] = Field(default_factory=list, description="units still in work")
    progress: list[tuple[Count, Count]] = Field(
        default_factory=list, description="(unit, rows applied so far) of held units")
    position: Count | None = Field(
        default=None, description="the worker's rows trained so far (where its next unit begins)")
    applied: Count | None = Field(
        default=None, description="the worker's rows whose pushes the shards applied")


def _queue(state: ServerState) -> Any:
    state.require_clock()  # shard 0 only
    return state.work


@router.post("/plan", summary="load the plan of work units", dependencies=[AuthDep])
def load_plan(req: PlanRequest, state: StateDep) -> dict[str, Any]:
    """Every worker sends the same plan; the first loads it, the others are checked
    against it (409 for a different plan)."""
    units = _queue(state).load([u.model_dump(exclude_none=True) for u in req.units],
                               req.plan_id)
    return {"plan_id": req.plan_id, "units": units}


@router.post("/next", summary="report finished units, get the next one",
             dependencies=[AuthDep])
def next_unit(req: NextRequest, state: StateDep) -> dict[str, Any]:
    """Answer ``{"unit": {...}, "fences": [...]}``; ``{"unit": null, "wait": true}``
    when nothing is left to take but other live workers still hold units (ask
    again: if one dies, its units are handed on); ``{"unit": null}`` when nothing
    is left. Before it trains a unit, the worker applies every fence on every
    shard (``POST /v1/streams/{worker}/fence``): a dead worker's units are handed
    on after its last push applied here, and a push of it that reached another
    shard but not this one is withdrawn there (docs/durability.md, section 4)."""
    clock = state.require_clock()
    workers = clock.snapshot()["workers"]
    latest: dict[int, dict[str, Any]] = {}
    for w in sorted(workers, key=lambda w: w["worker_id"]):
        latest[w["index"]] = w
    applied_by = {}  # a dead worker's position: its last push applied here
    for i, w in latest.items():
        if w["state"] == DEAD:
            record = state.dedup.fence_here(i, int(w["worker_id"]))
            if record is not None:  # else it is back (a new epoch claimed its stream)
                applied_by[i] = int(record["position"])
    unit = state.work.next(req.worker_index, req.done, req.holding, list(applied_by),
                           req.progress, req.position, req.applied, applied_by,
                           clock.held())
    if unit is None:
        return {"unit": None, "fences": [],
                "wait": state.work.held_by_others(req.worker_index, applied_by)}
    return {"unit": unit, "fences": state.dedup.fences()}


class ProgressRequest(_Strict):
    worker_index: Count
    progress: list[tuple[Count, Count]] = Field(
        description="(unit, rows applied so far) of units the worker holds")


@router.post("/progress", summary="rows of held units applied so far", dependencies=[AuthDep])
def progress(req: ProgressRequest, state: StateDep) -> dict[str, Any]:
    """A unit whose worker dies is handed on after these rows (no row trained twice)."""
    _queue(state).progress(req.worker_index, req.progress)
    return {"recorded": len(req.progress)}


@router.get("", summary="units pending, assigned and done")
def summary(state: StateDep) -> dict[str, Any]:
    return dict(_queue(state).summary())
