"""prefetch: order, bounded look-ahead, errors, early stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ftrl_ps.data.prefetch import prefetch
from ftrl_ps.errors import ConfigError
from tests.conftest import wait_until


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ftrl-ps-prefetch"]


def test_yields_everything_in_order() -> None:
    assert list(prefetch(range(1000), depth=3)) == list(range(1000))
    assert list(prefetch([])) == []
    wait_until(lambda: not _prefetch_threads(), 5, "the prefetch threads' end")


def test_runs_in_another_thread_and_stays_bounded() -> None:
    produced: list[int] = []
    threads: set[str] = set()

    def gen() -> Iterator[int]:
        for i in range(10):
            threads.add(threading.current_thread().name)
            produced.append(i)
            yield i

    it = prefetch(gen(), depth=2)
    assert next(it) == 0
    wait_until(lambda: len(produced) >= 3, 5, "3 items produced")
    time.sleep(0.1)
    # 1 handed out + at most depth queued + at most one being produced (blocked in put)
    assert len(produced) <= 4
    assert list(it) == list(range(1, 10))
    assert threads == {"ftrl-ps-prefetch"}


def test_producer_exception_reraises_in_consumer() -> None:
    class Boom(RuntimeError):
        pass

    def gen() -> Iterator[int]:
        yield 1
        yield 2
        raise Boom("producer failed")

    got = []
    with pytest.raises(Boom, match="producer failed"):
        for item in prefetch(gen()):
            got.append(item)
    assert got == [1, 2]
    wait_until(lambda: not _prefetch_threads(), 5, "the prefetch threads' end")


@pytest.mark.parametrize("how", ["break", "close"])
def test_early_stop_stops_producer(how: str) -> None:
    closed = threading.Event()
    produced: list[int] = []

    def endless() -> Iterator[int]:
        try:
            i = 0
            while True:
                produced.append(i)
                yield i
                i += 1
        finally:
            closed.set()

    it = prefetch(endless(), depth=2)
    if how == "break":
        for item in it:
            if item == 5:
                break
        del it  # what leaving the for loop's scope does
    else:
        assert next(it) == 0
        it.close()  # type: ignore[attr-defined]
    assert closed.wait(5.0), "producer's generator was not closed"
    wait_until(lambda: not _prefetch_threads(), 5, "the prefetch threads' end")
    count = len(produced)
    time.sleep(0.1)
    assert len(produced) == count


def test_close_while_producer_is_busy() -> None:
    release = threading.Event()

    def slow() -> Iterator[int]:
        yield 0
        release.wait(5.0)
        yield 1
        yield 2

    it = prefetch(slow(), depth=1)
    assert next(it) == 0
    start = time.monotonic()
    it.close()  # type: ignore[attr-defined]
    assert time.monotonic() - start < 3.0  # join is bounded
    release.set()
    wait_until(lambda: not _prefetch_threads(), 5, "the prefetch threads' end")


def test_depth_is_checked() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="depth"):
            prefetch(range(3), depth=bad)  # type: ignore[arg-type]


def _counted(n: int, produced: list[int]) -> Iterator[int]:
    for i in range(n):
        produced.append(i)
        yield i


def test_the_producer_stays_depth_items_ahead() -> None:
    produced: list[int] = []
    it = prefetch(_counted(50, produced), depth=4)
    wait_until(lambda: len(produced) >= 5, 5, "4 items queued and one more produced")
    time.sleep(0.1)
    assert len(produced) == 5  # 4 queued + one blocked in put
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    wait_until(lambda: len(produced) >= 8, 5, "the queue refilled to depth 4")
    time.sleep(0.1)
    assert len(produced) == 8
    assert list(it) == list(range(3, 50))


def test_with_reader_same_rows_and_early_stop_closes_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    psutil = pytest.importorskip("psutil")
    from ftrl_ps.data.libsvm import Batch, LibsvmReader, read_all

    path = tmp_path / "data.txt"
    path.write_bytes(b"".join(f"{i % 2} {i}:1 {i + 1}:0.5\n".encode() for i in range(2000)))
    reader = LibsvmReader(path, 20, chunk_bytes=1000)
    whole = Batch.concat(list(prefetch(reader, depth=3)))
    expected = read_all(path, 20)
    assert whole.indices.tolist() == expected.indices.tolist()
    assert whole.labels.tolist() == expected.labels.tolist()

    def is_open() -> bool:
        return any(f.path == str(path) for f in psutil.Process().open_files())

    it = prefetch(reader, depth=2)
    next(it)
    assert is_open()
    it.close()  # type: ignore[attr-defined]
    wait_until(lambda: not is_open(), 5, "the source's close")


def test_error_from_iter_itself() -> None:
    class NotIterable:
        def __iter__(self):  # type: ignore[no-untyped-def]
            raise OSError("cannot start")

    with pytest.raises(OSError, match="cannot start"):
        list(prefetch(NotIterable()))  # type: ignore[arg-type]


def test_starts_at_once_and_an_unused_iterator_stops_its_producer() -> None:
    started = threading.Event()
    closed = threading.Event()

    def gen() -> Iterator[int]:
        started.set()
        try:
            yield from range(1000)
        finally:
            closed.set()

    it = prefetch(gen(), depth=1)
    assert started.wait(5), "the producer must start before the first next()"
    del it  # never iterated
    assert closed.wait(5)
    wait_until(lambda: not _prefetch_threads(), 5, "the prefetch threads' end")
