"""Settings of one parameter-server shard, in one class.

Everything comes from the command line (``ftrl-ps server``) except the token,
which may also come from the environment variable ``FTRL_PS_TOKEN`` so that it
does not show up in ``ps`` output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from ftrl_ps.core.params import FTRLParams
from ftrl_ps.errors import ConfigError
from ftrl_ps.ps.auth import TOKEN_ENV, resolve_token
from ftrl_ps.ps.layout import DEFAULT_GROUP_SIZE, Layout
from ftrl_ps.ps.merge import DEFAULT_RULE, RULES

__all__ = ["SHARED", "TOKEN_ENV", "ServerSettings", "check_shards_agree"]


@dataclass(frozen=True)
class ServerSettings:
    """Configuration of one shard server.

    Attributes
    ----------
    bits, group_size, shard_index, num_shards
        The key layout (see :class:`ftrl_ps.ps.layout.Layout`) and which shard this is.
    dtype : {"float32", "float64"}
        Storage dtype of ``n`` and ``z``.
    staleness : int or None
        SSP bound (None = asynchronous, 0 = BSP). Only shard 0 runs the clock.
    num_workers : int or None
        Expected number of workers (None: the first registration decides).
    worker_timeout : float
        Seconds without a heartbeat before a worker is declared dead.
    registration_timeout : float
        Seconds after the first registration after which missing workers stop
        holding back the others.
    clock_wait_timeout : float
        Longest a clock/wait request blocks on the server before answering
        ``{"ready": false}`` (the client then asks again).
    token : str or None
        Bearer token required on state-changing requests (None: no auth).
    max_body_mb : float
        Largest accepted request body, in MiB (larger -> 413).
    init_model : str or None
        Model file whose keys (in this shard's range) initialise the store.
    merge_rule : str
        How workers' deltas are merged (:data:`ftrl_ps.ps.merge.RULES`); the
        workers read it from ``/v1/status`` and push accordingly.
    alpha, beta, l1, l2 : float
        The FTRL hyper-parameters of the model this cluster trains: the servers
        own them; workers adopt them and export saves them.
    checkpoint_dir : str or None
        Directory of this shard's checkpoints (restored at start; None: none).
    checkpoint_interval : float
        Seconds between checkpoints.
    max_exports : int
        State exports (``GET /v1/state``) served at once; more get 503.
    body_timeout : float
        Seconds a request body may stall between two reads (then 408).
    max_json_depth : int
        Deepest nesting accepted in a JSON body (deeper -> 400, never parsed).
    warm_rounds : int
        Rounds one worker trains alone before the others start (0: none; see
        :class:`ftrl_ps.ps.clock.SSPClock`).
    """

    bits: int = 20
    group_size: int = DEFAULT_GROUP_SIZE
    shard_index: int = 0
    num_shards: int = 1
    dtype: str = "float32"
    staleness: int | None = None
    num_workers: int | None = None
    worker_timeout: float = 30.0
    registration_timeout: float = 60.0
    clock_wait_timeout: float = 5.0
    token: str | None = field(default=None, repr=False)
    max_body_mb: float = 64.0
    init_model: str | None = None
    merge_rule: str = DEFAULT_RULE
    alpha: float = 0.1
    beta: float = 1.0
    l1: float = 1.0
    l2: float = 1.0
    checkpoint_dir: str | None = None
    checkpoint_interval: float = 30.0
    max_exports: int = 2
    body_timeout: float = 30.0
    max_json_depth: int = 32
    warm_rounds: int = 0

    def __post_init__(self) -> None:
        layout = self.layout  # validates bits/group_size/num_shards
        _ = self.params  # validates the hyper-parameters
        if not 0 <= self.shard_index < layout.num_shards:
            raise ConfigError(
                f"shard_index {self.shard_index} outside [0, {layout.num_shards})"
            )
        if self.dtype not in ("float32", "float64"):
            raise ConfigError(f"dtype must be float32 or float64, got {self.dtype!r}")
        if self.staleness is not None and (
            isinstance(self.staleness, bool)
            or not isinstance(self.staleness, int)
            or self.staleness < 0
        ):
            raise ConfigError(f"staleness must be an int >= 0 or None, got {self.staleness!r}")
        if self.num_workers is not None and self.num_workers < 1:
            raise ConfigError(f"num_workers must be >= 1, got {self.num_workers}")
        for name in ("worker_timeout", "clock_wait_timeout", "max_body_mb",
                     "checkpoint_interval", "body_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
        if not self.registration_timeout >= 0:
            raise ConfigError("registration_timeout must be >= 0")
        if self.token is not None and not self.token:
            raise ConfigError("token must not be empty")
        if self.merge_rule not in RULES:
            raise ConfigError(f"merge_rule must be one of {RULES}, got {self.merge_rule!r}")
        for name, least in (("max_exports", 1), ("max_json_depth", 1), ("warm_rounds", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"{name} must be an int >= {least}, got {value!r}")

    @property
    def params(self) -> FTRLParams:
        """The model's hyper-parameters (validated)."""
        return FTRLParams(alpha=self.alpha, beta=self.beta, l1=self.l1, l2=self.l2)

    def model_dict(self) -> dict[str, Any]:
        """What the servers own of the model: bits, dtype, hyper-parameters."""
        return {"bits": self.bits, "dtype": self.dtype, "params": self.params.as_dict()}

    @property
    def layout(self) -> Layout:
        """The cluster's key layout."""
        return Layout(self.bits, self.group_size, self.num_shards)

    @property
    def max_body_bytes(self) -> int:
        """``max_body_mb`` in bytes."""
        return int(self.max_body_mb * (1 << 20))

    @property
    def is_clock_authority(self) -> bool:
        """Shard 0 runs the SSP clock and the worker registry."""
        return self.shard_index == 0

    @classmethod
    def from_env(cls, **values: Any) -> ServerSettings:
        """Settings from keyword values, taking the token from ``FTRL_PS_TOKEN``
        when none is given."""
        values["token"] = resolve_token(values.get("token"))
        return cls(**values)

    def with_(self, **changes: Any) -> ServerSettings:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def public_dict(self) -> dict[str, Any]:
        """JSON-ready settings for the status page (the token is never shown)."""
        return {
            "layout": self.layout.to_dict(),
            "shard_index": self.shard_index,
            "dtype": self.dtype,
            "staleness": self.staleness,
            "num_workers": self.num_workers,
            "worker_timeout": self.worker_timeout,
            "registration_timeout": self.registration_timeout,
            "clock_wait_timeout": self.clock_wait_timeout,
            "max_body_mb": self.max_body_mb,
            "auth": self.token is not None,
            "merge_rule": self.merge_rule,
            "model": self.model_dict(),
            "checkpoint_dir": self.checkpoint_dir,
            "checkpoint_interval": self.checkpoint_interval,
            "max_exports": self.max_exports,
            "body_timeout": self.body_timeout,
            "max_json_depth": self.max_json_depth,
            "warm_rounds": self.warm_rounds,
        }


#: settings every shard of one cluster must share (the layout and dtype are checked
#: apart); a shard that merges or derives weights its own way makes another model
SHARED = ("merge_rule", "num_workers", "staleness", "warm_rounds")


def check_shards_agree(settings: list[dict[str, Any]]) -> None:
    """A ConfigError naming every setting in which a shard differs from shard 0
    (``settings``: each shard's ``/v1/status`` ``settings``, in shard order)."""
    def shared(st: dict[str, Any]) -> dict[str, Any]:
        params = (st.get("model") or {}).get("params") or {}
        return {**{k: st.get(k) for k in SHARED}, **params}

    first = shared(settings[0])
    clash = [f"shard {i} has {k} {v}, shard 0 {first.get(k)}"
             for i, st in enumerate(settings[1:], 1)
             for k, v in shared(st).items() if v != first.get(k)]
    if clash:
        raise ConfigError("the shards were started with different settings ("
                          + "; ".join(clash) + "): start every shard with the same flags "
                          "('ftrl-ps server --help' says which)")
