"""docs/tutorial.md runs as written: its sh blocks in order, then its Python session."""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.slow
def test_the_tutorial_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sklearn")
    text = TUTORIAL.read_text()
    blocks = sh_blocks(text)
    assert len(blocks) >= 5
    # `ftrl-ps` of this interpreter's environment, as a user's shell would find it
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    outputs = []
    for block in blocks:
        res = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"{block}\n{res.stdout}\n{res.stderr}"
        outputs.append(res.stdout)
    # what the text says about the results holds: the tuned model is not worse
    compare = next(out for block, out in zip(blocks, outputs, strict=True)
                   if "eval default.ftrl" in block)
    default_loss, tuned_loss = map(float, re.findall(r"^logloss ([0-9.]+)", compare, re.M))
    assert tuned_loss <= default_loss + 0.001
    assert (tmp_path / "predictions.txt").read_text().count("\n") == 10000
    monkeypatch.chdir(tmp_path)
    result = doctest.testfile(str(TUTORIAL), module_relative=False, verbose=False,
                              optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 10 and result.failed == 0
