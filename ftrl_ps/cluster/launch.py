"""Start the local cluster's processes: fork the preloaded launcher, or exec a fresh Python.

Every server and worker of a cluster runs one *role* (see
:mod:`ftrl_ps.cluster.roles`: typed options and a runner) with stdin from
``/dev/null`` and stdout and stderr in a log file (a server's stdout may go
to a pipe instead, which the launcher reads for the ``listening on URL``
line). There are two ways to start one:

``fork`` (default where :func:`os.fork` exists)
    The launcher has imported numpy, numba and ftrl-ps and loaded the numba
    kernels (:func:`preload`); a forked child shares all of that and starts
    in milliseconds instead of paying ~1 s of imports and kernel loading.
``exec``
    ``python -m ftrl_ps.cluster.child ROLE OPTIONS_JSON`` through
    :mod:`subprocess`, a fresh interpreter. Used where there is no ``fork``
    (Windows), when the launcher runs other threads (a fork copies locks other threads may hold;
    :meth:`Launcher.spawn` checks before every fork), or on request: set the
    environment variable ``FTRL_PS_LAUNCH=exec`` (``fork``/``auto``: default).

Either way the launcher gets a :class:`ChildHandle`: a
:class:`subprocess.Popen` or a :class:`ForkedChild` with the same interface,
so the code that watches and stops the processes does not care how they were
started. Children stay in the launcher's process group (Ctrl-C in a terminal
reaches them all) and, on Linux, get SIGTERM when the launcher dies
(``PR_SET_PDEATHSIG``).

Why not :mod:`multiprocessing`'s fork context: its ``Process`` has no stdout
pipe and another interface (``exitcode``, ``join``), and its bootstrap runs
multiprocessing's own after-fork hooks and finalizers; here the redirections
happen before any child code runs, and every step is on this page.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from ftrl_ps.errors import ConfigError
from ftrl_ps.learn.logs import say

__all__ = ["ChildHandle", "ForkedChild", "LAUNCH_ENV", "Launcher", "choose_method",
           "fork_child", "preload", "stop_all"]

#: environment variable choosing how children start: ``fork`` (default) or ``exec``
LAUNCH_ENV = "FTRL_PS_LAUNCH"

_PR_SET_PDEATHSIG, _PR_SET_NAME = 1, 15

log = logging.getLogger("ftrl_ps.cluster")


class ChildHandle(Protocol):
    """What the launcher uses of a child: the common part of Popen and ForkedChild."""

    pid: int
    returncode: int | Any
    stdout: IO[bytes] | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


def choose_method(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``("fork" | "exec", reason)`` from ``$FTRL_PS_LAUNCH`` and the platform.

    Raises :class:`~ftrl_ps.errors.ConfigError` for a value other than
    ``fork``, ``exec`` or ``auto``.
    """
    value = (os.environ if environ is None else environ).get(LAUNCH_ENV, "").strip().lower()
    if value not in ("", "auto", "fork", "exec"):
        raise ConfigError(f"{LAUNCH_ENV}={value!r}: expected 'fork', 'exec' or 'auto'")
    if value == "exec":
        return "exec", f"{LAUNCH_ENV}=exec"
    if not hasattr(os, "fork"):
        return "exec", "this platform has no os.fork"
    return "fork", "preloaded launcher"


def preload() -> None:
    """Load what the workers will use, before forking them.

    Loading the kernels costs a few ms from the ahead-of-time module, ~0.45 s
    through numba (its first kernel call); workers forked afterwards find the
    kernels (parse, train, bookkeeping) and the imports of their HTTP client
    loaded. (Servers use no numba.)
    """
    from ftrl_ps._kernels import aot

    if aot.load() is None:  # the workers' kernels come from numba
        from ftrl_ps._kernels._config import skip_blas_probe

        skip_blas_probe()
    import httpx

    from ftrl_ps.ps import kernels

    kernels.warm_up()
    kernels.PRELOADED = True  # the forked workers skip the cache check (load_kernels)
    # an httpx transport imports httpcore when first made (~0.15 s)
    httpx.Client(trust_env=False, verify=False).close()


class ForkedChild:
    """A :class:`subprocess.Popen`-like handle on a child made by :func:`fork_child`.

    ``returncode`` is None while it runs, then its exit code, or ``-N`` if
    signal ``N`` killed it (as with Popen). No signal is sent once the child
    has been reaped, so a recycled pid is never hit.
    """

    def __init__(self, pid: int, stdout: IO[bytes] | None = None) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code if the child has ended (reaping it), else None."""
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; :class:`subprocess.TimeoutExpired` after ``timeout`` s."""
        if timeout is None:
            while self.returncode is None:
                self._reap(0)
            return self.returncode
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            delay = min(delay * 2, remaining, 0.05)
            time.sleep(delay)
        assert self.returncode is not None
        return self.returncode

    def _reap(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped by someone else: the exit code is lost
            self.returncode = 255
            return
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` unless the child has already been reaped."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)

    def __repr__(self) -> str:
        return f"ForkedChild(pid={self.pid}, returncode={self.returncode})"


#: signals held back while forking (see :func:`fork_child`)
_HELD = {signal.SIGINT, signal.SIGTERM}


def fork_child(
    target: Callable[[], int | None],
    *,
    log: int,
    stdout: int | None = None,
    env: Mapping[str, str] | None = None,
    name: str = "",
    close: Sequence[int] = (),
) -> ForkedChild:
    """Fork a child that runs ``target()`` and exits with its return value.

    ``target`` returns the exit code (None = 0); ``SystemExit`` gives its
    code, ``KeyboardInterrupt`` 130, any other exception a traceback in the
    log and code 1. The child always ends with :func:`os._exit`: it never
    returns into the caller, never runs the caller's ``finally`` blocks or
    ``atexit`` handlers. Its stderr (and stdout) go to descriptor ``log``,
    its stdout to ``stdout`` if given (e.g. a pipe's write end); ``env`` is
    its whole environment (default: inherited); ``name`` its name for
    ``ps``/``top`` (Linux, 15 bytes); descriptors in ``close`` are closed in
    the child. The caller closes its own copies of ``log`` and ``stdout``.
    """
    for stream in (sys.stdout, sys.stderr):  # or their buffers would be the child's too
        with contextlib.suppress(Exception):
            stream.flush()
    parent = os.getpid()
    # SIGINT/SIGTERM held back across the fork: a Python handler that raises (Ctrl-C,
    # cli's SIGTERM) would otherwise run inside an at-fork hook (logging's), where the
    # exception is printed and dropped, and the launcher went on as if not told
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    pid = os.fork()
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a pending one is handled now
        return ForkedChild(pid)
    code = 1  # pragma: no cover - from here on this is the child
    try:
        _become_child(parent, log, stdout, env, name, close)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # its own handlers are set now
        code = _run(target)
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def _run(target: Callable[[], int | None]) -> int:  # pragma: no cover - in the child
    """``target()``'s exit code, as ``sys.exit(target())`` would give it."""
    try:
        result: object = target()
    except SystemExit as exc:
        result = exc.code
    except KeyboardInterrupt:
        return 130
    except BaseException:  # a log line (in json one object) with the traceback
        say(log, "unexpected error", level=logging.CRITICAL, exc_info=True)
        return 1
    if result is None:
        return 0
    if isinstance(result, int):
        return result & 0xFF
    say(log, str(result), level=logging.ERROR)  # sys.exit("message")
    return 1


def _become_child(
    parent: int,
    log: int,
    stdout: int | None,
    env: Mapping[str, str] | None,
    name: str,
    close: Sequence[int],
) -> None:  # pragma: no cover - in the child
    """Make the fresh fork what an exec'd ``python -m ftrl_ps.cluster.child`` would be."""
    _reset_signals()
    if sys.platform == "linux":
        libc = ctypes.CDLL(None)
        with contextlib.suppress(Exception):
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if name:
            with contextlib.suppress(Exception):
                libc.prctl(_PR_SET_NAME, name.encode()[:15])
    if os.getppid() != parent:  # the launcher died before PDEATHSIG was set
        os._exit(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(stdout if stdout is not None else log, 1)
    os.dup2(log, 2)
    for fd in {null, log, *([] if stdout is None else [stdout]), *close}:
        if fd > 2:
            os.close(fd)
    _fresh_std_streams()
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    gc.freeze()  # no collector pass over the inherited objects (no copy-on-write)
    if "numpy" in sys.modules:  # a fresh seed, as a fresh interpreter would have
        sys.modules["numpy"].random.seed()
    if faulthandler.is_enabled():
        faulthandler.enable(sys.stderr)


def _reset_signals() -> None:  # pragma: no cover - in the child
    """Signals as in a fresh interpreter: handlers set in Python become the
    defaults, SIGINT raises KeyboardInterrupt, ignored signals stay ignored."""
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(ValueError, OSError, TypeError):
            handler = signal.getsignal(sig)
            if callable(handler) and handler is not signal.default_int_handler:
                signal.signal(sig, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def _fresh_std_streams() -> None:  # pragma: no cover - in the child
    """New ``sys.stdin/stdout/stderr`` on descriptors 0-2, writes line-buffered.

    The inherited objects may be a test runner's captures or block-buffered
    pipes; they are left alone (never flushed, so nothing the launcher had
    buffered is written twice).
    """

    for fd, name, errors in ((0, "stdin", "strict"), (1, "stdout", "strict"),
                             (2, "stderr", "backslashreplace")):
        encoding = getattr(getattr(sys, f"__{name}__", None), "encoding", None) or "utf-8"
        stream = open(fd, "w" if fd else "r", buffering=1 if fd else -1,
                      encoding=encoding, errors=errors, closefd=False)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


@dataclass
class Launcher:
    """Starts the cluster's child processes (servers, workers), forked when it can.

    ``env`` is every child's environment; ``method`` and ``reason`` come from
    :func:`choose_method` unless given. A fork that finds other threads
    running switches the launcher to ``exec`` for good, says why in
    ``reason`` and calls ``warn(reason)``.
    """

    env: Mapping[str, str]
    method: str = ""
    reason: str = ""
    warn: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        if not self.method:
            self.method, self.reason = choose_method(self.env)

    def spawn(
        self,
        options: Any,
        log: Path,
        *,
        stdout_pipe: bool = False,
        pass_fds: tuple[int, ...] = (),
        name: str = "",
    ) -> ChildHandle:
        """Start a child running the role of ``options`` (see :mod:`ftrl_ps.cluster.roles`),
        stderr and stdout written to ``log``.

        ``stdout_pipe``: stdout goes to a pipe instead, read from the handle's
        ``stdout``. ``pass_fds``: descriptors the child keeps (a forked child
        inherits every one anyway). ``name``: see :func:`fork_child`.
        """
        from ftrl_ps.cluster.roles import options_to_json, role_of

        role = role_of(options)
        if self.method == "fork" and threading.active_count() != 1:
            self.method = "exec"
            self.reason = (
                f"{threading.active_count()} threads running in the launcher "
                "(forking needs exactly 1): children started with exec instead"
            )
            if self.warn is not None:
                self.warn(self.reason)
        with open(log, "wb") as logf:
            if self.method == "exec":
                return subprocess.Popen(
                    [sys.executable, "-m", "ftrl_ps.cluster.child", role.name,
                     options_to_json(options)],
                    stdout=subprocess.PIPE if stdout_pipe else logf,
                    stderr=logf,
                    stdin=subprocess.DEVNULL,
                    env=dict(self.env),
                    pass_fds=pass_fds,
                    preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                )
            return self._fork(options, logf.fileno(), stdout_pipe, name)

    def _fork(self, options: Any, log: int, stdout_pipe: bool, name: str) -> ForkedChild:
        from ftrl_ps.cluster.child import run_role

        read, write = os.pipe() if stdout_pipe else (-1, -1)
        try:
            child = fork_child(
                lambda: run_role(options),
                log=log,
                stdout=write if stdout_pipe else None,
                env=self.env,
                name=name,
                close=(read,) if stdout_pipe else (),
            )
        except BaseException:
            if stdout_pipe:
                os.close(read)
            raise
        finally:
            if stdout_pipe:
                os.close(write)
        if stdout_pipe:
            child.stdout = os.fdopen(read, "rb")
        return child


def stop_all(handles: Sequence[ChildHandle], grace: float) -> None:
    """SIGTERM every running child, wait up to ``grace`` s in all, SIGKILL the
    ones still running; close their stdout pipes."""
    for h in handles:
        if h.poll() is None:
            with contextlib.suppress(OSError):
                h.terminate()
    deadline = time.monotonic() + grace
    for h in handles:
        try:
            h.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            h.kill()
            h.wait()
        if h.stdout is not None:
            h.stdout.close()


def _die_with_parent() -> None:  # pragma: no cover - runs in the exec'd child
    """Ask Linux to SIGTERM this child if the launcher dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
