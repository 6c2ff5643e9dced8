"""The kernels compiled ahead of time (ftrl_ps._kernels.aot): numba's results for
every compiled signature, arguments outside them sent to numba, the GIL released,
no numba in a training process, and a failed build said once and not retried."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ftrl_ps._kernels import aot, aot_build
from ftrl_ps.ps import kernels as kernel_loading


@pytest.fixture
def module() -> Any:
    """This machine's compiled module (built by conftest's session start)."""
    if not aot.enabled():
        pytest.skip(f"{aot.AOT_ENV}=0: the kernels are asked to run through numba")
    aot.reset()
    mod = aot.load()
    assert mod is not None, f"no ahead-of-time module: {aot_build.failed_reason()}"
    yield mod
    aot.reset()


class _Capture:
    """A worker's client that serves a fixed state and keeps what is pushed."""

    def __init__(self, keys: int) -> None:
        rng = np.random.default_rng(5)
        self.n = rng.uniform(0, 3, keys).astype(np.float32)
        self.z = rng.normal(0, 2, keys).astype(np.float32)
        self.pushes: list[np.ndarray] = []

    def pull(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.n[keys], self.z[keys]

    def pull_versioned(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (*self.pull(keys), np.zeros(keys.size, np.uint32))

    def push(self, keys: np.ndarray, delta_n: np.ndarray, delta_z: np.ndarray,
             merge: Any = None, **progress: Any) -> None:
        self.pushes += [np.asarray(keys).copy(), np.asarray(delta_n).copy(),
                        np.asarray(delta_z).copy()]
        if merge is not None:
            self.pushes += [np.asarray(v).copy() for v in vars(merge).values()
                            if isinstance(v, np.ndarray)]

    def clock(self, stats: dict[str, Any] | None = None) -> None:
        return None


def _rows(count: int, seed: int, bad: bool = True) -> bytes:
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        feats = {int(k) for k in rng.integers(0, 900, 12)}
        parts = [f"{k}:{rng.uniform(0.1, 3):.3f}" for k in sorted(feats, reverse=i % 3 == 0)]
        parts += [f"user={i % 17}", f"site_{i % 5}:2", "4000000000:1"]  # hashed names
        lines.append(f"{int(rng.random() < 0.3)} {' '.join(parts)}")
    if bad:
        lines.insert(7, "2 1:1")  # a bad label
        lines.insert(20, "1 5:abc")  # a bad value
    return ("\n".join(lines) + "\n").encode()


def _scenario() -> list[np.ndarray]:
    """Every compiled kernel with every compiled signature, through the wrappers."""
    from ftrl_ps.core.ftrl import FTRL, logloss_sum
    from ftrl_ps.core.multi import MultiFTRL, compact_keys
    from ftrl_ps.core.params import FTRLParams
    from ftrl_ps.data.batch import Batch
    from ftrl_ps.data.bodies import parse_text
    from ftrl_ps.data.hashing import slots_of
    from ftrl_ps.data.libsvm import LibsvmReader
    from ftrl_ps.data.synth import SynthConfig, format_rows, make_design
    from ftrl_ps.ps.worker import Worker, WorkerConfig

    out: list[np.ndarray] = []
    data = _rows(400, 1)
    batches = list(LibsvmReader(io.BytesIO(data), 10, chunk_bytes=4096, skip_bad_lines=True))
    for b in batches:
        out += [b.labels, b.indptr, b.indices, b.values]
    scored = parse_text(b"3:1 user=4\n1 7:0.5\n", 10, labels=False)
    out += [scored.indptr, scored.indices, scored.values]
    for dtype in ("float32", "float64"):
        model = FTRL(10, dtype=dtype)
        for b in batches:
            model._fit(b.labels, b.indptr, b.indices, b.values)
        probs = model._predict(batches[0].indptr, batches[0].indices, batches[0].values)
        keys, n, z, nonzero = model.touched_state()
        out += [model.state.copy(), probs, model.weights(),
                np.array([logloss_sum(batches[0].labels.astype(np.float64), probs)]),
                keys, n, z, np.array([nonzero])]
        whole = Batch.concat(batches)  # tune's K-model kernels on compact keys
        slots, compact = compact_keys(whole.indices, 1 << 10)
        grid = [FTRLParams(), FTRLParams(alpha=0.5, l1=0.1), FTRLParams(alpha=2.0, l2=3.0)]
        multi = MultiFTRL(slots.size + 1, grid, dtype=dtype)
        order = np.arange(whole.rows)[::-1].copy()
        out += [multi.fit(whole.labels, whole.indptr, compact, whole.values, order),
                multi.logloss(whole.labels, whole.indptr, compact, whole.values),
                multi.state.copy()]
    out.append(slots_of(["user=1", "site", "x" * 40], 16))
    design = make_design(SynthConfig(rows=10, test_rows=1, bits=12, fields=4))
    out += [np.asarray(v) for v in vars(design).values() if isinstance(v, np.ndarray)]
    out.append(np.frombuffer(format_rows(np.array([1, 0], np.uint8), np.array([[1500], [0]]),
                                         np.array([[3, 9], [1, 2]])), np.uint8))
    client = _Capture((1 << 10) + 1)  # and the bias
    worker = Worker(client, 10, FTRLParams(), WorkerConfig(batch_size=32, fetch_step=2,
                                                           push_step=2, merge_rule="contraction"))
    worker.train_batches(iter(LibsvmReader(io.BytesIO(_rows(200, 2)), 10, skip_bad_lines=True)))
    worker.push()
    out += client.pushes
    assert len(client.pushes) >= 3
    return out


def test_compiled_kernels_give_numba_s_results_for_every_signature(
        module: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    symbol_of = {id(getattr(module, e.symbol)): e.symbol for e in aot.EXPORTS}
    used: set[str] = set()
    original = aot.Kernel.compiled_for

    def recording(self: aot.Kernel, args: tuple[Any, ...]) -> Any:
        fn = original(self, args)
        if fn is not None:
            used.add(symbol_of[id(fn)])
        return fn

    def refuse(self: aot.Kernel) -> Any:
        raise AssertionError(f"{self.module}.{self.name} fell back to numba")

    with monkeypatch.context() as m:
        m.setattr(aot.Kernel, "compiled_for", recording)
        m.setattr(aot.Kernel, "jit", refuse)
        compiled = _scenario()
    assert used == {e.symbol for e in aot.EXPORTS}  # every compiled signature ran

    monkeypatch.setenv(aot.AOT_ENV, "0")
    aot.reset()
    jitted = _scenario()
    assert len(compiled) == len(jitted)
    for i, (a, b) in enumerate(zip(compiled, jitted, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape, i
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), i


def _train_args(state_dtype: str = "float32") -> list[Any]:
    state = np.zeros(2 * 17, state_dtype)
    return [state, np.array([1, 0], np.float32), np.array([0, 2, 3]),
            np.array([1, 5, 2], np.int32), np.ones(3, np.float32), 16, 0.1, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("change", [
    "state float16", "state strided", "state read-only", "state 2-D", "labels float64",
    "indices int64", "indptr list", "bias_key float", "bias_key too big", "alpha string",
    "one argument short",
])
def test_arguments_outside_the_signatures_go_to_numba(module: Any, change: str) -> None:
    kernel = aot.kernels("ftrl").train_rows
    assert kernel.compiled_for(tuple(_train_args())) is not None
    args = _train_args()
    what, how = change.split(" ", 1)
    if what == "state":
        if how == "float16":
            args[0] = args[0].astype(np.float16)
        elif how == "strided":
            args[0] = np.zeros(4 * 17, np.float32)[::2]
        elif how == "read-only":
            args[0].flags.writeable = False
        else:
            args[0] = args[0].reshape(2, 17)
    elif what == "labels":
        args[1] = args[1].astype(np.float64)
    elif what == "indices":
        args[3] = args[3].astype(np.int64)
    elif what == "indptr":
        args[2] = [0, 2, 3]
    elif change == "bias_key float":
        args[5] = 16.0
    elif change == "bias_key too big":
        args[5] = 1 << 63
    elif what == "alpha":
        args[6] = "0.1"
    else:
        args = args[:-1]
    assert kernel.compiled_for(tuple(args)) is None


def test_numba_s_answer_for_arguments_the_module_does_not_take(module: Any) -> None:
    kernel = aot.kernels("ftrl").train_rows
    strided = np.zeros(4 * 17, np.float32)
    args = _train_args()
    args[0] = strided[::2]
    loss = kernel(*args)  # numba, through the dispatcher
    reference = _train_args()
    assert loss == kernel(*reference)  # the compiled kernel, same rows
    assert np.array_equal(strided[::2], reference[0]) and not strided[1::2].any()
    readonly = _train_args()
    readonly[1].flags.writeable = False  # read-only inputs are fine
    assert kernel.compiled_for(tuple(readonly)) is not None


def test_compiled_kernels_release_the_gil(module: Any) -> None:
    buf = np.frombuffer(b"1 3:1 17:0.5 99:2 1234:1\n" * 3_000_000, np.uint8).copy()
    args = (buf, buf.size, 20, False, 1, False, 0, 0)
    fn = aot.kernels("parse").parse_chunk.compiled_for(args)
    assert fn is not None
    done = threading.Event()

    def parse() -> None:
        fn(*args)
        done.set()

    thread = threading.Thread(target=parse)
    start = time.perf_counter()
    last, gap = start, 0.0
    thread.start()
    while not done.is_set():  # this thread keeps running only if the kernel lets go of the GIL
        now = time.perf_counter()
        gap, last = max(gap, now - last), now
    took = time.perf_counter() - start
    thread.join()
    assert took > 0.05, took
    assert gap < took / 2, (gap, took)


NO_NUMBA = """
import sys
from ftrl_ps.cli import main

train, test, model = sys.argv[1:]
assert main(["train", train, "--bits", "16", "--model", model, "-q"]) == 0
assert main(["eval", model, test]) == 0
assert main(["predict", model, test, "-o", model + ".p"]) == 0
print(sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite")))
"""


def test_a_training_run_imports_no_numba(module: Any, tmp_path: Path) -> None:
    data = tmp_path / "rows.svm"
    data.write_bytes(_rows(300, 3, bad=False))
    res = subprocess.run([sys.executable, "-c", NO_NUMBA, str(data), str(data),
                          str(tmp_path / "m.ftrl")], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != aot.AOT_ENV})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]"


def test_a_failed_build_says_why_once_and_is_not_retried(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pycc = aot_build._pycc()

    class NoCompiler:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("no C compiler here")

    monkeypatch.setenv(aot.AOT_ENV, "1")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # read by aot only: numba has its own
    monkeypatch.setattr(pycc, "CC", NoCompiler)
    aot.reset()
    caplog.set_level(logging.INFO, logger="ftrl_ps.kernels")
    try:
        assert aot.module_path().startswith(str(tmp_path))
        assert kernel_loading._build_ahead_of_time() is False
        assert aot_build.failed_reason() == "RuntimeError: no C compiler here"
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and aot_build.marker_path() in warnings[0]
        assert "no C compiler here" in warnings[0]
        assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".aot-build")]

        calls: list[int] = []
        monkeypatch.setattr(aot_build, "build", lambda: calls.append(1))
        assert kernel_loading._build_ahead_of_time() is False and calls == []
        assert aot.load() is None  # every kernel through numba
        model_args = _train_args()
        assert aot.kernels("ftrl").train_rows(*model_args) > 0
    finally:
        aot.reset()


def test_the_module_name_follows_sources_cpu_and_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import version

    assert aot._numba_version() == version("numba")  # read from the .dist-info folder's name
    name = aot.module_name()
    assert name == aot.module_name() and name.startswith("ftrl_ps_aot_")
    monkeypatch.setattr(aot, "kernel_sources_digest", lambda: b"another kernel source")
    changed_source = aot.module_name()
    monkeypatch.undo()
    monkeypatch.setattr(aot, "_cpu", lambda: "another CPU")
    changed_cpu = aot.module_name()
    assert len({name, changed_source, changed_cpu}) == 3


def test_where_the_module_lives(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert aot.cache_dir() == str(tmp_path / "numba" / "ftrl_ps")
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    assert aot.cache_dir() == os.path.join(aot.KERNEL_DIR, "__pycache__")  # as numba's cache
    monkeypatch.setattr(aot.os, "access", lambda *args: False)  # an installed, read-only package
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    assert aot.cache_dir() == str(tmp_path / "home-cache" / "ftrl-ps")


def test_a_damaged_module_is_not_loaded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(aot.AOT_ENV, "1")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    aot.reset()
    try:
        os.makedirs(aot.cache_dir())
        Path(aot.module_path()).write_bytes(b"\x7fELF truncated")
        assert aot.load() is None
        assert aot.kernels("ftrl").train_rows(*_train_args()) > 0  # numba's kernel
    finally:
        aot.reset()


def test_version_says_how_the_kernels_run(
        module: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.conftest import run_cli

    env = {k: v for k, v in os.environ.items() if k != aot.AOT_ENV}
    res = run_cli("--version", env=env)
    assert res.returncode == 0 and res.stdout.splitlines()[0].startswith("ftrl-ps ")
    assert res.stdout.splitlines()[1] == (
        f"kernels: compiled ahead of time for this CPU ({aot.module_path()})")
    res = run_cli("--version", env=dict(env, **{aot.AOT_ENV: "0"}))
    assert res.stdout.splitlines()[1] == "kernels: numba's JIT (FTRL_PS_AOT=0)"

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    aot.reset()
    os.makedirs(aot.cache_dir())
    Path(aot_build.marker_path()).write_text("CompileError: command 'gcc' failed\n")
    line = kernel_loading.describe()
    assert "CompileError: command 'gcc' failed" in line and aot_build.marker_path() in line


def test_the_first_run_counts_only_what_numba_still_compiles(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import ftrl_ps._kernels._config as config

    calls: list[int] = []
    monkeypatch.setattr(aot, "load", lambda: None)  # as on a fresh machine
    monkeypatch.setattr(kernel_loading, "_build_ahead_of_time", lambda: True)
    monkeypatch.setattr(config, "uncached_kernels",
                        lambda: ["ftrl.train_rows", "rowsort.sort_merge"])
    monkeypatch.setattr(kernel_loading, "warm_all", lambda: calls.append(1))
    caplog.set_level(logging.INFO, logger="ftrl_ps.kernels")
    assert kernel_loading.load_kernels() >= 0.0 and calls == [1]
    messages = [r.getMessage() for r in caplog.records]
    assert f"{kernel_loading.NOTICE}: 1 more through numba ..." in messages, messages


def test_only_kernels_jitted_with_the_reproduced_options_are_compiled(jit_only: None) -> None:
    import importlib

    for export in aot.EXPORTS:  # what the build checks before compiling
        dispatcher = getattr(importlib.import_module(f"ftrl_ps._kernels.{export.module}"),
                             export.name)
        aot_build._check_flags(export, dispatcher.targetoptions)
    from ftrl_ps._kernels import tune

    # tune's kernels: their "numpy" error model is reproduced, other options are not
    assert aot_build._check_flags(aot.Export("tune", "train_many", "void", ()),
                                  tune.train_many.targetoptions) == "numpy"
    for odd in ({"fastmath": True}, {"error_model": "other"}, {"boundscheck": True}):
        with pytest.raises(ValueError, match="reproduces"):
            aot_build._check_flags(aot.Export("tune", "train_many", "void", ()),
                                   {**tune.train_many.targetoptions, **odd})
