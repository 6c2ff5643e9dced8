"""The package's only 64-bit mix and hash: the splitmix64 finalizer and FNV-1a.

Kernels on unsigned 64-bit integers (arithmetic wraps modulo ``2**64``), used
by the libsvm reader (:mod:`ftrl_ps._kernels.parse`), by
:mod:`ftrl_ps.data.hashing` and by the synthetic data generator
(:mod:`ftrl_ps.data.synth`). The definitions are specified in
:mod:`ftrl_ps.data.hashing`; ``tests/naive.py`` holds a pure-Python reference.
Assumptions (not checked here): ``buf`` is a 1-D ``uint8`` array and
``0 <= start <= end <= len(buf)``; ``mix64_array`` gets a 1-D ``uint64`` array.
"""

from __future__ import annotations

import numpy as np

from ftrl_ps._kernels._config import njit

__all__ = [
    "FNV_OFFSET",
    "FNV_PRIME",
    "MASK64",
    "MIX_M1",
    "MIX_M2",
    "fnv1a64",
    "mix64",
    "mix64_array",
]

#: all bits of an unsigned 64-bit integer
MASK64 = (1 << 64) - 1
#: FNV-1a 64-bit offset basis and prime
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
#: the two multipliers of the splitmix64 finalizer
MIX_M1 = 0xBF58476D1CE4E5B9
MIX_M2 = 0x94D049BB133111EB

_M1 = np.uint64(MIX_M1)
_M2 = np.uint64(MIX_M2)
_FNV_OFFSET = np.uint64(FNV_OFFSET)
_FNV_PRIME = np.uint64(FNV_PRIME)
_S27 = np.uint64(27)
_S30 = np.uint64(30)
_S31 = np.uint64(31)


@njit(inline="always")
def mix64(x: np.uint64) -> np.uint64:
    """splitmix64 finalizer of ``x`` (mod 2**64)."""
    x = x ^ (x >> _S30)
    x = x * _M1
    x = x ^ (x >> _S27)
    x = x * _M2
    return x ^ (x >> _S31)


@njit(inline="always")
def fnv1a64(buf: np.ndarray, start: int, end: int) -> np.uint64:
    """64-bit FNV-1a of ``buf[start:end]``."""
    h = _FNV_OFFSET
    for i in range(start, end):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    return h


@njit
def mix64_array(x: np.ndarray) -> np.ndarray:
    """:func:`mix64` of every element of a 1-D ``uint64`` array (a new array)."""
    out = np.empty(x.shape[0], dtype=np.uint64)
    for i in range(x.shape[0]):
        out[i] = mix64(x[i])
    return out
