"""``/v1/streams``: each worker index's stream of pushes as this shard applied it.

A worker claims its registration epoch on every shard after registering
(``POST /v1/streams/{worker}``) and gets the record back: the last applied seq,
the input position it covers, the count and digest of applied pushes, and the
seq covered by a checkpoint (docs/durability.md). A finishing worker asks each
shard to make its pushes durable (``POST /v1/streams/{worker}/durable``). A
worker handed a dead worker's input fences that worker off on every shard
(``POST /v1/streams/{worker}/fence``, see :meth:`ftrl_ps.ps.dedup.PushDeduper.fence`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from ftrl_ps.server.deps import StateDep
from ftrl_ps.server.fields import Count, Epoch

__all__ = ["router"]

router = APIRouter(prefix="/v1/streams", tags=["streams"])


class ClaimRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    epoch: int = Field(ge=1, le=(1 << 53) - 1,
                       description="the epoch shard 0 gave the registration")


class StreamAnswer(BaseModel):
    worker: int
    epoch: int
    last_seq: int = Field(description="last push sequence number applied")
    position: int = Field(description="input rows covered by the applied pushes")
    pushes: int = Field(description="pushes applied")
    digest: str = Field(description="sum mod 2**64 of the applied pushes' digests, hex")
    durable_seq: int = Field(description="last seq covered by a checkpoint (or applied, "
                             "on a shard without checkpoints)")
    fenced: int = Field(0, description="epochs up to this one are fenced off (0: none)")
    fence_seq: int | None = Field(
        None, description="the fenced epochs' pushes after this seq were withdrawn (null "
                          "once a later epoch pushed)")
    run: str | None = Field(None, description="this shard's run id (a claim's answer): new "
                            "when the shard started without a checkpoint")


class FenceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    epoch: Epoch = Field(description="the dead registration's epoch")
    seq: Count = Field(description="its last push shard 0 applied (the commit point)")


@router.post("/{worker}", summary="claim an epoch for a worker index",
             response_model=StreamAnswer)
def claim(worker: Annotated[int, Path(ge=0, lt=1 << 32)], req: ClaimRequest,
          state: StateDep) -> dict[str, Any]:
    """Make ``epoch`` the index's current incarnation on this shard; the record.
    409 if a newer epoch holds the index (or, on shard 0, if the epoch is not
    the index's live registration)."""
    return {**state.claim(worker, req.epoch), "run": state.run_id}


@router.post("/{worker}/durable", summary="persist a worker index's pushes",
             response_model=StreamAnswer)
def durable(worker: Annotated[int, Path(ge=0, lt=1 << 32)], req: ClaimRequest,
            state: StateDep) -> dict[str, Any]:
    """Answer once every push of the index applied so far is in a checkpoint (a
    shard without a checkpoint dir answers at once): ``durable_seq`` covers them.
    A worker asks every shard before it finishes, so a shard that restarts later
    restores its pushes although the worker, gone, can no longer replay them.
    409 as for the claim."""
    return state.make_durable(worker, req.epoch)


@router.post("/{worker}/fence", summary="fence off a dead worker, withdraw its late push",
             response_model=StreamAnswer)
def fence(worker: Annotated[int, Path(ge=0, lt=1 << 32)], req: FenceRequest,
          state: StateDep) -> dict[str, Any]:
    """Refuse the index's epochs up to ``epoch`` from now on and withdraw its push
    applied here after ``seq`` (shard 0 handed its input on after that seq);
    answered once a checkpoint holds the change (with a checkpoint dir).
    Idempotent. 409 if more than that one push, or one this shard no longer
    holds the deltas of, would have to be withdrawn."""
    return state.fence(worker, req.epoch, req.seq)


@router.get("", summary="every stream record of this shard",
            response_model=list[StreamAnswer])
def records(state: StateDep) -> list[dict[str, Any]]:
    """The record of every worker index that pushed to (or claimed on) this shard."""
    return state.dedup.records()
