"""Start shard servers as child processes (for launchers, tests and benchmarks).

Each child runs ``python -m ftrl_ps server --port 0 ...``; the parent reads the
single ``listening on URL`` line from its stdout, so the port is the real one.
The child's stderr goes to a temporary file, quoted in the error if it fails.

>>> with spawn_server(["--bits", "12"]) as srv:        # doctest: +SKIP
...     print(srv.url)
http://127.0.0.1:41233
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ftrl_ps.errors import ServerError

__all__ = ["ServerProcess", "spawn_cluster", "spawn_server", "spawn_servers"]

READY_PREFIX = "listening on "


@dataclass
class ServerProcess:
    """A running shard server child process."""

    url: str
    process: subprocess.Popen[str]
    args: list[str]
    stderr_path: Path
    _stderr_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr_text(self, limit: int = 4000) -> str:
        """The tail of the child's stderr."""
        try:
            return self.stderr_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL; returns the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self._stderr_file is not None:
            self._stderr_file.close()
            self._stderr_file = None
        try:
            self.stderr_path.unlink()
        except OSError:
            pass
        return self.process.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _start(args: Sequence[str], env: Mapping[str, str] | None) -> tuple[
        subprocess.Popen[str], list[str], Path, IO[bytes], queue.Queue[str]]:
    argv = [str(a) for a in args]
    if "--port" not in argv:
        argv = ["--port", "0", *argv]
    cmd = [sys.executable, "-m", "ftrl_ps", "server", *argv]
    fd, path = tempfile.mkstemp(prefix="ftrl-ps-server-", suffix=".stderr")
    err = os.fdopen(fd, "wb")
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=child_env)
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:  # keep reading so the child never blocks on a full pipe
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, name=f"server-{proc.pid}-stdout", daemon=True).start()
    return proc, argv, Path(path), err, lines


def _await_ready(proc: subprocess.Popen[str], argv: list[str], path: Path, err: IO[bytes],
                 lines: queue.Queue[str], deadline: float) -> ServerProcess:
    server = ServerProcess("", proc, argv, path, err)
    while True:
        remaining = deadline - time.monotonic()
        try:
            line = lines.get(timeout=max(0.01, remaining))
        except queue.Empty:
            line = None
        if line and line.startswith(READY_PREFIX):
            server.url = line[len(READY_PREFIX):].strip()
            return server
        if line == "" or remaining <= 0:
            why = "exited" if proc.poll() is not None else "did not report ready in time"
            server.stop()
            raise ServerError(
                f"server {' '.join(argv)} {why} (code {proc.returncode}): "
                f"{server.stderr_text() or '(no stderr)'}"
            )


def spawn_server(
    args: Sequence[str] = (), *, env: Mapping[str, str] | None = None, timeout: float = 60.0
) -> ServerProcess:
    """Start one shard server and wait for its ``listening on`` line.

    ``args`` are ``ftrl-ps server`` flags (``--port 0`` is added unless given).
    Raises :class:`~ftrl_ps.errors.ServerError` if it exits or is not ready
    within ``timeout`` seconds.
    """
    return _await_ready(*_start(args, env), time.monotonic() + timeout)


def spawn_servers(
    arg_lists: Sequence[Sequence[str]],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> list[ServerProcess]:
    """Start several servers in parallel, one per argument list; returns them
    in order. If one fails, the others are stopped and the error is raised."""
    started = [_start(args, env) for args in arg_lists]
    deadline = time.monotonic() + timeout
    servers: list[ServerProcess] = []
    try:
        for item in started:
            servers.append(_await_ready(*item, deadline))
    except BaseException:
        for s in servers:
            s.stop()
        for proc, _argv, path, err, _lines in started[len(servers):]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            err.close()
            path.unlink(missing_ok=True)
        raise
    return servers


def spawn_cluster(
    num_shards: int,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> list[ServerProcess]:
    """Start the ``num_shards`` shards of one cluster in parallel
    (``--shard-index i --num-shards M`` added to ``args``), in shard order."""
    return spawn_servers(
        [[*args, "--shard-index", str(i), "--num-shards", str(num_shards)]
         for i in range(num_shards)],
        env=env,
        timeout=timeout,
    )
