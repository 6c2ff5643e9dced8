"""Request/response bodies of the parameter server: a compact binary format and JSON.

Binary format (media type ``application/x-ftrl-ps``), all little-endian::

    offset size  field
    0      4     magic  b"FTPS"
    4      1     version (1)
    5      1     kind: 1 PUSH, 2 KEYS, 3 VALUES, 4 GROUPS, 5 ENTRIES
    6      2     flags: bit 0 = values are float64 (else float32),
                        bit 1 = worker_id and seq are set,
                        bit 2 = merge sections (below)
    8      4     count: number of keys (uint32)
    12     4     worker_id (uint32; 0 unless flag bit 1)
    16     8     seq: per-worker push sequence number (uint64; 0 unless bit 1)
    24     ...   sections, by kind:
                 PUSH     keys uint32[count], delta_n[count], delta_z[count]
                 KEYS     keys uint32[count]            (pull request)
                 VALUES   n[count], z[count]            (pull response)
                 GROUPS   group ids uint32[count]       (pull-groups request)
                 ENTRIES  keys uint32[count], n[count], z[count]
                          (pull-groups response, state dump)

With flag bit 2 (the ``compose`` merge rule, :mod:`ftrl_ps.ps.merge`) a KEYS
body asks for versions, a VALUES body ends with ``versions uint32[count]``
and a PUSH body ends with ``versions uint32[count], rows uint32[count],
rho[count]`` (the versions pulled, the push's rows containing each key, the
round's saturation; ``rho`` in the values' float type).

A value section starts at the next multiple of its item size (4 bytes of zero
padding after an odd number of keys when values are float64). The body must
have exactly the length these fields imply. Decoding is zero-copy
(:func:`numpy.frombuffer`): decoded arrays are read-only views of the body.

JSON (``application/json``) carries the same messages as objects; see
:mod:`ftrl_ps.ps.wire_json` (``decode_json`` and ``to_json`` are re-exported here).

Examples
--------
>>> import numpy as np
>>> body = encode_push(np.array([1, 5]), np.array([0.5, 1.0]), np.array([-1.0, 2.0]),
...                    worker_id=3, seq=9)
>>> len(body)
48
>>> msg = decode(body, PUSH)
>>> msg.keys.tolist(), msg.delta_z.tolist(), msg.worker_id, msg.seq
([1, 5], [-1.0, 2.0], 3, 9)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ftrl_ps.errors import ProtocolError

__all__ = [
    "BINARY_MEDIA_TYPE",
    "ENTRIES",
    "GROUPS",
    "HEADER_SIZE",
    "JSON_MEDIA_TYPE",
    "KEYS",
    "PUSH",
    "VALUES",
    "Message",
    "decode",
    "decode_json",
    "encode",
    "encode_entries",
    "encode_groups",
    "encode_keys",
    "encode_push",
    "encode_values",
    "to_json",
]

BINARY_MEDIA_TYPE = "application/x-ftrl-ps"
JSON_MEDIA_TYPE = "application/json"

MAGIC = b"FTPS"
VERSION = 1
PUSH, KEYS, VALUES, GROUPS, ENTRIES = 1, 2, 3, 4, 5
KIND_NAMES = {PUSH: "PUSH", KEYS: "KEYS", VALUES: "VALUES", GROUPS: "GROUPS", ENTRIES: "ENTRIES"}
FLAG_FLOAT64 = 1
FLAG_WORKER = 2
FLAG_MERGE = 4

_HEADER = struct.Struct("<4sBBHIIQ")
HEADER_SIZE = _HEADER.size  # 24
_UINT32_LIMIT = 1 << 32
# kind -> (has a uint32 key section, number of value sections)
_SECTIONS = {PUSH: (True, 2), KEYS: (True, 0), VALUES: (False, 2), GROUPS: (True, 0),
             ENTRIES: (True, 2)}
# kind -> the sections flag bit 2 adds: name, and True for a uint32 section (else values' type)
_MERGE_SECTIONS: dict[int, tuple[tuple[str, bool], ...]] = {
    KEYS: (), VALUES: (("versions", True),),
    PUSH: (("versions", True), ("rows", True), ("rho", False)),
}


@dataclass(frozen=True)
class Message:
    """A decoded body. ``keys`` holds group ids for GROUPS; ``values`` is
    ``(delta_n, delta_z)`` for PUSH and ``(n, z)`` for VALUES/ENTRIES. ``merge``
    holds the merge sections (flag bit 2) in order; ``()`` for a KEYS body that
    asks for versions; None without the flag."""

    kind: int
    keys: np.ndarray | None = None
    values: tuple[np.ndarray, np.ndarray] | None = None
    worker_id: int | None = None
    seq: int = 0
    merge: tuple[np.ndarray, ...] | None = None

    @property
    def delta_n(self) -> np.ndarray:
        assert self.values is not None
        return self.values[0]

    @property
    def delta_z(self) -> np.ndarray:
        assert self.values is not None
        return self.values[1]


# --- binary --------------------------------------------------------------------------
def _keys_u32(keys: Any, name: str) -> np.ndarray:
    arr = np.asarray(keys)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ProtocolError(f"{name} must be a 1-D integer array")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= _UINT32_LIMIT):
        raise ProtocolError(f"{name} must fit in uint32")
    return arr.astype("<u4", copy=False)


def encode(
    kind: int,
    keys: Any = None,
    values: tuple[Any, Any] | None = None,
    *,
    worker_id: int | None = None,
    seq: int = 0,
    dtype: Any = None,
    merge: tuple[Any, ...] | None = None,
) -> bytes:
    """Encode one message (see the module docstring for the layout).

    ``dtype`` (float32, the default, or float64) picks the value encoding;
    ``merge`` the merge sections of a KEYS (``()``), VALUES or PUSH body.
    """
    if kind not in _SECTIONS:
        raise ProtocolError(f"unknown message kind {kind}")
    has_keys, n_values = _SECTIONS[kind]
    if has_keys != (keys is not None) or (n_values > 0) != (values is not None):
        raise ProtocolError(f"{KIND_NAMES[kind]} needs keys={has_keys}, values={n_values > 0}")
    parts: list[bytes] = []
    count = 0
    offset = HEADER_SIZE
    if has_keys:
        k = _keys_u32(keys, "keys")
        count = k.size
        parts.append(k.tobytes())
        offset += 4 * count
    flags = 0
    dt = np.dtype(np.float32 if dtype is None else dtype)
    if dt not in (np.float32, np.float64):
        raise ProtocolError(f"values must be float32 or float64, not {dt}")
    if values is not None:
        a, b = np.asarray(values[0]), np.asarray(values[1])
        if not has_keys:
            count = a.size
        if a.ndim != 1 or b.ndim != 1 or a.size != count or b.size != count:
            raise ProtocolError(
                f"value arrays must be 1-D with {count} entries, got {a.shape} and {b.shape}"
            )
        if dt == np.float64:
            flags |= FLAG_FLOAT64
        pad = -offset % dt.itemsize
        if pad:
            parts.append(b"\0" * pad)
        little = dt.newbyteorder("<")
        parts.append(a.astype(little, copy=False).tobytes())
        parts.append(b.astype(little, copy=False).tobytes())
    if merge is not None:
        flags |= FLAG_MERGE
        parts.extend(_encode_merge(kind, merge, count, dt,
                                   HEADER_SIZE + sum(len(p) for p in parts)))
    if worker_id is not None:
        if not 0 <= worker_id < _UINT32_LIMIT or not 0 <= seq < 1 << 64:
            raise ProtocolError("worker_id must fit in uint32 and seq in uint64")
        flags |= FLAG_WORKER
    header = _HEADER.pack(MAGIC, VERSION, kind, flags, count, worker_id or 0,
                          seq if worker_id is not None else 0)
    return header + b"".join(parts)


def _encode_merge(kind: int, merge: tuple[Any, ...], count: int, dt: np.dtype,
                  offset: int) -> list[bytes]:
    spec = _MERGE_SECTIONS.get(kind)
    if spec is None or len(merge) != len(spec):
        raise ProtocolError(f"{KIND_NAMES[kind]} takes {len(spec or ())} merge sections, "
                            f"got {len(merge)}" if spec is not None else
                            f"{KIND_NAMES[kind]} has no merge sections")
    out = []
    for (name, is_u32), arr in zip(spec, merge, strict=True):
        a = _keys_u32(arr, name) if is_u32 else np.asarray(arr, dtype=dt.newbyteorder("<"))
        if a.shape != (count,):
            raise ProtocolError(f"{name} must have {count} entries, got {a.shape}")
        pad = -offset % a.itemsize
        out.append(b"\0" * pad + a.tobytes())
        offset += pad + a.nbytes
    return out


def encode_push(keys: Any, delta_n: Any, delta_z: Any, **kw: Any) -> bytes:
    """PUSH body; keywords as :func:`encode` (worker_id, seq, dtype)."""
    return encode(PUSH, keys, (delta_n, delta_z), **kw)


def encode_keys(keys: Any, **kw: Any) -> bytes:
    """KEYS body (a pull request); optional ``worker_id`` for the heartbeat."""
    return encode(KEYS, keys, **kw)


def encode_groups(groups: Any) -> bytes:
    """GROUPS body (a pull-groups request)."""
    return encode(GROUPS, groups)


def encode_values(n: Any, z: Any, **kw: Any) -> bytes:
    """VALUES body (a pull response)."""
    return encode(VALUES, None, (n, z), **kw)


def encode_entries(keys: Any, n: Any, z: Any, **kw: Any) -> bytes:
    """ENTRIES body (pull-groups response, state dump)."""
    return encode(ENTRIES, keys, (n, z), **kw)


def decode(body: bytes | bytearray | memoryview, expected_kind: int | None = None) -> Message:
    """Decode and structurally validate a binary body (zero-copy).

    Raises
    ------
    ProtocolError
        Short or truncated body, bad magic/version/kind/flags, a kind other
        than ``expected_kind``, or a length that does not match ``count``.
    """
    size = len(body)
    if size < HEADER_SIZE:
        raise ProtocolError(f"body of {size} bytes is shorter than the {HEADER_SIZE}-byte header")
    magic, version, kind, flags, count, worker_id, seq = _HEADER.unpack_from(body, 0)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic!r}; not an {BINARY_MEDIA_TYPE} body")
    if version != VERSION:
        raise ProtocolError(f"unsupported wire version {version} (this server speaks {VERSION})")
    if kind not in _SECTIONS:
        raise ProtocolError(f"unknown message kind {kind}")
    if expected_kind is not None and kind != expected_kind:
        raise ProtocolError(
            f"expected a {KIND_NAMES[expected_kind]} body, got {KIND_NAMES[kind]}"
        )
    if flags & ~(FLAG_FLOAT64 | FLAG_WORKER | FLAG_MERGE):
        raise ProtocolError(f"unknown flags 0x{flags:04x}")
    spec = _MERGE_SECTIONS.get(kind) if flags & FLAG_MERGE else ()
    if spec is None:
        raise ProtocolError(f"{KIND_NAMES[kind]} has no merge sections (flag 0x{FLAG_MERGE:x})")
    has_keys, n_values = _SECTIONS[kind]
    dt = np.dtype("<f8" if flags & FLAG_FLOAT64 else "<f4")
    offset = HEADER_SIZE
    expected = offset + (4 * count if has_keys else 0)
    if n_values:
        expected += -expected % dt.itemsize + n_values * count * dt.itemsize
    for _, is_u32 in spec:
        expected += 4 * count if is_u32 else -expected % dt.itemsize + count * dt.itemsize
    if size != expected:
        what = "truncated" if size < expected else "too long"
        raise ProtocolError(
            f"{KIND_NAMES[kind]} body {what}: count={count} implies {expected} bytes, got {size}"
        )
    keys = None
    if has_keys:
        keys = np.frombuffer(body, dtype="<u4", count=count, offset=offset)
        offset += 4 * count
    values = None
    if n_values:
        offset += -offset % dt.itemsize
        a = np.frombuffer(body, dtype=dt, count=count, offset=offset)
        b = np.frombuffer(body, dtype=dt, count=count, offset=offset + count * dt.itemsize)
        values = (a, b)
        offset += 2 * count * dt.itemsize
    merge = None
    if flags & FLAG_MERGE:
        sections = []
        for _, is_u32 in spec:
            item = np.dtype("<u4") if is_u32 else dt
            offset += -offset % item.itemsize
            sections.append(np.frombuffer(body, dtype=item, count=count, offset=offset))
            offset += count * item.itemsize
        merge = tuple(sections)
    wid = worker_id if flags & FLAG_WORKER else None
    return Message(kind, keys, values, wid, seq if wid is not None else 0, merge)


# the JSON form lives in its own module; both are used as ``wire.<name>``
from ftrl_ps.ps.wire_json import decode_json, to_json  # noqa: E402  (imports this module)
