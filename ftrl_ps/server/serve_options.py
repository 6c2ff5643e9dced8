"""Typed options of a prediction service (``ftrl-ps serve``) and its runner.

The command line and ``services.serve`` build a :class:`ServeOptions`;
:func:`run_serve` loads the model (or connects to the cluster), builds the
app (:func:`ftrl_ps.server.serve_app.create_serve_app`) and serves it with
uvicorn until SIGTERM/SIGINT, then shuts down gracefully (the learner pushes
what it learned). Once serving it prints ``listening on URL`` on stdout.

With ``start_timeout`` > 0 it first waits that long for its model source (every
shard answering ``/health``, or the model file to exist) with
:func:`ftrl_ps.ps.waiting.wait_until_ready`, the wait of the workers and the
export, so it may start before the shards (containers start in any order).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ftrl_ps.errors import ConfigError
from ftrl_ps.learn.logs import say
from ftrl_ps.ps.auth import resolve_token
from ftrl_ps.server.options import is_loopback

if TYPE_CHECKING:
    from ftrl_ps.ps.service import ServiceConfig

__all__ = ["PREDICT_TOKEN_ENV", "ServeOptions", "run_serve"]

log = logging.getLogger(__name__)

#: environment variable of the token that /v1/predict requires (when set)
PREDICT_TOKEN_ENV = "FTRL_PS_PREDICT_TOKEN"


@dataclass(frozen=True)
class ServeOptions:
    """Everything ``ftrl-ps serve`` is told; field names are the flags' names.

    Exactly one of ``model`` (a file, reloaded when replaced) and ``server``
    (shard URLs, comma-separated) is the model source. ``token`` (default
    ``$FTRL_PS_TOKEN``) guards ``/v1/learn`` and is sent to the cluster;
    ``predict_token`` (default ``$FTRL_PS_PREDICT_TOKEN``) guards ``/v1/predict``
    when set. ``alpha``..``l2``: with ``server``, each one given must equal the
    servers' (they own the model: theirs are used); with ``model``, unused.
    ``start_timeout`` > 0: wait that long for the shards (or the model file).
    """

    model: str | None = None
    server: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    fd: int | None = None
    start_timeout: float = 0.0
    token: str | None = field(default=None, repr=False)
    predict_token: str | None = field(default=None, repr=False)
    reload_interval: float = 1.0
    refresh: float = 0.5
    learn: bool = False
    push_interval: float = 0.5
    batch_size: int = 500
    fetch_step: int = 4
    push_step: int = 4
    num_workers: int = 1
    dense_fraction: float = 0.5
    max_body_mb: float = 16.0
    max_rows: int = 100_000
    max_queue_rows: int = 1_000_000
    log_level: str = "info"
    alpha: float | None = None
    beta: float | None = None
    l1: float | None = None
    l2: float | None = None

    def __post_init__(self) -> None:
        for name in ("reload_interval", "refresh", "push_interval", "max_body_mb"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("batch_size", "fetch_step", "push_step", "num_workers", "max_rows",
                     "max_queue_rows"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.start_timeout < 0:
            raise ConfigError(f"start_timeout must be >= 0, got {self.start_timeout}")

    def config(self) -> ServiceConfig:
        """The :class:`~ftrl_ps.ps.service.ServiceConfig` of these options."""
        from ftrl_ps.ps.service import ServiceConfig
        from ftrl_ps.ps.worker import WorkerConfig
        from ftrl_ps.ps.worker_main import params_with_defaults, parse_urls

        config = ServiceConfig(
            model=self.model,
            reload_interval=self.reload_interval,
            server=parse_urls(self.server) if self.server else None,
            refresh=self.refresh,
            token=resolve_token(self.token),
            params=params_with_defaults(alpha=self.alpha, beta=self.beta, l1=self.l1,
                                        l2=self.l2),
            given={k: v for k, v in (("alpha", self.alpha), ("beta", self.beta),
                                     ("l1", self.l1), ("l2", self.l2)) if v is not None},
            learn=self.learn,
            push_interval=self.push_interval,
            worker=WorkerConfig(batch_size=self.batch_size, fetch_step=self.fetch_step,
                                push_step=self.push_step, num_workers=self.num_workers,
                                dense_fraction=self.dense_fraction),
            max_queue_rows=self.max_queue_rows,
            max_rows=self.max_rows,
        )
        config.check()
        return config

    def resolved_predict_token(self) -> str | None:
        """``predict_token``, else a non-empty ``$FTRL_PS_PREDICT_TOKEN``, else None."""
        if self.predict_token is not None:
            return self.predict_token or None
        return os.environ.get(PREDICT_TOKEN_ENV) or None


def run_serve(options: ServeOptions) -> int:
    """Serve until SIGTERM/SIGINT (blocks); the exit code."""
    from ftrl_ps.learn.logs import uvicorn_level
    from ftrl_ps.ps.service import PredictionService
    from ftrl_ps.server.run import READY_PREFIX
    from ftrl_ps.server.serve import bind_socket, serve, socket_from_fd
    from ftrl_ps.server.serve_app import create_serve_app

    config = options.config()
    if options.start_timeout > 0:
        from ftrl_ps.ps.waiting import wait_until_ready

        wait_until_ready(config.server or [], [config.model] if config.model else [],
                         timeout=options.start_timeout, who="serve")
    service = PredictionService(config)
    try:
        token = service.config.token
        if options.fd is None and not is_loopback(options.host) and token is None:
            say(log, f"listening on {options.host} without --token",
                level=logging.WARNING, prefix="ftrl-ps serve: warning: ")
        app = create_serve_app(service, token=token,
                               predict_token=options.resolved_predict_token(),
                               max_body_bytes=int(options.max_body_mb * (1 << 20)))
        sock = (socket_from_fd(options.fd) if options.fd is not None
                else bind_socket(options.host, options.port))
    except BaseException:
        service.close()
        raise

    def ready(url: str) -> None:
        print(f"{READY_PREFIX}{url}", flush=True)

    serve(app, sock, on_ready=ready, log_level=uvicorn_level(options.log_level))
    return 0
