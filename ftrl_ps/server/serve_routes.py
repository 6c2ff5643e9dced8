"""Routes of the prediction service: predict, learn, status, health, readiness.

::

    POST /v1/predict   rows -> {"probabilities": [...], "model_version": V}   [predict token]
    POST /v1/learn     labelled rows -> {"accepted": N, "ticket": T, ...}     [token]
    GET  /v1/status    model, source (reload/refresh errors), learner, freshness  [*]
    GET  /health       liveness: the process answers
    GET  /ready        readiness: 200 once a model is served (also while its source
                       fails: the last model stays served), else 503

[*] and the docs, /openapi.json and /metrics: the token, else the predict token,
when either is set (``server.serve_app``).

Bodies by ``Content-Type``: ``text/plain`` (libsvm lines), ``application/json``
(``{"rows": [{"features": {...}, "label": y}]}``) or ``application/x-ftrl-ps``
(binary ROWS, :mod:`ftrl_ps.ps.rowwire`); see :mod:`ftrl_ps.data.bodies`. A
binary request gets a binary PROBS answer unless ``Accept`` asks for JSON.
A malformed row answers 400 naming the line (text) or row (JSON) and the
field, and nothing of that request is scored or learned.

Predict is an ``async`` handler: a small request (under 16 KiB: a few rows)
is scored on the event loop without a thread hop; a larger one is parsed and
scored in the threadpool, so batch requests use every core. Learn parses and queues in the
threadpool because it may wait for room in the learner's queue.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ftrl_ps.ps import rowwire, wire
from ftrl_ps.ps.service import PredictionService
from ftrl_ps.server.deps import check_request_token, content_type

__all__ = ["INLINE_BYTES", "learn_router", "router"]

#: predict bodies up to this size are scored on the event loop (no thread hop)
INLINE_BYTES = 16 << 10

router = APIRouter(tags=["serving"])
learn_router = APIRouter(tags=["serving"])

_BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "text/plain": {"schema": {"type": "string"}, "example": "1 3:0.5 17:1\n0 5:1\n"},
            wire.JSON_MEDIA_TYPE: {
                "schema": {"type": "object"},
                "example": {"rows": [{"features": {"user=42": 1, "123": 0.5}, "label": 1}]},
            },
            wire.BINARY_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


def _service(request: Request) -> PredictionService:
    service: PredictionService = request.app.state.serving
    return service


def _wants_json(request: Request, media_type: str) -> bool:
    accept = request.headers.get("accept", "")
    if wire.BINARY_MEDIA_TYPE in accept:
        return False
    return media_type != wire.BINARY_MEDIA_TYPE or wire.JSON_MEDIA_TYPE in accept


@router.post("/v1/predict", summary="P(y=1) of every row", response_class=Response,
             openapi_extra=_BODY_DOC)
async def predict(request: Request) -> Response:
    """Score rows (labels optional and ignored) with the served model."""
    service = _service(request)
    check_request_token(request, request.app.state.predict_token)
    media_type = content_type(request.scope)
    body = await request.body()
    if len(body) < INLINE_BYTES:
        probs, version = service.predict(body, media_type)
    else:  # parse in a thread (the kernel releases the GIL): requests run in parallel
        probs, version = await run_in_threadpool(service.predict, body, media_type)
    if _wants_json(request, media_type):
        text = json.dumps({"probabilities": probs.tolist(), "model_version": version})
        return Response(text, media_type=wire.JSON_MEDIA_TYPE)
    return Response(rowwire.encode_probs(probs, version=version),
                    media_type=wire.BINARY_MEDIA_TYPE)


@learn_router.post("/v1/learn", summary="learn from labelled rows (online)",
                   response_class=JSONResponse, openapi_extra=_BODY_DOC)
async def learn(request: Request) -> JSONResponse:
    """Queue labelled rows for the online learner; they reach the cluster within
    ``--push-interval`` seconds and the served model with the next refresh.
    503 when the learner's queue stays too full for the request (retry later), 413
    for a request with more rows than the whole queue (``--max-queue-rows``)."""
    service = _service(request)
    check_request_token(request, request.app.state.token)
    media_type = content_type(request.scope)
    body = await request.body()
    result = await run_in_threadpool(service.learn, body, media_type)
    return JSONResponse(result)


@router.get("/v1/status", summary="model, source, learner and freshness")
def status(request: Request) -> dict[str, object]:
    """Everything an operator wants to know; a failed reload or refresh shows as
    ``source.healthy: false`` with its error, while the previous model stays served."""
    return _service(request).status()


@router.get("/health", summary="liveness probe")
async def health() -> dict[str, str]:
    """``{"status": "ok"}`` while the process answers."""
    return {"status": "ok"}


@router.get("/ready", summary="readiness probe")
async def ready(request: Request) -> JSONResponse:
    """200 ``{"ready": true, "model_version": V, "source_healthy": H}`` once a model is
    served, else 503. A failing source (``source_healthy: false``) keeps the last
    model served and the service ready: a stale model beats no answer."""
    service = _service(request)
    ok = service.ready()
    return JSONResponse({"ready": ok, "model_version": service.served.version,
                         "source_healthy": service.source_healthy()},
                        status_code=200 if ok else 503)
