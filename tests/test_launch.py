"""Starting the local cluster's processes: forked children, their handles, the exec fallback."""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ftrl_ps.cluster.launch import (
    LAUNCH_ENV,
    ForkedChild,
    Launcher,
    choose_method,
    fork_child,
    stop_all,
)
from ftrl_ps.cluster.roles import options_from_json, options_to_json, role_of
from ftrl_ps.errors import ConfigError
from ftrl_ps.server.options import ShardOptions
from tests.conftest import run_cli

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")


def _fork(target: Callable[[], int | None], log: Path, **kw: object) -> ForkedChild:
    with open(log, "wb") as f:
        return fork_child(target, log=f.fileno(), **kw)  # type: ignore[arg-type]


def _ending(how: str) -> Callable[[], int | None]:
    def target() -> int | None:
        print("to stdout")
        print("to stderr", file=sys.stderr)
        if how == "return 3":
            return 3
        if how == "return None":
            return None
        if how == "exit 4":
            raise SystemExit(4)
        if how == "exit message":
            raise SystemExit("bad input")
        if how == "interrupt":
            raise KeyboardInterrupt
        return 0

    return target


@pytest.mark.parametrize(
    "how, code",
    [("return 0", 0), ("return None", 0), ("return 3", 3), ("exit 4", 4),
     ("exit message", 1), ("interrupt", 130)],
)
def test_forked_child_exit_code_and_log(tmp_path: Path, how: str, code: int) -> None:
    log = tmp_path / "child.log"
    child = _fork(_ending(how), log)
    assert child.pid != os.getpid()
    assert child.wait(30) == code and child.returncode == code
    text = log.read_text()
    assert "to stdout\n" in text and "to stderr\n" in text
    assert ("bad input" in text) == (how == "exit message")


def test_exception_gives_code_1_and_traceback_in_log(tmp_path: Path) -> None:
    def target() -> int:
        raise RuntimeError("boom in the child")

    log = tmp_path / "child.log"
    assert _fork(target, log).wait(30) == 1
    text = log.read_text()
    assert "Traceback (most recent call last)" in text
    assert "RuntimeError: boom in the child" in text


def test_child_never_returns_into_the_caller(tmp_path: Path) -> None:
    """No finally block and no atexit handler of the launcher runs in the child."""
    marker = tmp_path / "ran.txt"

    def note() -> None:
        with open(marker, "a") as f:
            f.write(f"atexit {os.getpid()}\n")

    atexit.register(note)
    try:
        try:
            child = _fork(lambda: 0, tmp_path / "child.log")
        finally:
            with open(marker, "a") as f:
                f.write(f"finally {os.getpid()}\n")
        assert child.wait(30) == 0
    finally:
        atexit.unregister(note)
    assert marker.read_text().split() == ["finally", str(os.getpid())]


def test_child_environment_streams_and_signals(tmp_path: Path) -> None:
    """Like a fresh interpreter: stdin empty, own env, Python's default signal handling."""
    report = tmp_path / "report.json"

    def target() -> int:
        report.write_text(json.dumps({
            "stdin": sys.stdin.read(),
            "env": os.environ.get("LAUNCH_TEST"),
            "sigint_raises": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            "sigusr1": signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL,
            "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            "ppid": os.getppid(),
        }))
        return 0

    old = signal.signal(signal.SIGUSR1, lambda *_: None)  # the launcher's own handler
    try:
        child = _fork(target, tmp_path / "c.log", env={"LAUNCH_TEST": "yes"})
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert child.wait(30) == 0, (tmp_path / "c.log").read_text()
    got = json.loads(report.read_text())
    assert got == {"stdin": "", "env": "yes", "sigint_raises": True, "sigusr1": True,
                   "sigterm": True, "ppid": os.getpid()}
    assert os.environ.get("LAUNCH_TEST") is None  # the launcher's own environment is untouched


def _sleeper(ignore_term: bool = False) -> Callable[[], int]:
    def target() -> int:
        if ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)
        return 0

    return target


def _wait_for(path: Path, text: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.01)


def test_terminate_kill_poll_and_wait_timeout(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    child = _fork(_sleeper(), log)
    assert child.poll() is None and child.returncode is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.05)
    child.terminate()
    assert child.wait(10) == -signal.SIGTERM
    child.kill()  # reaped already: nothing is sent (the pid may be another process now)
    assert child.poll() == -signal.SIGTERM

    stubborn = _fork(_sleeper(ignore_term=True), log)
    _wait_for(log, "ready")
    stubborn.terminate()
    with pytest.raises(subprocess.TimeoutExpired):
        stubborn.wait(0.3)
    stubborn.kill()
    assert stubborn.wait() == -signal.SIGKILL


def test_stop_all_terminates_then_kills(tmp_path: Path) -> None:
    logs = tmp_path / "polite.log", tmp_path / "stubborn.log"
    polite, stubborn = _fork(_sleeper(), logs[0]), _fork(_sleeper(ignore_term=True), logs[1])
    _wait_for(logs[1], "ready")  # SIGTERM ignored from now on
    started = time.monotonic()
    stop_all([polite, stubborn], grace=0.5)
    assert polite.returncode == -signal.SIGTERM
    assert stubborn.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 5


@pytest.fixture
def other_thread() -> Iterator[threading.Thread]:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    yield thread
    stop.set()
    thread.join()


def test_launcher_runs_a_role_with_stdout_to_a_pipe(tmp_path: Path) -> None:
    launcher = Launcher(dict(os.environ, **{LAUNCH_ENV: "fork"}))
    # another test may have left a thread running: then exec is the right answer
    expected = "fork" if threading.active_count() == 1 else "exec"
    child = launcher.spawn(ShardOptions(bits=8), tmp_path / "s.log", stdout_pipe=True)
    try:
        assert launcher.method == expected
        assert isinstance(child, ForkedChild) == (expected == "fork")
        assert child.stdout is not None
        line = child.stdout.readline().decode().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
    finally:
        stop_all([child], 10)
    # a role whose options fail validation exits 2 with a one-line message
    bad = launcher.spawn(ShardOptions(bits=99), tmp_path / "bad.log")
    assert bad.wait(60) == 2
    assert "bits must be in" in (tmp_path / "bad.log").read_text()


def test_launcher_falls_back_to_exec_when_threads_run(
    tmp_path: Path, other_thread: threading.Thread
) -> None:
    warnings: list[str] = []
    launcher = Launcher(dict(os.environ), warn=warnings.append)
    assert launcher.method == "fork"
    child = launcher.spawn(ShardOptions(bits=99), tmp_path / "v.log")
    assert isinstance(child, subprocess.Popen)
    assert child.wait(60) == 2
    assert "bits must be in" in (tmp_path / "v.log").read_text()
    assert launcher.method == "exec" and "threads running" in launcher.reason
    assert warnings == [launcher.reason]


def test_options_travel_as_json_without_secrets() -> None:
    opts = ShardOptions(bits=12, staleness=None, num_workers=3)
    role = role_of(opts)
    assert role.name == "server"
    assert options_from_json("server", options_to_json(opts)) == opts
    with pytest.raises(ConfigError, match="FTRL_PS_TOKEN"):
        options_to_json(ShardOptions(token="secret"))
    with pytest.raises(ConfigError, match="unknown role"):
        options_from_json("gardener", "{}")
    with pytest.raises(ConfigError, match="bad server options"):
        options_from_json("server", '{"no_such_field": 1}')


def test_choose_method() -> None:
    assert choose_method({})[0] == "fork"
    assert choose_method({LAUNCH_ENV: "auto"})[0] == "fork"
    assert choose_method({LAUNCH_ENV: " Exec "}) == ("exec", f"{LAUNCH_ENV}=exec")
    with pytest.raises(ConfigError, match="expected 'fork', 'exec' or 'auto'"):
        choose_method({LAUNCH_ENV: "spawn"})


@pytest.fixture(scope="module")
def small_train(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("launch") / "train.svm"
    path.write_text("".join(f"{i % 2} {i % 50}:1 {50 + i % 7}:1\n" for i in range(4000)))
    return path


@pytest.mark.parametrize("method", ["fork", "exec"])
def test_cluster_runs_with_either_method(small_train: Path, tmp_path: Path, method: str) -> None:
    metrics, model = tmp_path / "m.json", tmp_path / "m.ftrl"
    res = run_cli(
        "train", str(small_train), "--workers", "2", "--bits", "12", "--batch-size", "100",
        "--model", str(model), "--metrics-json", str(metrics), "-q",
        env=dict(os.environ, **{LAUNCH_ENV: method}),
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(metrics.read_text())
    assert got["launch"]["method"] == method
    assert got["rows"] == 4000 and model.exists()
    assert got["progressive_logloss"] < 0.70


def test_bad_launch_variable_is_a_usage_error(small_train: Path, tmp_path: Path) -> None:
    res = run_cli(
        "train", str(small_train), "--workers", "2", "-q",
        env=dict(os.environ, **{LAUNCH_ENV: "thread"}, TMPDIR=str(tmp_path)),
    )
    assert res.returncode == 2
    assert f"{LAUNCH_ENV}='thread'" in res.stderr
    assert not list(tmp_path.glob("ftrl-ps-cluster-*"))  # no log folder left behind


@pytest.mark.parametrize("discard", [False, True])
def test_cluster_stop_writes_a_last_checkpoint_unless_discarded(
    tmp_path: Path, discard: bool
) -> None:
    from ftrl_ps.cluster.supervise import Cluster

    ckpt = tmp_path / "ckpt"
    cluster = Cluster(tmp_path, Launcher(dict(os.environ)))
    cluster.start_server(0, ShardOptions(bits=8, checkpoint_dir=str(ckpt),
                                         checkpoint_interval=3600))
    try:
        cluster.wait_servers()
    finally:
        cluster.stop(discard=discard)
    server = cluster.servers[0].popen
    # SIGTERM: a graceful exit (uvicorn re-raises the signal after shutting down)
    # with a last checkpoint; discard: killed, nothing written
    assert server.returncode == (-signal.SIGKILL if discard else -signal.SIGTERM)
    assert bool(list(ckpt.glob("shard-0-*.ckpt"))) is not discard

def test_a_worker_whose_input_read_failed_in_a_way_a_retry_may_cure_is_restarted(
        monkeypatch) -> None:
    """A bad line, a corrupt .gz, a part gone: exit 3 (not restarted). A connection reset
    while reading a URL (QA: it ended the whole run): exit 1, restarted like a crash."""
    import ftrl_ps.cluster.child as child
    import ftrl_ps.cluster.roles as roles
    from ftrl_ps.cluster.child import DATA_ERROR, run_role
    from ftrl_ps.data.sources import read_error

    # a child's logging set-up would outlive the test (the tests' process is no child)
    monkeypatch.setattr(child, "setup_logging", lambda *a, **k: None)

    for exc, code in ((ConnectionResetError(104, "Connection reset by peer"), 1),
                      (OSError(5, "Input/output error"), 1),
                      (FileNotFoundError(2, "No such file or directory"), DATA_ERROR),
                      (EOFError("Compressed file ended"), DATA_ERROR)):
        def fail(_options, exc=exc):
            raise read_error("s3://bucket/part-0", exc) from exc

        monkeypatch.setattr(roles, "role_of", lambda _o, fail=fail: types.SimpleNamespace(
            name="worker", run=fail))
        assert run_role(types.SimpleNamespace(worker_index=0, log_level=None)) == code, exc



@pytest.mark.parametrize("code, error", [(2, "input file not found: train.svm"),
                                         (3, "cannot open in/part-3.svm: No such file")])
def test_a_worker_that_failed_on_its_flags_or_input_is_not_restarted(tmp_path: Path, code: int,
                                                                     error: str) -> None:
    """Exit code 2 (a ConfigError: e.g. its input file was deleted) or 3 (a DataError:
    a bad line, a part gone) fails the run at once with the worker's log; restarting it
    would fail the same way, 3 times."""
    from types import SimpleNamespace

    from ftrl_ps.cluster.supervise import Cluster, Proc
    from ftrl_ps.errors import ClusterError

    log = tmp_path / "worker-0.log"
    log.write_text(f"error: {error}\n")
    cluster = Cluster(tmp_path, Launcher(dict(os.environ)))
    cluster.workers.append(Proc("worker 0", SimpleNamespace(poll=lambda: code), log, None))
    with pytest.raises(ClusterError, match=rf"(?s)worker 0 exited with code {code} .*not "
                                           rf"restarted.*{error}"):
        cluster.heal()
    assert cluster.restarts == []
