"""``/v1/pull``, ``/v1/pull-groups``, ``/v1/push`` and ``/v1/state``: the parameters.

The handlers are plain ``def`` functions, so FastAPI runs them in its
threadpool: decoding, validation and the store's numpy gathers/scatters (which
release the GIL) of requests that touch different parameter groups run in
parallel.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ftrl_ps.ps import wire
from ftrl_ps.server.deps import (
    AuthDep,
    BodyDep,
    StateDep,
    decode_body,
    encode_response,
    request_is_json,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["parameters"])


def _doc(example: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI request body: binary or JSON (with an example)."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                wire.BINARY_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
                wire.JSON_MEDIA_TYPE: {"schema": {"type": "object"}, "example": example},
            },
        }
    }


@router.post(
    "/pull",
    summary="n and z of sorted unique keys",
    response_class=Response,
    openapi_extra=_doc({"keys": [1, 5, 1024]}),
)
def pull(request: Request, state: StateDep, body: BodyDep) -> Response:
    """Body: KEYS (binary) or ``{"keys": [...]}`` (optional ``worker_id`` counts
    as a heartbeat; the merge flag or ``"versions": true`` asks for the keys'
    versions too). Answer: VALUES or ``{"n": [...], "z": [...]}``."""
    msg = decode_body(request, body, wire.KEYS)
    state.touch(msg.worker_id)
    n, z, versions = state.store.pull_versioned(msg.keys)
    return encode_response(
        request, wire.VALUES, None, (n, z), default_json=request_is_json(request),
        dtype=state.store.dtype, merge=None if msg.merge is None else (versions,),
    )


@router.post(
    "/pull-groups",
    summary="all keys of whole parameter groups, with n and z",
    response_class=Response,
    openapi_extra=_doc({"groups": [0, 3]}),
)
def pull_groups(request: Request, state: StateDep, body: BodyDep) -> Response:
    """Body: GROUPS or ``{"groups": [...]}`` (sorted unique group ids of this
    shard). Answer: ENTRIES or ``{"keys", "n", "z"}``."""
    msg = decode_body(request, body, wire.GROUPS)
    keys, n, z = state.store.pull_groups(msg.keys)
    return encode_response(
        request, wire.ENTRIES, keys, (n, z), default_json=request_is_json(request),
        dtype=state.store.dtype,
    )


@router.post(
    "/push",
    summary="add deltas to n and z",
    dependencies=[AuthDep],
    openapi_extra=_doc({"keys": [1, 5], "delta_n": [0.25, 1.0], "delta_z": [-0.5, 2.0],
                        "worker_id": 0, "seq": 1}),
)
def push(request: Request, state: StateDep, body: BodyDep) -> dict[str, object]:
    """Body: PUSH or ``{"keys", "delta_n", "delta_z"[, "worker_id", "seq"]}``.

    A push carrying ``(worker_id, seq)`` that this shard already applied is
    acknowledged with ``"applied": false`` and not applied again. A push with
    merge sections (versions pulled, rows, rho) is merged by the ``compose``
    rule (:mod:`ftrl_ps.ps.merge`), one without is added as it is.
    """
    msg = decode_body(request, body, wire.PUSH)
    state.touch(msg.worker_id)
    merge = None if msg.merge is None else (msg.merge[0], msg.merge[1], msg.merge[2])
    applied = state.dedup.apply(
        msg.worker_id, msg.seq,
        lambda: state.store.push(msg.keys, msg.delta_n, msg.delta_z, merge),
    )
    assert msg.keys is not None
    return {"applied": applied, "keys": int(msg.keys.size), "seq": msg.seq}


@router.get(
    "/state",
    summary="every touched key of this shard with n and z (to save a model)",
    response_class=Response,
)
def dump_state(request: Request, state: StateDep) -> Response:
    """Answer: ENTRIES (binary, the default) or JSON ``{"keys", "n", "z"}`` when
    ``Accept: application/json``."""
    keys, n, z = state.store.dump()
    return encode_response(
        request, wire.ENTRIES, keys, (n, z), default_json=False, dtype=state.store.dtype
    )

