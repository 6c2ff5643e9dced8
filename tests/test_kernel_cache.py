"""The kernels' on-disk cache follows every kernel source file (ftrl_ps._kernels._config)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import ftrl_ps
from ftrl_ps._kernels._config import kernel_sources_digest

HASH_NAMES = """
import numpy as np
from ftrl_ps._kernels.parse import slots_of_names
buf = np.frombuffer(b"user=1site=2ad=3", np.uint8)
print(slots_of_names(buf, np.array([0, 6, 12, 16], np.int64), 30).tolist())
"""


def _run(root: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = str(root)
    res = subprocess.run([sys.executable, "-c", HASH_NAMES], env=env, cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_a_change_to_an_inlined_helper_recompiles_its_callers(tmp_path: Path) -> None:
    """``parse.slots_of_names`` inlines ``mix.mix64``: after a change to mix.py
    alone, a new process computes with the new mix, not the cached old one (numba
    by itself stamps a kernel's cache with its own file only and would load the
    stale code), and the next process loads the recompiled kernel."""
    copy = tmp_path / "ftrl_ps"
    shutil.copytree(Path(ftrl_ps.__file__).parent, copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    first = _run(tmp_path)
    assert first == _run(tmp_path)  # from the cache: the same slots
    mix = copy / "_kernels" / "mix.py"
    source = mix.read_text()
    assert "_S31 = np.uint64(31)" in source
    mix.write_text(source.replace("_S31 = np.uint64(31)", "_S31 = np.uint64(29)"))
    changed = _run(tmp_path)
    assert changed != first
    assert _run(tmp_path) == changed


def test_sources_digest_covers_every_kernel_file(tmp_path: Path) -> None:
    for name in ("a.py", "b.py", "notes.txt"):
        (tmp_path / name).write_text("x = 1\n")
    base = kernel_sources_digest(str(tmp_path))
    (tmp_path / "notes.txt").write_text("other\n")
    assert kernel_sources_digest(str(tmp_path)) == base  # not a source file
    (tmp_path / "b.py").write_text("x = 2\n")
    assert kernel_sources_digest(str(tmp_path)) != base
    (tmp_path / "b.py").write_text("x = 1\n")
    assert kernel_sources_digest(str(tmp_path)) == base
    (tmp_path / "c.py").write_text("")
    assert kernel_sources_digest(str(tmp_path)) != base
