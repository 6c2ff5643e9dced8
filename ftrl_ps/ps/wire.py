"""Request/response bodies of the parameter server: a compact binary format and JSON.

Binary format (media type ``application/x-ftrl-ps``), all little-endian::

    offset size  field
    0      4     magic  b"FTPS"
    4      1     version (2)
    5      1     kind: 1 PUSH, 2 KEYS, 3 VALUES, 4 GROUPS, 5 ENTRIES
    6      2     flags: bit 0 = values are float64 (else float32),
                        bit 1 = the worker fields are set (PUSH only),
                        bit 2 = merge sections (below)
    8      4     count: number of keys (uint32)
    12     4     worker: the pushing worker's index (uint32)
    16     8     epoch: the worker's registration epoch (uint64)
    24     8     seq: the worker index's push sequence number (uint64, >= 1)
    32     8     prev_seq: seq of this index's previous push to this shard (uint64)
    40     8     position: input rows the worker trained up to this push (uint64)
    48     ...   sections, by kind:
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
round's saturation in the values' float type).

A value section starts at the next multiple of its item size (4 bytes of zero
padding after an odd number of keys when values are float64). The body must
have exactly the length these fields imply. Decoding is zero-copy
(:func:`numpy.frombuffer`): decoded arrays are read-only views of the body.

JSON (``application/json``) carries the same messages as objects:
PUSH ``{"keys": [...], "delta_n": [...], "delta_z": [...], "worker": 3, "epoch": 5,
"seq": 7, "prev_seq": 6, "position": 3500}`` (worker fields optional, all or none;
see docs/durability.md), or, as the OpenAPI schema documents it,
``{"entries": [[key, delta_n, delta_z], ...], "origin": {"worker": 3, ...}}``
(any key order, repeated keys summed, ``|value| <= 1e30``), KEYS ``{"keys": [...]}``,
VALUES ``{"n": [...], "z": [...]}``, GROUPS ``{"groups": [...]}``, ENTRIES
``{"keys": [...], "n": [...], "z": [...]}``.

Examples
--------
>>> import numpy as np
>>> body = encode_push(np.array([1, 5]), np.array([0.5, 1.0]), np.array([-1.0, 2.0]),
...                    origin=PushOrigin(worker=3, epoch=1, seq=9, prev_seq=8, position=70))
>>> len(body)
72
>>> msg = decode(body, PUSH)
>>> msg.keys.tolist(), msg.delta_z.tolist(), msg.origin.worker, msg.origin.seq
([1, 5], [-1.0, 2.0], 3, 9)
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ftrl_ps.errors import ProtocolError
from ftrl_ps.ps.messages import (
    ENTRIES,
    GROUPS,
    KEYS,
    KIND_NAMES,
    MERGE_SECTIONS,
    PUSH,
    UINT32_LIMIT,
    VALUES,
    Message,
    PushOrigin,
)
from ftrl_ps.ps.wire_json import JSON_VALUE_LIMIT, decode_json, to_json

__all__ = [
    "BINARY_MEDIA_TYPE",
    "ENTRIES",
    "GROUPS",
    "HEADER_SIZE",
    "JSON_MEDIA_TYPE",
    "JSON_VALUE_LIMIT",
    "KEYS",
    "PUSH",
    "VALUES",
    "Message",
    "PushOrigin",
    "decode",
    "decode_json",
    "encode",
    "encode_entries",
    "encode_groups",
    "encode_keys",
    "encode_push",
    "encode_values",
    "iter_messages",
    "message_size",
    "to_json",
]

BINARY_MEDIA_TYPE = "application/x-ftrl-ps"
JSON_MEDIA_TYPE = "application/json"

MAGIC = b"FTPS"
VERSION = 2
FLAG_FLOAT64 = 1
FLAG_WORKER = 2
FLAG_MERGE = 4

_HEADER = struct.Struct("<4sBBHIIQQQQ")
HEADER_SIZE = _HEADER.size  # 48
# kind -> (has a uint32 key section, number of value sections)
_SECTIONS = {PUSH: (True, 2), KEYS: (True, 0), VALUES: (False, 2), GROUPS: (True, 0),
             ENTRIES: (True, 2)}


# --- binary --------------------------------------------------------------------------
def _keys_u32(keys: Any, name: str) -> np.ndarray:
    arr = np.asarray(keys)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ProtocolError(f"{name} must be a 1-D integer array")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= UINT32_LIMIT):
        raise ProtocolError(f"{name} must fit in uint32")
    return arr.astype("<u4", copy=False)


def encode(
    kind: int,
    keys: Any = None,
    values: tuple[Any, Any] | None = None,
    *,
    origin: PushOrigin | None = None,
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
    fields = (0, 0, 0, 0, 0)
    if origin is not None:
        if kind != PUSH:
            raise ProtocolError("only a PUSH carries worker fields")
        flags |= FLAG_WORKER
        fields = (origin.worker, origin.epoch, origin.seq, origin.prev_seq, origin.position)
    header = _HEADER.pack(MAGIC, VERSION, kind, flags, count, *fields)
    return header + b"".join(parts)


def _encode_merge(kind: int, merge: tuple[Any, ...], count: int, dt: np.dtype,
                  offset: int) -> list[bytes]:
    spec = MERGE_SECTIONS.get(kind)
    if spec is None:
        raise ProtocolError(f"{KIND_NAMES[kind]} has no merge sections")
    if len(merge) != len(spec):
        raise ProtocolError(f"{KIND_NAMES[kind]} takes {len(spec)} merge sections, "
                            f"got {len(merge)}")
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
    """PUSH body; keywords as :func:`encode` (origin, dtype)."""
    return encode(PUSH, keys, (delta_n, delta_z), **kw)


def encode_keys(keys: Any, **kw: Any) -> bytes:
    """KEYS body (a pull request)."""
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
    magic, version, kind, flags, count, *fields = _HEADER.unpack_from(body, 0)
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
    if flags & FLAG_MERGE and kind not in MERGE_SECTIONS:
        raise ProtocolError(f"{KIND_NAMES[kind]} has no merge sections (flag 0x{FLAG_MERGE:x})")
    if flags & FLAG_WORKER and kind != PUSH:
        raise ProtocolError("only a PUSH carries worker fields")
    if not flags & FLAG_WORKER and any(fields):
        raise ProtocolError("worker fields are set but the worker flag is not")
    has_keys, n_values = _SECTIONS[kind]
    dt = np.dtype("<f8" if flags & FLAG_FLOAT64 else "<f4")
    offset = HEADER_SIZE
    expected = _implied_size(kind, flags, count)
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
        for _, is_u32 in MERGE_SECTIONS[kind]:
            item = np.dtype("<u4") if is_u32 else dt
            offset += -offset % item.itemsize
            sections.append(np.frombuffer(body, dtype=item, count=count, offset=offset))
            offset += count * item.itemsize
        merge = tuple(sections)
    origin = PushOrigin(*fields) if flags & FLAG_WORKER else None
    return Message(kind, keys, values, origin, merge)


def _implied_size(kind: int, flags: int, count: int) -> int:
    has_keys, n_values = _SECTIONS[kind]
    itemsize = 8 if flags & FLAG_FLOAT64 else 4
    size = HEADER_SIZE + (4 * count if has_keys else 0)
    if n_values:
        size += -size % itemsize + n_values * count * itemsize
    if flags & FLAG_MERGE:
        for _, is_u32 in MERGE_SECTIONS.get(kind, ()):
            size += 4 * count if is_u32 else -size % itemsize + count * itemsize
    return size


def message_size(header: bytes | bytearray | memoryview) -> int:
    """Length of the whole binary message that starts with ``header`` (>= 48 bytes)."""
    magic, version, kind, flags, count, *_ = _HEADER.unpack_from(header, 0)
    if magic != MAGIC or version != VERSION or kind not in _SECTIONS:
        raise ProtocolError("not a message header of this wire version")
    return _implied_size(kind, flags, count)


def iter_messages(chunks: Any, expected_kind: int) -> Any:
    """Decode a stream of concatenated binary messages (e.g. the ``/v1/state``
    answer) from an iterable of byte chunks, one message at a time. A stream
    that ends inside a message raises ProtocolError."""
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        while len(buf) >= HEADER_SIZE:
            size = message_size(buf)
            if len(buf) < size:
                break
            yield decode(bytes(buf[:size]), expected_kind)
            del buf[:size]
    if buf:
        raise ProtocolError(f"the stream ended inside a message ({len(buf)} bytes left)")

