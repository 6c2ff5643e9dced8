"""docs/tutorial.md runs as written: its sh blocks in order, then its Python session."""

from __future__ import annotations

import contextlib
import doctest
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.slow
def test_the_tutorial_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sklearn")
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    text = TUTORIAL.read_text()
    blocks = sh_blocks(text)
    assert len(blocks) >= 5
    # `ftrl-ps` of this interpreter's environment, as a user's shell would find it
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               PORT=str(free_port()), NO_PROXY="*")  # the server on a free loopback port
    outputs = []
    for block in blocks:
        # its own process group, so that a server the block started in the
        # background is stopped even when the block fails half-way
        proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        assert proc.returncode == 0, f"{block}\n{out}\n{err}"
        outputs.append(out)
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
