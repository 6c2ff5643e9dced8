"""Key layout of the parameter space: feature slots, parameter groups, shards.

A model with ``bits`` = *b* hashes features into ``2**b`` slots and keeps ONE
extra bias slot at key ``2**b``, so the key space is ``[0, 2**b + 1)``. Keys
travel as ``uint32`` on the wire; ``1 <= b <= 30``
(:func:`ftrl_ps.core.params.check_bits`).

Two partitions of the key space:

* **parameter groups** — contiguous runs of ``group_size`` keys,
  group *g* = ``[g*G, min((g+1)*G, D))``. The parameter store keeps one lock
  per group (lock striping; beyond ``store.MAX_LOCKS`` groups a shard, one per
  run of consecutive groups), so pushes touching different groups run in
  parallel. The last group also holds the bias key (it may be shorter).
* **shards** — ``num_shards`` contiguous ``[begin, end)`` ranges, one per
  server process, aligned to group boundaries: shard *i* owns groups
  ``[floor(i*NG/M), floor((i+1)*NG/M))`` where ``NG`` is the number of groups and
  ``M`` the number of shards (as ps-lite's ``GetServerKeyRanges``, but in
  units of groups so a group never straddles two servers).

Examples
--------
>>> lay = Layout(bits=4, group_size=4, num_shards=2)
>>> lay.num_keys, lay.bias_key, lay.num_groups
(17, 16, 5)
>>> lay.shard_range(0), lay.shard_range(1)
((0, 8), (8, 17))
>>> lay.group_range(4)
(16, 17)
>>> import numpy as np
>>> lay.split_keys(np.array([1, 7, 8, 16], dtype=np.uint32)).tolist()
[0, 2, 4]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ftrl_ps.core.params import check_bits
from ftrl_ps.errors import ConfigError, LayoutMismatchError

__all__ = ["DEFAULT_GROUP_SIZE", "Layout"]

#: default number of keys per parameter group (one lock per group, up to 1,024 groups
#: a shard: ``store.MAX_LOCKS``). 4096 keys
#: = 32 KiB of float32 ``n`` + ``z``: small enough that unrelated updates rarely
#: contend, large enough that the lock list stays short (256 locks at 2**20 keys).
DEFAULT_GROUP_SIZE: int = 4096


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < low:
        raise ConfigError(f"{name} must be in >= {low}, got {value}")
    return value


@dataclass(frozen=True)
class Layout:
    """Feature slots, parameter groups and shard ranges of one cluster.

    Parameters
    ----------
    bits : int
        ``2**bits`` hashed feature slots plus one bias slot; 1 <= bits <= 30.
    group_size : int, default DEFAULT_GROUP_SIZE
        Keys per parameter group (>= 1).
    num_shards : int, default 1
        Number of server shards; at most :attr:`num_groups` so that no shard
        is empty.

    Raises
    ------
    ConfigError
        If an argument is out of range.
    """

    bits: int
    group_size: int = DEFAULT_GROUP_SIZE
    num_shards: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "bits", check_bits(self.bits))
        object.__setattr__(self, "group_size", _check_int("group_size", self.group_size, 1))
        object.__setattr__(self, "num_shards", _check_int("num_shards", self.num_shards, 1))
        if self.num_shards > self.num_groups:
            raise ConfigError(
                f"num_shards={self.num_shards} exceeds the number of parameter groups "
                f"({self.num_groups} groups of {self.group_size} keys for bits={self.bits}); "
                "use fewer shards or a smaller group_size"
            )

    # --- key space -------------------------------------------------------------------
    @property
    def num_features(self) -> int:
        """Number of hashed feature slots, ``2**bits``."""
        return 1 << self.bits

    @property
    def bias_key(self) -> int:
        """Key of the bias weight, ``2**bits`` (the last key)."""
        return 1 << self.bits

    @property
    def num_keys(self) -> int:
        """Size of the key space, ``2**bits + 1``."""
        return (1 << self.bits) + 1

    # --- parameter groups ------------------------------------------------------------
    @property
    def num_groups(self) -> int:
        """Number of parameter groups, ``ceil(num_keys / group_size)``."""
        return -(-self.num_keys // self.group_size)

    def group_range(self, group: int) -> tuple[int, int]:
        """Keys ``[begin, end)`` of parameter group ``group``."""
        group = self._check_group(group)
        begin = group * self.group_size
        return begin, min(begin + self.group_size, self.num_keys)

    def group_of(self, keys: np.ndarray) -> np.ndarray:
        """Group id of every key (``keys // group_size``, int64)."""
        return np.asarray(keys, dtype=np.int64) // self.group_size

    def group_keys(self, groups: np.ndarray) -> np.ndarray:
        """All keys of the given groups, concatenated in order (int64).

        ``groups`` must hold valid group ids; sorted unique groups give sorted
        unique keys.
        """
        groups = np.asarray(groups, dtype=np.int64)
        if groups.size == 0:
            return np.zeros(0, dtype=np.int64)
        begins = groups * self.group_size
        ends = np.minimum(begins + self.group_size, self.num_keys)
        lengths = ends - begins
        offsets = np.repeat(begins - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        return np.arange(int(lengths.sum()), dtype=np.int64) + offsets

    # --- shards ----------------------------------------------------------------------
    def shard_group_range(self, shard: int) -> tuple[int, int]:
        """Parameter groups ``[begin, end)`` owned by ``shard``."""
        shard = self._check_shard(shard)
        ng, m = self.num_groups, self.num_shards
        return (ng * shard) // m, (ng * (shard + 1)) // m

    def shard_range(self, shard: int) -> tuple[int, int]:
        """Keys ``[begin, end)`` owned by ``shard``."""
        g0, g1 = self.shard_group_range(shard)
        return g0 * self.group_size, min(g1 * self.group_size, self.num_keys)

    @cached_property
    def shard_bounds(self) -> np.ndarray:
        """Key boundaries ``[0, end_0, end_1, ..., num_keys]`` (read-only int64, length M+1)."""
        bounds = np.array(
            [0] + [self.shard_range(i)[1] for i in range(self.num_shards)], dtype=np.int64
        )
        bounds.setflags(write=False)
        return bounds

    @cached_property
    def shard_group_bounds(self) -> np.ndarray:
        """Group boundaries ``[0, ..., num_groups]`` of the shards (read-only int64)."""
        bounds = np.array(
            [0] + [self.shard_group_range(i)[1] for i in range(self.num_shards)], dtype=np.int64
        )
        bounds.setflags(write=False)
        return bounds

    def shard_of_key(self, key: int) -> int:
        """Index of the shard that owns ``key``."""
        if not 0 <= key < self.num_keys:
            raise ConfigError(f"key {key} outside the key space [0, {self.num_keys})")
        return int(np.searchsorted(self.shard_bounds, key, side="right")) - 1

    def split_keys(self, keys: np.ndarray) -> np.ndarray:
        """Split points of SORTED keys by shard.

        Returns ``s`` of length ``num_shards + 1`` so that shard *i* gets
        ``keys[s[i]:s[i+1]]``. Precondition (not checked here): ``keys`` sorted.
        """
        return np.searchsorted(np.asarray(keys), self.shard_bounds, side="left").astype(np.int64)

    def split_groups(self, groups: np.ndarray) -> np.ndarray:
        """Split points of SORTED group ids by shard (as :meth:`split_keys`)."""
        return np.searchsorted(np.asarray(groups), self.shard_group_bounds, side="left").astype(
            np.int64
        )

    # --- (de)serialisation ---------------------------------------------------------
    def to_dict(self) -> dict[str, int]:
        """``{"bits", "group_size", "num_shards"}`` (the wire form)."""
        return {"bits": self.bits, "group_size": self.group_size, "num_shards": self.num_shards}

    @classmethod
    def from_dict(cls, data: Any) -> Layout:
        """Inverse of :meth:`to_dict`; raises ConfigError on missing/extra fields."""
        if not isinstance(data, dict):
            raise ConfigError(f"layout must be an object, got {type(data).__name__}")
        expected = {"bits", "group_size", "num_shards"}
        if set(data) != expected:
            raise ConfigError(f"layout must have exactly the fields {sorted(expected)}")
        return cls(data["bits"], data["group_size"], data["num_shards"])

    def check_same(self, other: Layout, *, what: str = "worker", against: str = "server"
                   ) -> None:
        """Raise :class:`LayoutMismatchError` naming every field that differs
        (``other``: ``what``'s layout, ``self``: ``against``'s)."""
        diffs = [
            f"{name}: {what} has {getattr(other, name)}, {against} has {getattr(self, name)}"
            for name in ("bits", "group_size", "num_shards")
            if getattr(self, name) != getattr(other, name)
        ]
        if diffs:
            raise LayoutMismatchError("layout mismatch (" + "; ".join(diffs) + ")")

    # --- helpers ---------------------------------------------------------------------
    def _check_group(self, group: int) -> int:
        if not 0 <= group < self.num_groups:
            raise ConfigError(f"group {group} outside [0, {self.num_groups})")
        return int(group)

    def _check_shard(self, shard: int) -> int:
        if not 0 <= shard < self.num_shards:
            raise ConfigError(f"shard {shard} outside [0, {self.num_shards})")
        return int(shard)
