"""Training inputs that are more than one plain file, and the work units they split into.

An input *spec* is one of:

* a file path (plain or gzip, detected by its magic bytes);
* a directory: every file below it, in sorted order (names starting with
  ``.`` or ``_``, such as ``_SUCCESS``, are left out);
* a glob pattern (``data/part-*.svm.gz``; ``**`` matches sub-directories);
* an fsspec URL (``s3://bucket/day=1/``, ``gs://...``, ``memory://...``,
  ``file:///...``), itself a file, a directory or a glob, read through
  fsspec's own backend for the protocol (installed separately, e.g. ``s3fs``).

:func:`expand` turns a spec into its :class:`Part` s; :func:`work_units` cuts
them into line-aligned :class:`Unit` s for hand-out: a plain part into byte
ranges of about ``unit_bytes`` (a :class:`~ftrl_ps.data.libsvm.LibsvmReader`
with that ``byte_range`` reads exactly the lines that start inside it), a
gzip part whole (a compressed stream cannot be entered in the middle), and
consecutive small parts packed into one unit (read whole, one after the other).

>>> import fsspec
>>> with fsspec.open("memory://doc/a.svm", "wb") as f:
...     _ = f.write(b"1 3:1\\n0 4:1\\n")
>>> [(p.name, p.size, p.gzip) for p in expand("memory://doc/")]
[('memory:///doc/a.svm', 12, False)]
>>> [(u.start, u.end) for u in work_units(expand("memory://doc/"), unit_bytes=8)]
[(0, 6), (6, 12)]
"""

from __future__ import annotations

import glob
import gzip
import io
import logging
import os
import zlib
from dataclasses import asdict, dataclass
from typing import Any, BinaryIO

from ftrl_ps.errors import ConfigError, DataError, InputIOError

__all__ = ["MAX_UNIT", "MIN_UNIT", "Part", "Unit", "check_shares", "check_unit_mb",
           "cluster_split", "estimate_rows", "expand", "has_files", "is_url", "open_binary",
           "read_error", "split_for", "work_units"]

_GZIP_MAGIC = b"\x1f\x8b"
_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class Part:
    """One file of an input: its path or URL, size in bytes, and whether it is gzip."""

    name: str
    size: int
    gzip: bool


@dataclass(frozen=True)
class Unit:
    """A piece of work: lines of ``part`` starting in bytes ``[start, end)``
    (a gzip part: the whole file, ``start = 0, end = size``), or, when ``parts``
    is not empty, the whole small parts it names (``(name, size, gzip)``, in
    order; ``part`` is the first, ``end`` their total size): several small files
    handed out as one unit."""

    id: int
    part: str
    start: int
    end: int
    gzip: bool
    parts: tuple[tuple[str, int, bool], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The unit as JSON (no ``parts`` key for one part: as before packing)."""
        out = asdict(self)
        if not self.parts:
            del out["parts"]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Unit:
        """The unit of :meth:`as_dict` (also as JSON gives it back: lists)."""
        packed = tuple((str(n), int(size), bool(gz)) for n, size, gz in d.get("parts") or ())
        return cls(**{**d, "parts": packed})

    def files(self) -> list[Part]:
        """The parts a packed unit reads whole."""
        return [Part(n, size, gz) for n, size, gz in self.parts]


def is_url(spec: str) -> bool:
    """Whether ``spec`` names a file through fsspec (``protocol://...``)."""
    return "://" in spec


def _hidden(name: str) -> bool:
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return base.startswith((".", "_"))


#: OSErrors of the input that a retry cannot cure (the rest: :class:`InputIOError`)
_FOR_GOOD = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
             EOFError, gzip.BadGzipFile, zlib.error)


def read_error(name: str, exc: BaseException, verb: str = "read") -> DataError:
    """The error to raise for ``exc`` met reading (``verb``) the input ``name``: an
    :class:`InputIOError` for an I/O failure a retry may cure (a connection reset),
    a plain :class:`DataError` for a file missing, unreadable or corrupt.

    >>> type(read_error("s3://b/k", ConnectionResetError(104, "reset"))).__name__
    'InputIOError'
    >>> print(read_error("d/a.gz", EOFError("Compressed file ended")))
    cannot read d/a.gz: Compressed file ended
    """
    why = getattr(exc, "strerror", None) or exc
    cls = DataError if isinstance(exc, _FOR_GOOD) or not isinstance(exc, OSError) \
        else InputIOError
    return cls(f"cannot {verb} {name}: {why}")


def open_binary(name: str) -> BinaryIO:
    """Open a local path or an fsspec URL for binary reading (seekable)."""
    if not is_url(name):
        try:
            return open(name, "rb")  # noqa: SIM115 - the caller closes it
        except OSError as exc:
            raise read_error(name, exc, "open") from exc
    import fsspec

    try:
        f: BinaryIO = fsspec.open(name, "rb").open()
    except (OSError, ValueError, ImportError) as exc:
        raise read_error(name, exc, "open") from exc
    if isinstance(f, io.BytesIO):
        # fsspec's memory filesystem hands every opener the same file object: readers
        # in two threads would move each other's position (a unit read from mid-line)
        return io.BytesIO(f.getvalue())
    return f


def split_for(spec: str) -> str:
    """How a cluster splits ``spec`` when not told (``--split auto``): ``"shares"``
    (worker i of N reads the i-th byte range) for one plain local file, or a path
    not there yet (a worker started with ``--start-timeout`` waits for it);
    ``"units"`` (small units handed out as workers ask) for a gzip file, a
    directory, a glob or an fsspec URL, which have no byte ranges to share."""
    if spec == "-":
        return "shares"
    if os.path.isfile(spec):
        return "units" if _part(spec, os.path.getsize(spec)).gzip else "shares"
    if is_url(spec) or os.path.isdir(spec) or _GLOB_CHARS & set(spec):
        return "units"
    return "shares"


def check_shares(spec: str) -> None:
    """Raise :class:`~ftrl_ps.errors.ConfigError` if ``--split shares`` cannot cut
    ``spec``: shares are byte ranges of one plain, uncompressed local file. A
    path not there yet passes (a worker started with ``--start-timeout`` waits
    for it; who needs it there says so)."""
    if split_for(spec) == "shares":
        return
    if os.path.isfile(spec):  # (split_for: a file it hands out is gzip-compressed)
        raise ConfigError(
            f"{spec} is gzip-compressed; '--split shares' reads byte ranges of one plain "
            "file, so it needs it uncompressed (--split auto or units hands it out whole)")
    raise ConfigError(f"'--split shares' reads byte ranges of one plain file; {spec} is "
                      "not one (--split auto or units hands out its parts)")


def cluster_split(spec: str, split: str, workers: int) -> str:
    """How a local cluster of ``workers`` splits ``spec`` (``split``: ``auto``,
    ``shares`` or ``units``), checked (:func:`check_shares`); with units, a warning
    when the input is fewer gzip files than workers: each is read whole by one
    worker (a gzip stream cannot be cut), so the others idle."""
    split = split_for(spec) if split == "auto" else split
    if split == "shares":
        if not os.path.isfile(spec):
            expand(spec)  # nothing there: "no input files match"
        check_shares(spec)
    elif workers > 1 and spec != "-":
        parts = expand(spec)
        if all(p.gzip for p in parts) and len(parts) < workers:
            what = "one gzip file" if len(parts) == 1 else f"{len(parts)} gzip files"
            logging.getLogger(__name__).warning(
                "%s is %s: a gzip stream cannot be split, so one worker reads each whole "
                "and %d of the %d workers will idle; decompress it (a plain file is cut into "
                "byte ranges) or give at least %d .gz parts (a directory or glob)", spec,
                what, workers - len(parts), workers, workers)
    return split


def _part(name: str, size: int) -> Part:
    """The input file ``name`` of ``size`` bytes (gzip told by its first two bytes)."""
    return Part(name, size, _is_gzip(name) if size >= 2 else False)


#: other compressions, told by their magic bytes: a clear error, not a parse error
#: quoting binary bytes as a label
_UNREAD = {b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd",
           b"PK\x03\x04": "zip"}


def _is_gzip(name: str) -> bool:
    """Whether ``name`` is gzip; ConfigError for another compression, and for text
    whose lines end with a bare CR (they would be read as one line)."""
    with open_binary(name) as f:
        head = f.read(1 << 16)
    for magic, kind in _UNREAD.items():
        if head.startswith(magic):
            raise ConfigError(f"{name} is {kind}-compressed; ftrl-ps reads plain text and "
                              "gzip: decompress it first")
    gzip = head[:2] == _GZIP_MAGIC
    if not gzip and b"\r" in head and b"\n" not in head:
        raise ConfigError(f"{name}: its lines end with a bare CR (classic Mac OS), which "
                          "would read as one line; convert it first (tr '\\r' '\\n')")
    return gzip


def _local_files(spec: str) -> list[str]:
    if os.path.isdir(spec):
        found = [os.path.join(root, f) for root, dirs, files in os.walk(spec) for f in files
                 if not _hidden(f) and not any(_hidden(d) for d in
                                               os.path.relpath(root, spec).split(os.sep)
                                               if d != ".")]
    elif _GLOB_CHARS & set(spec):
        found = [p for p in glob.glob(spec, recursive=True) if os.path.isfile(p)]
    elif os.path.isfile(spec):
        return [spec]
    else:
        raise ConfigError(f"input file not found: {spec}")
    return sorted(found)


def has_files(spec: str) -> bool:
    """Whether a local path, directory or glob has a file to read yet (cheap: files
    are listed, not opened). A worker started with ``--start-timeout`` waits for it."""
    try:
        return bool(_local_files(spec))
    except ConfigError:
        return False


def _url_files(spec: str) -> tuple[Any, list[str]]:
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(spec)
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"cannot read {spec}: {exc}") from exc
    if _GLOB_CHARS & set(path):
        found = [p for p in fs.glob(path) if fs.isfile(p)]
    elif fs.isdir(path):
        found = [p for p in fs.find(path) if not _hidden(p)
                 and not any(_hidden(d) for d in p[len(path.rstrip("/")):].split("/")[:-1])]
    elif fs.exists(path):
        found = [path]
    else:
        raise ConfigError(f"input file not found: {spec}")
    return fs, sorted(found)


def expand(spec: str) -> list[Part]:
    """The files of an input spec (see the module docstring), in sorted order.

    Raises :class:`ConfigError` if nothing matches.
    """
    if is_url(spec):
        fs, paths = _url_files(spec)
        names = [fs.unstrip_protocol(p) for p in paths]
        sizes = [int(fs.size(p)) for p in paths]
    else:
        names = _local_files(spec)
        sizes = [os.path.getsize(n) for n in names]
    if not names:
        raise ConfigError(f"no input files in the directory {spec} (hidden ones are skipped)"
                          if not is_url(spec) and os.path.isdir(spec)
                          else f"no input files match {spec}")
    _warn_twins(spec, names)
    return [_part(n, s) for n, s in zip(names, sizes, strict=True)]


_warned: set[str] = set()


def _warn_twins(spec: str, names: list[str]) -> None:
    """Once per input: parts ``X`` and ``X.gz`` both there are likely the same rows,
    which would be trained twice (a file gzipped beside its original)."""
    given = set(names)
    twins = [n for n in names if n.endswith(".gz") and n[:-3] in given]
    if twins and spec not in _warned:
        _warned.add(spec)
        logging.getLogger(__name__).warning(
            "%s holds both %s and %s%s: if they are the same rows, every row is read twice "
            "(give a glob such as '*.gz' to pick one)", spec, twins[0][:-3], twins[0],
            f" (and {len(twins) - 1} more such pair(s))" if len(twins) > 1 else "")


#: the bounds of a hand-out unit's size in bytes: the default's, and a size given's
MIN_UNIT, MAX_UNIT = 64 << 10, 64 << 20


def check_unit_mb(unit_mb: float | None) -> str | None:
    """A unit size given (``--unit-mb``, MiB; None: the default) checked against the
    bounds the default is held to. Below 64 KiB a :class:`ConfigError` (tiny units
    cost more requests than they hold rows: a 4 MB file in 100-byte units is 40,000
    of them); above 64 MiB the warning to give (one worker trains each unit, so a
    few big units leave the other workers idle); else None.

    >>> check_unit_mb(2.0) is None
    True
    >>> check_unit_mb(0.001)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ftrl_ps.errors.ConfigError: a unit of 0.001 MiB is below 64 KiB (--unit-mb 0.0625 at least): ...
    """
    if unit_mb is None:
        return None
    size = unit_mb * (1 << 20)
    if not size >= MIN_UNIT:  # (nan too)
        raise ConfigError(f"a unit of {unit_mb:g} MiB is below 64 KiB (--unit-mb "
                          f"{MIN_UNIT / (1 << 20):g} at least): units that small cost more "
                          "requests than they hold rows")
    if size > MAX_UNIT:
        return (f"a unit of {unit_mb:g} MiB (--unit-mb) is over 64 MiB: one worker trains "
                "each unit, so an input of fewer units than workers leaves some of them idle")
    return None


def _whole(units: list[Unit], pack: list[Part]) -> None:
    """Append the whole parts of ``pack`` as one unit (one part: a plain unit)."""
    if len(pack) == 1:
        units.append(Unit(len(units), pack[0].name, 0, pack[0].size, pack[0].gzip))
    elif pack:
        units.append(Unit(len(units), pack[0].name, 0, sum(p.size for p in pack),
                          all(p.gzip for p in pack), tuple((p.name, p.size, p.gzip)
                                                           for p in pack)))
    pack.clear()


def work_units(parts: list[Part], unit_bytes: int, epochs: int = 1) -> list[Unit]:
    """Line-aligned units of about ``unit_bytes``, ``epochs`` times over, numbered 0..
    in hand-out order (epoch by epoch, parts in order). A plain part bigger than
    ``unit_bytes`` is cut into byte ranges, a gzip part is read whole, and
    consecutive small parts (plain or gzip) are packed into one unit of at most
    ``unit_bytes`` (a folder of many small files: one hand-out per unit, not per
    file). Empty parts have no unit."""
    if unit_bytes < 1 or epochs < 1:
        raise ConfigError("unit_bytes and epochs must be >= 1")
    units: list[Unit] = []
    for _ in range(epochs):
        pack: list[Part] = []
        packed = 0  # bytes in pack (summed as it grows: 100,000 parts took 3.8 s)
        for p in parts:
            if not p.size:
                continue
            if p.gzip or p.size <= unit_bytes:
                if packed + p.size > unit_bytes:
                    _whole(units, pack)
                    packed = 0
                pack.append(p)
                packed += p.size
                continue
            _whole(units, pack)
            packed = 0
            pieces = -(-p.size // unit_bytes)
            bounds = [p.size * i // pieces for i in range(pieces + 1)]
            first = len(units)
            units.extend(Unit(first + i, p.name, bounds[i], bounds[i + 1], False)
                         for i in range(pieces))
        _whole(units, pack)
    return units


def estimate_rows(spec: str, sample_bytes: int = 1 << 20) -> int:
    """Rows of an input, estimated from the line length of the first MiB of text of
    its first file (and, for gzip, that file's compression ratio)."""
    import gzip

    parts = expand(spec)
    with open_binary(parts[0].name) as raw:
        f: Any = gzip.GzipFile(fileobj=raw) if parts[0].gzip else raw
        head = f.read(sample_bytes)
        ratio = len(head) / max(1, raw.tell()) if parts[0].gzip else 1.0
    size = sum(p.size * (ratio if p.gzip else 1.0) for p in parts)
    lines = head.count(b"\n")
    if not lines or size <= len(head):
        return max(lines, 1)
    return max(1, int(size / (len(head) / lines)))
