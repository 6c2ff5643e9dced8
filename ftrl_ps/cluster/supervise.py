"""The processes of a local cluster run, and the supervisor that heals them.

:class:`Cluster` starts shards on sockets it binds itself (so each shard's URL
is known at once and stays the same across restarts) and workers; it restarts
a shard that exits on the same port (the shard restores its checkpoint and
the workers, which retry meanwhile, replay what it lacks) and a worker that
exits non-zero with the same index and state directory (it replays its
journal and resumes after the rows it pushed), at most ``max_restarts`` times
in all; not a worker that stopped on its flags or its input data (exit codes
2 and 3, :mod:`ftrl_ps.cluster.child`): a new one would fail the same way, so
the run ends at once with its error. See docs/durability.md, section 5.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ftrl_ps.cluster.child import DATA_ERROR, USAGE_ERROR
from ftrl_ps.cluster.launch import ChildHandle, Launcher, stop_all
from ftrl_ps.cluster.spawn import log_tail, wait_ready
from ftrl_ps.errors import ClusterError, ServerError
from ftrl_ps.server.sockets import bind_socket, socket_url

__all__ = ["Cluster", "Proc", "RestartEvent"]

START_TIMEOUT = 60.0
STOP_GRACE = 5.0


@dataclass
class Proc:
    """One child process of the run (the latest incarnation of its role)."""

    name: str
    popen: ChildHandle  # a subprocess.Popen or a launch.ForkedChild
    log: Path
    options: Any
    url: str | None = None

    def tail(self, lines: int = 15) -> str:
        return log_tail(self.log, lines)


@dataclass
class RestartEvent:
    """A process that died and was started again."""

    name: str
    exit_code: int
    detected: float  # time.time() when the supervisor saw it exit
    restarted: float  # time.time() when the new process was serving / started

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "exit_code": self.exit_code, "detected": self.detected,
                "restarted": self.restarted,
                "seconds_to_restart": round(self.restarted - self.detected, 3)}


#: exit codes of a worker that a restart would not help (its flags, its data)
_FATAL = {USAGE_ERROR: "a configuration or input error", DATA_ERROR: "an error in its input data"}


def _how(code: int) -> str:
    """``exited with code 1`` / ``was killed by signal 9``."""
    if code < 0:
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class Cluster:
    """Processes of one local run (servers first, then workers)."""

    logdir: Path
    launcher: Launcher
    max_restarts: int = 3
    servers: list[Proc] = field(default_factory=list)
    workers: list[Proc] = field(default_factory=list)
    restarts: list[RestartEvent] = field(default_factory=list)

    def restart_counts(self) -> dict[str, int]:
        """``restarts`` (all), ``worker_restarts`` and ``shard_restarts``: the keys of
        ``--metrics-json`` and the numbers of the live line."""
        workers = sum(1 for e in self.restarts if e.name.startswith("worker "))
        return {"restarts": len(self.restarts), "worker_restarts": workers,
                "shard_restarts": len(self.restarts) - workers}

    def spawn(self, name: str, options: Any, **how: Any) -> Proc:
        """Start a child for ``options`` logging to ``LOGDIR/NAME.log`` (see Launcher.spawn);
        a restarted role logs to ``NAME-rK.log``."""
        stem = name.replace(" ", "-")
        count = sum(1 for e in self.restarts if e.name == name)
        log = self.logdir / (f"{stem}-r{count}.log" if count else f"{stem}.log")
        handle = self.launcher.spawn(options, log, name=f"ftrl-{stem}", **how)
        return Proc(name, handle, log, options)

    def start_server(self, index: int, options: Any, port: int = 0) -> Proc:
        """Start shard ``index`` on a socket bound here (``port=0``: a free one).

        Connections made before the server is up wait in the socket's backlog,
        so workers can start at the same time as the servers.
        """
        sock = bind_socket("127.0.0.1", port)
        try:
            proc = self.spawn(f"server {index}", replace(options, fd=sock.fileno()),
                              stdout_pipe=True, pass_fds=(sock.fileno(),))
            proc.url = socket_url(sock)
            proc.options = options
        finally:
            sock.close()  # the server holds its own copy; a dead server refuses connections
        _put(self.servers, proc)
        return proc

    def start_worker(self, index: int, options: Any) -> Proc:
        proc = self.spawn(f"worker {index}", options)
        _put(self.workers, proc)
        return proc

    def wait_servers(self) -> None:
        """Wait until every shard serves (a failure to start is a ClusterError)."""
        for p in self.servers:
            self._wait_ready(p)

    def _wait_ready(self, p: Proc) -> None:
        try:
            wait_ready(p.popen, p.name, p.log, START_TIMEOUT)
        except ServerError as exc:
            raise ClusterError(str(exc)) from exc

    # --- healing ---------------------------------------------------------------------
    def _budget(self, p: Proc, code: int) -> None:
        if len(self.restarts) >= self.max_restarts:
            raise ClusterError(
                f"{p.name} exited with code {code} and the run already restarted "
                f"{len(self.restarts)} process(es) (--max-restarts {self.max_restarts}); "
                f"its log:\n{p.tail()}"
            )

    def heal(self) -> int:
        """Restart every dead shard and every worker that failed; the number of
        workers still running (0: all finished)."""
        for i, p in enumerate(self.servers):
            code = p.popen.poll()
            if code is not None:
                self._restart_server(i, p, code)
        running = 0
        for i, p in enumerate(self.workers):
            code = p.popen.poll()
            if code is None:
                running += 1
            elif code != 0:
                if code in _FATAL:  # its flags or data: a new process fails the same way
                    raise ClusterError(f"{p.name} exited with code {code} ({_FATAL[code]}: "
                                       f"not restarted); its log:\n{p.tail()}")
                self._budget(p, code)
                detected = time.time()
                self.restarts.append(RestartEvent(p.name, code, detected, detected))
                self.start_worker(i, replace(p.options, supersede=True))
                self.restarts[-1].restarted = time.time()
                self._say(f"{p.name} {_how(code)}: restarted (it resumes after the rows it "
                          "pushed)")
                running += 1
        return running

    def _say(self, event: str) -> None:
        """One line per restart, on the launcher's stderr."""
        if self.launcher.warn is not None:
            self.launcher.warn(event)

    def _restart_server(self, index: int, p: Proc, code: int) -> None:
        self._budget(p, code)
        detected = time.time()
        if p.popen.stdout is not None:
            p.popen.stdout.close()
        assert p.url is not None
        port = int(p.url.rsplit(":", 1)[1])
        event = RestartEvent(p.name, code, detected, detected)
        self.restarts.append(event)
        new = self.start_server(index, p.options, port=port)
        self._wait_ready(new)
        event.restarted = time.time()
        self._say(f"{p.name} {_how(code)}: restarted on the same port from its checkpoint "
                  f"in {event.restarted - detected:.1f} s")

    def stop(self, *, discard: bool = False) -> None:
        """Stop every process: SIGTERM, SIGKILL after ``STOP_GRACE`` s.

        ``discard``: the run is over and the launcher holds the servers' state,
        so nothing they would still write (a last checkpoint, deleted with the
        run's folder) is wanted: they are killed at once (~0.15 s less per run).
        """
        if discard:
            for p in [*self.workers, *self.servers]:
                p.popen.kill()
        stop_all([p.popen for p in [*self.workers, *self.servers]], STOP_GRACE)


def _put(procs: list[Proc], proc: Proc) -> None:
    """Replace the process of the same role (a restart), else append."""
    for i, old in enumerate(procs):
        if old.name == proc.name:
            procs[i] = proc
            return
    procs.append(proc)
