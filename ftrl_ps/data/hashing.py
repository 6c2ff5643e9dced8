"""Feature hashing: how a feature name becomes a weight slot.

This docstring is the specification; it is precise enough to re-implement the
mapping in another language (the test vectors in ``tests/test_hashing.py``
pin it down). The functions below run the numba kernels of the reader
(:mod:`ftrl_ps._kernels.mix`, :mod:`ftrl_ps._kernels.parse`), loaded on first
call; ``tests/naive.py`` holds a pure-Python reference they are tested against.

Feature space
-------------
``--bits b`` (``1 <= b <= 30``) gives ``2**b`` slots ``0 .. 2**b - 1``. The
trainer adds the bias at slot ``2**b`` itself; the reader never emits it.
Below, all arithmetic is on unsigned 64-bit integers (mod ``2**64``) and
``MASK = 2**b - 1``.

``mix64(x)``, the splitmix64 finalizer::

    x ^= x >> 30;  x *= 0xbf58476d1ce4e5b9
    x ^= x >> 27;  x *= 0x94d049bb133111eb
    x ^= x >> 31

``fnv1a64(bytes)``, 64-bit FNV-1a::

    h = 0xcbf29ce484222325
    for each byte c:  h ^= c;  h *= 0x100000001b3

The name of a feature (the part of the token before its last ``:``) is mapped
to a slot as follows:

1. If the name is a plain decimal integer -- one or more ASCII digits ``0-9``,
   nothing else (no sign, no dot, no spaces; leading zeros are allowed and
   ignored, so ``"007"`` is ``7``) -- and its value ``i`` fits in 64 bits
   (``i <= 2**64 - 1``):

   * ``i < 2**b``: slot ``i`` (plain libsvm indices keep their meaning);
   * otherwise: slot ``mix64(i) & MASK``.

2. Any other name (``user=123``, ``site_abc``, ``-5``, ``1.5``, a digit string
   whose value exceeds ``2**64 - 1``): slot ``mix64(fnv1a64(utf8(name))) & MASK``.
   The reader hashes the raw bytes of the file, which equals the UTF-8
   encoding for UTF-8 input.

An empty name is an error (the reader rejects ``:3``).

Collisions (two names on one slot, or one feature repeated on a line) are
merged by the reader by *summing* their values; see :mod:`ftrl_ps.data.libsvm`.

Examples
--------
>>> slot_of("12", 20)
12
>>> slot_of("user=123", 20) == mix64(fnv1a64(b"user=123")) & (2**20 - 1)
True
>>> slot_of(str(2**20), 20) == mix64(2**20) & (2**20 - 1)
True
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ftrl_ps.core.params import check_bits
from ftrl_ps.errors import DataError

__all__ = ["fnv1a64", "mix64", "slot_of", "slots_of"]


def _as_buffer(data: bytes) -> np.ndarray:
    """``data`` as a writable ``uint8`` array (the type the kernels are compiled for)."""
    return np.frombuffer(bytearray(data), dtype=np.uint8)


def mix64(x: int) -> int:
    """The splitmix64 finalizer on an unsigned 64-bit integer (``x`` is taken mod 2**64).

    >>> hex(mix64(0x9E3779B97F4A7C15))  # first output of splitmix64 seeded with 0
    '0xe220a8397b1dcdaf'
    """
    from ftrl_ps._kernels import mix as _mix

    return int(_mix.mix64(np.uint64(int(x) & _mix.MASK64)))


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a hash of ``data``.

    >>> hex(fnv1a64(b"a"))
    '0xaf63dc4c8601ec8c'
    """
    from ftrl_ps._kernels import mix as _mix

    buf = _as_buffer(data)
    return int(_mix.fnv1a64(buf, 0, buf.shape[0]))


def slot_of(name: str, bits: int) -> int:
    """The slot in ``[0, 2**bits)`` of feature ``name`` (the reader's kernel).

    Parameters
    ----------
    name : str
        Feature name as written in the file, before the last ``:``.
    bits : int
        Width of the feature space, ``1 <= bits <= 30``.

    Raises
    ------
    ConfigError
        If ``bits`` is out of range.
    DataError
        If ``name`` is empty.
    """
    from ftrl_ps._kernels.parse import slot_of_bytes

    bits = check_bits(bits)
    if not name:
        raise DataError("empty feature name")
    buf = _as_buffer(name.encode("utf-8"))
    return int(slot_of_bytes(buf, 0, buf.shape[0], bits))


def slots_of(names: Iterable[str], bits: int) -> np.ndarray:
    """Slots of many names at once with the reader's numba kernel.

    Returns an ``int64`` array; equal to ``[slot_of(n, bits) for n in names]``.
    """
    from ftrl_ps._kernels.aot import kernels

    bits = check_bits(bits)
    encoded = [n.encode("utf-8") for n in names]
    if any(not e for e in encoded):
        raise DataError("empty feature name")
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    buf = _as_buffer(b"".join(encoded) or b"\0")  # an empty list still gets a buffer
    return kernels("parse").slots_of_names(buf, offsets, bits)
