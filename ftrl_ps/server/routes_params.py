"""``/v1/pull``, ``/v1/pull-groups``, ``/v1/push`` and ``/v1/state``: the parameters.

The handlers are plain ``def`` functions, so FastAPI runs them in its
threadpool: decoding, validation and the store's numpy gathers/scatters (which
release the GIL) of requests that touch different parameter groups run in
parallel. A shard's app answers binary pushes and pulls before they reach
these routes (:mod:`ftrl_ps.server.hotpath`), with the same functions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from ftrl_ps.errors import UnavailableError
from ftrl_ps.ps import wire
from ftrl_ps.ps.state import ServerState
from ftrl_ps.server.deps import (
    AuthDep,
    BodyDep,
    StateDep,
    decode_body,
    encode_response,
    request_is_json,
    response_is_json,
)

__all__ = ["answer_pull", "answer_push", "router"]

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


def answer_push(state: ServerState, msg: wire.Message) -> dict[str, object]:
    """The answer to a decoded PUSH (applied exactly once: ServerState.push)."""
    return state.push(msg)


def answer_pull(state: ServerState, msg: wire.Message) -> tuple[Any, Any, Any]:
    """``(n, z, merge)`` at a decoded KEYS message's keys, in their order;
    ``merge`` is ``(versions,)`` if the message asks for versions (only a
    shard of a versioned merge rule keeps them: ProtocolError from others)."""
    if msg.merge is not None:
        state.store.require_versions("a pull asking for versions")
    n, z, versions = state.store.pull_versioned(msg.keys)
    return n, z, None if msg.merge is None else (versions,)


def _sorted_if_json(request: Request, ids: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """JSON bodies may list ids in any order: ``(sorted ids, their positions in
    the request)``; binary ones stay as sent (the store checks their order)."""
    arr = np.asarray(ids)
    if arr.size < 2 or not request_is_json(request) or bool((np.diff(arr) > 0).all()):
        return arr, None
    order = np.argsort(arr, kind="stable")
    return arr[order], order


@router.post(
    "/pull",
    summary="n and z of sorted unique keys",
    response_class=Response,
    openapi_extra=_doc({"keys": [1, 5, 1024]}),
)
def pull(request: Request, state: StateDep, body: BodyDep) -> Response:
    """Body: KEYS (binary: sorted unique keys) or ``{"keys": [...]}`` (unique keys
    in any order; the merge flag or ``"versions": true`` asks for the keys'
    versions too, which only a shard of a versioned merge rule keeps: 400 from
    the others). Answer: VALUES or ``{"n": [...], "z": [...]}``, in the
    request's key order."""
    msg = decode_body(request, body, wire.KEYS)
    keys, order = _sorted_if_json(request, msg.keys)
    n, z, merge = answer_pull(state, replace(msg, keys=keys))
    if order is not None:
        n[order], z[order] = n.copy(), z.copy()
        if merge is not None:
            merge[0][order] = merge[0].copy()
    return encode_response(
        request, wire.VALUES, None, (n, z), default_json=request_is_json(request),
        dtype=state.store.dtype, merge=merge,
    )


@router.post(
    "/pull-groups",
    summary="all keys of whole parameter groups, with n and z",
    response_class=Response,
    openapi_extra=_doc({"groups": [0, 3]}),
)
def pull_groups(request: Request, state: StateDep, body: BodyDep) -> Response:
    """Body: GROUPS (sorted unique group ids of this shard) or ``{"groups":
    [...]}`` (unique, any order). Answer: ENTRIES or ``{"keys", "n", "z"}``."""
    msg = decode_body(request, body, wire.GROUPS)
    keys, n, z = state.store.pull_groups(_sorted_if_json(request, msg.keys)[0])
    return encode_response(
        request, wire.ENTRIES, keys, (n, z), default_json=request_is_json(request),
        dtype=state.store.dtype,
    )


@router.post(
    "/push",
    summary="add deltas to n and z",
    dependencies=[AuthDep],
    openapi_extra=_doc({"keys": [1, 5], "delta_n": [0.25, 1.0], "delta_z": [-0.5, 2.0]}),
)
def push(request: Request, state: StateDep, body: BodyDep) -> dict[str, object]:
    """Body: PUSH or ``{"keys", "delta_n", "delta_z"[, "worker", "epoch", "seq",
    "prev_seq", "position"]}``.

    A push with worker fields is applied exactly once (docs/durability.md): a
    retry of an applied push is acknowledged with ``"applied": false``; a
    superseded or unknown epoch, a reused seq or a gap (``PushGapError``: the
    shard lacks earlier pushes) is a 409.
    """
    return answer_push(state, decode_body(request, body, wire.PUSH))


#: entries per message of a state export (bounded memory per export); the store
#: is scanned :data:`STATE_SCAN_KEYS` keys at a time and its touched entries
#: gathered into messages: at 2**26 keys and 1.2M touched, 65,536-key scans sent
#: one small message each (1,024 of them) and took 0.20 s, messages of 65,536
#: entries 19 messages and 0.07 s
STATE_CHUNK_KEYS, STATE_SCAN_KEYS = 1 << 16, 1 << 18
NDJSON_MEDIA_TYPE = "application/x-ndjson"


@router.get(
    "/state",
    summary="every touched key of this shard with n and z (to save a model), streamed",
    response_class=StreamingResponse,
    responses={200: {"content": {
        wire.BINARY_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
        NDJSON_MEDIA_TYPE: {"schema": {"type": "string"}},
    }, "description": "ENTRIES messages, the last one empty"}},
)
def dump_state(request: Request, state: StateDep) -> StreamingResponse:
    """Answer: a stream of ENTRIES messages of at most 65,536 keys each, in key
    order, ended by an empty one (so a cut answer is detected); with ``Accept:
    application/json`` (or ``application/x-ndjson``) one JSON object
    ``{"keys", "n", "z"}`` per line instead. Memory stays at one chunk per
    export; at most ``max_exports`` run at once, more get 503 (retry)."""
    if not state.exports.acquire(blocking=False):
        raise UnavailableError(
            f"{state.settings.max_exports} state export(s) already running; retry later"
        )
    as_json = response_is_json(request, default_json=False) or (
        NDJSON_MEDIA_TYPE in request.headers.get("accept", ""))
    dtype = state.store.dtype

    def chunks() -> Iterator[bytes]:
        for keys, n, z in _gathered(state.store.iter_touched(STATE_SCAN_KEYS),
                                    STATE_CHUNK_KEYS):
            yield _entries(keys, n, z, as_json, dtype)
        empty = np.zeros(0, dtype)
        yield _entries(np.zeros(0, np.uint32), empty, empty, as_json, dtype)

    media = NDJSON_MEDIA_TYPE if as_json else wire.BINARY_MEDIA_TYPE
    return StreamingResponse(_Releasing(chunks(), state.exports.release), media_type=media)


def _gathered(parts: Iterator[tuple[np.ndarray, ...]], limit: int
              ) -> Iterator[tuple[np.ndarray, ...]]:
    """``parts`` (tuples of equal-length arrays) regrouped into pieces of exactly
    ``limit`` entries, the last one shorter (none empty), in order."""
    held: list[tuple[np.ndarray, ...]] = []
    size = 0
    for part in parts:
        held.append(part)
        size += len(part[0])
        if size < limit:
            continue
        # one copy per crossing of a piece's end; the pieces are views of it
        joined = _joined(held)
        full = size - size % limit
        for at in range(0, full, limit):
            yield tuple(a[at:at + limit] for a in joined)
        held, size = ([tuple(a[full:] for a in joined)] if size > full else []), size - full
    if size:
        yield _joined(held)


def _joined(held: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    return held[0] if len(held) == 1 else tuple(
        np.concatenate(col) for col in zip(*held, strict=True))


class _Releasing:
    """An iterator that calls ``release`` once when exhausted, closed or collected
    (also if the answer was never started, e.g. the client went away)."""

    def __init__(self, it: Iterator[bytes], release: Any) -> None:
        self._it, self._release = it, release

    def __iter__(self) -> _Releasing:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._it)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def __del__(self) -> None:
        self.close()


def _entries(keys: np.ndarray, n: np.ndarray, z: np.ndarray, as_json: bool,
             dtype: np.dtype) -> bytes:
    if as_json:
        return json.dumps(wire.to_json(wire.ENTRIES, keys, (n, z))).encode() + b"\n"
    return wire.encode_entries(keys, n, z, dtype=dtype)
