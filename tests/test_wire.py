"""Wire format: round trips, the documented byte layout, and every malformed body."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from ftrl_ps.errors import ProtocolError
from ftrl_ps.ps import wire


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count", [0, 1, 3, 1000])
def test_push_round_trip(dtype, count):
    rng = np.random.default_rng(count)
    keys = np.sort(rng.choice(2**20, count, replace=False)).astype(np.uint32)
    dn, dz = rng.random(count).astype(dtype), rng.normal(size=count).astype(dtype)
    origin = wire.PushOrigin(worker=7, epoch=2**45, seq=2**40 + 3, prev_seq=2**40, position=99)
    body = wire.encode_push(keys, dn, dz, origin=origin, dtype=dtype)
    msg = wire.decode(body, wire.PUSH)
    np.testing.assert_array_equal(msg.keys, keys)
    np.testing.assert_array_equal(msg.delta_n, dn)
    np.testing.assert_array_equal(msg.delta_z, dz)
    assert msg.delta_n.dtype == np.dtype(dtype)
    assert msg.origin == origin
    # values start at a multiple of their item size
    itemsize = np.dtype(dtype).itemsize
    keys_end = wire.HEADER_SIZE + 4 * count
    assert len(body) == keys_end + (-keys_end % itemsize) + 2 * count * itemsize


def test_decoding_is_zero_copy():
    body = wire.encode_values(np.arange(4.0), np.ones(4))
    msg = wire.decode(body, wire.VALUES)
    n = msg.values[0]
    assert not n.flags.writeable and not n.flags.owndata
    assert np.shares_memory(n, np.frombuffer(body, dtype=np.uint8))


def test_documented_header_layout():
    origin = wire.PushOrigin(worker=3, epoch=11, seq=8, prev_seq=5, position=1000)
    body = wire.encode_push(np.array([5, 9], dtype=np.uint32), [1.0, 2.0], [3.0, 4.0],
                            origin=origin)
    fields = struct.unpack_from("<4sBBHIIQQQQ", body)
    assert fields == (b"FTPS", 2, wire.PUSH, wire.FLAG_WORKER, 2, 3, 11, 8, 5, 1000)
    assert wire.HEADER_SIZE == 48
    assert body[48:56] == struct.pack("<2I", 5, 9)
    plain = wire.decode(wire.encode_keys([1]), wire.KEYS)
    assert plain.origin is None


@pytest.mark.parametrize("kind", [wire.KEYS, wire.GROUPS, wire.VALUES, wire.ENTRIES])
def test_other_kinds_round_trip(kind):
    keys = np.array([0, 4, 2**32 - 1], dtype=np.uint32)
    vals = (np.array([1.5, 0.0, 2.0]), np.array([-1.0, 3.0, 0.25]))
    has_keys = kind != wire.VALUES
    has_vals = kind in (wire.VALUES, wire.ENTRIES)
    body = wire.encode(kind, keys if has_keys else None, vals if has_vals else None)
    msg = wire.decode(body, kind)
    if has_keys:
        np.testing.assert_array_equal(msg.keys, keys)
    if has_vals:
        np.testing.assert_array_equal(msg.values[0], vals[0])
    obj = json.loads(json.dumps(wire.to_json(kind, keys if has_keys else None,
                                             vals if has_vals else None)))
    back = wire.decode_json(json.dumps(obj).encode(), kind)
    if has_keys:
        assert back.keys.tolist() == keys.tolist()
    if has_vals:
        assert back.values[1].tolist() == vals[1].tolist()


def _good() -> bytes:
    return wire.encode_push(np.array([1, 2, 3]), np.ones(3), np.zeros(3))


def _patch(body: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(body)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


MALFORMED = [
    ("empty", b"", "shorter than the 48-byte header"),
    ("short header", _good()[:10], "shorter than"),
    ("truncated body", _good()[:-1], "truncated"),
    ("truncated keys", _good()[:54], "truncated"),
    ("trailing bytes", _good() + b"\0", "too long"),
    ("count too big", _patch(_good(), 8, "<I", 4), "truncated"),
    ("count too small", _patch(_good(), 8, "<I", 2), "too long"),
    ("huge count", _patch(_good(), 8, "<I", 2**32 - 1), "truncated"),
    ("bad magic", b"XXXX" + _good()[4:], "bad magic"),
    ("bad version", _patch(_good(), 4, "<B", 9), "version 9"),
    ("bad kind", _patch(_good(), 5, "<B", 77), "unknown message kind"),
    ("wrong kind", wire.encode_keys([1, 2]), "expected a PUSH body, got KEYS"),
    ("unknown flag", _patch(_good(), 6, "<H", 0x80), "unknown flags"),
    ("float64 flag on float32 body", _patch(_good(), 6, "<H", 1), "too long|truncated"),
    ("worker fields without the flag", _patch(_good(), 24, "<Q", 5), "worker flag is not"),
    ("worker flag, seq 0", _patch(_good(), 6, "<H", wire.FLAG_WORKER), "seq >= 1"),
    ("deep JSON is no recursion error", b"[" * 100_000, "magic|shorter"),
    ("worker flag on KEYS", _patch(wire.encode_keys([1]), 6, "<H", wire.FLAG_WORKER),
     "expected a PUSH|only a PUSH"),
]


@pytest.mark.parametrize(("case", "body", "message"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_binary_bodies(case, body, message):
    with pytest.raises(ProtocolError, match=message):
        wire.decode(body, wire.PUSH)


BAD_JSON = [
    (b"{", "invalid JSON"),
    (b"\xff\xfe", "invalid JSON"),
    (b"[1, 2]", "must be an object"),
    (b'{"keys": [1], "delta_n": [1]}', "missing fields"),
    (b'{"keys": [1], "delta_n": [1], "delta_z": [1], "x": 1}', "unknown fields"),
    (b'{"keys": [1.5], "delta_n": [1], "delta_z": [1]}', "integers"),
    (b'{"keys": [true], "delta_n": [1], "delta_z": [1]}', "integers"),
    (b'{"keys": [1, true], "delta_n": [1, 1], "delta_z": [1, 1]}', "integers"),
    (b'{"keys": [-1], "delta_n": [1], "delta_z": [1]}', r"\[0, 2\*\*32\)"),
    (b'{"keys": [4294967296], "delta_n": [1], "delta_z": [1]}', r"\[0, 2\*\*32\)"),
    (b'{"keys": [99999999999999999999999], "delta_n": [1], "delta_z": [1]}', "integers"),
    (b'{"keys": [[1]], "delta_n": [1], "delta_z": [1]}', "integers"),
    (b'{"keys": 1, "delta_n": [1], "delta_z": [1]}', "list of integers"),
    (b'{"keys": [1], "delta_n": ["a"], "delta_z": [1]}', "numbers"),
    (b'{"keys": [1], "delta_n": [true], "delta_z": [1]}', "numbers"),
    (b'{"keys": [1], "delta_n": [1], "delta_z": [1], "seq": 3}', "needs all of"),
    (b'{"keys": [1], "delta_n": [1], "delta_z": [1], "worker": -2, "epoch": 1, "seq": 1, '
     b'"prev_seq": 0, "position": 0}', "uint32"),
    (b'{"keys": [1], "delta_n": [1], "delta_z": [1], "worker": 0, "epoch": 1, "seq": 0, '
     b'"prev_seq": 0, "position": 0}', "seq >= 1"),
    (b'{"entries": [[1, 2]]}', "triples"),
    (b'{"entries": [[1, 2, 3]], "x": 1}', "unknown fields"),
    (b'{"entries": [[1, 1e31, 3]]}', "within"),
    (b'{"entries": [[1, 1, 3]], "origin": {"worker": 0}}', "needs all of"),
    (b'{"entries": [[1, 1, 3]], "origin": 5}', "must be an object"),
    (b'{"keys": [1], "delta_n": [1], "delta_z": [1], "worker": 0, "epoch": true, "seq": 1, '
     b'"prev_seq": 0, "position": 0}', "integers"),
]


@pytest.mark.parametrize(("body", "message"), BAD_JSON)
def test_malformed_json_bodies(body, message):
    with pytest.raises(ProtocolError, match=message):
        wire.decode_json(body, wire.PUSH)


def test_json_nan_parses_but_stays_nan():
    """JSON NaN/Infinity literals are parsed; the store's validation rejects them."""
    msg = wire.decode_json(b'{"keys": [1], "delta_n": [NaN], "delta_z": [Infinity]}', wire.PUSH)
    assert np.isnan(msg.delta_n[0]) and np.isinf(msg.delta_z[0])


def test_json_integer_beyond_float64_is_a_protocol_error():
    body = b'{"keys": [1], "delta_n": [' + b"9" * 400 + b'], "delta_z": [0]}'
    with pytest.raises(ProtocolError, match="beyond float64"):  # was an OverflowError: 500
        wire.decode_json(body, wire.PUSH)


def test_json_push_with_worker_fields():
    msg = wire.decode_json(
        b'{"keys": [1, 2], "delta_n": [1, 2], "delta_z": [0.5, 0], "worker": 4, "epoch": 2, '
        b'"seq": 9, "prev_seq": 7, "position": 10}',
        wire.PUSH,
    )
    assert msg.keys.tolist() == [1, 2] and msg.delta_z.tolist() == [0.5, 0.0]
    assert msg.origin == wire.PushOrigin(4, 2, 9, 7, 10)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((wire.PUSH, [1, 2], ([1.0], [1.0, 2.0])), "1-D with 2 entries"),
        ((wire.KEYS, [-1]), "uint32"),
        ((wire.KEYS, [2**32]), "uint32"),
        ((wire.KEYS, [1.5]), "integer"),
        ((wire.KEYS, None), "needs keys"),
        ((wire.VALUES, [1], ([1.0], [1.0])), "needs keys=False"),
        ((99, [1]), "unknown message kind"),
    ],
)
def test_encode_rejects_bad_input(args, message):
    with pytest.raises(ProtocolError, match=message):
        wire.encode(*args)


def test_encode_rejects_bad_worker_fields_and_dtype():
    with pytest.raises(ProtocolError):
        wire.encode_push([1], [1.0], [1.0], origin=wire.PushOrigin(2**32, 1, 1, 0, 0))
    with pytest.raises(ProtocolError):
        wire.encode_push([1], [1.0], [1.0], dtype=np.int32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count", [0, 1, 3])
def test_merge_sections_round_trip(dtype, count: int) -> None:
    keys = np.arange(count, dtype=np.uint32) * 5
    merge = (np.arange(count) + 7, np.arange(count) * 3, np.linspace(0, 1, count))
    body = wire.encode_push(keys, np.ones(count), np.zeros(count), dtype=dtype, merge=merge)
    msg = wire.decode(body, wire.PUSH)
    assert msg.merge is not None and len(msg.merge) == 3
    assert msg.merge[0].tolist() == merge[0].tolist() and msg.merge[1].tolist() == merge[1].tolist()
    np.testing.assert_allclose(msg.merge[2], merge[2], rtol=1e-6)
    values = wire.decode(wire.encode_values(np.ones(count), np.ones(count), dtype=dtype,
                                            merge=(merge[0],)), wire.VALUES)
    assert values.merge is not None and values.merge[0].tolist() == merge[0].tolist()
    asks = wire.decode(wire.encode_keys(keys, merge=()), wire.KEYS)
    assert asks.merge == () and wire.decode(wire.encode_keys(keys), wire.KEYS).merge is None
    obj = json.loads(json.dumps(wire.to_json(wire.PUSH, keys, (np.ones(count), np.zeros(count)),
                                             merge)))
    back = wire.decode_json(json.dumps(obj).encode(), wire.PUSH)
    assert back.merge is not None and back.merge[1].tolist() == merge[1].tolist()
    assert wire.decode_json(b'{"keys": [1], "versions": true}', wire.KEYS).merge == ()


def test_bad_merge_sections_are_refused() -> None:
    good = wire.encode_push([1, 2], [1.0, 1.0], [0.0, 0.0], merge=([0, 0], [1, 1], [0.0, 1.0]))
    with pytest.raises(ProtocolError, match="truncated"):
        wire.decode(good[:-4], wire.PUSH)
    with pytest.raises(ProtocolError, match="merge sections"):
        wire.encode_groups([1]) and wire.encode(wire.GROUPS, [1], merge=())
    flagged = bytearray(wire.encode_groups([1]))
    flagged[6] |= wire.FLAG_MERGE
    with pytest.raises(ProtocolError, match="no merge sections"):
        wire.decode(bytes(flagged), wire.GROUPS)
    with pytest.raises(ProtocolError, match="go together"):
        wire.decode_json(b'{"keys": [1], "delta_n": [1], "delta_z": [1], "rows": [1]}',
                         wire.PUSH)
    with pytest.raises(ProtocolError, match="3 merge sections"):
        wire.encode_push([1], [1.0], [1.0], merge=([0],))


def test_worker_flag_on_a_keys_body_is_refused():
    body = bytearray(wire.encode_keys([1]))
    body[6] = wire.FLAG_WORKER
    with pytest.raises(ProtocolError, match="only a PUSH"):
        wire.decode(bytes(body), wire.KEYS)


def test_json_push_entries_form_sorts_and_sums_repeated_keys():
    msg = wire.decode_json(b'{"entries": [[5, 1, 2], [1, 0.5, 0], [5, 1, -1]], '
                           b'"origin": {"worker": 1, "epoch": 2, "seq": 3, "prev_seq": 1, '
                           b'"position": 7}}', wire.PUSH)
    assert msg.keys.tolist() == [1, 5]
    assert msg.delta_n.tolist() == [0.5, 2.0] and msg.delta_z.tolist() == [0.0, 1.0]
    assert msg.origin == wire.PushOrigin(1, 2, 3, 1, 7)
    with pytest.raises(ProtocolError, match="invalid JSON"):
        wire.decode_json(b"[" * 100_000, wire.PUSH)
