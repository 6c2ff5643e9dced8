"""Compile :data:`ftrl_ps._kernels.aot.EXPORTS` into one extension module.

Uses numba's ahead-of-time compiler (``numba.pycc``) on the same Python
functions the JIT compiles, with the JIT's flags: machine code for this host's
CPU (as numba's cache), and the GIL released while a kernel runs (``nogil``:
the parser threads and the store's lock stripes run kernels in parallel).
pycc has no option for the latter, so its compile flags are extended for the
duration of the build. Linking needs a C compiler; without one the build fails
once, says why, and every kernel runs through numba's JIT as before.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

from ftrl_ps._kernels import aot

__all__ = ["build", "failed_reason", "marker_path"]


def marker_path() -> str:
    """Where a failed build leaves its reason (so later processes do not retry)."""
    return aot.module_path() + ".failed"


def failed_reason() -> str | None:
    """Why the last build of this machine's module failed, or None."""
    try:
        with open(marker_path()) as f:
            return f.read().strip() or "unknown"
    except OSError:
        return None


def _pycc() -> Any:
    """``numba.pycc``, without its pending-deprecation warning (numba 0.57+):
    should a numba come without it, the build fails once and numba's JIT runs
    every kernel."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import numba.pycc

    return numba.pycc


@contextlib.contextmanager
def _release_gil() -> Iterator[None]:
    import numba.pycc.compiler as pycc_compiler

    base = pycc_compiler.Flags

    class NoGilFlags(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.release_gil = True  # what njit(nogil=True) sets

    pycc_compiler.Flags = NoGilFlags  # type: ignore[misc]  # numba.pycc reads it here
    try:
        yield
    finally:
        pycc_compiler.Flags = base  # type: ignore[misc]


#: the JIT options the build reproduces (nogil: the GIL released; the rest as pycc's
#: defaults); a kernel with any other option is not compiled ahead of time
_SAME_FLAGS = {"nogil": True, "fastmath": False, "nopython": True, "boundscheck": None}


def _check_flags(export: aot.Export, options: dict[str, Any]) -> None:
    if options != _SAME_FLAGS:
        raise ValueError(f"{export.module}.{export.name} is jitted with {options}; the "
                         f"ahead-of-time build reproduces {_SAME_FLAGS} only")


def build() -> str:
    """Compile the module to :func:`aot.module_path` (atomically); its path.

    Raises whatever pycc raises (no C compiler, a kernel it cannot compile);
    a failure leaves :func:`marker_path` with the reason.
    """
    target = aot.module_path()
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".aot-build-", dir=folder)
    try:
        cc = _pycc().CC(aot.module_name(), source_module=__name__)
        cc.output_dir = work
        cc.target_cpu = "host"
        for export in aot.EXPORTS:
            dispatcher = getattr(importlib.import_module(f"ftrl_ps._kernels.{export.module}"),
                                 export.name)
            _check_flags(export, dispatcher.targetoptions)
            cc.export(export.symbol, export.signature)(dispatcher.py_func)
        sink = io.StringIO()  # the C compiler's command lines
        with _release_gil(), contextlib.redirect_stdout(sink):
            cc.compile()
        os.replace(os.path.join(work, cc.output_file), target)
    except Exception as exc:
        with contextlib.suppress(OSError), open(marker_path(), "w") as f:
            f.write(f"{type(exc).__name__}: {exc}".strip()[:2000] + "\n")
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.remove(marker_path())
    aot.reset()
    return target
