"""Faulting in a fresh state's pages ahead of use (ftrl_ps.core.memory)."""

from __future__ import annotations

import mmap
import subprocess
import sys
import threading

import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.core.memory import populate, populate_async
from tests.conftest import rss_kib


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux madvise")
def test_populate_makes_the_pages_resident_and_keeps_the_contents() -> None:
    pages = mmap.mmap(-1, 64 << 20)  # fresh anonymous pages (see below)
    a = np.frombuffer(pages, dtype=np.uint8)  # 64 MiB, never written
    a[12345] = 7
    before = rss_kib()
    done = populate(a)
    if not done:
        pytest.skip("kernel without MADV_POPULATE_WRITE (Linux < 5.14)")
    assert rss_kib() - before > 48 << 10  # most of the 64 MiB are resident now
    assert a[12345] == 7 and int(a.sum()) == 7


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux madvise")
@pytest.mark.parametrize("chunk", [4096, 3 << 20, 1 << 40])
def test_populate_in_chunks_reaches_the_last_page(chunk: int) -> None:
    # an odd size and an offset start: the chunks must cover [first page, last page).
    # Fresh anonymous pages (not np.zeros: malloc may hand out resident heap pages
    # that earlier tests freed, and then nothing is left to fault in)
    pages = mmap.mmap(-1, (40 << 20) + 12345)
    a = np.frombuffer(pages, dtype=np.uint8)[777:]
    a[-1] = 9
    before = rss_kib()
    if not populate(a, chunk=chunk):
        pytest.skip("kernel without MADV_POPULATE_WRITE (Linux < 5.14)")
    assert rss_kib() - before > 36 << 10  # nearly all of the 40 MiB
    assert a[-1] == 9 and int(a.sum()) == 9


def test_populate_async_runs_beside_writers_and_changes_nothing() -> None:
    model = FTRL(21)  # 16 MiB of state
    thread = populate_async(model.state)
    assert isinstance(thread, threading.Thread)
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 1 << 21, 10_000)
    model.state[keys, 1] = 1.5  # written while the thread may still run
    thread.join(10)
    assert not thread.is_alive()
    assert np.count_nonzero(model.state) == np.unique(keys).size
    assert np.all(model.state[keys, 1] == 1.5)


def test_small_or_strided_arrays_are_left_alone() -> None:
    assert populate_async(np.zeros(10)) is None
    strided = np.zeros((4 << 20, 2))[:, 0]
    assert populate_async(strided) is None
    assert populate(strided) is False
    assert populate(np.zeros(0)) is False


_BUFFERS = """
import resource, sys
from concurrent.futures import ThreadPoolExecutor
from ftrl_ps.core.memory import keep_freed_buffers
kept = keep_freed_buffers() if sys.argv[1] == "keep" else None
def request(i):  # a shard's request: a body of a few hundred KB, copied
    body = b"x" * (300_000 + (i % 7) * 20_000)
    return len(bytes(bytearray(body)))
pool = ThreadPoolExecutor(4)
list(pool.map(request, range(200)))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
list(pool.map(request, range(1000)))
small = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 1000
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):  # 6 MB: above the threshold, mapped and given back each time
    len(b"x" * 6_000_000)
print(kept, small, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_buffers_are_not_faulted_in_again() -> None:
    def faults(mode: str) -> tuple[str, float, float]:
        out = subprocess.run([sys.executable, "-c", _BUFFERS, mode], capture_output=True,
                             text=True, check=True, timeout=60).stdout.split()
        return out[0], float(out[1]), float(out[2])

    kept, with_setting, large = faults("keep")
    if kept == "False":
        pytest.skip("not glibc: mallopt unavailable")
    assert kept == "True"
    _, default, _ = faults("default")
    # glibc's defaults map and fault in such buffers anew (~230 page faults a
    # request measured); kept, they are reused
    assert default > 50 and with_setting < 10, (default, with_setting)
    # what is kept stays bounded: a buffer above the threshold is still mapped on
    # its own and given back when freed, so each one is faulted in anew (~1,500
    # pages here; fewer with transparent huge pages, never none: kept, it is 0)
    assert large >= 1, large


_CHUNKS = """
import resource, sys
import numpy as np
from ftrl_ps.core.memory import keep_freed_chunks
kept = keep_freed_chunks() if sys.argv[1] == "keep" else None
def chunk():  # a parsed chunk's arrays: sized for the densest text, an eighth written
    arrays = [np.empty(n, np.uint8) for n in (8 << 20, 16 << 20, 8 << 20, 8 << 20)]
    for a in arrays:
        a[: a.size // 8] = 1
for _ in range(5):
    chunk()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    chunk()
print(kept, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_chunks_are_not_faulted_in_again() -> None:
    """The reader's chunk arrays, freed together, are reused (the command line's
    setting); with glibc's defaults each chunk faults its pages in anew."""
    def faults(mode: str) -> tuple[str, float]:
        out = subprocess.run([sys.executable, "-c", _CHUNKS, mode], capture_output=True,
                             text=True, check=True, timeout=60).stdout.split()
        return out[0], float(out[1])

    kept, with_setting = faults("keep")
    if kept == "False":
        pytest.skip("not glibc: mallopt unavailable")
    _, default = faults("default")
    assert default > 100 and with_setting < 10, (default, with_setting)


def test_the_command_line_keeps_freed_chunks() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import ftrl_ps.cli as c, ftrl_ps.core.memory as m; "
         "calls = []; m.keep_freed_chunks = lambda: calls.append(1) or True; "
         "c.main = lambda: print(len(calls)) or 0; c.console_main()"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "1", out
