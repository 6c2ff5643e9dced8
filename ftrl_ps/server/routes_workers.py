"""``/v1/workers``: registration, SSP clock, heartbeats, finish, leave (shard 0 only).

Other shards answer these routes with 400 (ConfigError) naming shard 0. The
clock routes are ``async``: a tick, and the question whether the worker may
go on, take the clock's lock briefly on the event loop (no thread hop: most
ticks are answered at once); a worker that must wait blocks a thread of a
separate pool (``ServerState.wait_executor``), so waiting workers neither
block the event loop nor take threads from the pool that serves pushes and
pulls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ftrl_ps.errors import LayoutMismatchError
from ftrl_ps.ps.clock import SSPClock
from ftrl_ps.ps.overview import Overview
from ftrl_ps.ps.state import ServerState
from ftrl_ps.server.deps import AuthDep, StateDep
from ftrl_ps.server.fields import Count, NonNegative

__all__ = ["ClockRequest", "answer_tick", "router"]

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/workers", tags=["workers"], dependencies=[AuthDep])

StatName = Annotated[str, StringConstraints(min_length=1, max_length=64)]
StatValue = Annotated[float, Field(allow_inf_nan=False)]
Stats = Annotated[dict[StatName, StatValue], Field(max_length=32)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LayoutModel(_Strict):
    """The worker's view of the key layout; must equal the server's."""

    bits: int = Field(ge=1, le=30)
    group_size: int = Field(ge=1, le=1 << 30)
    num_shards: int = Field(ge=1, le=1 << 16)


class RegisterRequest(_Strict):
    worker_index: int | None = Field(
        default=None, ge=0,
        description="0-based index of this worker; null: the server assigns the lowest index "
        "that is not registered, or whose worker was marked dead",
    )
    num_workers: int = Field(ge=1, description="number of workers in the cluster")
    layout: LayoutModel
    instance: str | None = Field(
        default=None, max_length=200,
        description="random id of this worker process: a retried registration with the "
        "same instance returns the same worker id",
    )
    supersede: bool = Field(
        default=False, description="replace a live registration of the same index (its "
        "process is known to be gone): the old epoch is marked dead",
    )
    pid: int | None = Field(default=None, ge=0, description="the worker's process id")
    identity: str | None = Field(
        default=None, min_length=1, max_length=200,
        description="a stable name of the worker's slot that survives its restarts (e.g. "
        "its container's hostname): with worker_index null, a registration with the "
        "identity of a live or dead registration takes that index over at once",
    )


class ClockRequest(_Strict):
    clock: int | None = Field(
        default=None, ge=1,
        description="the clock this tick reaches (makes a retried tick idempotent)",
    )
    stats: Stats | None = Field(
        default=None, description="progress to show in /v1/status, e.g. rows, "
        "logloss_sum, rows_per_s",
    )
    timeout: float | None = Field(
        default=None, ge=0, description="longest wait in seconds (capped by the server)"
    )


class WaitRequest(_Strict):
    timeout: float | None = Field(default=None, ge=0)


class FinishRequest(_Strict):
    stats: Stats | None = Field(
        default=None, description="the worker's last progress (as a clock tick's): a worker "
        "need not tick after its last push",
    )
    sent: Count | None = Field(
        default=None, description="the last push seq the worker sent to this shard (0: "
        "none): the checkpoint that says finished then holds those pushes too, and the "
        "answer's `stream` is the worker index's record; 409 if they are not all applied "
        "(replay them first)",
    )
    sent_to: list[Count] | None = Field(
        default=None, max_length=4096, description="per shard, the last push seq the "
        "worker sent there (kept with the registration: an export checks that every "
        "shard still holds them)",
    )


#: bodies used when a clock/wait/finish request has none (all fields optional)
_EMPTY_CLOCK = ClockRequest()
_EMPTY_WAIT = WaitRequest()
_EMPTY_FINISH = FinishRequest()


class RegisterAnswer(BaseModel):
    worker_id: int = Field(description="the registration's epoch, never reused")
    epoch: int
    worker_index: int
    clock: int
    staleness: int | None
    layout: LayoutModel


class ClockAnswer(BaseModel):
    worker_id: int
    clock: int
    ready: bool = Field(description="false: the SSP wait timed out on the server; ask again")
    min_clock: int | None
    staleness: int | None
    alone: bool = Field(False, description="this worker trains alone in the warm start")
    slowest: list[int] = Field(default_factory=list, description="worker indices at the "
                               "smallest clock (live, or expected and never registered)")


@router.post("", summary="register a worker", response_model=RegisterAnswer)
def register(req: RegisterRequest, state: StateDep) -> dict[str, Any]:
    """Check the worker's layout (409 on a mismatch) and give it a worker id."""
    clock = state.require_clock()
    given, held = req.layout.model_dump(), state.layout.to_dict()
    diffs = [f"{k}: worker has {given[k]}, server has {held[k]}" for k in held
             if given.get(k) != held[k]]
    if diffs:  # any difference is a mismatch (409), even fields that form no valid layout
        raise LayoutMismatchError("layout mismatch (" + "; ".join(diffs) + ")")
    worker_id = clock.register(req.worker_index, req.num_workers, req.instance,
                               supersede=req.supersede, pid=req.pid, identity=req.identity)
    info = clock.worker(worker_id)
    return {
        "worker_id": worker_id,
        "epoch": worker_id,
        "worker_index": info.index,
        "clock": info.clock,
        "staleness": clock.staleness,
        "layout": state.layout.to_dict(),
    }


async def _wait(state: ServerState, clock: SSPClock, worker_id: int,
                timeout: float | None) -> dict[str, Any]:
    """Wait until ``worker_id`` may go on: at once if it may now (asked without
    blocking, the clock's lock is only ever held briefly), else in the wait pool."""
    limit = state.settings.clock_wait_timeout
    seconds = limit if timeout is None else min(timeout, limit)
    started = time.perf_counter()
    ready = clock.wait(worker_id, 0.0)
    if not ready and seconds > 0:
        loop = asyncio.get_running_loop()
        ready = await loop.run_in_executor(state.wait_executor, clock.wait, worker_id, seconds)
    state.telemetry.ssp_wait.observe(time.perf_counter() - started)
    return {
        "worker_id": worker_id,
        "clock": clock.worker(worker_id).clock,
        "ready": ready,
        "min_clock": clock.min_clock(),
        "staleness": clock.staleness,
        "alone": clock.alone(worker_id),
        "slowest": [] if ready else [i for i in Overview.from_clock(clock.snapshot()).slowest
                                     if i != clock.worker(worker_id).index],
    }


@router.post("/{worker_id}/clock", summary="tick, then wait for SSP", response_model=ClockAnswer)
async def tick(worker_id: int, state: StateDep, req: ClockRequest = _EMPTY_CLOCK) -> dict[str, Any]:
    """Advance the worker's clock by one, then wait until it is at most
    ``staleness`` clocks ahead of the slowest live worker, or until the server's
    wait timeout (``"ready": false``; the client then calls ``/wait``)."""
    return await answer_tick(state, worker_id, req)


async def answer_tick(state: ServerState, worker_id: int, req: ClockRequest) -> dict[str, Any]:
    """Tick ``worker_id`` and wait for SSP: the answer (a ClockAnswer's fields)."""
    clock = state.require_clock()
    clock.tick(worker_id, req.stats, req.clock)  # brief: under the clock's lock only
    return await _wait(state, clock, worker_id, req.timeout)


@router.post("/{worker_id}/wait", summary="wait for SSP again", response_model=ClockAnswer)
async def wait(worker_id: int, state: StateDep, req: WaitRequest = _EMPTY_WAIT) -> dict[str, Any]:
    """Wait (without ticking) until the worker may proceed or the timeout passes."""
    clock = state.require_clock()
    return await _wait(state, clock, worker_id, req.timeout)


@router.post("/{worker_id}/heartbeat", summary="sign of life")
def heartbeat(worker_id: int, state: StateDep) -> dict[str, Any]:
    """Refresh the worker's heartbeat (404 unknown, 409 dead or finished)."""
    clock = state.require_clock()
    clock.heartbeat(worker_id)
    return {"worker_id": worker_id, "state": clock.worker(worker_id).state}


@router.post("/{worker_id}/warm-done", summary="the lone worker's warm start is pushed")
def warm_done(worker_id: int, state: StateDep) -> dict[str, Any]:
    """The warm start's lone worker has every push of its warm start applied on
    every shard: the warm start is over now, the held workers go on (before its
    clock tick). From any other worker, or once over, nothing changes
    (``"ended": false``). 404 unknown, 409 dead or finished."""
    clock = state.require_clock()
    return {"worker_id": worker_id, "ended": clock.warm_done(worker_id)}


@router.post("/{worker_id}/finish", summary="the worker is done")
def finish(worker_id: int, state: StateDep,
           req: FinishRequest = _EMPTY_FINISH) -> dict[str, Any]:
    """Mark the worker finished: it no longer holds back the others. With a
    checkpoint dir the answer comes once a checkpoint holds it (docs/durability.md),
    and with ``sent`` the worker's pushes to this shard too."""
    if req.sent_to is not None:
        state.require_clock().note_sent(worker_id, req.sent_to)
    record = state.finish_worker(worker_id, req.stats, req.sent)
    answer: dict[str, Any] = {"worker_id": worker_id,
                              "state": state.require_clock().worker(worker_id).state}
    if record is not None:
        answer["stream"] = record
    return answer


class OnlineReport(_Strict):
    learner: str = Field(min_length=1, max_length=64, description="the learner's own id")
    rows: Count = Field(description="rows it trained and pushed in all")
    loss_sum: NonNegative = Field(description="their log loss sum")


@router.post("/online", summary="an online learner's totals (serve --learn)")
def online(req: OnlineReport, state: StateDep) -> dict[str, Any]:
    """Rows an online learner (``ftrl-ps serve --learn``: anonymous pushes outside
    the SSP clock) trained and pushed so far: shard 0 counts them in its status,
    metrics and exports (totals, so a repeated or late report changes nothing)."""
    state.require_clock().report_online(req.learner, req.rows, req.loss_sum)
    return {"learner": req.learner, "rows": req.rows}


@router.post("/{worker_id}/leave", summary="the worker's process is stopping")
def leave(worker_id: int, state: StateDep) -> dict[str, Any]:
    """The worker's process is stopping before its end (Ctrl-C, SIGTERM, an
    error): it is dead from now on, as after ``--worker-timeout`` without a
    heartbeat, so it holds back nobody and its units are handed on. ``"left":
    false`` when it was not live (finished, dead or superseded: nothing
    changes). 404 unknown."""
    clock = state.require_clock()
    left = clock.leave(worker_id)
    if left:
        info = clock.worker(worker_id)
        log.warning("worker %d (index %d) left: its process is stopping", worker_id, info.index)
    return {"worker_id": worker_id, "left": left, "state": clock.worker(worker_id).state}
