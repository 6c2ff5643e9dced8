"""libsvm rows from an unbounded stream, as soon as whole lines arrive.

:class:`~ftrl_ps.data.libsvm.LibsvmReader` fills a chunk of megabytes before
it parses, which suits files; a live stream (``tail -F events.svm |``, a
message-queue consumer writing lines) may deliver a few lines a minute, and
those must be learned now. :func:`stream_batches` reads whatever the pipe
holds (one ``read`` of up to ``max_bytes``, which returns as soon as any data
is there), parses the whole lines with the reader's kernel and yields them
as one :class:`~ftrl_ps.data.batch.Batch`; a partial last line waits for its
newline (or the end of the stream).

A bad line raises :class:`~ftrl_ps.errors.ParseError` with the stream's line
number, or, with ``skip_bad_lines``, is skipped and counted in ``stats``.

>>> import io
>>> [b.rows for b in stream_batches(io.BytesIO(b"1 3:1\\n0 4:1\\n1 5"), bits=10)]
[2, 1]
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, BinaryIO

from ftrl_ps.data.batch import Batch
from ftrl_ps.data.bodies import parse_text
from ftrl_ps.data.libsvm import MAX_BAD_EXAMPLES, ReaderStats
from ftrl_ps.errors import ParseError

__all__ = ["stream_batches"]


def _read_some(f: Any, size: int) -> bytes:
    """Up to ``size`` bytes, returning as soon as some are available (b"" at the end)."""
    fileno = getattr(f, "fileno", None)
    if fileno is not None and not hasattr(f, "getvalue"):
        try:
            return os.read(fileno(), size)
        except (OSError, ValueError):
            pass
    read1 = getattr(f, "read1", None)
    data: bytes = read1(size) if read1 is not None else f.read(size)
    return data


def stream_batches(source: BinaryIO, bits: int, *, max_bytes: int = 1 << 20,
                   skip_bad_lines: bool = False, name: str = "<stdin>",
                   stats: ReaderStats | None = None) -> Iterator[Batch]:
    """Batches of the whole lines read so far from ``source`` (binary), until its end."""
    st = stats if stats is not None else ReaderStats()
    carry = b""
    line_base = 0
    while True:
        data = _read_some(source, max_bytes)
        eof = not data
        buf = carry + data
        cut = len(buf) if eof else buf.rfind(b"\n") + 1
        carry = buf[cut:]
        text = buf[:cut]
        while text:
            try:
                batch = parse_text(text, bits, labels=True, source=name)
            except ParseError as exc:
                line = line_base + exc.line
                if not skip_bad_lines:
                    raise ParseError(name, line, exc.token, exc.reason) from None
                st.bad_lines += 1
                if len(st.bad_examples) < MAX_BAD_EXAMPLES:
                    st.bad_examples.append((line, exc.token, exc.reason))
                head, _, text = _split_after_line(text, exc.line)
                ok = parse_text(head, bits, labels=True, source=name)
                line_base += exc.line
                st.rows += ok.rows
                if ok.rows:
                    yield ok
                continue
            line_base += text.count(b"\n") + (0 if text.endswith(b"\n") else 1)
            st.rows += batch.rows
            st.bytes_read += len(text)
            if batch.rows:
                yield batch
            text = b""
        st.lines = line_base
        if eof:
            return


def _split_after_line(text: bytes, line: int) -> tuple[bytes, bytes, bytes]:
    """``(lines before line, the line, the rest)`` of ``text`` (1-based ``line``)."""
    start = 0
    for _ in range(line - 1):
        start = text.index(b"\n", start) + 1
    end = text.find(b"\n", start)
    end = len(text) if end < 0 else end + 1
    return text[:start], text[start:end], text[end:]
