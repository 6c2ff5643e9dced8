"""One reader over every file of an input spec (file, directory, glob, fsspec URL).

:class:`InputReader` reads the parts of :func:`ftrl_ps.data.sources.expand` (or
the parts it is given) one after the other with a
:class:`~ftrl_ps.data.libsvm.LibsvmReader` each, and adds their counters up;
standard input (``"-"``) and open file objects are read as they are.
:func:`read_unit` reads one hand-out unit (:class:`~ftrl_ps.data.sources.Unit`).

>>> import fsspec
>>> for name, text in (("x/p1.svm", b"1 3:1\\n"), ("x/p2.svm", b"0 4:1\\n1 5:1\\n")):
...     with fsspec.open("memory://" + name, "wb") as f:
...         _ = f.write(text)
>>> reader = InputReader("memory://x/", bits=8)
>>> [b.rows for b in reader], reader.stats.rows, reader.size
([1, 2], 3, 18)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, BinaryIO

from ftrl_ps.data.batch import Batch
from ftrl_ps.data.libsvm import LibsvmReader, ReaderStats
from ftrl_ps.data.sources import Part, Unit, expand

__all__ = ["InputReader", "read_unit"]

MAX_BAD_EXAMPLES = 10


class InputReader:
    """Iterate over all parts of ``source`` in :class:`Batch` es (one pass per ``iter``).

    ``stats`` adds up the parts' counters (``bytes_read``: text consumed so
    far); ``size`` is the input's size on disk when known (for progress).
    Other keywords go to every :class:`LibsvmReader`.
    """

    def __init__(self, source: str | os.PathLike[str] | BinaryIO | list[Part], bits: int,
                 **reader_kw: Any) -> None:
        self.bits = bits
        self.reader_kw = reader_kw
        self.stats = ReaderStats()
        self.parts: list[Part] | None = None
        self.source = source
        self._part, self._done_disk, self._part_bytes = 0, 0, 0  # where a pass is
        if isinstance(source, list):  # the parts themselves (a packed hand-out unit)
            self.parts, self.name = source, source[0].name if source else "<no parts>"
        elif isinstance(source, str | os.PathLike) and os.fspath(source) != "-":
            self.parts = expand(os.fspath(source))
            self.name = os.fspath(source)
        else:
            LibsvmReader(source, bits, **reader_kw)  # validates the arguments now
            self.name = "<stdin>" if source == "-" else str(getattr(source, "name", "<stream>"))

    @property
    def size(self) -> int | None:
        """Bytes on disk of all parts (None for a stream)."""
        return None if self.parts is None else sum(p.size for p in self.parts)

    def fraction(self) -> float | None:
        """The share of the input's bytes on disk read so far in this pass; None
        when unknown (a stream, an empty input, or one gzip file: its text is
        longer than its size on disk). A gzip part counts once read whole."""
        parts = self.parts
        if not parts or (len(parts) == 1 and parts[0].gzip) or not self.size:
            return None
        current = parts[self._part] if self._part < len(parts) else None
        inside = 0 if current is None or current.gzip else self._part_bytes
        return min(1.0, (self._done_disk + inside) / self.size)

    def __iter__(self) -> Iterator[Batch]:
        self.stats = ReaderStats()
        self._part, self._done_disk, self._part_bytes = 0, 0, 0
        if self.parts is None:
            assert not isinstance(self.source, list)  # (a list is parts)
            yield from self._one(LibsvmReader(self.source, self.bits, **self.reader_kw))
            return
        named = len(self.parts) > 1  # a skipped line is then told by part and line
        for i, part in enumerate(self.parts):
            self._part, self._part_bytes = i, 0
            yield from self._one(LibsvmReader(part.name, self.bits, **self.reader_kw),
                                 part.name if named else None)
            self._done_disk += part.size
        self._part = len(self.parts)

    def _one(self, reader: LibsvmReader, name: str | None = None) -> Iterator[Batch]:
        done = ReaderStats(**{k: getattr(self.stats, k) for k in ("rows", "lines",
                                                                  "bad_lines", "bytes_read")})
        examples = list(self.stats.bad_examples)
        for batch in reader:
            self._add(done, examples, reader.stats, name)
            yield batch
        self._add(done, examples, reader.stats, name)

    def _add(self, done: ReaderStats, examples: list[Any], part: ReaderStats,
             name: str | None) -> None:
        self.stats.rows = done.rows + part.rows
        self.stats.lines = done.lines + part.lines
        self.stats.bad_lines = done.bad_lines + part.bad_lines
        self.stats.bytes_read = done.bytes_read + part.bytes_read
        self._part_bytes = part.bytes_read
        mine = (part.bad_examples if name is None else
                [(f"{name}:{line}", token, why) for line, token, why in part.bad_examples])
        self.stats.bad_examples = (examples + mine)[:MAX_BAD_EXAMPLES]


def read_unit(unit: Unit, bits: int, **reader_kw: Any) -> LibsvmReader | InputReader:
    """A reader of one hand-out unit: its byte range of a plain part, a whole gzip part,
    or the whole small parts packed into it (their skipped lines told by part and line)."""
    if unit.parts:
        return InputReader(unit.files(), bits, **reader_kw)
    byte_range = None if unit.gzip else (unit.start, unit.end)
    return LibsvmReader(unit.part, bits, byte_range=byte_range, **reader_kw)
