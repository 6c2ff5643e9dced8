"""Shared fixtures: real datasets (skipped when absent) and small generated data."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Build this machine's kernels once before any test (the ahead-of-time module
    and numba's cache), so no test's timeout includes the first run's compile.

    Also undo an ignored SIGINT: a shell without job control starts background
    commands (``cmd &`` in a script, ``nohup``) with SIGINT ignored, every child
    inherits that, and the tests that press Ctrl-C on a child would fail."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    from ftrl_ps.ps.kernels import load_kernels

    load_kernels()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The container tests (marked ``compose``) run last: on a fresh machine their
    one-time preparation (podman, the base image, the image build: minutes) runs
    beside the rest of the suite when ``.ci/run`` starts it, and the test waits
    for it (scripts/compose-test.sh holds a lock while it prepares)."""
    items.sort(key=lambda item: item.get_closest_marker("compose") is not None)  # stable


@pytest.fixture
def jit_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every kernel through numba's JIT in this process (``FTRL_PS_AOT=0``)."""
    from ftrl_ps._kernels import aot

    monkeypatch.setenv(aot.AOT_ENV, "0")
    aot.reset()
    yield
    aot.reset()  # looked up again (with the environment restored) at the next call


def shared_file(*parts: str) -> Path:
    """A file of ../shared/data, or skip the test when the folder is absent."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"dataset not available: {path}")
    return path


@pytest.fixture(scope="session")
def a9a() -> tuple[Path, Path]:
    return shared_file("libsvm", "a9a"), shared_file("libsvm", "a9a.t")


@pytest.fixture(scope="session")
def synth_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A seeded synthetic CTR dataset: 20k train rows, 5k test rows, 2**18 slots."""
    out = tmp_path_factory.mktemp("synth")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ftrl_ps",
            "gen",
            str(out),
            "--rows",
            "20000",
            "--test-rows",
            "5000",
            "--bits",
            "18",
            "--seed",
            "7",
            "--quiet",
        ],
        check=True,
        capture_output=True,
    )
    return out


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, what: str = "the condition",
               interval: float = 0.02) -> None:
    """Poll ``predicate`` until it is true; fail the test naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        time.sleep(interval)


def rss_kib() -> int:
    """This process's resident memory in KiB (Linux ``/proc``)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def run_cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ftrl_ps ARGS`` and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "ftrl_ps", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        **kw,
    )
