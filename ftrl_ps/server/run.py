"""Run one shard until SIGTERM/SIGINT: options -> app -> socket -> uvicorn.

Once serving it prints exactly one line on stdout, ``listening on URL``,
which launchers read to learn the address (``port=0`` picks a free port).
"""

from __future__ import annotations

import sys

from ftrl_ps.server.options import ShardOptions, is_loopback

__all__ = ["READY_PREFIX", "run_shard"]

#: the line a shard prints on stdout once it accepts connections
READY_PREFIX = "listening on "


def run_shard(options: ShardOptions) -> int:
    """Serve one shard (blocks); the exit code.

    Raises :class:`~ftrl_ps.errors.ConfigError` for invalid options or a port
    that cannot be bound.
    """
    from ftrl_ps.server.app import create_app
    from ftrl_ps.server.serve import bind_socket, serve, socket_from_fd

    settings = options.settings()
    if options.fd is None and not is_loopback(options.host) and settings.token is None:
        print(f"ftrl-ps server: warning: listening on {options.host} without --token",
              file=sys.stderr)
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
