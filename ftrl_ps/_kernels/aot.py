"""The kernels compiled ahead of time, and the checked door to them.

``import numba`` and numba's first kernel load cost ~0.65 s of every process's
start-up (a third of a 1M-row ``ftrl-ps train``). The hot kernels are therefore
also compiled once per machine, with numba's own ahead-of-time compiler
(``numba.pycc``, :mod:`ftrl_ps._kernels.aot_build`), into one extension module
kept beside numba's cache; a process that finds it imports it in about a
millisecond and never imports numba.

The module's functions have fixed signatures (:data:`EXPORTS`) and, unlike a
numba dispatcher, do **not** check what they are given: an array of another
dtype is read as raw memory. So every call goes through a :class:`Kernel`,
which checks each argument's type, dtype, shape and layout against the
signatures (a few microseconds per call; kernels are called per batch) and
otherwise calls the numba-compiled kernel (imported then, cached on disk as
before). The same happens for every kernel when the module is absent, could
not be built (no C compiler), or ``FTRL_PS_AOT=0`` is set: the module is a
start-up saving, never a change of results (``tests/test_aot.py``).

This module imports no numba; :func:`kernels` gives the wrappers a
module-like namespace per kernel module.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import platform
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["AOT_ENV", "EXPORTS", "Kernel", "cache_dir", "enabled", "kernel_sources_digest",
           "kernels", "load", "module_name", "module_path", "reset"]

#: environment variable: ``0`` runs every kernel through numba's JIT (and its cache)
AOT_ENV = "FTRL_PS_AOT"
#: the folder of the kernel modules
KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Arg:
    """One argument of a compiled signature: a scalar (``ndim == 0``) or a
    C-contiguous array of ``code``'s dtype; ``out``: the kernel writes it (a
    read-only array goes to numba instead)."""

    code: str
    ndim: int = 0
    out: bool = False

    @property
    def numba(self) -> str:
        if self.ndim == 0:
            return self.code
        return f"{self.code}[{', '.join([':'] * (self.ndim - 1) + ['::1'])}]"

    def accepts(self, value: Any) -> bool:
        if self.ndim == 0:
            if self.code == "f8":
                return isinstance(value, (float, int, np.floating, np.integer))
            if self.code == "b1":
                return isinstance(value, (bool, np.bool_))
            # i8: an integer in int64's range (numba would type a float otherwise)
            return (isinstance(value, (int, np.integer))
                    and -(1 << 63) <= int(value) < (1 << 63))
        return (type(value) is np.ndarray and value.ndim == self.ndim
                and value.dtype == _DTYPES[self.code] and value.flags.c_contiguous
                and (value.flags.writeable or not self.out))


_DTYPES = {c: np.dtype(c) for c in ("u1", "i4", "i8", "u4", "u8", "f4", "f8")}  # numba's codes


def _a(code: str, ndim: int = 1, out: bool = False) -> Arg:
    return Arg(code, ndim, out)


I8, F8, B1 = Arg("i8"), Arg("f8"), Arg("b1")
_PARAMS = (F8, F8, F8, F8)  # alpha, beta, l1, l2


@dataclass(frozen=True)
class Export:
    """A kernel compiled ahead of time for the argument types ``args``."""

    module: str
    name: str
    result: str
    args: tuple[Arg, ...]

    @property
    def symbol(self) -> str:
        return f"{self.module}__{self.name}__{'_'.join(a.code + str(a.ndim) for a in self.args)}"

    @property
    def signature(self) -> str:
        return f"{self.result}({', '.join(a.numba for a in self.args)})"


def _ftrl() -> list[Export]:
    rows = (_a("i8"), _a("i4"), _a("f4"))  # indptr, indices, values
    out: list[Export] = []
    for s in ("f4", "f8"):
        out += [Export("ftrl", "train_rows", "f8",
                       (_a(s, out=True), _a("f4"), *rows, I8, *_PARAMS)),
                Export("ftrl", "predict_rows", "void",
                       (_a(s), *rows, I8, *_PARAMS, _a("f8", out=True))),
                Export("ftrl", "weights", "void", (_a(s), *_PARAMS, _a("f8", out=True))),
                Export("ftrl", "count_touched", "i8", (_a(s),)),
                Export("ftrl", "export_touched", "i8",
                       (_a(s), *_PARAMS, _a("u4", out=True), _a(s, out=True), _a(s, out=True)))]
    return out


def _tune() -> list[Export]:
    """``ftrl-ps tune``'s K-model kernels: without them tune loads numba (~0.4 s),
    four default runs' start-up on a small file."""
    rows = (_a("i8"), _a("i4"), _a("f4"))  # indptr, indices, values
    out: list[Export] = []
    for s in ("f4", "f8"):
        hp = (_a(s), _a(s), _a(s))  # alpha, beta, l1
        out += [Export("tune", "train_many", "void",
                       (_a(s, out=True), _a("f4"), *rows, _a("i8"), *hp, _a(s), _a(s),
                        _a("f8", out=True))),
                Export("tune", "weights_many", "void", (_a(s), *hp, _a(s), _a(s, 2, out=True))),
                Export("tune", "logloss_many", "void",
                       (_a(s, 2), _a("f4"), *rows, _a("i8"), _a("f8", out=True)))]
    return out


#: every compiled kernel signature (scalar helpers stay with numba's JIT)
EXPORTS: tuple[Export, ...] = (
    *_ftrl(),
    *_tune(),
    Export("ftrl", "logloss_sum", "f8", (_a("f8"), _a("f8"))),
    Export("parse", "parse_chunk", "Tuple((f4[:], i8[:], i4[:], f4[:], i8, i8, i8[:, :]))",
           (_a("u1"), I8, I8, B1, I8, B1, I8, I8)),
    Export("parse", "slots_of_names", "i8[:]", (_a("u1"), _a("i8"), I8)),
    Export("mix", "mix64_array", "u8[:]", (_a("u8"),)),
    Export("synth", "format_block_kernel", "i8",
           (_a("u1"), _a("i8", 2), _a("i8", 2), _a("u1", out=True))),
    Export("worker", "first_seen", "i8",
           (_a("i4"), I8, _a("i8", out=True), I8, I8, _a("i4", out=True), _a("i8", out=True),
            I8)),
    Export("worker", "renumber", "void",
           (_a("i4", out=True), _a("i8"), _a("u4", out=True), _a("i8", out=True))),
    Export("contraction", "add_row_contraction", "void",
           (_a("f8", 2), _a("i8"), _a("f8"), _a("i8"), *_PARAMS, _a("f8", out=True))),
)

#: trailing arguments a kernel may be called without (as its Python default)
DEFAULTS: dict[tuple[str, str], tuple[Any, ...]] = {("parse", "parse_chunk"): (False, 0, 0)}


def enabled() -> bool:
    return os.environ.get(AOT_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def kernel_sources_digest(folder: str = KERNEL_DIR) -> bytes:
    """SHA-256 over the names and contents of every ``.py`` file in ``folder``."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), "rb") as f:
                digest.update(name.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return digest.digest()


def _cpu() -> str:
    """What the machine code depends on: the CPU's model and feature flags
    (compiled for this host's CPU, like numba's cache)."""
    try:
        with open("/proc/cpuinfo") as f:
            head = f.read(1 << 16).split("\n\n", 1)[0]
        return "\n".join(line for line in head.splitlines()
                         if line.startswith(("model name", "flags", "vendor_id", "cpu family")))
    except OSError:
        return f"{platform.machine()} {platform.processor()}"


def _numba_version() -> str:
    """numba's version from its ``.dist-info`` folder's name (~1 ms; importlib.metadata
    takes ~50 ms of every process's start-up), else from importlib.metadata."""
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        return "?"
    site = os.path.dirname(next(iter(spec.submodule_search_locations)))
    try:
        found = [n for n in os.listdir(site)
                 if n.startswith("numba-") and n.endswith((".dist-info", ".egg-info"))]
    except OSError:
        found = []
    if len(found) == 1:
        return found[0][len("numba-"):].rsplit(".", 1)[0]
    try:
        from importlib.metadata import version

        return version("numba")
    except Exception:  # noqa: BLE001 -- no metadata: part of the key only
        return "?"


def module_name() -> str:
    """The extension module's name: it changes with any kernel source, numba,
    numpy, Python or the CPU, so a stale module is never loaded."""
    key = hashlib.sha256()
    for part in (kernel_sources_digest(), _numba_version().encode(), np.__version__.encode(),
                 sys.version.encode(), _cpu().encode()):
        key.update(part + b"\0")
    return f"ftrl_ps_aot_{key.hexdigest()[:20]}"


def cache_dir() -> str:
    """``$NUMBA_CACHE_DIR/ftrl_ps`` when set, else ``__pycache__`` beside the kernels
    (where numba keeps its own cache), else, when the package's folder is
    read-only (an installed package), ``ftrl-ps`` in the user's cache folder."""
    root = os.environ.get("NUMBA_CACHE_DIR")
    if root:
        return os.path.join(root, "ftrl_ps")
    beside = os.path.join(KERNEL_DIR, "__pycache__")
    if os.access(beside if os.path.isdir(beside) else KERNEL_DIR, os.W_OK):
        return beside
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(home, "ftrl-ps")


def module_path() -> str:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return os.path.join(cache_dir(), module_name() + suffix)


_state: dict[str, Any] = {}


def load() -> ModuleType | None:
    """The compiled module if it is enabled and built for this machine, else None
    (looked up once per process; :func:`reset` looks again)."""
    if "module" not in _state:
        module = None
        path = module_path() if enabled() else ""
        if path and os.path.exists(path):
            spec = importlib.util.spec_from_file_location(os.path.basename(path).split(".")[0],
                                                          path)
            try:
                if spec is not None and spec.loader is not None:
                    module = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(module)
            except (ImportError, OSError):  # e.g. a truncated file: built again, numba meanwhile
                module = None
        _state["module"] = module
    return _state["module"]


def reset() -> None:
    """Forget the module (and every kernel's resolution): after a build."""
    _state.clear()
    for namespace in _NAMESPACES.values():
        for value in vars(namespace).values():
            if isinstance(value, Kernel):
                value._compiled = None


class Kernel:
    """A kernel called through the compiled module when an export's signature
    accepts the arguments, else through numba's JIT dispatcher."""

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name
        self.exports = tuple(e for e in EXPORTS if (e.module, e.name) == (module, name))
        self.defaults = DEFAULTS.get((module, name), ())
        self._compiled: tuple[tuple[Export, Any], ...] | None = None

    def jit(self) -> Any:
        """numba's dispatcher of this kernel (imports numba)."""
        return getattr(importlib.import_module(f"ftrl_ps._kernels.{self.module}"), self.name)

    def compiled_for(self, args: tuple[Any, ...]) -> Any:
        """The compiled function that takes ``args`` (defaults filled in), or None."""
        compiled = self._compiled
        if compiled is None:
            module = load()
            compiled = self._compiled = tuple(
                (e, getattr(module, e.symbol)) for e in self.exports
                if module is not None and hasattr(module, e.symbol))
        for export, fn in compiled:
            if len(args) == len(export.args) and all(
                    a.accepts(v) for a, v in zip(export.args, args, strict=True)):
                return fn
        return None

    def __call__(self, *args: Any) -> Any:
        full = args
        if self.defaults and self.exports and len(args) < len(self.exports[0].args):
            missing = len(self.exports[0].args) - len(args)
            if missing <= len(self.defaults):
                full = args + self.defaults[len(self.defaults) - missing:]
        fn = self.compiled_for(full)
        if fn is not None:
            return fn(*full)
        return self.jit()(*args)

    def __repr__(self) -> str:
        return f"Kernel({self.module}.{self.name}, {len(self.exports)} compiled signatures)"


class KernelModule:
    """Module-like access to ``ftrl_ps._kernels.<name>``: exported kernels as
    :class:`Kernel`, anything else (helpers, constants) from the numba module."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if any((e.module, e.name) == (self._name, attr) for e in EXPORTS):
            value: Any = Kernel(self._name, attr)
        else:
            value = getattr(importlib.import_module(f"ftrl_ps._kernels.{self._name}"), attr)
        setattr(self, attr, value)
        return value


_NAMESPACES: dict[str, KernelModule] = {}


def kernels(name: str) -> Any:
    """The kernels of ``ftrl_ps._kernels.<name>`` (e.g. ``kernels("ftrl").train_rows``)."""
    if name not in _NAMESPACES:
        _NAMESPACES[name] = KernelModule(name)
    return _NAMESPACES[name]
