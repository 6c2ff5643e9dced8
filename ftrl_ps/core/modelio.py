"""The model file: a versioned, checksummed snapshot of the FTRL state.

Layout (all integers little-endian)::

    offset   size   field
    0        8      magic  b"FTRLPSMD"
    8        4      uint32 format version (currently 1)
    12       4      uint32 H, length of the header
    16       H      header: a UTF-8 JSON object (see below)
    16+H     4*K    keys: uint32[K], strictly increasing, each < 2**bits + 1
    ...      s*K    n: float32 or float64 [K] (s = 4 or 8, from "dtype")
    ...      s*K    z: same type [K]
    end-4    4      uint32 CRC-32 (zlib.crc32) of every byte before it

The header holds ``format`` ("ftrl-ps model"), ``bits``, ``dtype``, ``params``
(alpha, beta, l1, l2), ``num_keys`` (K), ``bias_key`` (``2**bits``),
``ftrl_ps_version``, ``created`` (UTC, ISO 8601) and ``training`` (free-form
facts about the run: rows, epochs, files). Only keys whose ``n`` or ``z`` is
not zero are stored, so a sparse model is a small file; the full state is
kept, so training can resume from it.

Files are written atomically: to a temporary file in the same folder, flushed
and fsync'ed, then renamed over the target. A reader never sees half a model.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ftrl_ps import __version__
from ftrl_ps.core.outfile import replacing
from ftrl_ps.core.params import DTYPES, FTRLParams, check_bits, num_keys
from ftrl_ps.errors import ModelFormatError

__all__ = ["FORMAT_VERSION", "MAGIC", "SavedModel", "load_model", "save_model"]

if TYPE_CHECKING:
    from ftrl_ps.core.ftrl import FTRL

MAGIC = b"FTRLPSMD"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sII")
_CRC = struct.Struct("<I")
_MAX_HEADER = 1 << 20


@dataclass
class SavedModel:
    """A model as stored on disk: hyper-parameters plus the touched keys' state."""

    bits: int
    params: FTRLParams
    dtype: str
    keys: np.ndarray
    n: np.ndarray
    z: np.ndarray
    training: dict[str, Any] = field(default_factory=dict)
    created: str = ""

    def to_ftrl(self) -> FTRL:
        from ftrl_ps.core.ftrl import FTRL

        model = FTRL(self.bits, self.params, dtype=self.dtype)
        model.load_state(self.keys, self.n, self.z, reset=False)  # new: all zero
        return model

    @classmethod
    def from_ftrl(cls, model: FTRL, training: dict[str, Any] | None = None,
                  touched: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> SavedModel:
        """The touched keys' state of ``model`` (``touched``: the ``keys, n, z`` of its
        :meth:`FTRL.touched_state`, when the caller has them already)."""
        keys, n, z = model.touched_state()[:3] if touched is None else touched
        return cls(
            bits=model.bits,
            params=model.params,
            dtype=model.dtype,
            keys=keys,
            n=n,
            z=z,
            training=dict(training or {}),
        )

    @classmethod
    def from_compact(cls, bits: int, params: FTRLParams, state: np.ndarray, slots: np.ndarray,
                     training: dict[str, Any] | None = None) -> SavedModel:
        """The model of a compact ``(len(slots) + 1, 2)`` state (``n``, ``z`` per row):
        row ``i`` is slot ``slots[i]`` (sorted), the last row the bias. Rows whose
        state is zero are left out, as :meth:`FTRL.touched_state` leaves them."""
        if state.ndim != 2 or state.shape != (slots.size + 1, 2):
            raise ModelFormatError(f"a compact state of {slots.size} slots and the bias "
                                   f"has shape ({slots.size + 1}, 2), got {state.shape}")
        touched = (state != 0).any(axis=1)
        keys = np.append(slots, 1 << bits)[touched].astype(np.uint32)
        return cls(bits=bits, params=params, dtype=str(state.dtype), keys=keys,
                   n=state[touched, 0].copy(), z=state[touched, 1].copy(),
                   training=dict(training or {}))


def save_model(path: str | os.PathLike[str], model: SavedModel | FTRL, **training: Any) -> Path:
    """Write ``model`` to ``path`` atomically; returns the path.

    Extra keyword arguments are stored in the header's ``training`` object.
    """
    saved = model if isinstance(model, SavedModel) else SavedModel.from_ftrl(model)
    saved.training.update(training)
    keys = np.ascontiguousarray(saved.keys, dtype="<u4")
    n = np.ascontiguousarray(saved.n, dtype=np.dtype(saved.dtype).newbyteorder("<"))
    z = np.ascontiguousarray(saved.z, dtype=np.dtype(saved.dtype).newbyteorder("<"))
    if not keys.shape == n.shape == z.shape:
        raise ModelFormatError("keys, n and z must have one length")
    bad = _bad_keys(n, z)
    if bad:  # load_model would refuse the file: say why now, and write nothing
        raise ModelFormatError(
            f"not saving {path}: {bad:,} of {keys.size:,} keys have a NaN or infinite state "
            f"(the training overflowed {saved.dtype}: feature values or --alpha too large? "
            "scale the features, or train with --dtype float64)"
        )
    header = {
        "format": "ftrl-ps model",
        "bits": saved.bits,
        "dtype": saved.dtype,
        "params": saved.params.as_dict(),
        "num_keys": int(keys.size),
        "bias_key": 1 << saved.bits,
        "ftrl_ps_version": __version__,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "training": saved.training,
    }
    head = json.dumps(header, sort_keys=True).encode()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with replacing(target, "wb", fsync=True) as f:
        crc = 0
        for chunk in (_PREFIX.pack(MAGIC, FORMAT_VERSION, len(head)), head, keys, n, z):
            data = chunk.data.cast("B") if isinstance(chunk, np.ndarray) else chunk
            crc = zlib.crc32(data, crc)
            f.write(data)
        f.write(_CRC.pack(crc))
    return target


def _bad_keys(n: np.ndarray, z: np.ndarray) -> int:
    """How many keys have a state no model may hold (NaN, inf, or a negative ``n``):
    the one rule of :func:`save_model` and :func:`load_model`."""
    return int(np.count_nonzero(~(np.isfinite(n) & np.isfinite(z) & (n >= 0))))


def load_model(path: str | os.PathLike[str]) -> SavedModel:
    """Read a model file, checking magic, version, sizes and checksum.

    Raises
    ------
    ModelFormatError
        The file is missing, truncated, corrupt, or not an ftrl-ps model.
    """
    try:
        blob = Path(path).read_bytes()
    except OSError as exc:
        raise ModelFormatError(f"cannot read model {path}: {exc.strerror or exc}") from exc
    where = f"model file {path}"
    if len(blob) < _PREFIX.size + _CRC.size:
        raise ModelFormatError(f"{where} is too short to be an ftrl-ps model")
    magic, version, head_len = _PREFIX.unpack_from(blob)
    if magic != MAGIC:
        raise ModelFormatError(f"{where} is not an ftrl-ps model (bad magic {magic[:8]!r})")
    if version != FORMAT_VERSION:
        raise ModelFormatError(
            f"{where} has format version {version}; this ftrl-ps reads version {FORMAT_VERSION}"
        )
    (crc,) = _CRC.unpack_from(blob, len(blob) - _CRC.size)
    if zlib.crc32(memoryview(blob)[: -_CRC.size]) != crc:
        raise ModelFormatError(f"{where} is corrupt (checksum mismatch)")
    if head_len > _MAX_HEADER or _PREFIX.size + head_len > len(blob) - _CRC.size:
        raise ModelFormatError(f"{where} has a bad header length {head_len}")
    try:
        header = json.loads(blob[_PREFIX.size : _PREFIX.size + head_len])
        bits = check_bits(header["bits"])
        dtype = header["dtype"]
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}")
        params = FTRLParams.from_dict(header["params"])
        count = int(header["num_keys"])
        training = header.get("training", {})
        if not isinstance(training, dict):
            raise ValueError(f"'training' must be an object, not {type(training).__name__}")
    except Exception as exc:  # noqa: BLE001 - any header defect is a format error
        raise ModelFormatError(f"{where} has an invalid header: {exc}") from exc
    size = np.dtype(dtype).itemsize
    body = memoryview(blob)[_PREFIX.size + head_len : -_CRC.size]
    if len(body) != count * (4 + 2 * size):
        raise ModelFormatError(
            f"{where}: body has {len(body)} bytes, expected {count * (4 + 2 * size)} "
            f"for {count} keys"
        )
    keys = np.frombuffer(body, dtype="<u4", count=count).astype(np.int64)
    fdt = np.dtype(dtype).newbyteorder("<")
    n = np.frombuffer(body, dtype=fdt, count=count, offset=4 * count).astype(dtype)
    z = np.frombuffer(body, dtype=fdt, count=count, offset=(4 + size) * count).astype(dtype)
    if count and (np.any(np.diff(keys) <= 0) or keys[-1] >= num_keys(bits)):
        raise ModelFormatError(f"{where}: keys are not increasing or out of range")
    if _bad_keys(n, z):
        raise ModelFormatError(f"{where}: state holds NaN, inf or negative n")
    return SavedModel(
        bits=bits,
        params=params,
        dtype=dtype,
        keys=keys,
        n=n,
        z=z,
        training=dict(training),
        created=str(header.get("created", "")),
    )
