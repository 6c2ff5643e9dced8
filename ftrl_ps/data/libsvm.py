"""Streaming libsvm reader: text lines to CSR batches of hashed features.

Format
------
One example per line: a label, then feature tokens, separated by spaces or
tabs. ``#`` starts a comment to the end of the line. Blank and comment-only
lines are skipped but counted for line numbers. CRLF endings are fine and the
last line may lack its newline.

* Label: a decimal number equal to -1, 0 or 1 (``-1``, ``+1``, ``1.0``,
  ``0``...); -1 and 0 become 0.0, 1 becomes 1.0. Anything else is an error.
* A token starting with ``|`` (a Vowpal Wabbit namespace such as ``|f``) and a
  ``qid:N`` token are skipped.
* Feature token: ``name:value``, split at the *last* ``:``; a token without
  ``:`` has value 1.0. The value is a decimal float (``[+-]digits[.digits]
  [e[+-]digits]``). NaN, inf, values beyond float32 range, an empty name
  (``:3``), an empty value (``5:``) or an unparsable value are errors.
  Zero values (also those that round to 0 in float32) are dropped: they
  cannot change the model.
* Names map to slots in ``[0, 2**bits)`` as specified in :mod:`ftrl_ps.data.hashing`.
* Within a row, slots are sorted ascending and unique: repeated features and
  hash collisions are merged by **summing** their values (a sum that is 0 in
  float32 is dropped). Rows already strictly increasing are not sorted.

A bad line raises :class:`~ftrl_ps.errors.ParseError` (file, 1-based line,
token, reason). With ``skip_bad_lines=True`` it is skipped and counted in
:class:`ReaderStats` instead, which keeps the first 10 for the report.

An empty input (or one with only blank/comment lines) yields **no batches**;
:func:`read_all` then returns a batch with ``rows == 0``.

Example
-------
>>> import io
>>> batch = read_all(io.BytesIO(b"+1 3:0.5 1:2\\n-1 7\\n"), bits=20)
>>> batch.labels.tolist(), batch.indptr.tolist(), batch.indices.tolist()
([1.0, 0.0], [0, 2, 3], [1, 3, 7])
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from ftrl_ps._kernels import codes
from ftrl_ps._kernels.aot import kernels
from ftrl_ps.core.params import check_bits
from ftrl_ps.data.batch import Batch
from ftrl_ps.data.sources import open_binary, read_error
from ftrl_ps.errors import ConfigError, DataError, ParseError

__all__ = [
    "Batch",
    "LibsvmReader",
    "ReaderStats",
    "bad_line_reason",
    "read_all",
    "shorten_token",
    "split_ranges",
]

#: how many bad lines :class:`ReaderStats` keeps for the report
MAX_BAD_EXAMPLES = 10
_GZIP_MAGIC = b"\x1f\x8b"
_TAIL_READ = 1 << 16  # read size once past the end of a byte range
_REASONS = {
    codes.R_LABEL: "label must be -1, 0 or 1",
    codes.R_EMPTY_NAME: "empty feature name",
    codes.R_EMPTY_VALUE: "empty feature value",
    codes.R_BAD_VALUE: "feature value is not a decimal number",
    codes.R_RANGE: "feature value is NaN, infinite or beyond float32 range",
    codes.R_SUM_RANGE: "sum of repeated features overflows float32",
}


def _room(per_byte: float, n: int) -> int:
    """Entries for ``n`` bytes 1.25x as dense as the last chunk (0: as dense as text can be)."""
    return int(per_byte * n * 1.25) + 1024 if per_byte > 0 else 0


@dataclass
class ReaderStats:
    """Counters of one pass of a :class:`LibsvmReader`, updated as it goes.

    ``bad_examples`` holds ``(line, token, reason)`` of the first :data:`MAX_BAD_EXAMPLES`
    skipped lines (an InputReader of parts: ``"part:line"``); ``bytes_read`` counts
    bytes of (decompressed) text consumed.
    """

    rows: int = 0
    lines: int = 0
    bad_lines: int = 0
    bad_examples: list[tuple[int | str, str, str]] = field(default_factory=list)
    bytes_read: int = 0

    def report(self) -> str:
        """A human-readable end-of-run summary."""
        text = f"{self.rows} rows from {self.lines} lines, {self.bad_lines} bad lines skipped"
        for line, token, reason in self.bad_examples:
            text += f"\n  line {line}: {reason}: {token!r}"
        if self.bad_lines > len(self.bad_examples):
            text += f"\n  ... and {self.bad_lines - len(self.bad_examples)} more"
        return text


def shorten_token(raw: bytes, limit: int = 80) -> str:
    """A bad token as text for an error message (at most ``limit`` characters)."""
    text = raw.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


class LibsvmReader:
    """Iterate over a libsvm file in :class:`Batch` es of about ``chunk_bytes`` of text.

    Parameters
    ----------
    source : str, os.PathLike or binary file object
        A path or an fsspec URL (gzip files are detected by their magic bytes),
        ``"-"`` for standard input, or an open binary file object.
    bits : int
        Feature space ``2**bits`` slots, ``1 <= bits <= 30``.
    chunk_bytes : int
        Bytes read per batch; a line longer than this still works.
    skip_bad_lines : bool
        Skip and count malformed lines instead of raising ParseError.
    byte_range : (int, int), optional
        Plain files (paths or URLs) only: read exactly the lines whose first byte lies in
        ``[start, end)`` (a line starts at 0 or right after ``\\n``); the last
        of them is read to its end even past ``end``.

    Notes
    -----
    A path can be iterated several times (one pass per ``iter``; ``stats``
    is reset at the start of each pass); a file object or stdin only once.
    One batch per chunk; chunks without rows yield nothing. Memory stays
    bounded by a few times ``chunk_bytes`` (plus the longest line). With a
    ``byte_range``, line numbers in errors are still those of the whole file:
    the newlines before the range are counted, once, only when a bad line is
    reported.
    """

    def __init__(self, source: str | os.PathLike[str] | BinaryIO, bits: int, *,
                 chunk_bytes: int = 4 << 20, skip_bad_lines: bool = False,
                 byte_range: tuple[int, int] | None = None, threads: int = 1) -> None:
        self.bits = check_bits(bits)
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ConfigError(f"threads must be a positive integer, got {threads!r}")
        #: parser threads; with more than one, chunks are parsed concurrently (the
        #: kernel releases the GIL) and yielded in file order
        self.threads = threads
        if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
            raise ConfigError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
        self.chunk_bytes = chunk_bytes
        self.skip_bad_lines = bool(skip_bad_lines)
        self._density = (0.0, 0.0)  # features, rows per byte of the last chunk parsed
        self.source = source
        self.is_path = isinstance(source, str | os.PathLike)
        if self.is_path:
            self.name = "<stdin>" if source == "-" else os.fspath(source)  # type: ignore[arg-type]
        elif hasattr(source, "read"):
            self.name = str(getattr(source, "name", "<stream>"))
            if isinstance(source, io.TextIOBase):
                raise ConfigError(f"{self.name}: open the file in binary mode ('rb')")
        else:
            raise ConfigError(f"source must be a path or a binary file object, got {source!r}")
        if byte_range is not None:
            start, end = byte_range
            if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end):
                raise ConfigError(f"byte_range must be (start, end) with 0 <= start <= end, "
                                  f"got {byte_range!r}")
            if not self.is_path or self.name == "<stdin>":
                raise ConfigError("byte_range needs a plain file path")
        self.byte_range = byte_range
        self.stats = ReaderStats()
        self._stream_start = 0  # file offset where the current pass started reading
        self._prefix_lines: int | None = None  # lines before _stream_start, when needed
        if self.is_path and self.name != "<stdin>":
            self._open()[0].close()  # fail early: missing, unreadable, gzip with a range

    # -- opening ---------------------------------------------------------------------------

    def _open(self) -> tuple[Any, bool]:
        """The binary stream to read and whether we must close it."""
        if not self.is_path:
            return self._maybe_gunzip(self.source), False
        if self.name == "<stdin>":
            stdin = getattr(sys.stdin, "buffer", None)
            if stdin is None:
                raise DataError("cannot read <stdin>: no standard input")
            return self._maybe_gunzip(stdin), False
        f = open_binary(self.name)  # a path or an fsspec URL; closed by __iter__
        if self.byte_range is None:
            try:
                magic = f.read(2)
                f.seek(0)
            except OSError as exc:
                f.close()
                raise read_error(self.name, exc) from exc
            if magic == _GZIP_MAGIC:
                return gzip.GzipFile(fileobj=f, mode="rb"), True
        elif f.read(2) == _GZIP_MAGIC:
            f.close()
            raise ConfigError(f"{self.name}: byte_range needs an uncompressed file")
        return f, True

    def _maybe_gunzip(self, f: Any) -> Any:
        magic = b""
        if hasattr(f, "peek"):
            magic = f.peek(2)[:2]
        elif getattr(f, "seekable", lambda: False)():
            pos = f.tell()
            magic = f.read(2)
            f.seek(pos)
        return gzip.GzipFile(fileobj=f, mode="rb") if magic == _GZIP_MAGIC else f

    def _range_start(self, f: Any) -> int:
        """First line start at or after ``byte_range[0]``; leaves ``f`` there."""
        start = self.byte_range[0]  # type: ignore[index]
        if start == 0:
            f.seek(0)
            return 0
        f.seek(start - 1)
        pos = start - 1
        while True:
            block = f.read(_TAIL_READ)
            if not block:
                return pos
            k = block.find(b"\n")
            if k >= 0:
                pos += k + 1
                f.seek(pos)
                return pos
            pos += len(block)

    def _line_number(self, stream_line: int) -> int:
        """1-based file line number of the ``stream_line``-th (0-based) line read."""
        if self._prefix_lines is None:
            self._prefix_lines = 0
            if self.byte_range is not None and self._stream_start > 0:
                with open_binary(self.name) as f:
                    left = self._stream_start
                    while left > 0:
                        block = f.read(min(left, 1 << 20))
                        if not block:
                            break
                        self._prefix_lines += block.count(b"\n")
                        left -= len(block)
        return self._prefix_lines + stream_line + 1

    # -- iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        self.stats = ReaderStats()
        f, owned = self._open()
        pool = ThreadPoolExecutor(self.threads, "libsvm-parse") if self.threads > 1 else None
        try:
            yield from self._batches(f, pool)
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise read_error(self.name, exc) from exc
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
            if owned:
                f.close()

    def _batches(self, f: Any, pool: ThreadPoolExecutor | None = None) -> Iterator[Batch]:
        pending: deque[tuple[np.ndarray, Future[Any], bytearray]] = deque()
        spare: list[bytearray] = []  # chunk buffers back from the parser threads
        end = None
        self._stream_start = 0
        self._prefix_lines = None
        if self.byte_range is not None:
            self._stream_start = self._range_start(f)
            end = self.byte_range[1]
            if self._stream_start >= end:
                return
        buf = bytearray(self.chunk_bytes)
        view = memoryview(buf)
        have = 0  # bytes of data at the front of buf (a carried partial line first)
        clean = 0  # buf[:clean] is known to hold no newline (keeps long lines linear)
        base = self._stream_start  # file offset of buf[0]
        line_base = 0  # lines read before buf[0]
        eof = False
        while True:
            if not eof:
                if have == len(buf):  # one line longer than the buffer: grow
                    view.release()
                    grown = bytearray(2 * len(buf))  # (buf may be exported to numpy still)
                    grown[:have] = buf
                    buf = grown
                    view = memoryview(buf)
                want = len(buf) - have
                if end is not None and base + have >= end:
                    want = min(want, _TAIL_READ)
                got = _read_into(f, view[have:have + want])
                eof = got == 0
                have += got
            cut, last = -1, False
            if end is not None and base + have > end - 1:  # holds the line of byte end-1
                k = buf.find(b"\n", max(end - 1 - base, clean), have)
                if k >= 0 or eof:
                    cut, last = (k + 1 if k >= 0 else have), True
            if cut < 0:
                cut = have if eof else buf.rfind(b"\n", clean, have) + 1
                last = eof
            clean = have
            if cut > 0:
                rest = have - cut
                if pool is None:
                    batch, lines = self._parse(view, cut, line_base)
                    line_base += lines
                    self.stats.bytes_read += cut
                    if batch.rows:
                        yield batch
                    buf[:rest] = buf[cut:have]
                else:  # hand this buffer to the pool; finish results in file order
                    arr = np.frombuffer(buf, dtype=np.uint8, count=cut)
                    pending.append((arr, pool.submit(self._kernel, arr, cut), buf))
                    while len(pending) > self.threads:
                        batch, line_base = self._finish_pending(pending.popleft(), line_base,
                                                                spare)
                        if batch.rows:
                            yield batch
                    # read on into a free buffer (no copy of the chunk, no fresh pages)
                    old, buf = buf, _free_buffer(spare, len(buf))
                    view.release()
                    view = memoryview(buf)
                    buf[:rest] = old[cut:have]
                have, base, clean = rest, base + cut, rest
            if last:
                while pending:
                    batch, line_base = self._finish_pending(pending.popleft(), line_base, spare)
                    if batch.rows:
                        yield batch
                return

    def _kernel(self, arr: np.ndarray, n: int) -> tuple[Any, ...]:
        features, rows = self._density  # 0: room for the most the text could hold
        result: tuple[Any, ...] = kernels("parse").parse_chunk(
            arr, n, self.bits, self.skip_bad_lines, MAX_BAD_EXAMPLES, False,
            _room(features, n), _room(rows, n))
        if n:
            self._density = (result[2].size / n, result[0].size / n)
        return result

    def _finish_pending(self, item: tuple[np.ndarray, Future[Any], bytearray], line_base: int,
                        spare: list[bytearray]) -> tuple[Batch, int]:
        arr, future, owner = item
        batch, lines = self._finish(arr, future.result(), line_base)
        self.stats.bytes_read += arr.size
        spare.append(owner)  # parsed: the kernel's arrays do not point into it
        return batch, line_base + lines

    def _parse(self, view: memoryview, n: int, line_base: int) -> tuple[Batch, int]:
        arr = np.frombuffer(view, dtype=np.uint8, count=n)
        batch, lines = self._finish(arr, self._kernel(arr, n), line_base)
        del arr
        return batch, lines

    def _finish(self, arr: np.ndarray, result: tuple[Any, ...], line_base: int
                ) -> tuple[Batch, int]:
        """Stats, errors and the Batch of one parsed chunk (called in file order)."""
        labels, indptr, indices, values, n_lines, n_bad, bad = result
        st = self.stats
        st.lines += n_lines
        if n_bad:
            if not self.skip_bad_lines:
                line_idx, s, e, code = (int(x) for x in bad[0])
                raw = bytes(arr[s:e])
                raise ParseError(self.name, self._line_number(line_base + line_idx),
                                 shorten_token(raw), bad_line_reason(code, raw))
            st.bad_lines += int(n_bad)
            for line_idx, s, e, code in bad[: min(int(n_bad), MAX_BAD_EXAMPLES)].tolist():
                if len(st.bad_examples) < MAX_BAD_EXAMPLES:
                    raw = bytes(arr[s:e])
                    st.bad_examples.append((self._line_number(line_base + line_idx),
                                            shorten_token(raw), bad_line_reason(code, raw)))
        st.rows += len(labels)
        return Batch(labels, indptr, indices, values), n_lines


def bad_line_reason(code: int, raw: bytes) -> str:
    """The text of a parser reason code for the bad token ``raw``."""
    if code == codes.R_BAD_VALUE:
        value = raw.rsplit(b":", 1)[-1].lstrip(b"+-").lower()
        if value in (b"nan", b"inf", b"infinity"):
            return _REASONS[codes.R_RANGE]
    return _REASONS.get(code, f"bad line (code {code})")


def _free_buffer(spare: list[bytearray], size: int) -> bytearray:
    """A chunk buffer of at least ``size`` bytes (the current one's: it holds the
    carried partial line): a spare one, else a new one."""
    while spare:
        candidate = spare.pop()
        if len(candidate) >= size:
            return candidate
    return bytearray(size)


def _read_into(f: Any, target: memoryview) -> int:
    """Fill ``target`` from ``f`` as far as possible; 0 only at end of input."""
    total = 0
    readinto = getattr(f, "readinto", None)
    while total < len(target):
        if readinto is not None:
            got = readinto(target[total:])
        else:
            data = f.read(len(target) - total)
            got = len(data) if data else 0
            target[total:total + got] = data or b""
        if not got:
            break
        total += got
    return total


def read_all(source: str | os.PathLike[str] | BinaryIO, bits: int, **kw: Any) -> Batch:
    """Read a whole input into one :class:`Batch` (for tests and small files).

    Takes the keyword arguments of :class:`LibsvmReader`.
    """
    return Batch.concat(list(LibsvmReader(source, bits, **kw)))


def split_ranges(path: str | os.PathLike[str], parts: int) -> list[tuple[int, int]]:
    """``parts`` byte ranges of about equal size that cover the file ``path``.

    Reading each range with ``LibsvmReader(path, bits, byte_range=r)`` reads
    every line of the file exactly once overall.
    """
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ConfigError(f"parts must be a positive integer, got {parts!r}")
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise DataError(f"cannot stat {os.fspath(path)}: {exc.strerror or exc}") from exc
    bounds = [size * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]
