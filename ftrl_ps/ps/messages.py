"""The messages of the parameter-server protocol, independent of their encoding:
the kinds, :class:`Message` and a push's :class:`PushOrigin`. Encodings:
:mod:`ftrl_ps.ps.wire` (binary) and :mod:`ftrl_ps.ps.wire_json` (JSON).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ftrl_ps.errors import ProtocolError

__all__ = ["ENTRIES", "GROUPS", "KEYS", "KIND_NAMES", "MERGE_SECTIONS", "PUSH", "UINT32_LIMIT",
           "VALUES", "Message", "PushOrigin"]

PUSH, KEYS, VALUES, GROUPS, ENTRIES = 1, 2, 3, 4, 5
KIND_NAMES = {PUSH: "PUSH", KEYS: "KEYS", VALUES: "VALUES", GROUPS: "GROUPS", ENTRIES: "ENTRIES"}
UINT32_LIMIT = 1 << 32
#: the sections a message carries for the ``compose`` merge rule (ftrl_ps.ps.merge):
#: kind -> (name, True for uint32 / False for the values' float type); a KEYS
#: request with the merge flag asks for the keys' versions
MERGE_SECTIONS: dict[int, tuple[tuple[str, bool], ...]] = {
    KEYS: (), VALUES: (("versions", True),),
    PUSH: (("versions", True), ("rows", True), ("rho", False)),
}
_U64 = 1 << 64


@dataclass(frozen=True)
class PushOrigin:
    """Who sent a push and where it stands in that worker's stream of pushes
    (see docs/durability.md): worker index, registration epoch, sequence number,
    the sequence number of the previous push to the same shard, input position."""

    worker: int
    epoch: int
    seq: int
    prev_seq: int
    position: int

    def __post_init__(self) -> None:
        if not 0 <= self.worker < UINT32_LIMIT:
            raise ProtocolError(f"worker index must fit in uint32, got {self.worker}")
        for name in ("epoch", "seq", "prev_seq", "position"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _U64:
                raise ProtocolError(f"{name} must be an integer in [0, 2**64), got {value!r}")
        if self.seq < 1:
            raise ProtocolError(f"a push needs seq >= 1, got {self.seq}")


@dataclass(frozen=True)
class Message:
    """A decoded body. ``keys`` holds group ids for GROUPS; ``values`` is
    ``(delta_n, delta_z)`` for PUSH and ``(n, z)`` for VALUES/ENTRIES. ``merge``
    holds the :data:`MERGE_SECTIONS` in order (``()`` for a KEYS request that
    asks for versions), None without them."""

    kind: int
    keys: np.ndarray | None = None
    values: tuple[np.ndarray, np.ndarray] | None = None
    origin: PushOrigin | None = None
    merge: tuple[np.ndarray, ...] | None = None

    @property
    def delta_n(self) -> np.ndarray:
        assert self.values is not None
        return self.values[0]

    @property
    def delta_z(self) -> np.ndarray:
        assert self.values is not None
        return self.values[1]
