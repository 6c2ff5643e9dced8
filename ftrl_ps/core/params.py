"""FTRL hyper-parameters and the size of the feature space (no numba here).

Kept apart from :mod:`ftrl_ps.core.ftrl` so that the command line and the cluster
launcher can validate their arguments without loading the kernels.

>>> FTRLParams(alpha=0.05).as_dict()
{'alpha': 0.05, 'beta': 1.0, 'l1': 1.0, 'l2': 1.0}
>>> num_keys(4)  # 16 feature slots and the bias
17
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ftrl_ps.errors import ConfigError

__all__ = [
    "DEFAULT_BITS",
    "DTYPES",
    "MAX_BITS",
    "MIN_BITS",
    "FTRLParams",
    "check_bits",
    "num_keys",
]

#: smallest and largest ``bits`` (``2**bits`` feature slots plus the bias), checked by
#: :func:`check_bits`; at 30 every key is below ``2**31`` (int32 indices, uint32 wire keys)
MIN_BITS = 1
MAX_BITS = 30
#: the feature space of a new model (``ftrl-ps train``; the servers' own default,
#: ``ftrl_ps.server.options.DEFAULT_BITS``, is the same)
DEFAULT_BITS = 22
DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class FTRLParams:
    """FTRL-Proximal hyper-parameters (defaults as Vowpal Wabbit's ``--ftrl`` examples)."""

    alpha: float = 0.1
    beta: float = 1.0
    l1: float = 1.0
    l2: float = 1.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, np.floating | np.integer):  # e.g. np.float32 from a grid
                value = float(value)
                object.__setattr__(self, name, value)
            if not isinstance(value, int | float) or not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value!r}")
        if self.alpha <= 0:
            raise ConfigError(f"alpha must be > 0, got {self.alpha}")
        for name in ("beta", "l1", "l2"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FTRLParams:
        return cls(**{k: float(d[k]) for k in ("alpha", "beta", "l1", "l2")})


def check_bits(bits: int) -> int:
    """Validate a feature-space size in bits and return it as an ``int``.

    Raises
    ------
    ConfigError
        If ``bits`` is not an integer (``bool`` is refused) in ``[MIN_BITS, MAX_BITS]``.
    """
    if isinstance(bits, bool) or not isinstance(bits, int | np.integer):
        raise ConfigError(f"bits must be an integer, got {bits!r}")
    if not MIN_BITS <= bits <= MAX_BITS:
        raise ConfigError(f"bits must be in [{MIN_BITS}, {MAX_BITS}], got {bits}")
    return int(bits)


def num_keys(bits: int) -> int:
    """Size of the key space: ``2**bits`` feature slots plus the bias slot."""
    return (1 << check_bits(bits)) + 1
