"""README's "Serve and learn online": its curl examples, run as written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from tests._servers import real_server
from tests.conftest import REPO
from tests.test_serve_e2e import serve_process


def _blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Serve and learn online", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def test_readme_setup_block_uses_real_flags() -> None:
    from ftrl_ps.cli import build_parser

    setup = _blocks()[0]
    for line in setup.splitlines():
        if line.startswith("ftrl-ps "):
            build_parser().parse_args(line.removeprefix("ftrl-ps ").rstrip(" &").split())


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_curl_examples_run_as_written() -> None:
    curl_block = _blocks()[1]
    with real_server(["--bits", "18", "--num-workers", "1", "--staleness", "inf"]) as srv, \
            serve_process("--server", srv.url, "--learn") as url:
        out = subprocess.run(["bash", "-e", "-c", curl_block], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "SERVE": url, "NO_PROXY": "*"})
    assert out.returncode == 0, out.stderr
    answers = [json.loads(line) for line in out.stdout.replace("}{", "}\n{").splitlines()]
    learned, predicted = answers[:2], answers[2:4]
    assert [a["accepted"] for a in learned] == [2, 1]
    assert [len(a["probabilities"]) for a in predicted] == [2, 1]
    assert answers[4]["error"] == "ParseError" and "body:2:" in answers[4]["detail"]
    assert answers[5] == {"ready": True, "model_version": answers[5]["model_version"],
                          "source_healthy": True}
    assert answers[6]["learner"]["rows_accepted"] == 3  # the bad request learned nothing
