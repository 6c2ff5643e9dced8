"""Output files written whole or not at all, and checked before a long run.

:func:`replacing` writes to a temporary file beside the target and renames it
over the target only when the writing succeeded: a reader never sees half a
file, an interrupted or failed run leaves the old file as it was, and a command
whose output is its own input (``ftrl-ps predict m in.svm -o in.svm``) reads
the input whole before it is replaced. The new file gets the old one's
permissions, or the umask's (``tempfile.mkstemp`` alone would give 0600, and a
model meant for a service under another user could not be read).

:func:`check_writable` makes and removes a file where the output will go, so
that a wrong path fails at once, not after the training it would have saved.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from ftrl_ps.errors import OutputError

__all__ = ["check_writable", "new_file_mode", "replacing"]


def new_file_mode(target: Path) -> int:
    """The permissions the file at ``target`` has, or a new file would get (umask)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process's umask: from /proc (Linux), else set and set back (os has no
    getter; other threads could create a file with 0o022 in between)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def _temporary(target: Path) -> tuple[int, str]:
    try:
        if target.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(target))
        return tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None


@contextmanager
def replacing(path: str | os.PathLike[str], mode: str = "w", *,
              fsync: bool = False) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing (``mode`` "w" or "wb");
    on a clean exit it replaces ``path``, on an exception it is removed.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> with replacing(d / "out.txt") as f:
    ...     _ = f.write("new")
    >>> (d / "out.txt").read_text()
    'new'
    >>> try:
    ...     with replacing(d / "out.txt") as f:
    ...         _ = f.write("half")
    ...         raise KeyboardInterrupt
    ... except KeyboardInterrupt:
    ...     pass
    >>> (d / "out.txt").read_text(), sorted(p.name for p in d.iterdir())
    ('new', ['out.txt'])
    """
    target = Path(path)
    fd, tmp = _temporary(target)
    try:
        os.fchmod(fd, new_file_mode(target))
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:  # a full disk: say which file (the write itself does not)
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(target)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(path: str | os.PathLike[str], what: str, *, make_parents: bool = False) -> None:
    """Raise :class:`~ftrl_ps.errors.OutputError` unless a file can be written at ``path``
    (``-``, stdout, always can). ``make_parents`` creates missing folders, as the
    model file's writer does."""
    if str(path) == "-":
        return
    target = Path(path)
    if make_parents:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{what}: cannot make the folder {target.parent}: "
                              f"{exc.strerror or exc}") from None
    try:
        fd, tmp = _temporary(target)
    except OutputError as exc:
        raise OutputError(f"{what}: {exc}") from None
    os.close(fd)
    os.unlink(tmp)
