"""JIT flags for every kernel, in one place.

``cache=True`` stores compiled code next to the sources (or in
``NUMBA_CACHE_DIR``), so only the first process of a machine pays the compile.
``nogil=True`` lets kernels run in parallel threads (reader prefetch, the
lock-striped parameter store).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import ftrl_ps._kernels as _kernels
from ftrl_ps._kernels.aot import KERNEL_DIR, kernel_sources_digest


class _Absent:
    """Import hook that makes some installed modules look absent (see below)."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if any(name == n or name.startswith(n + ".") for n in self.names):
            raise ImportError(f"{name} skipped while loading numba")


def _import_without(module: str, *absent: str) -> None:
    """Import ``module`` while the modules ``absent`` (and their submodules) look
    not installed (:class:`_Absent` first on ``sys.meta_path`` meanwhile)."""
    hook = _Absent(*absent)
    sys.meta_path.insert(0, hook)
    try:
        importlib.import_module(module)
    finally:
        sys.meta_path.remove(hook)


def _light_numba_import() -> None:
    """Import numba without the optional modules it only probes at import time.

    ``import numba`` imports ``scipy`` (a version check) and ``yaml`` (to read
    an optional ``.numba_config.yaml`` in the working folder): together 30-60 ms
    of every command's start-up, for nothing the kernels use. The command line
    (``SKIP_BLAS_PROBE``, set before any kernel module is imported) loads numba
    without them; numba's ``NUMBA_*`` environment variables still apply.
    Library users, and processes that have already imported either, are not
    affected.
    """
    if "numba" in sys.modules:
        return
    _import_without("numba", *(m for m in ("scipy", "yaml") if m not in sys.modules))


if _kernels.SKIP_BLAS_PROBE:
    _light_numba_import()

import numba  # noqa: E402

__all__ = ["JIT_FLAGS", "KERNEL_MODULES", "kernel_sources_digest", "njit", "skip_blas_probe",
           "uncached_kernels"]

def _stamp_caches_with_every_kernel_file() -> None:
    """Make the on-disk cache of each kernel depend on every kernel source file.

    numba stamps a kernel's cached machine code with its *own* source file only
    (numba issue #1833, open since 2016): the parser compiles in
    ``plain.plain_lines``, ``rowsort.sort_merge`` and ``mix.mix64``, so after a
    change to one of those files alone a process would load the old parser from
    the cache and run the old code, silently. Here a kernel of this folder gets
    the stamp ``(its own stamp, digest of every kernel file)`` (computed once per
    process): any change to a kernel file recompiles every kernel, once. Other
    numba code is not affected; if numba's cache internals moved, nothing is
    patched and numba's own rule applies.
    """
    try:
        from numba.core.caching import _SourceFileBackedLocatorMixin as locator
    except ImportError:
        return
    own_stamp = getattr(locator, "get_source_stamp", None)
    if own_stamp is None or getattr(own_stamp, "covers_kernel_dir", False):
        return
    digest: list[bytes] = []

    def stamp(self: Any) -> Any:
        path = getattr(self, "_py_file", None)
        if not isinstance(path, str) or os.path.dirname(os.path.abspath(path)) != KERNEL_DIR:
            return own_stamp(self)
        if not digest:
            digest.append(kernel_sources_digest())
        return (own_stamp(self), digest[0])

    stamp.covers_kernel_dir = True  # type: ignore[attr-defined]
    locator.get_source_stamp = stamp  # type: ignore[method-assign]  # numba's own hook


_stamp_caches_with_every_kernel_file()

JIT_FLAGS: dict[str, bool] = {"nogil": True, "cache": True, "fastmath": False}


def njit(*args: Any, **kwargs: Any) -> Any:
    """``numba.njit`` with the project's flags."""
    flags = dict(JIT_FLAGS)
    flags.update(kwargs)
    # numba's stubs know its keyword arguments one by one, not as a dict of them
    if args and callable(args[0]):
        return numba.njit(**flags)(args[0])  # type: ignore[call-overload]
    return numba.njit(*args, **flags)  # type: ignore[call-overload]


#: every module of numba kernels (under ``ftrl_ps._kernels``)
KERNEL_MODULES = (
    "contraction", "ftrl", "mix", "parse", "plain", "rowsort", "synth", "tune", "worker",
)


def uncached_kernels() -> list[str] | None:
    """Kernels that have no fresh compiled code in numba's on-disk cache.

    The cache lives in ``__pycache__`` next to the kernel sources, or under
    ``$NUMBA_CACHE_DIR`` when set (or when the package folder is read-only).
    A kernel counts as cached when its index file exists, was written by this
    numba version and matches the source file's stamp: numba then loads it
    instead of compiling. Kernels inlined into others (``inline="always"``)
    are not cached on their own and are not listed. Returns None when this
    numba's cache cannot be inspected (its internals changed).
    """
    from numba.core.registry import CPUDispatcher

    missing = []
    try:
        for mod_name in KERNEL_MODULES:
            mod = importlib.import_module(f"ftrl_ps._kernels.{mod_name}")
            for name, obj in sorted(vars(mod).items()):
                if not isinstance(obj, CPUDispatcher) or obj.__module__ != mod.__name__:
                    continue
                if obj.targetoptions.get("inline") == "always":
                    continue
                if not obj._cache._cache_file._load_index():  # type: ignore[attr-defined]
                    missing.append(f"{mod_name}.{name}")
    except (AttributeError, TypeError, ValueError, OSError, EOFError):
        return None
    return missing


def skip_blas_probe() -> None:
    """Load numba's array-math registry without importing scipy.

    The first time a process compiles or loads any kernel, numba imports
    ``numba.np.arraymath``, which imports ``scipy.linalg`` (0.35-0.45 s here)
    only to offer ``np.linalg`` in nopython mode. No ftrl-ps kernel uses BLAS,
    so the command line calls this once at start-up: numba then runs without
    its optional BLAS support in that process. Library users, who may want
    numba's linear algebra in their own code, are not affected.
    """
    if "scipy.linalg" in sys.modules or "numba.np.arraymath" in sys.modules:
        return
    # scipy itself too when not loaded yet: importing scipy.linalg imports it first
    _import_without("numba.np.arraymath", "scipy.linalg" if "scipy" in sys.modules else "scipy")


if _kernels.SKIP_BLAS_PROBE:
    skip_blas_probe()
