"""Run one shard with uvicorn on a socket we bind ourselves.

Binding first means ``port=0`` works: the OS picks a free port, we know it
before uvicorn starts, and :func:`serve` calls ``on_ready(url)`` only once
uvicorn has started serving on that very socket.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

import uvicorn

from ftrl_ps.server.sockets import bind_socket, socket_from_fd, socket_url

__all__ = ["bind_socket", "serve", "socket_from_fd", "socket_url"]


class _Server(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        on_ready: Callable[[], None] | None,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self._on_ready = on_ready
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: Any) -> None:
        # uvicorn waits for running requests before it shuts down; release the
        # long ones (SSP clock waits) first. In a thread: this runs in a signal
        # handler, which must not block on a lock the interrupted code may hold.
        if self._on_exit is not None and not self.should_exit:
            threading.Thread(target=self._on_exit, name="ftrl-ps-exit", daemon=True).start()
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self._on_ready is not None:
            self._on_ready()


def serve(
    app: Any,
    sock: socket.socket,
    *,
    on_ready: Callable[[str], None] | None = None,
    on_exit: Callable[[], None] | None = None,
    log_level: str = "warning",
    access_log: bool = False,
) -> None:
    """Serve ``app`` on ``sock`` until SIGINT/SIGTERM (blocks).

    ``on_ready(url)`` runs once uvicorn accepts connections; ``on_exit()``
    runs (in a thread) when SIGINT/SIGTERM arrives, before uvicorn waits for
    the requests in progress. One process, one event loop; sync handlers run
    in the threadpool.
    """
    url = socket_url(sock)
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=access_log,
        lifespan="on",
        log_config=None,  # records go through ftrl_ps.learn.logs (one line per event)
        timeout_keep_alive=30,
        server_header=False,
    )
    server = _Server(config, (lambda: on_ready(url)) if on_ready else None, on_exit)
    server.run(sockets=[sock])
