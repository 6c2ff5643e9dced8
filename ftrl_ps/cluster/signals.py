"""SIGTERM as Ctrl-C for a command or service that must clean up when stopped.

``kill PID``, ``docker stop`` and Kubernetes stop a process with SIGTERM, whose
default action ends it at once: no ``finally`` runs. A process that must say
goodbye first (a worker leaving the cluster, a launcher stopping its children)
runs its work inside :func:`sigterm_as_interrupt`, where SIGTERM raises
:class:`KeyboardInterrupt` in the main thread, as Ctrl-C does. Children it forks
reset it (``cluster.launch._reset_signals``).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["sigterm_as_interrupt"]


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt meanwhile (main thread only; elsewhere a
    no-op), the handler before is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
