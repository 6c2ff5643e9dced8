"""The worker's push journal: every push, kept until every shard has it in a checkpoint.

An entry is written *before* its push is sent (write-ahead), so a worker killed
at any moment finds on restart every push some shard may have applied, and the
input position they cover. An entry is released once every shard it touched
reports the push durable (``durable_seq`` in the push answers); the last entry
is always kept (it holds the position). See docs/durability.md, section 4.

On disk (``worker --state-dir DIR``: ``DIR/worker-<index>.journal``)::

    header   "FTPSJRNL" | version u32 | worker u32 | num_shards u32 | dtype char (f/d) | 3 pad
             | per shard: its run id, 16 ASCII bytes (zeros: unknown; not in version 1)
    records  length u32 | crc32 u32 | payload
    payload  seq u64 | position u64 | loss_sum f64 | count u32 | parts mask u32... (see
             _ENTRY) | per shard: prev u64, digest u64, total pushes u64, total digest u64
             | keys u32[count] | delta_n[count] | delta_z[count]

Records are appended with one ``write`` each (a process killed mid-write leaves a
torn last record, which is detected by its length or CRC and dropped: its push
was never sent). Without a directory the journal lives in memory only.

The run ids say which cluster run the pushes belong to (each shard's, from its
``/v1/status``: new when it starts without a checkpoint, kept in its checkpoints).
A journal none of whose shards' runs is the servers' is another run's: loading
it is a ConfigError (replayed, its pushes would rebuild that run's model in new
servers). A version 1 journal (no run ids) is taken as this run's.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ftrl_ps.errors import ConfigError, ModelFormatError, WorkerStateError

__all__ = ["JournalEntry", "PushJournal", "check_run"]

_MAGIC = b"FTPSJRNL"
_VERSION = 2
_HEAD = struct.Struct("<8sIIIc3x")
_RUN = 16  # bytes of a shard's run id
_REC = struct.Struct("<II")
_ENTRY = struct.Struct("<QQdIQ")  # seq, position, loss_sum, count, parts bit mask
_SHARD = struct.Struct("<QQQQ")  # prev, digest, total pushes, total digest
#: rewrite the file after this many released entries
_COMPACT_EVERY = 256
#: an entry's arrays, in the order of its record
_ARRAYS = ("keys", "delta_n", "delta_z")


@dataclass
class JournalEntry:
    """One push: its seq, the input position and loss it covers, and per shard
    the previous seq sent there, whether it has a part there, the part's digest
    and the cumulative (pushes, digest) sent there including this one."""

    seq: int
    position: int
    loss_sum: float
    keys: np.ndarray
    delta_n: np.ndarray
    delta_z: np.ndarray
    prev: list[int]
    parts: list[bool]
    digests: list[int]
    totals: list[tuple[int, int]]
    #: the compose merge rule's sections (ftrl_ps.ps.merge), sent with the push; not
    #: written to the journal file: a push replayed from the file is summed
    merge: tuple[np.ndarray, ...] | None = None
    #: where its keys and deltas are in the journal file (byte offset; None: not
    #: written to a file), for :meth:`PushJournal.spill`
    arrays_at: int | None = None
    #: the journal whose file holds its keys and deltas, and their count, once
    #: :meth:`PushJournal.spill` dropped them from memory (None: in memory)
    spilled_to: tuple[PushJournal, int] | None = field(default=None, repr=False,
                                                        compare=False)

    def __getattr__(self, name: str) -> Any:
        """``keys``, ``delta_n`` and ``delta_z`` of a spilled entry: read from its
        journal file at each access (a replay, a compaction), not kept."""
        spilled = self.__dict__.get("spilled_to")
        if spilled is None or name not in _ARRAYS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return spilled[0].read_array(self, _ARRAYS.index(name), spilled[1])

    def has_part(self, shard: int) -> bool:
        return self.parts[shard]

    def last_part(self, shard: int) -> int:
        """The last seq sent to ``shard`` up to and including this entry."""
        return self.seq if self.parts[shard] else self.prev[shard]

    def encode(self, dtype: np.dtype) -> bytes:
        mask = sum(1 << i for i, p in enumerate(self.parts) if p)
        out = [_ENTRY.pack(self.seq, self.position, self.loss_sum, self.keys.size, mask)]
        for i in range(len(self.parts)):
            out.append(_SHARD.pack(self.prev[i], self.digests[i], *self.totals[i]))
        little = dtype.newbyteorder("<")
        out += [np.ascontiguousarray(self.keys, "<u4").tobytes(),
                np.ascontiguousarray(self.delta_n, little).tobytes(),
                np.ascontiguousarray(self.delta_z, little).tobytes()]
        return b"".join(out)

    @classmethod
    def decode(cls, payload: bytes, num_shards: int, dtype: np.dtype) -> JournalEntry:
        seq, position, loss_sum, count, mask = _ENTRY.unpack_from(payload, 0)
        off = _ENTRY.size
        prev, digests, totals = [], [], []
        for _ in range(num_shards):
            p, d, tp, td = _SHARD.unpack_from(payload, off)
            off += _SHARD.size
            prev.append(p)
            digests.append(d)
            totals.append((tp, td))
        little = dtype.newbyteorder("<")
        if len(payload) != off + count * (4 + 2 * little.itemsize):
            raise ModelFormatError("journal record has the wrong length")
        keys = np.frombuffer(payload, "<u4", count, off).astype(np.uint32)
        off += 4 * count
        dn = np.frombuffer(payload, little, count, off).astype(dtype)
        dz = np.frombuffer(payload, little, count, off + count * little.itemsize).astype(dtype)
        parts = [bool(mask >> i & 1) for i in range(num_shards)]
        return cls(seq, position, loss_sum, keys, dn, dz, prev, parts, digests, totals)


def check_run(path: Path, was: list[str | None], now: list[str | None]) -> None:
    """Refuse the journal ``path`` of runs ``was`` (per shard; None: unknown) when the
    servers' runs ``now`` are known and none of its shards' is the same: another
    cluster run's pushes (a state dir left from an earlier run). A shard that
    restarted without its checkpoint has a new run, the others keep theirs."""
    pairs = [(w, n) for w, n in zip(was, now, strict=True) if w is not None and n is not None]
    if pairs and all(w != n for w, n in pairs):
        raise ConfigError(
            f"{path} is the push journal of another cluster run (runs {[w for w, _ in pairs]}, "
            f"the servers' are {[n for _, n in pairs]}): delete it, or give this worker "
            "another --state-dir (a new run starts from an empty one)")


class PushJournal:
    """The pushes of one worker index not yet durable on every shard.

    Parameters
    ----------
    path : path or None
        The journal file (created if missing, else loaded); None: memory only.
    worker, num_shards, dtype
        Checked against an existing file's header.
    runs : list of str or None, optional
        Each shard's run id (None: unknown); an existing file of another run is a
        ConfigError (:func:`check_run`).
    """

    def __init__(self, path: str | os.PathLike[str] | None, worker: int, num_shards: int,
                 dtype: Any, runs: list[str | None] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.worker, self.num_shards = worker, num_shards
        self.dtype = np.dtype(dtype)
        if num_shards > 32:
            raise ConfigError("the journal supports at most 32 shards")
        #: each shard's run id, as the header says (None: unknown)
        self.runs: list[str | None] = list(runs) if runs is not None else [None] * num_shards
        self.entries: list[JournalEntry] = []
        self.dropped_torn = False
        self._released = 0
        self._fd: int | None = None
        self._size = 0  # of the file
        #: an entry's arrays begin this far into its record's payload
        self._arrays_offset = _ENTRY.size + num_shards * _SHARD.size
        self._lock = threading.RLock()  # the file's writes and reads (push, main threads)
        if self.path is not None:
            if self.path.exists():
                self._load()
            self._rewrite()

    @classmethod
    def check_file(cls, path: str | os.PathLike[str], worker: int, num_shards: int,
                   dtype: Any, runs: list[str | None]) -> None:
        """Check an existing journal file as loading it would (its header, its run),
        writing nothing (before registering: another process may hold it)."""
        probe = cls(None, worker, num_shards, dtype, runs)
        probe.path = Path(path)
        if probe.path.exists():
            probe._load()

    # --- reading ---------------------------------------------------------------------
    def _header(self, version: int = _VERSION) -> bytes:
        code = b"d" if self.dtype == np.float64 else b"f"
        head = _HEAD.pack(_MAGIC, version, self.worker, self.num_shards, code)
        if version == 1:
            return head
        return head + b"".join((r or "").encode("ascii")[:_RUN].ljust(_RUN, b"\0")
                               for r in self.runs)

    def _load(self) -> None:
        assert self.path is not None
        data = self.path.read_bytes()
        if len(data) < _HEAD.size or data[:8] != _MAGIC:
            raise ModelFormatError(f"{self.path} is not an ftrl-ps push journal")
        version = _HEAD.unpack_from(data)[1]
        off = _HEAD.size if version == 1 else _HEAD.size + _RUN * self.num_shards
        if version not in (1, _VERSION) or data[:_HEAD.size] != self._header(version)[:_HEAD.size]:
            raise ConfigError(
                f"{self.path} belongs to another worker/layout/dtype "
                f"(this is worker {self.worker} with {self.num_shards} shard(s), {self.dtype})"
            )
        if version > 1:
            was = [data[_HEAD.size + _RUN * i:_HEAD.size + _RUN * (i + 1)].rstrip(b"\0")
                   .decode("ascii", "replace") or None for i in range(self.num_shards)]
            check_run(self.path, was, self.runs)
            self.runs = [r if r is not None else w for r, w in zip(self.runs, was, strict=True)]
        while off < len(data):
            if off + _REC.size > len(data):
                self.dropped_torn = True
                break
            length, crc = _REC.unpack_from(data, off)
            payload = data[off + _REC.size: off + _REC.size + length]
            if len(payload) != length or zlib.crc32(payload) != crc:
                self.dropped_torn = True  # the push of a torn record was never sent
                break
            self.entries.append(JournalEntry.decode(payload, self.num_shards, self.dtype))
            off += _REC.size + length

    def note_run(self, shard: int, run: str | None) -> None:
        """``shard`` answered with run id ``run`` (it restarted without a checkpoint,
        and this worker synced it): the header says so from now on."""
        with self._lock:
            if run is None or self.runs[shard] == run:
                return
            self.runs[shard] = run
            if self.path is not None:
                self._rewrite()

    @property
    def last(self) -> JournalEntry | None:
        """The newest entry (None if nothing was ever pushed)."""
        return self.entries[-1] if self.entries else None

    def last_part(self, shard: int) -> int:
        """The last seq sent to ``shard`` (0 if none is known)."""
        return self.entries[-1].last_part(shard) if self.entries else 0

    def totals(self) -> list[tuple[int, int]]:
        """Per shard: (pushes, digest sum mod 2**64) of every push part ever sent."""
        last = self.last
        return list(last.totals) if last is not None else [(0, 0)] * self.num_shards

    # --- writing ---------------------------------------------------------------------
    def append(self, entry: JournalEntry) -> None:
        """Add ``entry`` (to the file first, in one write)."""
        with self._lock:
            if self._fd is not None:
                payload = entry.encode(self.dtype)
                os.write(self._fd, _REC.pack(len(payload), zlib.crc32(payload)) + payload)
                entry.arrays_at = self._size + _REC.size + self._arrays_offset
                self._size += _REC.size + len(payload)
            self.entries.append(entry)

    def spill(self, entry: JournalEntry) -> bool:
        """Drop ``entry``'s keys and deltas from memory (once it has been sent):
        from then on each access reads them from its record in the journal file
        (a replay, a compaction; the page cache holds them); True if it did. A
        journal without a file keeps them.

        Entries stay until every shard has checkpointed them, ~1.7 MB each for a
        140,000-key push: at 20M rows a local cluster's worker held 51 of them
        (85 MB) at its end, its memory growing with them between checkpoints.
        (Maps of the records would keep a file descriptor each: read instead.)
        """
        with self._lock:
            if (self.path is None or entry.arrays_at is None or entry.spilled_to is not None
                    or entry.keys.size == 0 or not any(e is entry for e in self.entries)):
                return False
            entry.spilled_to = (self, int(entry.keys.size))
            for name in _ARRAYS:
                delattr(entry, name)
            return True

    def read_array(self, entry: JournalEntry, which: int, count: int) -> np.ndarray:
        """Array ``which`` (0 keys, 1 delta_n, 2 delta_z) of ``count`` entries of a
        spilled ``entry``, read from the journal file."""
        little = self.dtype.newbyteorder("<")
        dtype = np.dtype("<u4") if which == 0 else little
        with self._lock:  # not while a compaction moves the records
            assert self.path is not None and entry.arrays_at is not None
            if not any(e is entry for e in self.entries):  # its offset may be another's now
                raise WorkerStateError(f"push {entry.seq} left the journal: its keys and "
                                       "deltas are no longer kept")
            offset = entry.arrays_at + (0, 4 * count, (4 + little.itemsize) * count)[which]
            try:
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    data = os.pread(fd, count * dtype.itemsize, offset)
                finally:
                    os.close(fd)
            except OSError as exc:  # e.g. the state directory was removed under the worker
                raise WorkerStateError(f"cannot read push {entry.seq} back from its journal "
                                       f"{self.path}: {exc}") from exc
        if len(data) != count * dtype.itemsize:
            raise ModelFormatError(f"{self.path}: a journal record ends early")
        out = np.frombuffer(data, dtype)
        return out.astype(np.uint32 if which == 0 else self.dtype, copy=False)

    def release(self, durable: list[int]) -> None:
        """Drop entries every touched shard holds durably (``durable[shard]`` = the
        shard's durable seq for this worker); the last entry stays."""
        with self._lock:
            keep = [e for e in self.entries[:-1]
                    if any(e.parts[s] and durable[s] < e.seq for s in range(self.num_shards))]
            dropped = len(self.entries) - 1 - len(keep)
            if dropped <= 0:
                return
            self.entries = [*keep, self.entries[-1]]
            self._released += dropped
            if self._fd is not None and self._released >= _COMPACT_EVERY:
                self._rewrite()

    def replace(self, entries: list[JournalEntry]) -> None:
        """Make ``entries`` the journal (the file rewritten and swapped in at once)."""
        with self._lock:
            self.entries = list(entries)
            if self.path is not None:
                self._rewrite()

    def _rewrite(self) -> None:
        """Write the retained entries to a fresh file and swap it in (atomic)."""
        with self._lock:
            assert self.path is not None
            self.close()
            tmp = self.path.with_name(self.path.name + ".tmp")
            head = self._header()
            size, offsets = len(head), []
            with open(tmp, "wb") as f:
                f.write(head)
                for e in self.entries:  # a spilled entry is read from the old file
                    payload = e.encode(self.dtype)
                    f.write(_REC.pack(len(payload), zlib.crc32(payload)) + payload)
                    offsets.append(size + _REC.size + self._arrays_offset)
                    size += _REC.size + len(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            for e, at in zip(self.entries, offsets, strict=True):
                e.arrays_at = at
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            self._size = size
            self._released = 0

    def close(self) -> None:
        """Close the file (the entries stay in memory)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
