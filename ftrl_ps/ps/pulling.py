"""The pulls of a :class:`~ftrl_ps.ps.client.PSClient` (a mixin): ``n``/``z`` of
sorted unique keys from every shard that holds some, and, for the ``compose``
merge rule (:mod:`ftrl_ps.ps.merge`), the keys' versions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ftrl_ps.errors import ProtocolError
from ftrl_ps.ps import wire
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.shards import ShardConnections

__all__ = ["Pulls"]

Arrays = tuple[np.ndarray, np.ndarray]
Arrays3 = tuple[np.ndarray, np.ndarray, np.ndarray]


class Pulls:
    """Mixin of :class:`~ftrl_ps.ps.client.PSClient`: ``pull`` and ``pull_versioned``."""

    _net: ShardConnections
    layout: Layout
    dtype: np.dtype
    wire_format: str
    _by_shard: Callable[..., list[Any]]
    _check_keys: Callable[[Any], np.ndarray]

    def pull(self, keys: Any) -> Arrays:
        """``(n, z)`` at ``keys`` (sorted, unique, in ``[0, 2**bits + 1)``): fresh
        writable arrays of the servers' dtype."""
        n, z, _ = self.pull_versioned(keys, versions=False)
        return n, z

    def pull_versioned(self, keys: Any, versions: bool = True) -> Arrays3:
        """``(n, z, versions)``: versions (uint32) for a ``compose`` push (ps.merge)."""
        k = self._check_keys(keys)
        parts = self._by_shard(k, self.layout.split_keys(k), lambda i, ks: self._pull_shard(
            i, ks, versions)) or [(np.zeros(0, self.dtype),) * 2 + (np.zeros(0, np.uint32),)]
        n, z, v = (np.concatenate([p[i] for p in parts]) for i in range(3))
        return n, z, v

    def _pull_shard(self, shard: int, keys: np.ndarray, versions: bool = False) -> Arrays3:
        if self.wire_format == "json":
            obj: dict[str, Any] = {"keys": keys.tolist(), "versions": versions}
            msg = wire.decode_json(self._net.post_json(shard, "/v1/pull", obj).content, wire.VALUES)
        else:
            body = wire.encode_keys(keys, merge=() if versions else None)
            resp = self._net.request(shard, "POST", "/v1/pull", content=body, headers={
                "Content-Type": wire.BINARY_MEDIA_TYPE, "Accept": wire.BINARY_MEDIA_TYPE})
            msg = wire.decode(resp.content, wire.VALUES)
        assert msg.values is not None
        n, z = msg.values
        if n.size != keys.size:
            raise ProtocolError(f"shard {shard} returned {n.size} values for {keys.size} keys")
        v = msg.merge[0] if versions and msg.merge else np.zeros(0, np.uint32)
        if versions and v.size != keys.size:
            raise ProtocolError(f"shard {shard} did not return the keys' versions")
        return n.astype(self.dtype, copy=True), z.astype(self.dtype, copy=True), v.astype(np.uint32)
