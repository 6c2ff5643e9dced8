"""The JSON form of the parameter-server bodies (``application/json``).

The same messages as the binary format of :mod:`ftrl_ps.ps.wire`, as objects:
PUSH ``{"keys": [...], "delta_n": [...], "delta_z": [...], "worker_id": 3, "seq": 7}``
(worker fields optional; merge fields ``"versions"``, ``"rows"``, ``"rho"``
all or none), KEYS ``{"keys": [...]}`` (optional ``worker_id``; ``"versions":
true`` asks for versions), VALUES ``{"n": [...], "z": [...]}`` (optional
``"versions"``), GROUPS ``{"groups": [...]}``, ENTRIES ``{"keys": [...],
"n": [...], "z": [...]}``. Both functions are also reachable as
``wire.decode_json`` and ``wire.to_json``.

>>> to_json(KEYS, [1, 5])
{'keys': [1, 5]}
>>> decode_json(b'{"n": [0.5], "z": [1]}', VALUES).values[1].tolist()
[1.0]
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ftrl_ps.errors import ProtocolError
from ftrl_ps.ps.wire import (
    _MERGE_SECTIONS,
    _UINT32_LIMIT,
    ENTRIES,
    GROUPS,
    KEYS,
    PUSH,
    VALUES,
    Message,
)

__all__ = ["decode_json", "to_json"]

_JSON_FIELDS = {
    PUSH: ("keys", ("delta_n", "delta_z")),
    KEYS: ("keys", None),
    VALUES: (None, ("n", "z")),
    GROUPS: ("groups", None),
    ENTRIES: ("keys", ("n", "z")),
}


def _json_ints(data: Any, name: str) -> np.ndarray:
    if not isinstance(data, list):
        raise ProtocolError(f"{name!r} must be a list of integers")
    if not data:
        return np.zeros(0, dtype=np.int64)
    try:
        arr = np.asarray(data)
    except (ValueError, OverflowError) as exc:
        raise ProtocolError(f"{name!r} must be a flat list of integers") from exc
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or any(v is True or v is False for v in data):
        raise ProtocolError(f"{name!r} must be a flat list of integers")
    if int(arr.min()) < 0 or int(arr.max()) >= _UINT32_LIMIT:
        raise ProtocolError(f"{name!r} must hold integers in [0, 2**32)")
    return arr.astype(np.int64, copy=False)


def _json_floats(data: Any, name: str) -> np.ndarray:
    if not isinstance(data, list):
        raise ProtocolError(f"{name!r} must be a list of numbers")
    if not data:
        return np.zeros(0, dtype=np.float64)
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in data):
        raise ProtocolError(f"{name!r} must be a flat list of numbers")
    return np.asarray(data, dtype=np.float64)


def _json_uint(obj: dict[str, Any], name: str, limit: int) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise ProtocolError(f"{name!r} must be a non-negative integer below {limit}")
    return value


def decode_json(body: bytes | str, kind: int) -> Message:
    """Parse a JSON body of the given kind (see the module docstring)."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"invalid JSON body: {exc}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError("JSON body must be an object")
    key_field, value_fields = _JSON_FIELDS[kind]
    allowed = {key_field, *(value_fields or ())} - {None}
    optional = {"worker_id", "seq"} if kind in (PUSH, KEYS) else set()
    spec = _MERGE_SECTIONS.get(kind, ())
    optional |= {name for name, _ in spec} | ({"versions"} if kind == KEYS else set())
    unknown = set(obj) - allowed - optional
    if unknown:
        raise ProtocolError(
            f"unknown fields {sorted(unknown)}; expected {sorted(allowed | optional)}"
        )
    missing = {f for f in allowed if f not in obj}
    if missing:
        raise ProtocolError(f"missing fields {sorted(missing)}")
    keys = _json_ints(obj[key_field], key_field) if key_field else None
    values = None
    if value_fields:
        a = _json_floats(obj[value_fields[0]], value_fields[0])
        b = _json_floats(obj[value_fields[1]], value_fields[1])
        values = (a, b)
    worker_id = _json_uint(obj, "worker_id", _UINT32_LIMIT)
    seq = _json_uint(obj, "seq", 1 << 64) or 0
    if seq and worker_id is None:
        raise ProtocolError("'seq' needs a 'worker_id'")
    return Message(kind, keys, values, worker_id, seq, _json_merge(obj, kind, spec))


def _json_merge(obj: dict[str, Any], kind: int, spec: tuple[tuple[str, bool], ...]
                ) -> tuple[np.ndarray, ...] | None:
    if kind == KEYS:
        if obj.get("versions", False) not in (True, False):
            raise ProtocolError("'versions' must be true or false")
        return () if obj.get("versions") else None
    given = [name for name, _ in spec if name in obj]
    if not given:
        return None
    if len(given) != len(spec):
        raise ProtocolError(f"merge fields {[n for n, _ in spec]} go together; got {given}")
    return tuple(_json_ints(obj[n], n) if u32 else _json_floats(obj[n], n) for n, u32 in spec)


def to_json(kind: int, keys: Any = None, values: tuple[Any, Any] | None = None,
            merge: tuple[Any, ...] | None = None) -> dict[str, Any]:
    """A JSON-ready dict of a message (keys as ints, values as floats)."""
    key_field, value_fields = _JSON_FIELDS[kind]
    out: dict[str, Any] = {}
    if key_field:
        out[key_field] = np.asarray(keys).tolist()
    if value_fields:
        assert values is not None
        out[value_fields[0]] = np.asarray(values[0], dtype=np.float64).tolist()
        out[value_fields[1]] = np.asarray(values[1], dtype=np.float64).tolist()
    if merge is not None and kind == KEYS:
        out["versions"] = True
    elif merge is not None:
        for (name, u32), arr in zip(_MERGE_SECTIONS[kind], merge, strict=True):
            out[name] = np.asarray(arr, dtype=np.int64 if u32 else np.float64).tolist()
    return out
