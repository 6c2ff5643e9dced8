"""Compile :data:`ftrl_ps._kernels.aot.EXPORTS` into one extension module.

Uses numba's ahead-of-time compiler (``numba.pycc``) on the same Python
functions the JIT compiles, with the JIT's flags: machine code for this host's
CPU (as numba's cache), the GIL released while a kernel runs (``nogil``:
the parser threads and the store's lock stripes run kernels in parallel), and
each kernel's ``error_model`` (``"numpy"`` for tune's K-model kernels, whose
loops vectorise only without division checks). pycc has no option for either,
so its compile flags are extended for the duration of the build. Linking needs
a C compiler; without one the build fails once, says why, and every kernel runs
through numba's JIT as before.
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
def _jit_flags(error_models: dict[Any, str]) -> Iterator[None]:
    """pycc compiles with the GIL released, and each function of ``error_models``
    (Python function -> numba error model) with its error model."""
    import numba.pycc.compiler as pycc_compiler

    base, compile_extra = pycc_compiler.Flags, pycc_compiler.compile_extra

    class NoGilFlags(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.release_gil = True  # what njit(nogil=True) sets

    def compile_with_model(typing: Any, target: Any, func: Any, args: Any, ret: Any,
                           flags: Any, *rest: Any, **kwargs: Any) -> Any:
        model = error_models.get(func)
        if model is not None and model != flags.error_model:
            flags = flags.copy()
            flags.error_model = model
        return compile_extra(typing, target, func, args, ret, flags, *rest, **kwargs)

    pycc_compiler.Flags = NoGilFlags  # type: ignore[misc]  # numba.pycc reads both here
    pycc_compiler.compile_extra = compile_with_model  # type: ignore[assignment]
    try:
        yield
    finally:
        pycc_compiler.Flags = base  # type: ignore[misc]
        pycc_compiler.compile_extra = compile_extra


#: the JIT options the build reproduces (nogil: the GIL released; the rest as pycc's
#: defaults), besides ``error_model``; a kernel with any other option is not
#: compiled ahead of time
_SAME_FLAGS = {"nogil": True, "fastmath": False, "nopython": True, "boundscheck": None}
_ERROR_MODELS = ("python", "numpy")


def _check_flags(export: aot.Export, options: dict[str, Any]) -> str:
    """The kernel's error model, if its other options are those the build reproduces."""
    rest = {k: v for k, v in options.items() if k != "error_model"}
    model = options.get("error_model", "python")
    if rest != _SAME_FLAGS or model not in _ERROR_MODELS:
        raise ValueError(f"{export.module}.{export.name} is jitted with {options}; the "
                         f"ahead-of-time build reproduces {_SAME_FLAGS} (and an "
                         f"error_model of {_ERROR_MODELS}) only")
    return str(model)


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
        models: dict[Any, str] = {}
        for export in aot.EXPORTS:
            dispatcher = getattr(importlib.import_module(f"ftrl_ps._kernels.{export.module}"),
                                 export.name)
            models[dispatcher.py_func] = _check_flags(export, dispatcher.targetoptions)
            cc.export(export.symbol, export.signature)(dispatcher.py_func)
        sink = io.StringIO()  # the C compiler's command lines
        with _jit_flags(models), contextlib.redirect_stdout(sink):
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
