"""Run one shard until SIGTERM/SIGINT: options -> app -> socket -> uvicorn.

Once serving it prints exactly one line on stdout, ``listening on URL``,
which launchers read to learn the address (``port=0`` picks a free port).

With ``checkpoint_dir`` and ``start_timeout`` > 0 (the container service's
default) the shard first waits for the checkpoint directory to exist: it is
meant to be a volume, and a directory the shard made itself would sit in the
container's own layer, lost with the container, so it is not created then.
With ``start_timeout`` 0 (the command line's default) a missing directory is
created, as before.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TextIO

from ftrl_ps.core.memory import keep_freed_buffers
from ftrl_ps.errors import ConfigError
from ftrl_ps.learn.logs import say
from ftrl_ps.ps.waiting import log_line, wait_until_ready
from ftrl_ps.server.options import ShardOptions, is_loopback

__all__ = ["READY_PREFIX", "run_shard", "wait_for_checkpoint_dir"]

#: the line a shard prints on stdout once it accepts connections
READY_PREFIX = "listening on "

log = logging.getLogger("ftrl_ps.server")


def wait_for_checkpoint_dir(options: ShardOptions, *, interval: float = 1.0,
                            out: TextIO | Callable[[str], None] | None = log_line
                            ) -> float:
    """Wait (up to ``options.start_timeout`` s) for ``options.checkpoint_dir`` to
    exist; the seconds waited (0 when there is nothing to wait for).

    Raises :class:`~ftrl_ps.errors.StartupTimeoutError` when it is still missing
    (it is not created), :class:`~ftrl_ps.errors.ConfigError` when it exists but
    is not a directory or ``start_timeout`` is negative.
    """
    path, timeout = options.checkpoint_dir, options.start_timeout
    if timeout < 0:
        raise ConfigError(f"start_timeout must be >= 0, got {timeout}")
    if path is None or timeout == 0:
        return 0.0
    who = (f"ftrl-ps server shard {options.shard_index}: --checkpoint-dir "
           "(a volume not mounted yet?)")
    waited = wait_until_ready([], [path], timeout=timeout, who=who, interval=interval, out=out)
    if not os.path.isdir(path):
        raise ConfigError(f"--checkpoint-dir {path} exists but is not a directory")
    return waited


def run_shard(options: ShardOptions) -> int:
    """Serve one shard (blocks); the exit code.

    Raises :class:`~ftrl_ps.errors.ConfigError` for invalid options or a port
    that cannot be bound, :class:`~ftrl_ps.errors.StartupTimeoutError` when the
    checkpoint directory did not appear (:func:`wait_for_checkpoint_dir`).
    """
    from ftrl_ps.server.app import create_app
    from ftrl_ps.server.serve import bind_socket, serve, socket_from_fd

    settings = options.settings()
    keep_freed_buffers()  # request buffers reused, not faulted in anew (core.memory)
    wait_for_checkpoint_dir(options)
    if options.fd is None and not is_loopback(options.host) and settings.token is None:
        say(log, f"warning: listening on {options.host} without --token",
            level=logging.WARNING, prefix="ftrl-ps server: ")
    app = create_app(settings, peers=options.peer_urls())
    sock = (
        socket_from_fd(options.fd) if options.fd is not None
        else bind_socket(options.host, options.port)
    )

    def ready(url: str) -> None:
        print(f"{READY_PREFIX}{url}", flush=True)

    # on SIGTERM/Ctrl-C, release clock waits at once instead of letting
    # uvicorn wait for them to time out (up to clock_wait_timeout)
    serve(app, sock, on_ready=ready, on_exit=app.state.ftrl.close, log_level=options.log_level)
    return 0
