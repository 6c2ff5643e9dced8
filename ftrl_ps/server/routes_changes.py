"""``GET /v1/changes``: the touched keys of the groups written since a version.

What a prediction service (``ftrl-ps serve --server``) pulls to refresh its
copy of the model: only the parameter groups that pushes (or a loaded model)
wrote after the version it last saw, and of those only keys whose state is
not zero (see :mod:`ftrl_ps.ps.changes`). It reads the model, so it needs
the bearer token when the server has one.
"""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from ftrl_ps.ps import wire
from ftrl_ps.ps.changes import INSTANCE_HEADER, VERSION_HEADER
from ftrl_ps.server.deps import AuthDep, StateDep, response_is_json

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["parameters"])


@router.get(
    "/changes",
    summary="touched keys (n, z) of the parameter groups written since a version",
    response_class=Response,
    dependencies=[AuthDep],
)
def changes(
    request: Request,
    state: StateDep,
    since: int = Query(0, ge=0, description="the version of the previous answer (0: all)"),
) -> Response:
    """Answer: ENTRIES (binary, the default) or JSON ``{"version", "instance", "keys",
    "n", "z"}``; the binary answer carries the version and instance in the
    ``X-Ftrl-Ps-Version`` / ``X-Ftrl-Ps-Instance`` headers. A different instance
    than before means the shard restarted: read everything again (``since=0``)."""
    store = state.store
    version, keys, n, z = store.changed_since(since)
    headers = {VERSION_HEADER: str(version), INSTANCE_HEADER: store.changes.instance}
    if response_is_json(request, default_json=False):
        body = wire.to_json(wire.ENTRIES, keys, (n, z))
        body.update(version=version, instance=store.changes.instance)
        return JSONResponse(body, headers=headers)
    return Response(wire.encode_entries(keys, n, z, dtype=store.dtype),
                    media_type=wire.BINARY_MEDIA_TYPE, headers=headers)
