"""A model file as the source of a prediction service: loaded once, reloaded when replaced.

:class:`ModelFileSource` loads the file into a
:class:`~ftrl_ps.learn.serving.ServingModel`, then looks at the file every
``interval`` seconds. When its identity changed (device, inode, size or
modification time: an atomic replace by rename, as ``ftrl-ps train`` and
``export`` write models, gives a new inode) it loads the new file and swaps
it in. A file that cannot be loaded (truncated, corrupt, missing) leaves the
previous model in service; the failure is kept in :meth:`ModelFileSource.status`
(``"reload_error"``) until a later version of the file loads, and that
version is not tried again until the file changes once more. Each reload
logs one line: info when the new model is served, a warning when it failed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from ftrl_ps.core.modelio import load_model
from ftrl_ps.errors import FTRLPSError, ModelFormatError
from ftrl_ps.learn.serving import ServingModel

__all__ = ["ModelFileSource"]

log = logging.getLogger(__name__)


def _identity(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class ModelFileSource:
    """Serve the model in ``path``; reload it when the file is replaced.

    Raises :class:`~ftrl_ps.errors.ModelFormatError` at construction when the
    file cannot be loaded (a service should not start without its model).
    """

    def __init__(self, served: ServingModel, path: str | os.PathLike[str],
                 interval: float = 1.0) -> None:
        self.served = served
        self.path = os.fspath(path)
        self.interval = float(interval)
        self.reloads = 0
        self.failed_reloads = 0
        self.reload_error: str | None = None
        self.reload_error_at: float | None = None
        self.checked_at: float | None = None
        self._seen = _identity(self.path)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._load()

    def _load(self) -> None:
        saved = load_model(self.path)
        self.served.install(saved.to_ftrl(), source=f"file {self.path}",
                            model_created=saved.created, model_keys=int(saved.keys.size))

    def check(self) -> bool:
        """Reload if the file changed since the last look; True if a new model is served."""
        self.checked_at = time.time()
        ident = _identity(self.path)
        if ident == self._seen:
            return False
        self._seen = ident
        try:
            if ident is None:
                raise ModelFormatError(f"model file {self.path} is gone")
            self._load()
        except FTRLPSError as exc:
            self.failed_reloads += 1
            self.reload_error = f"{exc} (still serving version {self.served.version})"
            self.reload_error_at = time.time()
            log.warning("model reload of %s failed: %s", self.path, self.reload_error)
            return False
        self.reloads += 1
        self.reload_error = None
        self.reload_error_at = None
        log.info("model reloaded from %s: serving version %d (%s keys)", self.path,
                 self.served.version, self.served.info.get("model_keys", "?"))
        return True

    def start(self) -> None:
        """Check every ``interval`` seconds in a daemon thread."""
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(self.interval):
                self.check()

        self._thread = threading.Thread(target=loop, name="ftrl-ps-reload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the checking thread."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()

    def status(self) -> dict[str, Any]:
        """What ``/v1/status`` shows of the source."""
        return {
            "kind": "file",
            "path": self.path,
            "reload_interval": self.interval,
            "reloads": self.reloads,
            "failed_reloads": self.failed_reloads,
            "reload_error": self.reload_error,
            "reload_error_at": self.reload_error_at,
            "checked_at": self.checked_at,
            "healthy": self.reload_error is None,
        }
