"""Commands that docs/deployment.md tells people to run, run for real.

The docs' command to watch a compose run (``docker compose exec server-0 CMD``)
runs here against two real shards with a token, as it would in server 0's
container: the compose host names become the local servers' URLs and the
token is in ``FTRL_PS_TOKEN``, as the compose file gives it to server 0
(``127.0.0.1:7000``, server 0 itself there, becomes shard 0's URL).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from tests._servers import TOKEN, real_cluster
from tests.conftest import REPO

DOCS = REPO / "docs" / "deployment.md"


def _exec_command(service: str) -> list[str]:
    """The words after ``docker compose exec SERVICE`` in the docs (one such line)."""
    found = re.findall(rf"docker compose exec {service} ([^`\n]+(?:\n[^`\n]+)*)",
                       DOCS.read_text())
    assert len(found) == 1, found
    return shlex.split(found[0])


def test_the_documented_status_command_reads_a_cluster_with_a_token() -> None:
    argv = _exec_command("server-0")
    assert argv[0] == "python", argv
    with real_cluster(2, ["--bits", "12", "--token", TOKEN]) as shards:
        hosts = {f"server-{i}:7000": s.url.removeprefix("http://") for i, s in
                 enumerate(shards)}
        hosts["127.0.0.1:7000"] = hosts["server-0:7000"]  # server 0 itself, in its container
        argv = [re.sub(r"server-\d:7000|127\.0\.0\.1:7000", lambda m: hosts[m.group(0)], a)
                for a in argv]
        env = {**os.environ, "FTRL_PS_TOKEN": TOKEN}
        res = subprocess.run([sys.executable, *argv[1:]], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "shard 0: keys" in res.stdout and "shard 1: keys" in res.stdout, res.stdout
