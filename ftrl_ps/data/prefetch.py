"""Run an iterator ahead of its consumer in a background thread.

Used to overlap parsing (the reader's numba kernel releases the GIL) with
training::

    for batch in prefetch(LibsvmReader(path, bits=20), depth=2):
        model.fit_batch(batch)

Waiting is a bounded buffer plus one condition variable; nothing polls.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TypeVar

from ftrl_ps.errors import ConfigError

__all__ = ["prefetch"]

T = TypeVar("T")

#: how long closing the consumer waits for the producer thread to finish its item
CLOSE_JOIN_TIMEOUT_S = 1.0


class _Channel:
    """Bounded hand-over between one producer and one consumer thread: up to
    ``depth`` items."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.items: deque[object] = deque()
        self.cond = threading.Condition()
        self.finished = False  # producer is done (normally or with an error)
        self.error: BaseException | None = None
        self.stopped = False  # consumer has gone away

    def put(self, item: object) -> bool:
        """Queue ``item``; False if the consumer stopped (the producer should quit)."""
        with self.cond:
            while len(self.items) >= self.depth and not self.stopped:
                self.cond.wait()
            if self.stopped:
                return False
            self.items.append(item)
            self.cond.notify_all()
            return True

    def finish(self, error: BaseException | None = None) -> None:
        with self.cond:
            self.finished = True
            self.error = error
            self.cond.notify_all()

    def get(self) -> tuple[bool, object]:
        """``(True, item)``, or ``(False, None)`` when the producer finished cleanly."""
        with self.cond:
            while not self.items and not self.finished:
                self.cond.wait()
            if self.items:
                item = self.items.popleft()
                self.cond.notify_all()
                return True, item
            if self.error is not None:
                raise self.error
            return False, None

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.items.clear()
            self.cond.notify_all()


def _produce(iterable: Iterable[object], channel: _Channel) -> None:
    it: Iterator[object] | None = None
    try:
        it = iter(iterable)
        for item in it:
            if not channel.put(item):
                break
    except BaseException as exc:  # handed to the consumer
        channel.finish(exc)
        return
    finally:
        close = getattr(it, "close", None)
        if close is not None and channel.stopped:
            try:
                close()  # e.g. let a reader close its file
            except Exception:  # the consumer is gone: nobody to tell
                pass
    channel.finish()


def prefetch(iterable: Iterable[T], depth: int = 2) -> Iterator[T]:
    """Iterate over ``iterable`` in a daemon thread, up to ``depth`` items ahead.

    Parameters
    ----------
    iterable : Iterable
        Iterated in the background thread, which starts at once (so work
        begins while the caller does other things, e.g. connects to servers).
    depth : int
        Maximum number of items produced but not yet consumed (>= 1).

    Returns
    -------
    Iterator
        The same items in the same order. An exception raised by the producer
        is re-raised here after the items produced before it. When this
        iterator is closed early (``break`` out of a ``for`` loop, ``close()``,
        garbage collection) the producer stops after its current item, its
        iterator's ``close()`` is called, and the thread is joined for up to
        :data:`CLOSE_JOIN_TIMEOUT_S`. An iterator dropped without ever being
        used stops its producer as well.

    Examples
    --------
    >>> list(prefetch(range(5)))
    [0, 1, 2, 3, 4]
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigError(f"prefetch depth must be a positive integer, got {depth!r}")
    return _consume(iterable, depth)


def _consume(iterable: Iterable[T], depth: int) -> Iterator[T]:
    channel = _Channel(depth)
    thread = threading.Thread(target=_produce, args=(iterable, channel),
                              name="ftrl-ps-prefetch", daemon=True)
    thread.start()
    items: Iterator[T] = _drain(channel, thread)
    # a generator that never ran does not run its finally block when collected
    weakref.finalize(items, channel.stop)
    return items


def _drain(channel: _Channel, thread: threading.Thread) -> Iterator[T]:
    try:
        while True:
            ok, item = channel.get()
            if not ok:
                return
            yield item  # type: ignore[misc]
    finally:
        channel.stop()
        if thread is not threading.current_thread():
            thread.join(CLOSE_JOIN_TIMEOUT_S)
