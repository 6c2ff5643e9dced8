"""Log lines and restart counts of real runs: ``train --workers`` and ``server``.

With ``--log-format json`` every stderr line of the launcher, and every line of
its children's logs, is one JSON object (the restart lines, ``servers: ...``
and a restored shard's line included); the text format keeps those lines bare.
A run where a worker and a shard are killed with SIGKILL (found by their pids
in ``/v1/status``) reports one worker restart and one shard restart, in
``--metrics-json`` and on the live line alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, run_cli, wait_until

ROWS = 40_000
TOKEN = "log-token"
FIELDS = {"time", "level", "component", "logger", "message", "pid"}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    res = run_cli("gen", str(out), "--rows", str(ROWS), "--test-rows", "2000", "--seed", "5",
                  "--bits", "18", "--quiet")
    assert res.returncode == 0, res.stderr
    return out


class Run:
    """``ftrl-ps train --workers 2 --servers 2`` with its stderr collected by a thread
    (a pipe, or a terminal when ``tty``: then the live line is drawn)."""

    def __init__(self, data: Path, out: Path, *flags: str, tty: bool = False) -> None:
        cmd = [sys.executable, "-m", "ftrl_ps", "train", str(data / "train.svm"),
               "--workers", "2", "--servers", "2", "--bits", "18", "--batch-size", "250",
               "--checkpoint-interval", "0.3", "--metrics-json", str(out / "m.json"),
               "--token", TOKEN, "--split", "shares",
               # every clock tick 0.2 s later: the run outlasts two restarts
               "--straggle-prob", "1", "--straggle-delay", "0.2", *flags]
        self.out = out
        self.chunks: list[str] = []
        # TMPDIR: the log dir of a run that failed (and was killed) is left in the test's
        env = {**os.environ, "PYTHONPATH": str(REPO), "FTRL_PS_LOG_FORMAT": "",
               "TMPDIR": str(out)}
        if tty:
            master, slave = pty.openpty()
            self.proc = subprocess.Popen(cmd, cwd=REPO, stderr=slave, env=env,
                                         stdout=subprocess.DEVNULL)
            os.close(slave)
            reader = lambda: os.read(master, 65536)  # noqa: E731
            self._close = lambda: os.close(master)
        else:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, env=env,
                                         stdout=subprocess.DEVNULL)
            assert self.proc.stderr is not None
            pipe = self.proc.stderr
            reader = lambda: os.read(pipe.fileno(), 65536)  # noqa: E731
            self._close = pipe.close
        self._thread = threading.Thread(target=self._read, args=(reader,), daemon=True)
        self._thread.start()

    def _read(self, read: Any) -> None:
        while True:
            try:
                chunk = read()
            except OSError:  # a terminal whose other side closed
                return
            if not chunk:
                return
            self.chunks.append(chunk.decode("utf-8", "replace"))

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def finish(self) -> dict[str, Any]:
        code = self.proc.wait(timeout=300)
        self._thread.join(30)
        self._close()
        assert code == 0, self.text[-3000:]
        metrics: dict[str, Any] = json.loads((self.out / "m.json").read_text())
        return metrics

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def urls_of(servers_line: str) -> tuple[list[str], Path]:
    """The shard URLs and the log dir of ``servers: URL, URL  (logs in DIR; ...)``."""
    urls = [u.rstrip(",") for u in servers_line.split("(")[0].split()[1:]]
    logdir = Path(servers_line.split("(logs in ")[1].split(";")[0])
    return urls, logdir


def kill_a_worker_then_a_shard(run: Run, servers_line: str, said: Any) -> Path:
    """SIGKILL worker 0 once a quarter of the rows are trained, then, once its restart
    is reported (``said(text)``), shard 1; the log dir, once shard 1's restart is
    reported."""
    urls, logdir = urls_of(servers_line)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(headers=headers, timeout=5, trust_env=False) as http:
        def workers() -> list[dict[str, Any]]:
            try:
                clock = http.get(urls[0] + "/v1/status").json().get("clock") or {}
            except httpx.HTTPError:
                return []
            return [w for w in clock.get("workers", []) if w["state"] == "live"]

        wait_until(lambda: sum(w["stats"].get("rows", 0) for w in workers()) >= ROWS / 4,
                   timeout=120, what="a quarter of the rows")
        pid = next(w["pid"] for w in workers() if w["index"] == 0)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: said("worker 0 was killed by signal 9: restarted"), timeout=60,
                   what="worker 0's restart")
        pid = http.get(urls[1] + "/v1/status").json()["shard"]["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: said("server 1 was killed by signal 9: restarted on the same port"),
                   timeout=60, what="shard 1's restart")
    assert run.proc.poll() is None, "the run ended before both restarts: make it longer"
    return logdir


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` as a JSON object with the fields of a log line."""
    entries = []
    for line in text.splitlines():
        entry = json.loads(line)  # fails on any line that is not JSON
        assert isinstance(entry, dict) and FIELDS <= set(entry), line
        entries.append(entry)
    return entries


@pytest.mark.timeout(300)
def test_json_covers_the_launcher_and_its_children(data: Path, tmp_path: Path) -> None:
    run = Run(data, tmp_path, "--log-format", "json")
    try:
        def messages() -> list[str]:
            found = []
            for line in run.text.splitlines():
                with contextlib.suppress(ValueError):  # a line still being written
                    found.append(json.loads(line)["message"])
            return found

        wait_until(lambda: any(m.startswith("servers: ") for m in messages()), timeout=60,
                   what="the servers line")
        servers = next(m for m in messages() if m.startswith("servers: "))
        logdir = kill_a_worker_then_a_shard(
            run, servers, lambda text: any(text in m for m in messages()))
        # before the run deletes them
        children = {f.name: f.read_text() for f in sorted(logdir.glob("*.log"))}
        metrics = run.finish()
    finally:
        run.kill()
    entries = json_lines(run.text)
    assert {e["component"] for e in entries} == {"train"}
    restarts = [e for e in entries if "was killed by signal 9" in e["message"]]
    assert [e["level"] for e in restarts] == ["warning", "warning"], restarts
    assert not any(e["message"].startswith("ftrl-ps train: ") for e in entries)
    # the children inherit the format: every line of their logs is JSON, the
    # restarted shard's restore line included
    assert {"server-0.log", "server-1.log", "server-1-r1.log", "worker-0.log",
            "worker-0-r1.log", "worker-1.log"} <= set(children), children.keys()
    child = {name: json_lines(text) for name, text in children.items()}
    assert any("shard 1 restored checkpoint" in e["message"]
               for e in child["server-1-r1.log"]), children["server-1-r1.log"]
    assert {e["component"] for e in child["server-1-r1.log"]} == {"server-1"}
    assert (metrics["worker_restarts"], metrics["shard_restarts"]) == (1, 1), \
        metrics["restart_events"]
    assert metrics["restarts"] == 2


LIVE = re.compile(r"worker restarts (\d+)  shard restarts (\d+)")


@pytest.mark.timeout(300)
def test_live_line_and_metrics_count_worker_and_shard_restarts_alike(
    data: Path, tmp_path: Path
) -> None:
    """On a terminal, in the default text format: the bare launcher lines as before,
    and the live line's counts equal to --metrics-json's."""
    run = Run(data, tmp_path, tty=True)
    try:
        def lines() -> list[str]:
            return [p for p in re.split(r"[\r\n]+", run.text) if p.strip()]

        wait_until(lambda: any(ln.startswith("servers: ") for ln in lines()), timeout=60,
                   what="the servers line")
        servers = next(ln for ln in lines() if ln.startswith("servers: "))
        kill_a_worker_then_a_shard(
            run, servers,
            lambda text: any(ln.startswith(f"ftrl-ps train: {text}") for ln in lines()))
        seen = len(run.text)
        wait_until(lambda: LIVE.search(run.text[seen:]) is not None, timeout=60,
                   what="a live line after both restarts")
        metrics = run.finish()
    finally:
        run.kill()
    counts = [tuple(map(int, m.groups())) for m in LIVE.finditer(run.text[seen:])]
    assert counts and set(counts) == {(1, 1)}, counts
    assert (metrics["worker_restarts"], metrics["shard_restarts"]) == counts[-1]
    assert metrics["restarts"] == 2 and "{" not in run.text  # text: no JSON
    glued = [ln for ln in re.split(r"[\r\n]+", run.text)
             if "ftrl-ps train: " in ln and not ln.startswith("ftrl-ps train: ")]
    assert not glued, glued  # the launcher's lines are not written after the live line


def _server(ckpt: Path, *flags: str) -> str:
    """Start ``ftrl-ps server`` on a free port with ``ckpt``, stop it with SIGTERM once
    it listens; its stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftrl_ps", "server", "--port", "0", "--bits", "18",
         "--checkpoint-dir", str(ckpt), *flags],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "FTRL_PS_LOG_FORMAT": ""})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, -signal.SIGTERM), err  # uvicorn raises it again
    return err


def test_server_restore_and_uvicorn_lines_are_json(tmp_path: Path) -> None:
    """A shard that restores its checkpoint says so in JSON (at the default level
    too), and uvicorn's own lines (``--log-level info``) are JSON as well."""
    _server(tmp_path)  # its last checkpoint, written on SIGTERM
    entries = json_lines(_server(tmp_path, "--log-format", "json"))
    assert any(e["message"].startswith("shard 0 restored checkpoint") for e in entries)
    entries = json_lines(_server(tmp_path, "--log-format", "json", "--log-level", "info"))
    assert any(e["logger"].startswith("uvicorn") for e in entries), entries
    assert {e["component"] for e in entries} == {"server"}
    text = _server(tmp_path)  # the text format: the bare line, as before
    assert re.search(r"^ftrl-ps server: shard 0 restored checkpoint \S+ \(version \d+",
                     text, re.M), text
    # SIGTERM said nothing (QA): now where the state is that a restart restores
    assert re.search(r"^ftrl-ps server: shard 0 stops; its state is in checkpoint \S+"
                     r"shard-0-\d+\.ckpt \(a restart on \S+ restores it\)", text, re.M), text
