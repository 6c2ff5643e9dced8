"""The package's layering holds: import-linter contracts and a few plain checks.

The contracts live in pyproject.toml ([tool.importlinter]); scripts/test.sh also
runs ``lint-imports`` itself. The layers, top to bottom::

    cli > cluster > server > ps > learn > data > core

plus ``ftrl_ps._kernels`` (numba kernels) and ``ftrl_ps.errors``, which import
nothing else of ftrl_ps. Besides running the linter on the package, these tests
plant violations in a copy of it and check that the linter reports each of them
under the contract it breaks.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "ftrl_ps"
MAX_LINES = 450

#: contract id -> name, as configured in pyproject.toml
CONTRACTS = {
    c["id"]: c["name"]
    for c in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
}


def lint_imports(cwd: Path, *args: str, pythonpath: Path | None = None
                 ) -> subprocess.CompletedProcess[str]:
    """Run import-linter (the ``lint-imports`` command) in ``cwd`` on its pyproject.toml."""
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}  # no wrapped chain lines
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    code = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache", "--no-logo", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )


def test_import_contracts_are_kept() -> None:
    out = lint_imports(REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in CONTRACTS.values():
        assert f"{name} KEPT" in out.stdout


# --- the linter catches violations -------------------------------------------------

#: (contract id, file of the package copy, code appended to it, chain reported)
VIOLATIONS = [
    ("layers", "core/_bad.py", "import ftrl_ps.cli\n", "ftrl_ps.core._bad -> ftrl_ps.cli"),
    ("layers", "data/_bad.py", "from ftrl_ps.learn import training\n",
     "ftrl_ps.data._bad -> ftrl_ps.learn.training"),
    ("no-web-no-cli-below-server", "data/_bad.py", "import fastapi\n",
     "ftrl_ps.data._bad -> fastapi"),
    ("no-web-no-cli-below-server", "learn/_bad.py", "import argparse\n",
     "ftrl_ps.learn._bad -> argparse"),
    ("no-web-no-cli-below-server", "ps/_bad.py", "from starlette import status\n",
     "ftrl_ps.ps._bad -> starlette"),
    ("no-web-no-cli-below-server", "core/_bad.py", "import ftrl_ps.cli\n",
     "ftrl_ps.core._bad -> ftrl_ps.cli"),
    ("kernels-standalone", "_kernels/_bad.py", "from ftrl_ps.errors import FTRLPSError\n",
     "ftrl_ps._kernels._bad -> ftrl_ps.errors"),
    ("errors-standalone", "errors.py", "\nfrom ftrl_ps.core import _bad\n",
     "ftrl_ps.errors -> ftrl_ps.core._bad"),
    ("no-package-root", "_kernels/_bad_root.py", "import ftrl_ps\n",
     "ftrl_ps._kernels._bad_root -> ftrl_ps"),
]


@pytest.fixture(scope="module")
def broken_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package and of pyproject.toml with every VIOLATIONS entry planted."""
    root = tmp_path_factory.mktemp("broken")
    shutil.copytree(PACKAGE, root / "ftrl_ps",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    for _contract, file, code, _chain in VIOLATIONS:
        with (root / "ftrl_ps" / file).open("a") as f:
            f.write(code)
    return root


def test_every_contract_has_a_planted_violation() -> None:
    assert {v[0] for v in VIOLATIONS} == set(CONTRACTS)


@pytest.mark.parametrize(("contract", "file", "code", "chain"), VIOLATIONS,
                         ids=[f"{v[0]}:{v[1]}" for v in VIOLATIONS])
def test_violation_is_reported(broken_copy: Path, contract: str, file: str, code: str,
                               chain: str) -> None:
    out = lint_imports(broken_copy, "--contract", contract, pythonpath=broken_copy)
    report = out.stdout + out.stderr
    assert out.returncode == 1, report
    assert f"{CONTRACTS[contract]} BROKEN" in out.stdout, report
    # the planted module exists only in the copy: it, not the repo, was linted
    assert f"{chain} (l." in out.stdout, report


# --- plain checks ------------------------------------------------------------------

def package_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool = False
                     ) -> Iterator[tuple[int, str]]:
    """``(line, module name)`` of every import in ``source`` (the code of ``module``):
    ``import`` and ``from`` statements, relative ones resolved (``from x import y``
    yields both x and x.y, y may be a submodule), and ``importlib.import_module`` /
    ``__import__`` calls with a literal name."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            yield node.lineno, name
            for alias in node.names:
                yield node.lineno, f"{name}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if (called in ("import_module", "__import__") and isinstance(first, ast.Constant)
                    and isinstance(first.value, str)):
                yield node.lineno, first.value


def _is_under(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def test_only_the_command_line_uses_argparse_or_imports_cli() -> None:
    """argparse and ftrl_ps.cli belong to ftrl_ps/cli and ftrl_ps/__main__.py alone."""
    offenders = []
    for path in package_files():
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "cli" or rel == Path("__main__.py"):
            continue
        source = path.read_text()
        for line, name in imported_modules(source, module_name(path), path.name == "__init__.py"):
            if _is_under(name, "argparse") or _is_under(name, "ftrl_ps.cli"):
                offenders.append(f"ftrl_ps/{rel}:{line} imports {name}")
    assert not offenders, "\n".join(sorted(set(offenders)))


def test_import_scanner() -> None:
    code = (
        "import argparse\n"
        "from argparse import Namespace\n"
        "from ..cli import _common\n"
        "from . import sibling\n"
        "from ftrl_ps import cli\n"
        "import importlib\n"
        "importlib.import_module('ftrl_ps.cli.gen_cmd')\n"
    )
    found = list(imported_modules(code, "ftrl_ps.cluster.local"))
    assert (1, "argparse") in found and (2, "argparse") in found
    assert (3, "ftrl_ps.cli._common") in found and (4, "ftrl_ps.cluster.sibling") in found
    assert (5, "ftrl_ps.cli") in found and (7, "ftrl_ps.cli.gen_cmd") in found
    assert (1, "ftrl_ps.cluster.x") in imported_modules("from .x import y", "ftrl_ps.cluster",
                                                        is_package=True)
    assert not _is_under("argparsex", "argparse") and _is_under("ftrl_ps.cli.a", "ftrl_ps.cli")


def test_no_module_is_too_long() -> None:
    long = {f"ftrl_ps/{p.relative_to(PACKAGE)}": n for p in package_files()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them): {long}"
