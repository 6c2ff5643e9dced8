"""Typed options of one shard process: the network part plus :class:`ServerSettings`.

The command line (``ftrl-ps server``), the services' environment settings and
the local cluster all build a :class:`ShardOptions`; :func:`ftrl_ps.server.run.run_shard`
runs it. This module imports no web stack, so a launcher can build options
cheaply before it forks.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from ftrl_ps.ps.layout import DEFAULT_GROUP_SIZE
from ftrl_ps.ps.merge import DEFAULT_RULE
from ftrl_ps.ps.shard_settings import ServerSettings

__all__ = ["DEFAULT_BITS", "LOG_LEVELS", "ShardOptions", "is_loopback"]

DEFAULT_BITS = 22
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


@dataclass(frozen=True)
class ShardOptions:
    """Everything ``ftrl-ps server`` is told; field names are the flags' names.

    ``fd`` is an already-listening socket inherited from a launcher (then
    ``host``/``port`` are unused). ``token`` None means: take
    ``$FTRL_PS_TOKEN`` if set. ``peers`` (shard 0): the other shards' URLs,
so that its dashboard shows their keys and load. The rest is
:class:`ServerSettings`.
    """

    host: str = "127.0.0.1"
    port: int = 0
    fd: int | None = None
    token: str | None = field(default=None, repr=False)
    max_body_mb: float = 64.0
    log_level: str = "warning"
    bits: int = DEFAULT_BITS
    group_size: int = DEFAULT_GROUP_SIZE
    shard_index: int = 0
    num_shards: int = 1
    dtype: str = "float32"
    init_model: str | None = None
    staleness: int | None = None
    num_workers: int | None = None
    worker_timeout: float = 30.0
    registration_timeout: float = 60.0
    clock_wait_timeout: float = 5.0
    merge_rule: str = DEFAULT_RULE
    alpha: float = 0.1
    beta: float = 1.0
    l1: float = 1.0
    l2: float = 1.0
    checkpoint_dir: str | None = None
    checkpoint_interval: float = 30.0
    #: > 0: wait up to this long at start for ``checkpoint_dir`` to exist (a volume
    #: not mounted yet) instead of creating it; 0: create it when missing
    start_timeout: float = 0.0
    max_exports: int = 2
    body_timeout: float = 30.0
    #: URLs of shards 1..M-1 (comma-separated), for shard 0's dashboard
    peers: str | None = None
    warm_rounds: int = 0

    def peer_urls(self) -> list[str]:
        """``peers`` as a list (empty when unset).

        >>> ShardOptions(peers=" http://a:1, http://b:2/ ,").peer_urls()
        ['http://a:1', 'http://b:2']
        """
        return [u.strip().rstrip("/") for u in (self.peers or "").split(",") if u.strip()]

    def settings(self) -> ServerSettings:
        """The shard's :class:`ServerSettings` (validated; token from env if unset)."""
        return ServerSettings.from_env(
            bits=self.bits,
            group_size=self.group_size,
            shard_index=self.shard_index,
            num_shards=self.num_shards,
            dtype=self.dtype,
            staleness=self.staleness,
            num_workers=self.num_workers,
            worker_timeout=self.worker_timeout,
            registration_timeout=self.registration_timeout,
            clock_wait_timeout=self.clock_wait_timeout,
            token=self.token,
            max_body_mb=self.max_body_mb,
            init_model=self.init_model,
            merge_rule=self.merge_rule,
            alpha=self.alpha,
            beta=self.beta,
            l1=self.l1,
            l2=self.l2,
            checkpoint_dir=self.checkpoint_dir,
            checkpoint_interval=self.checkpoint_interval,
            max_exports=self.max_exports,
            body_timeout=self.body_timeout,
            warm_rounds=self.warm_rounds,
        )


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1).

    >>> is_loopback("127.0.0.2"), is_loopback("::1"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
