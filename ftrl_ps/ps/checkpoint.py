"""Shard checkpoints: atomic, versioned, checksummed snapshots of one shard.

``DIR/shard-<index>-<version>.ckpt`` (version 1, 2, 3, ...; the newest
:data:`KEEP` are kept)::

    "FTPSCKPT" | format u32
    records    count u32 | keys u32[count] | n[count] | z[count]     (touched keys, in order)
    end        count u32 = 0xFFFFFFFF
    meta       JSON: layout, dtype, params, stream records, registry, key count, time
    trailer    meta length u32 | crc32 of every byte before it u32 | "END."

A snapshot is a consistent cut: pushes are held back (the shard's push
barrier) while the touched state and the stream records are written, so the
records' ``last_seq`` are exactly what ``n``/``z`` contain. The file is written
under a temporary name, fsynced, renamed and the directory fsynced, so a
reader sees a whole file or none. :func:`restore_latest` takes the newest file
that passes every check and reports (and skips) partial or corrupt ones.
See docs/durability.md, section 3.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import struct
import threading
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from ftrl_ps.errors import ConfigError, ModelFormatError, ServerError
from ftrl_ps.learn.logs import say

if TYPE_CHECKING:
    from ftrl_ps.ps.state import ServerState

__all__ = ["KEEP", "Checkpointer", "checkpoint_files", "read_checkpoint", "restore_latest"]

log = logging.getLogger("ftrl_ps.server")
#: the text format's prefix of the lines about checkpoints (learn.logs.say)
PREFIX = "ftrl-ps server: "

MAGIC, TAIL = b"FTPSCKPT", b"END."
FORMAT = 1
KEEP = 3
_END = 0xFFFFFFFF
_U32 = struct.Struct("<I")
_TRAILER = struct.Struct("<II4s")


def checkpoint_files(directory: str | os.PathLike[str], shard: int) -> list[tuple[int, Path]]:
    """``(version, path)`` of the shard's checkpoint files, newest first."""
    pattern = re.compile(rf"shard-{shard}-(\d+)\.ckpt$")
    found = []
    for path in Path(directory).glob(f"shard-{shard}-*.ckpt"):
        m = pattern.match(path.name)
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found, reverse=True)


class _CrcWriter:
    def __init__(self, f: BinaryIO) -> None:
        self.f, self.crc = f, 0

    def write(self, data: bytes) -> None:
        self.f.write(data)
        self.crc = zlib.crc32(data, self.crc)


def _records(state: ServerState) -> list[dict[str, Any]]:
    return state.dedup.state()


def write_checkpoint(state: ServerState, directory: Path, version: int) -> tuple[Path, Any]:
    """Write version ``version`` of the shard's checkpoint; ``(path, stream records)``."""
    settings = state.settings
    dtype = state.store.dtype.newbyteorder("<")
    final = directory / f"shard-{settings.shard_index}-{version:08d}.ckpt"
    tmp = directory / f".{final.name}.tmp"
    try:  # a failed write (a full disk) leaves no partial file behind
        with open(tmp, "wb") as f:
            out = _CrcWriter(f)
            out.write(MAGIC + _U32.pack(FORMAT))
            total = 0
            with state.barrier.exclusive():  # a consistent cut: no push in between
                for keys, n, z in state.store.iter_touched():
                    out.write(_U32.pack(keys.size) + keys.astype("<u4").tobytes()
                              + n.astype(dtype).tobytes() + z.astype(dtype).tobytes())
                    total += keys.size
                streams = _records(state)
                clock = state.clock.state() if state.clock is not None else None
                work = state.work.state() if state.clock is not None else None
            out.write(_U32.pack(_END))
            meta = json.dumps({
                "format": FORMAT, "version": version, "shard_index": settings.shard_index,
                "layout": settings.layout.to_dict(), "dtype": settings.dtype,
                "params": settings.params.as_dict(), "keys": total, "created": time.time(),
                "streams": streams, "clock": clock, "work": work, "run": state.run_id,
            }).encode()
            out.write(meta)
            f.write(_TRAILER.pack(len(meta), out.crc, TAIL))
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, final)
    _fsync_dir(directory)
    return final, streams


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. a platform without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_checkpoint(path: Path, dtype: np.dtype) -> tuple[dict[str, Any], list[Any]]:
    """Check a checkpoint file whole and return ``(meta, [(keys, n, z), ...])``.

    Raises ModelFormatError for a partial, corrupt or foreign file.
    """
    data = path.read_bytes()
    if len(data) < len(MAGIC) + 4 + _TRAILER.size or not data.startswith(MAGIC):
        raise ModelFormatError(f"{path.name}: not an ftrl-ps checkpoint (or empty)")
    meta_len, crc, tail = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    if tail != TAIL:
        raise ModelFormatError(f"{path.name}: no end marker (a partial write?)")
    body = memoryview(data)[: len(data) - _TRAILER.size]
    if zlib.crc32(body) != crc:
        raise ModelFormatError(f"{path.name}: checksum mismatch (corrupt)")
    (fmt,) = _U32.unpack_from(data, len(MAGIC))
    if fmt != FORMAT:
        raise ModelFormatError(f"{path.name}: checkpoint format {fmt}, expected {FORMAT}")
    try:
        meta = json.loads(bytes(body[len(body) - meta_len:]))
    except ValueError as exc:
        raise ModelFormatError(f"{path.name}: unreadable metadata: {exc}") from exc
    dt = np.dtype(meta.get("dtype", "float32")).newbyteorder("<")
    chunks, off = [], len(MAGIC) + 4
    while True:
        (count,) = _U32.unpack_from(data, off)
        off += 4
        if count == _END:
            break
        keys = np.frombuffer(data, "<u4", count, off).astype(np.uint32)
        off += 4 * count
        n = np.frombuffer(data, dt, count, off).astype(dtype)
        z = np.frombuffer(data, dt, count, off + count * dt.itemsize).astype(dtype)
        off += 2 * count * dt.itemsize
        chunks.append((keys, n, z))
    if off != len(body) - meta_len:
        raise ModelFormatError(f"{path.name}: sections do not add up")
    return meta, chunks


def restore_latest(state: ServerState, directory: Path) -> Path | None:
    """Load the newest valid checkpoint of the shard into ``state``; its path.

    Corrupt files are reported on stderr and skipped; a valid file written
    with another layout, dtype or hyper-parameters is a ConfigError (the
    server's flags and the directory disagree).
    """
    settings = state.settings
    for version, path in checkpoint_files(directory, settings.shard_index):
        try:
            meta, chunks = read_checkpoint(path, state.store.dtype)
        except (ModelFormatError, OSError, struct.error, ValueError) as exc:
            say(log, f"skipping checkpoint {path}: {exc}", level=logging.WARNING,
                prefix=PREFIX)
            continue
        mine = {"layout": settings.layout.to_dict(), "dtype": settings.dtype,
                "params": settings.params.as_dict(), "shard_index": settings.shard_index}
        for key, value in mine.items():
            if meta.get(key) != value:
                raise ConfigError(
                    f"checkpoint {path} has {key}={meta.get(key)!r} but this server has "
                    f"{value!r}: start the server with the flags it was checkpointed with, "
                    "or use another --checkpoint-dir"
                )
        for keys, n, z in chunks:
            state.store.load(keys, n, z)
        state.dedup.restore(meta["streams"])
        state.run_id = str(meta.get("run") or state.run_id)  # (older files: a new one)
        if state.clock is not None and meta.get("clock") is not None:
            state.clock.restore(meta["clock"])
        if state.clock is not None and meta.get("work"):
            state.work.restore(meta["work"])  # the hand-out's units (ps.workqueue)
        age = time.time() - float(meta.get("created", time.time()))
        say(log, f"shard {settings.shard_index} restored checkpoint {path} "
                 f"(version {version}, {meta['keys']:,} keys, {len(meta['streams'])} worker "
                 f"stream(s), written {age:.1f} s ago)", prefix=PREFIX)
        return path
    return None


class Checkpointer:
    """Writes the shard's checkpoints every ``interval`` seconds from a thread."""

    def __init__(self, state: ServerState, directory: str | os.PathLike[str],
                 interval: float) -> None:
        self.state = state
        self.directory = Path(directory)
        self.interval = interval
        self.directory.mkdir(parents=True, exist_ok=True)
        files = checkpoint_files(self.directory, state.settings.shard_index)
        self.version = files[0][0] if files else 0
        self.written = 0
        self.last_seconds: float | None = None
        self._began = -math.inf  # time.monotonic() when the newest write began
        self._since = time.monotonic()  # the state is not in a checkpoint of ours since
        self._last_path: Path | None = None
        self._mark: Any = None  # what the newest checkpoint holds (:meth:`_state_mark`)
        self._lock = threading.Lock()
        state.telemetry.gauge("checkpoint_age_seconds", "seconds since the cut of this "
                              "shard's newest checkpoint (since its start before the first)",
                              self.age)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self) -> Path:
        """Write the next version now (thread-safe) and drop old ones."""
        with self._lock:
            return self._write_locked()

    def ensure(self, requested_at: float) -> Path:
        """A checkpoint whose cut is later than ``requested_at`` (``time.monotonic()``):
        the newest file if its write began after that moment, else a new one written
        now. Concurrent requests share one write (finishing workers, docs/durability.md)."""
        with self._lock:
            if self._last_path is not None and self._began >= requested_at:
                return self._last_path
            return self._write_locked()

    def _state_mark(self) -> Any:
        """What a checkpoint would hold, in brief: the store's write version (every
        push, withdrawal and load bumps it) and the stream, clock and hand-out state."""
        st = self.state
        return (st.store.changes.version, _records(st),
                st.clock.state() if st.clock is not None else None,
                st.work.state() if st.clock is not None else None)

    def write_if_changed(self) -> Path | None:
        """:meth:`write`, unless nothing changed since the newest checkpoint (an idle
        shard does not rewrite its whole state every interval): then None, and that
        file counts as cut now (:meth:`age`, :meth:`ensure`)."""
        with self._lock:
            mark = self._state_mark()
            if self._last_path is not None and mark == self._mark:
                self._began = time.monotonic()
                return None
            return self._write_locked(mark)

    def _write_locked(self, mark: Any = None) -> Path:
        """``mark``: :meth:`_state_mark` if the caller took it already (before the cut)."""
        began = time.monotonic()  # the cut is taken after this moment
        if mark is None:  # taken before the cut: a change in between rewrites
            mark = self._state_mark()
        t0 = time.perf_counter()
        self.version += 1
        try:
            path, streams = write_checkpoint(self.state, self.directory, self.version)
        except OSError as exc:  # said to the workers that wait on it, and in the log
            raise ServerError(
                f"shard {self.state.settings.shard_index} cannot write its checkpoint in "
                f"{self.directory}: {exc.strerror or exc}"
            ) from exc
        self.state.dedup.mark_durable(streams)
        for _, old in checkpoint_files(self.directory, self.state.settings.shard_index)[KEEP:]:
            old.unlink(missing_ok=True)
        self.written += 1
        self.last_seconds = time.perf_counter() - t0
        self._began, self._last_path, self._mark = began, path, mark
        return path

    def start(self) -> None:
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(self.interval):
                try:
                    self.write_if_changed()
                except ServerError as exc:  # keep serving; say why the checkpoint failed
                    say(log, str(exc), level=logging.ERROR, prefix=PREFIX)

        self._thread = threading.Thread(target=loop, name="ftrl-ps-checkpoint", daemon=True)
        self._thread.start()

    def stop(self, final: bool = True) -> None:
        """Stop the thread; with ``final`` write one last checkpoint (and say where:
        an operator stopping a shard learns what a restart will restore)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if final:
            path = self.write()
            say(log, f"shard {self.state.settings.shard_index} stops; its state is in "
                f"checkpoint {path} (a restart on {self.directory} restores it)",
                prefix=PREFIX)

    def age(self) -> float:
        """Seconds since the newest checkpoint's cut (since the start, before the first
        one): what a full disk or a stalled checkpointer makes grow."""
        return time.monotonic() - (self._began if self.written else self._since)

    def status(self) -> dict[str, Any]:
        return {"dir": str(self.directory), "interval": self.interval,
                "version": self.version, "written": self.written,
                "last_seconds": self.last_seconds, "age_seconds": round(self.age(), 3)}
