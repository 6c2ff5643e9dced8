"""The JSON forms of the parameter-server messages (see :mod:`ftrl_ps.ps.wire`).

PUSH ``{"keys", "delta_n", "delta_z"}`` with optional flat worker fields, or
``{"entries": [[key, delta_n, delta_z], ...], "origin": {...}}`` (the form the
OpenAPI schema documents); KEYS ``{"keys"}``, VALUES ``{"n", "z"}``, GROUPS
``{"groups"}``, ENTRIES ``{"keys", "n", "z"}``. The ``compose`` merge rule's
sections (:data:`~ftrl_ps.ps.messages.MERGE_SECTIONS`): PUSH ``"versions"``,
``"rows"``, ``"rho"`` (all or none), VALUES ``"versions"``, and a KEYS request
``"versions": true`` to ask for them.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ftrl_ps.errors import ProtocolError
from ftrl_ps.ps.messages import (
    ENTRIES,
    GROUPS,
    KEYS,
    MERGE_SECTIONS,
    PUSH,
    UINT32_LIMIT,
    VALUES,
    Message,
    PushOrigin,
)

__all__ = ["JSON_INT_LIMIT", "JSON_VALUE_LIMIT", "decode_json", "to_json"]

_JSON_FIELDS = {
    PUSH: ("keys", ("delta_n", "delta_z")),
    KEYS: ("keys", None),
    VALUES: (None, ("n", "z")),
    GROUPS: ("groups", None),
    ENTRIES: ("keys", ("n", "z")),
}


#: largest integer a JSON body may carry in a worker field (exact in a double)
JSON_INT_LIMIT = (1 << 53) - 1


def _as_int(value: Any) -> int | None:
    """``value`` as an int if JSON Schema calls it an integer (``3`` or ``3.0``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) <= JSON_INT_LIMIT:
        return int(value)
    return None


def _json_ints(data: Any, name: str) -> np.ndarray:
    if not isinstance(data, list):
        raise ProtocolError(f"{name!r} must be a list of integers")
    if not data:
        return np.zeros(0, dtype=np.int64)
    ints = [_as_int(v) for v in data]
    if any(v is None for v in ints):
        raise ProtocolError(f"{name!r} must be a flat list of integers")
    try:
        arr = np.asarray(ints)
    except (ValueError, OverflowError) as exc:
        raise ProtocolError(f"{name!r} must be a flat list of integers") from exc
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ProtocolError(f"{name!r} must be a flat list of integers")
    if int(arr.min()) < 0 or int(arr.max()) >= UINT32_LIMIT:
        raise ProtocolError(f"{name!r} must hold integers in [0, 2**32)")
    return arr.astype(np.int64, copy=False)


def _json_floats(data: Any, name: str) -> np.ndarray:
    if not isinstance(data, list):
        raise ProtocolError(f"{name!r} must be a list of numbers")
    if not data:
        return np.zeros(0, dtype=np.float64)
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in data):
        raise ProtocolError(f"{name!r} must be a flat list of numbers")
    try:
        return np.asarray(data, dtype=np.float64)
    except OverflowError:  # an integer of hundreds of digits
        raise ProtocolError(f"{name!r} holds a number beyond float64's range") from None


_ORIGIN_FIELDS = ("worker", "epoch", "seq", "prev_seq", "position")


def _json_origin(obj: dict[str, Any]) -> PushOrigin | None:
    given = [f for f in _ORIGIN_FIELDS if f in obj]
    if not given:
        return None
    if len(given) != len(_ORIGIN_FIELDS):
        raise ProtocolError(f"a push with worker fields needs all of {list(_ORIGIN_FIELDS)}")
    values = [_as_int(obj[f]) for f in _ORIGIN_FIELDS]
    if any(v is None or v > JSON_INT_LIMIT for v in values):
        raise ProtocolError(f"{list(_ORIGIN_FIELDS)} must be integers up to 2**53 - 1 in JSON")
    return PushOrigin(*values)  # type: ignore[arg-type]


#: largest magnitude of a value in a JSON push of the entries form
JSON_VALUE_LIMIT = 1e30


def _json_entries(obj: dict[str, Any]) -> Message:
    """A PUSH of the ``entries`` form: sorted, repeated keys summed."""
    unknown = set(obj) - {"entries", "origin"}
    if unknown:
        raise ProtocolError(f"unknown fields {sorted(unknown)}; expected ['entries', 'origin']")
    rows = obj["entries"]
    if not isinstance(rows, list) or any(
        not isinstance(r, list) or len(r) != 3 for r in rows
    ):
        raise ProtocolError("'entries' must be a list of [key, delta_n, delta_z] triples")
    keys = _json_ints([r[0] for r in rows], "entries keys")
    dn = _json_floats([r[1] for r in rows], "entries delta_n")
    dz = _json_floats([r[2] for r in rows], "entries delta_z")
    if dn.size and (np.abs(np.concatenate([dn, dz])) > JSON_VALUE_LIMIT).any():
        raise ProtocolError(f"entry values must be within +-{JSON_VALUE_LIMIT:g}")
    uniq, inverse = np.unique(keys, return_inverse=True)
    sum_n, sum_z = np.zeros(uniq.size), np.zeros(uniq.size)
    np.add.at(sum_n, inverse, dn)
    np.add.at(sum_z, inverse, dz)
    origin = obj.get("origin")
    if "origin" in obj and not isinstance(origin, dict):
        raise ProtocolError("'origin' must be an object")
    if origin is not None:
        extra = set(origin) - set(_ORIGIN_FIELDS)
        if extra:
            raise ProtocolError(f"unknown origin fields {sorted(extra)}")
    return Message(PUSH, uniq, (sum_n, sum_z),
                   _json_origin(origin) if origin is not None else None)


def decode_json(body: bytes | str, kind: int) -> Message:
    """Parse a JSON body of the given kind (see the module docstring)."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProtocolError(f"invalid JSON body: {exc}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError("JSON body must be an object")
    if kind == PUSH and "entries" in obj:
        return _json_entries(obj)
    key_field, value_fields = _JSON_FIELDS[kind]
    allowed = {key_field, *(value_fields or ())} - {None}
    required = set(allowed)
    if kind == PUSH:
        allowed |= set(_ORIGIN_FIELDS)
    spec = MERGE_SECTIONS.get(kind, ())
    allowed |= {name for name, _ in spec} | ({"versions"} if kind == KEYS else set())
    unknown = set(obj) - allowed
    if unknown:
        raise ProtocolError(f"unknown fields {sorted(unknown)}; expected {sorted(allowed)}")
    missing = {f for f in required if f not in obj}
    if missing:
        raise ProtocolError(f"missing fields {sorted(missing)}")
    keys = _json_ints(obj[key_field], key_field) if key_field else None
    values = None
    if value_fields:
        a = _json_floats(obj[value_fields[0]], value_fields[0])
        b = _json_floats(obj[value_fields[1]], value_fields[1])
        values = (a, b)
    return Message(kind, keys, values, _json_origin(obj) if kind == PUSH else None,
                   _json_merge(obj, kind, spec))


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
        for (name, u32), arr in zip(MERGE_SECTIONS[kind], merge, strict=True):
            out[name] = np.asarray(arr, dtype=np.int64 if u32 else np.float64).tolist()
    return out
