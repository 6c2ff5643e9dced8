"""Start shard servers as child processes and wait until they serve.

Built on the one launcher (:class:`ftrl_ps.cluster.launch.Launcher`): a
child runs the ``server`` role with its :class:`ShardOptions` and prints
``listening on URL`` once it accepts connections; :func:`wait_ready` reads
that line, so the URL holds the real port. The local cluster, the tests and
the benchmarks start servers this way.

>>> with spawn_server(ShardOptions(bits=12)) as srv:      # doctest: +SKIP
...     print(srv.url)
http://127.0.0.1:41233
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ftrl_ps.cluster.launch import ChildHandle, Launcher, stop_all
from ftrl_ps.errors import ServerError
from ftrl_ps.ps.auth import TOKEN_ENV
from ftrl_ps.server.options import ShardOptions
from ftrl_ps.server.run import READY_PREFIX

__all__ = [
    "ServerProcess",
    "log_tail",
    "spawn_cluster",
    "spawn_server",
    "spawn_servers",
    "wait_ready",
]

STOP_GRACE = 10.0


def log_tail(log: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file, indented (empty if unreadable)."""
    try:
        text = log.read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return ""
    return "\n".join("    " + ln for ln in text[-lines:])


def wait_ready(handle: ChildHandle, name: str, log: Path, timeout: float) -> str:
    """The URL a server child prints once serving (``listening on URL``).

    Raises :class:`~ftrl_ps.errors.ServerError` naming the child, why it is
    not ready (exited with code N, not ready in time) and its log's tail.
    """
    found: list[str] = []

    def read() -> None:
        assert handle.stdout is not None
        for raw in handle.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith(READY_PREFIX):
                found.append(line[len(READY_PREFIX):])
                return

    t = threading.Thread(target=read, daemon=True, name=f"ready-{handle.pid}")
    t.start()
    t.join(timeout)
    if not found:
        if not t.is_alive():  # its stdout closed: it is exiting, wait for the code
            with contextlib.suppress(subprocess.TimeoutExpired):
                handle.wait(5.0)
        code = handle.poll()
        why = (
            f"exited with code {code}" if code is not None
            else f"not ready in {timeout:.0f} s" if t.is_alive()
            else "closed its output before it was ready"
        )
        raise ServerError(f"{name} {why}; its log ({log}):\n{log_tail(log)}")
    return found[0]


@dataclass
class ServerProcess:
    """A running shard server child: its URL, process handle, options and log."""

    url: str
    handle: ChildHandle
    options: ShardOptions
    log: Path

    @property
    def pid(self) -> int:
        return self.handle.pid

    def stderr_text(self, limit: int = 4000) -> str:
        """The tail of the child's log (its stderr)."""
        try:
            return self.log.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self, timeout: float = STOP_GRACE) -> int | None:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL; the exit code."""
        stop_all([self.handle], timeout)
        shutil.rmtree(self.log.parent, ignore_errors=True)
        return self.handle.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn_servers(
    options: Sequence[ShardOptions],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> list[ServerProcess]:
    """Start one server per options object, in parallel; returns them in order.

    Children are exec'd fresh interpreters (the caller may run threads); an
    options' token reaches its child as ``$FTRL_PS_TOKEN``. If
    one fails to start, the others are stopped and
    :class:`~ftrl_ps.errors.ServerError` is raised.
    """
    base_env = dict(os.environ if env is None else env)
    base_env.setdefault("PYTHONUNBUFFERED", "1")
    started: list[tuple[ChildHandle, ShardOptions, Path]] = []
    servers: list[ServerProcess] = []
    try:
        for opts in options:
            child_env = dict(base_env)
            if opts.token is not None:  # secrets go through the environment
                child_env[TOKEN_ENV] = opts.token
            launcher = Launcher(child_env, method="exec", reason="spawn_servers")
            logdir = Path(tempfile.mkdtemp(prefix="ftrl-ps-server-"))
            log = logdir / "server.log"
            handle = launcher.spawn(replace(opts, token=None), log, stdout_pipe=True)
            started.append((handle, opts, log))
        deadline = time.monotonic() + timeout
        for handle, opts, log in started:
            name = f"server (shard {opts.shard_index})"
            url = wait_ready(handle, name, log, max(0.1, deadline - time.monotonic()))
            servers.append(ServerProcess(url, handle, opts, log))
    except BaseException:
        stop_all([h for h, _, _ in started], 2.0)
        for _, _, log in started:
            shutil.rmtree(log.parent, ignore_errors=True)
        raise
    return servers


def spawn_server(
    options: ShardOptions | None = None,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> ServerProcess:
    """Start one shard server (default options: a fresh 127.0.0.1 port) and wait for it."""
    return spawn_servers([options or ShardOptions()], env=env, timeout=timeout)[0]


def spawn_cluster(
    num_shards: int,
    options: ShardOptions | None = None,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> list[ServerProcess]:
    """Start the ``num_shards`` shards of one cluster in parallel, in shard order."""
    base = options or ShardOptions()
    return spawn_servers(
        [replace(base, shard_index=i, num_shards=num_shards) for i in range(num_shards)],
        env=env,
        timeout=timeout,
    )
