"""The CLI's start-up shortcut: numba's array maths loaded without scipy.linalg."""

from __future__ import annotations

import subprocess
import sys


def test_cli_processes_do_not_import_scipy_linalg_and_kernels_still_work(tmp_path) -> None:
    data = tmp_path / "d.svm"
    data.write_text("1 1:1 2:0.5\n0 3:1\n")
    code = (
        "import sys\n"
        "from ftrl_ps.cli import main\n"
        f"code = main(['train', {str(data)!r}, '--bits', '4', '-q', '--test', {str(data)!r}])\n"
        "print(code, 'scipy.linalg' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "0 False"


def test_library_import_leaves_numba_untouched() -> None:
    code = (
        "import sys, ftrl_ps\n"
        "print('numba.np.arraymath' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
