"""Fault in a large array's memory ahead of its first use, in a background thread;
keep freed request buffers for the next request (:func:`keep_freed_buffers`).

A fresh model's state (``np.zeros``) is not memory yet: the kernel maps and
zeroes each page (2 MiB with transparent huge pages) the first time it is
written, so a new 2**26-key model pays ~0.5 GiB of zeroing inside the first
rows it trains (measured: the first tenth of a 20M-row run at 17 % fewer
rows per CPU second than the last). :func:`populate_async` asks Linux to do
that work now, in a daemon thread, with ``madvise(MADV_POPULATE_WRITE)``
(Linux 5.14+): it maps the pages writable without changing a byte, so it is
safe while another thread already writes the array. Elsewhere (another OS,
an older kernel) it does nothing.

>>> import numpy as np
>>> a = np.zeros(1 << 20)
>>> t = populate_async(a)
>>> _ = t is None or t.join()
>>> float(a.sum())
0.0
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # no numpy at import: the command line calls keep_freed_chunks first
    import numpy as np

__all__ = ["CHUNK_BYTES", "CHUNK_MMAP_THRESHOLD", "CHUNK_TRIM_THRESHOLD", "MADV_POPULATE_WRITE",
           "MIN_BYTES", "keep_freed_buffers", "keep_freed_chunks", "populate", "populate_async"]

#: ``madvise`` advice of Linux 5.14+ (``include/uapi/asm-generic/mman-common.h``)
MADV_POPULATE_WRITE = 23
#: smaller arrays are not worth a thread
MIN_BYTES = 8 << 20
#: :func:`populate` faults in this many bytes per ``madvise`` call (two huge pages)
CHUNK_BYTES = 4 << 20


def _libc(name: str, *argtypes: Any) -> Any:
    """The C library's function ``name`` returning an int (None off Linux, or
    where the C library has no such function)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = list(argtypes)
    fn.restype = ctypes.c_int
    return fn


def populate(array: np.ndarray, chunk: int = CHUNK_BYTES) -> bool:
    """Fault in the whole pages of a C-contiguous ``array`` now (the calling thread
    waits; the GIL is released), ``chunk`` bytes per call. True if the kernel did
    it, False otherwise.

    One call holds the process's memory map lock (for reading) while it works,
    and whatever needs it for writing waits: a new thread's stack, a ``mmap``'d
    buffer, a shared library being imported. In one call, a 2**26-key shard's
    two 256 MiB arrays held its start-up ~0.7 s when the kernel had to make
    huge pages first (after a big file was read); calls of :data:`CHUNK_BYTES`
    let such waiters in between."""
    fn = _libc("madvise", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    if fn is None or not array.flags.c_contiguous or array.nbytes == 0:
        return False
    page = mmap.PAGESIZE
    begin = array.ctypes.data
    start = -(-begin // page) * page
    end = (begin + array.nbytes) // page * page
    if end <= start:
        return False
    step = max(page, chunk // page * page)
    return all(fn(at, min(step, end - at), MADV_POPULATE_WRITE) == 0
               for at in range(start, end, step))


def populate_async(array: np.ndarray, min_bytes: int = MIN_BYTES) -> threading.Thread | None:
    """Start :func:`populate` of ``array`` in a daemon thread (None when ``array``
    is smaller than ``min_bytes``). The thread keeps ``array`` alive until done."""
    if array.nbytes < min_bytes or not array.flags.c_contiguous:
        return None
    thread = threading.Thread(target=populate, args=(array,), name="ftrl-ps-populate",
                              daemon=True)
    thread.start()
    return thread


#: glibc's ``mallopt`` parameters (``malloc.h``)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def keep_freed_buffers(mmap_threshold: int = 4 << 20, trim_threshold: int = 8 << 20) -> bool:
    """Let glibc's malloc reuse freed buffers of up to ``mmap_threshold`` bytes
    instead of mapping fresh pages for each (and return freed memory to the
    system only beyond ``trim_threshold`` bytes at the top of its heap).

    A shard's requests and answers are buffers of a few hundred KB (a 34,000-key
    push is 408 KB, copied a few times on its way in). By default glibc serves
    such sizes with ``mmap`` and unmaps them when freed, or trims its heap top
    after them, so every request faults in its buffers' pages anew: measured
    on a shard, 0.6-1.1 ms of system CPU per 34,000-key push went to 0.4 ms.
    Larger buffers (a push of more than ~330,000 keys) and arrays (a model's
    state) are still mapped on their own, so what is kept stays small: -1 to
    +3 MiB of a shard's RSS after rounds of 34,000 to 300,000 keys, measured
    (16 and 64 MiB kept +14 MiB after the 300,000-key rounds). True if glibc
    took both settings; False elsewhere (another libc, another OS), where
    nothing changes. :func:`keep_freed_chunks` is the same for a reader's chunks.
    """
    mallopt = _libc("mallopt", ctypes.c_int, ctypes.c_int)  # glibc's
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)
                and mallopt(M_TRIM_THRESHOLD, trim_threshold))


#: :func:`keep_freed_chunks`: buffers below this size come from the heap (glibc's
#: largest: 32 MiB on 64-bit)
CHUNK_MMAP_THRESHOLD = 32 << 20
#: ... and the heap gives memory back beyond this many free bytes at its top
CHUNK_TRIM_THRESHOLD = 256 << 20


def keep_freed_chunks() -> bool:
    """:func:`keep_freed_buffers` for a process that reads libsvm input: the
    command line's (``ftrl-ps``, the services) before it works.

    The reader sizes a chunk's arrays from the chunk before (~1.25x what its
    rows need); the first chunk's, and a request body's, are made for the
    densest text it could hold (at ``--chunk-mb 4``: 8-16 MiB each, 40 MiB in
    all, of which ~3.5 MiB are written). glibc maps arrays that large on their
    own and, once the first few were freed, serves them from a heap whose top
    it trims beyond twice the largest (32 MiB): a chunk's 40 MiB freed together
    are given back, and the next chunk faults its pages in anew. Measured when
    every chunk's arrays were that large (before session 29), on 20M rows in one
    process (4 runs each, alternated): 84,000-153,000 page faults -> 42,000-86,000;
    parsing 5M rows alone, 0.36-0.38 -> 0.21-0.28 s of system time (one
    baseline run 0.14 s: glibc's own thresholds sometimes fit). Wall time was
    within the host's noise. Only the pages once written stay resident when
    freed (+10 MiB of peak RSS measured); the model's state is larger than
    :data:`CHUNK_MMAP_THRESHOLD` and still mapped on its own. True if glibc
    took the settings.
    """
    return keep_freed_buffers(CHUNK_MMAP_THRESHOLD, CHUNK_TRIM_THRESHOLD)
