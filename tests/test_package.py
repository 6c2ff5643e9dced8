"""The public face of the package (as httpx tests its exported names)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ftrl_ps
from ftrl_ps._kernels import BLAS_THREAD_VARIABLES, one_blas_thread


def test_all_is_sorted_and_complete() -> None:
    assert ftrl_ps.__all__ == sorted(ftrl_ps.__all__)
    for name in ftrl_ps.__all__:
        assert hasattr(ftrl_ps, name), name
    public = {n for n in dir(ftrl_ps) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(ftrl_ps, n)).__name__ == "module"}
    assert public - modules - {"annotations"} == set(ftrl_ps.__all__) - {"__version__"}


def test_errors_share_one_root() -> None:
    for name in ftrl_ps.__all__:
        obj = getattr(ftrl_ps, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, ftrl_ps.FTRLPSError)


def test_import_does_not_pull_in_the_server_stack() -> None:
    code = (
        "import sys, ftrl_ps; "
        "print(any(m.startswith(('fastapi', 'uvicorn')) for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_command_line_and_the_servers_start_without_numba() -> None:
    """The launcher forks servers before loading numba, and servers never load it."""
    code = (
        "import sys, ftrl_ps, ftrl_ps.cli, ftrl_ps.cluster.local, ftrl_ps.server.app; "
        "ftrl_ps.cli.build_parser(); "
        "print('numba' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_shard_starts_without_the_http_client() -> None:
    """A shard serves HTTP but sends none: httpx (0.15 s of a shard's start) stays
    unloaded in it, and in the local cluster's launcher until its servers are forked."""
    code = (
        "import sys, ftrl_ps.cli, ftrl_ps.cli.train_cmd, ftrl_ps.cluster.local, "
        "ftrl_ps.server.run, ftrl_ps.server.app, ftrl_ps.server.serve; "
        "ftrl_ps.cli.build_parser(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'httpcore')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lazy_package_attributes_resolve() -> None:
    import ftrl_ps

    for name in ftrl_ps.__all__:
        assert getattr(ftrl_ps, name) is not None
    with pytest.raises(AttributeError):
        ftrl_ps.no_such_name  # noqa: B018


def test_the_estimator_needs_only_the_sklearn_extra() -> None:
    """``import ftrl_ps`` and the online API work without scikit-learn; asking for
    FTRLClassifier without it says which extra to install."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('sklearn', 'scipy'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import ftrl_ps\n"
        "m = ftrl_ps.OnlineFTRL(bits=8); m.learn_one({'a': 1}, 1)\n"
        "try:\n"
        "    ftrl_ps.FTRLClassifier\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'ftrl-ps[sklearn]'" in out.stdout


def test_one_default_feature_space() -> None:
    """core.params.DEFAULT_BITS (library, estimator, tune) is the servers' default."""
    from ftrl_ps.core.params import DEFAULT_BITS
    from ftrl_ps.server.options import DEFAULT_BITS as SERVER_BITS

    assert DEFAULT_BITS == SERVER_BITS == 22


def test_the_command_line_asks_numpy_for_one_blas_thread_before_loading_it() -> None:
    """``import ftrl_ps`` and the command line's module load no numpy, so the
    command can set ``OPENBLAS_NUM_THREADS=1`` before numpy starts OpenBLAS's
    threads (each spins ~0.1 s after numpy's import: ftrl_ps._kernels)."""
    code = (
        "import os, sys, ftrl_ps, ftrl_ps.cli as cli; "
        "print('numpy' in sys.modules); "
        "cli.main = lambda: print(os.environ.get('OPENBLAS_NUM_THREADS'), "
        "'numpy' in sys.modules) or 0; "
        "cli.console_main()"
    )
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    assert out.stdout.split() == ["False", "1", "False"]
    # a user's own setting is kept
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**env, "OMP_NUM_THREADS": "2"})
    assert out.stdout.split() == ["False", "None", "False"]


@pytest.mark.parametrize("name", BLAS_THREAD_VARIABLES)
def test_one_blas_thread_keeps_what_the_user_set(name: str) -> None:
    environ = {name: "3"}
    assert not one_blas_thread(environ)
    assert environ == {name: "3"}
    environ = {}
    assert one_blas_thread(environ)
    assert environ == {"OPENBLAS_NUM_THREADS": "1"}
