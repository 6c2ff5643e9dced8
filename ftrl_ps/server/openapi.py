"""The shard's OpenAPI schema: typed request bodies and every status code it answers.

FastAPI derives most of the schema from the routes; this module completes it:

* the JSON request bodies of ``/v1/pull``, ``/v1/pull-groups`` and ``/v1/push``
  (read by :mod:`ftrl_ps.ps.wire`, not by pydantic) get exact schemas, with this
  shard's key and group ranges as bounds;
* every operation lists the error answers it can give (``{"error", "detail"}``,
  status codes from :mod:`ftrl_ps.ps.http_status`), and FastAPI's unused 422 is
  replaced by the 400 that validation errors really get;
* with a token, a bearer security scheme applies to every route but the open
  ones of :data:`ftrl_ps.server.deps.OPEN_PATHS` (probes, the dashboard's page).

The binary format (``application/x-ftrl-ps``) is described in the operations'
text: a JSON Schema cannot describe it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from ftrl_ps.ps.shard_settings import ServerSettings
from ftrl_ps.ps.wire_json import JSON_INT_LIMIT, JSON_VALUE_LIMIT
from ftrl_ps.server.deps import OPEN_PATHS, OPEN_PREFIXES

__all__ = ["install_openapi", "request_schemas"]

_U32 = (1 << 32) - 1
_U63 = JSON_INT_LIMIT

#: error answers per path prefix (besides 401 with a token and 400/408/413 for bodies)
_ERRORS: dict[str, dict[int, str]] = {
    "/v1/pull": {},
    "/v1/pull-groups": {},
    "/v1/push": {404: "unknown worker epoch (shard 0)",
                 409: "superseded or unknown epoch, reused seq, gap (PushGapError)"},
    "/v1/state": {503: "too many exports running: retry"},
    "/v1/workers": {404: "unknown worker id", 408: "clock wait timed out",
                    409: "layout/worker conflict, dead or finished worker"},
    "/v1/streams": {409: "superseded epoch, or not the live registration"},
    "/v1/work": {409: "no plan or another plan loaded, or a unit that is not this worker's"},
    "/v1/status": {},
    "/ready": {503: "not ready"},
}
_NUMBERS = {"type": "array", "items": {"type": "number"}}
_KEYS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
#: JSON answers of the wire-format routes
_ANSWERS: dict[str, dict[str, Any]] = {
    "/v1/pull": {"type": "object", "required": ["n", "z"],
                 "properties": {"n": _NUMBERS, "z": _NUMBERS}},
    "/v1/pull-groups": {"type": "object", "required": ["keys", "n", "z"],
                        "properties": {"keys": _KEYS, "n": _NUMBERS, "z": _NUMBERS}},
}
_BODY_ERRORS = {400: "malformed or invalid request", 408: "the request body stalled",
                413: "request body too large"}


def request_schemas(settings: ServerSettings) -> dict[str, dict[str, Any]]:
    """JSON Schemas of the wire-format request bodies, bounded by this shard."""
    lay = settings.layout
    begin, end = lay.shard_range(settings.shard_index)
    g_begin, g_end = lay.shard_group_range(settings.shard_index)

    def ids(lo: int, hi: int) -> dict[str, Any]:
        return {"type": "array", "uniqueItems": True,
                "items": {"type": "integer", "minimum": lo, "maximum": hi - 1}}

    def value(lo: float) -> dict[str, Any]:
        return {"type": "number", "minimum": lo, "maximum": JSON_VALUE_LIMIT}

    origin = {
        "type": "object", "additionalProperties": False,
        "required": ["worker", "epoch", "seq", "prev_seq", "position"],
        "properties": {
            "worker": {"type": "integer", "minimum": 0, "maximum": _U32},
            "epoch": {"type": "integer", "minimum": 0, "maximum": _U63},
            "seq": {"type": "integer", "minimum": 1, "maximum": _U63},
            "prev_seq": {"type": "integer", "minimum": 0, "maximum": _U63},
            "position": {"type": "integer", "minimum": 0, "maximum": _U63},
        },
        "description": "who pushes and where this push stands in its stream "
                       "(docs/durability.md); omit for an anonymous push",
    }
    return {
        "/v1/pull": {"type": "object", "additionalProperties": False, "required": ["keys"],
                     "properties": {"keys": ids(begin, end)}},
        "/v1/pull-groups": {"type": "object", "additionalProperties": False,
                            "required": ["groups"], "properties": {"groups": ids(g_begin, g_end)}},
        "/v1/push": {
            "type": "object", "additionalProperties": False, "required": ["entries"],
            "properties": {
                "entries": {"type": "array", "description": "[key, delta_n, delta_z]; "
                            "repeated keys are summed",
                            "items": {"type": "array", "minItems": 3, "maxItems": 3,
                                      "prefixItems": [
                                          {"type": "integer", "minimum": begin,
                                           "maximum": end - 1},
                                          value(0.0), value(-JSON_VALUE_LIMIT)]}},
                "origin": origin,
            },
        },
    }


def _error_response(text: str) -> dict[str, Any]:
    return {"description": text, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/Error"}}}}


def install_openapi(app: FastAPI) -> None:
    """Replace ``app.openapi`` by one that completes FastAPI's schema (cached)."""
    settings: ServerSettings = app.state.ftrl.settings
    bodies = request_schemas(settings)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, summary=app.summary,
                             routes=app.routes)
        comps = schema.setdefault("components", {})
        comps.setdefault("schemas", {})["Error"] = {
            "type": "object", "required": ["error", "detail"],
            "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
        }
        for name in ("HTTPValidationError", "ValidationError"):
            comps["schemas"].pop(name, None)
        if settings.token is not None:
            comps["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        for path, item in schema.get("paths", {}).items():
            for method, op in item.items():
                _complete(path, method, op, bodies, settings.token is not None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _complete(path: str, method: str, op: dict[str, Any], bodies: dict[str, Any],
              auth: bool) -> None:
    responses = op.setdefault("responses", {})
    responses.pop("422", None)
    if path == "/dashboard/{name}":  # the page's files: any other name is no operation
        from ftrl_ps.server.routes_dashboard import ASSETS

        for param in op.get("parameters", []):
            if param.get("name") == "name":
                param["schema"] = {"type": "string", "enum": sorted(ASSETS)}
    if path in bodies:
        op["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": bodies[path]}}}
    if path in _ANSWERS:
        responses["200"] = {"description": "the values (JSON, or binary when asked for "
                            "with Accept: application/x-ftrl-ps)",
                            "content": {"application/json": {"schema": _ANSWERS[path]},
                                        "application/x-ftrl-ps": {"schema": {
                                            "type": "string", "format": "binary"}}}}
    errors: dict[int, str] = {}
    for prefix, codes in _ERRORS.items():
        if path == prefix or path.startswith(prefix + "/"):
            errors.update(codes)
    if method == "post" or op.get("parameters"):
        errors.update(_BODY_ERRORS)
    if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
        op["security"] = []
    elif auth:
        op["security"] = [{"bearer": []}]
        errors[401] = "missing or wrong bearer token"
    for code, text in sorted(errors.items()):
        responses.setdefault(str(code), _error_response(text))
