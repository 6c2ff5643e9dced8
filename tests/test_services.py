"""services/: FTRL_PS_* environment -> a role's options -> its runner; the services as
real processes."""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from ftrl_ps.errors import ConfigError, TransportError
from services import SERVICE_MODULES, gen, server, wait, worker
from services._common import Service, command_line_parser
from tools import envtable

REPO = Path(__file__).resolve().parents[1]


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment without FTRL_PS_* variables, plus ``extra``."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("FTRL_PS_")}
    out.update(PYTHONUNBUFFERED="1", **extra)
    return out


# --- every service and its command line ------------------------------------------

@pytest.mark.parametrize("service", envtable.services(), ids=lambda s: s.name)
def test_every_flag_is_an_option_and_every_option_a_flag(service: Service) -> None:
    fields = {f.name for f in dataclasses.fields(service.options)}
    assert set(envtable.cli_arguments(service.command)) - {"help"} == fields
    assert set(service.defaults) | set(service.notes) | set(service.required) <= fields
    assert all(name.startswith("FTRL_PS_") for name in service.extras)


def test_command_line_wins_over_env() -> None:
    environ = {"FTRL_PS_OUTDIR": "/env", "FTRL_PS_ROWS": "1000", "FTRL_PS_SEED": "1"}
    opts = gen.SERVICE.load(["--rows", "5", "--see=9", "/cli"], environ)
    assert (opts.outdir, opts.rows, opts.seed) == ("/cli", 5, 9)  # '--see' abbreviates --seed
    assert gen.SERVICE.load([], environ).rows == 1000
    parser = command_line_parser("worker", "python -m services.worker")
    assert vars(parser.parse_args(["-q", "--worker-index", "auto"])) == {
        "quiet": True, "worker_index": None}
    with pytest.raises(ConfigError, match="argument --batch-size: expected a positive integer"):
        worker.SERVICE.load(["--batch-size", "0"], {})
    with pytest.raises(ConfigError, match="unrecognized arguments: --bogus"):
        worker.SERVICE.load(["--bogus"], {})


def test_service_help_lists_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        gen.main(["--help"], {})
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "python -m services.gen" in out and "--test-rows" in out and "(default: 100000)" in out


def test_unknown_variable_names_the_service() -> None:
    with pytest.raises(ConfigError, match=r"for services.worker: FTRL_PS_BACH_SIZE \(did you"):
        worker.SERVICE.load([], {"FTRL_PS_BACH_SIZE": "10"})


# --- service-specific behaviour ---------------------------------------------------------

def test_server_defaults_and_k8s_ordinal() -> None:
    k8s = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "ftrl-ps-server-3"}
    opts = server.SERVICE.load([], {**k8s, "FTRL_PS_NUM_SHARDS": "4"})
    assert (opts.host, opts.port, opts.shard_index) == ("0.0.0.0", 7000, 3)
    explicit = server.SERVICE.load([], {**k8s, "FTRL_PS_SHARD_INDEX": "1",
                                        "FTRL_PS_NUM_SHARDS": "4"})
    assert explicit.shard_index == 1
    outside = server.SERVICE.load([], {"HOSTNAME": "build-07"})  # not in Kubernetes
    assert outside.shard_index == 0
    cli = server.SERVICE.load(["--port", "0", "--host", "127.0.0.1"], {"FTRL_PS_PORT": "9"})
    assert (cli.host, cli.port) == ("127.0.0.1", 0)
    assert server.SERVICE.load([], {"FTRL_PS_PORT": "9"}).port == 9
    assert [server.ordinal(h) for h in ("a-0", "web-12.x.svc", "web", "7f3a9c21")] == [
        0, 12, None, None]


def test_worker_index_from_indexed_job() -> None:
    base = {"FTRL_PS_SERVER": "http://s:7000", "FTRL_PS_INPUT": "in.svm",
            "FTRL_PS_NUM_WORKERS": "3"}
    assert worker.SERVICE.load([], {**base, "JOB_COMPLETION_INDEX": "2"}).worker_index == 2
    assert worker.SERVICE.load([], {**base, "JOB_COMPLETION_INDEX": "2",
                                    "FTRL_PS_WORKER_INDEX": "0"}).worker_index == 0
    assert worker.SERVICE.load([], {**base, "FTRL_PS_WORKER_INDEX": "auto"}).worker_index is None
    with pytest.raises(ConfigError, match="FTRL_PS_WORKER_INDEX is required"):
        worker.SERVICE.load([], base)  # 'auto' must be asked for
    with pytest.raises(ConfigError, match=r"FTRL_PS_WORKER_INDEX \(default\)='x'"):
        worker.SERVICE.load([], {**base, "JOB_COMPLETION_INDEX": "x"})


@pytest.mark.parametrize("variable, value, message", [
    ("FTRL_PS_BATCH_SIZE", "0", "batch_size must be >= 1"),
    ("FTRL_PS_CHUNK_MB", "0", r"--chunk-mb must be in \[1, 1024\]"),
    ("FTRL_PS_CHUNK_MB", "4096", r"--chunk-mb must be in \[1, 1024\]"),
    ("FTRL_PS_ALPHA", "-1", "alpha must be > 0"),
    ("FTRL_PS_L1", "-0.5", "l1"),
    ("FTRL_PS_BITS", "99", "bits must be in"),
    ("FTRL_PS_DTYPE", "float16", "--dtype must be one of"),
    ("FTRL_PS_EPOCHS", "0", "epochs must be >= 1"),
    ("FTRL_PS_PUSH_STEP", "0", "push_step must be >= 1"),
])
def test_a_worker_value_out_of_range_fails_before_the_wait_for_the_servers(
    variable: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A service waits up to 600 s for its servers: a bad value is said first (it
    used to be found only once the servers answered, or never for --chunk-mb)."""
    environ = {"FTRL_PS_SERVER": "http://127.0.0.1:9", "FTRL_PS_INPUT": "in.svm",
               "FTRL_PS_NUM_WORKERS": "2", "FTRL_PS_WORKER_INDEX": "0", variable: value}
    started = time.monotonic()
    assert worker.main([], environ) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert re.search(message, err) and "waiting" not in err, err


def test_gen_skips_existing_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.svm").write_text("1 1:1\n")
    environ = {"FTRL_PS_OUTDIR": str(tmp_path / "out"),
               "FTRL_PS_SKIP_IF_EXISTS": str(tmp_path / "train.svm")}
    assert gen.main([], environ) == 0
    assert "nothing generated" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert gen.main([], {**environ, "FTRL_PS_ROWZ": "5"}) == 2  # typos still caught
    assert "FTRL_PS_ROWZ" in capsys.readouterr().err


def _fake(runner: Any) -> Service:
    return Service(name="gen", command="gen", options=gen.GenOptions, runner=runner)


@pytest.mark.parametrize(("exc", "code"), [(ConfigError("bad rows"), 2),
                                           (TransportError("no server"), 1)])
def test_runner_errors_give_exit_codes(exc: Exception, code: int,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    def runner(options: Any) -> None:
        raise exc

    assert _fake(runner).main([], {"FTRL_PS_OUTDIR": "/x"}) == code
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("services.gen: GenOptions(outdir='/x'")
    assert err[-1] == f"services.gen: error: {exc}"


def test_config_errors_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    service = _fake(lambda options: 7)
    assert service.main([], {"FTRL_PS_OUTDIR": "/x"}) == 7
    capsys.readouterr()
    assert service.main(["--rows", "x"], {"FTRL_PS_OUTDIR": "/x"}) == 2
    assert service.main([], {"FTRL_PS_ROWS": "x"}) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["services.gen: error: argument --rows: invalid int value: 'x'",
                   "services.gen: error: FTRL_PS_OUTDIR is required; FTRL_PS_ROWS='x': Input "
                   "should be a valid integer, unable to parse string as an integer"]


# --- the documentation table ---------------------------------------------------------

def test_service_modules_and_table() -> None:
    services = envtable.services()
    assert [s.name for s in services] == list(SERVICE_MODULES)
    text = envtable.markdown_table()
    for s in services:
        for f in dataclasses.fields(s.options):
            assert f"| `services.{s.name}` | `FTRL_PS_{f.name.upper()}` |" in text
    assert "| `services.gen` | `FTRL_PS_SKIP_IF_EXISTS` | (service only)" in text
    assert "| `services.server` | `FTRL_PS_PORT` | `--port` | `7000` (CLI: `0`) |" in text
    assert ("| `services.worker` | `FTRL_PS_WORKER_INDEX` | `--worker-index` | **required** |"
            in text)
    doc = f"intro\n{envtable.BEGIN}\nold\n{envtable.END}\nmore\n"
    assert envtable.embedded_table(envtable.replace_table(doc, text)) == text
    with pytest.raises(ValueError, match="env-table"):
        envtable.replace_table("no markers", text)


def test_envtable_check_reports_stale_table(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text(f"{envtable.BEGIN}\nstale\n{envtable.END}\n")
    assert envtable.main(["--check", str(doc)]) == 1
    assert envtable.main(["--write", str(doc)]) == 0
    assert envtable.main(["--check", str(doc)]) == 0


# --- real processes ------------------------------------------------------------------

class Proc:
    """A child process whose stdout lines are queued (read with a timeout)."""

    def __init__(self, module: str, environ: dict[str, str], *args: str) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=REPO, env=environ, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.put(line)
        self.lines.put("")

    def wait_line(self, prefix: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line.startswith(prefix):
                return line[len(prefix):].strip()
            if line == "":
                break
        self.stop()
        raise AssertionError(f"no {prefix!r} line; stderr: {self.stderr()[-2000:]}")

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        return self.popen.returncode

    def stderr(self) -> str:
        if self.popen.poll() is None:
            return "(running)"
        assert self.popen.stderr is not None
        return self.popen.stderr.read()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


def test_server_service_from_env_only(procs: list[Proc]) -> None:
    environ = clean_env(FTRL_PS_HOST="127.0.0.1", FTRL_PS_PORT="0", FTRL_PS_BITS="12",
                        FTRL_PS_TOKEN="tok-123", FTRL_PS_NUM_WORKERS="2")
    srv = Proc("services.server", environ)
    procs.append(srv)
    url = srv.wait_line("listening on ")
    assert url.startswith("http://127.0.0.1:")
    assert httpx.get(f"{url}/health", timeout=5).json()["status"] == "ok"
    assert httpx.get(f"{url}/v1/status", timeout=5).status_code == 401  # reads need it too
    status = httpx.get(f"{url}/v1/status", timeout=5,
                       headers={"Authorization": "Bearer tok-123"}).json()
    assert status["layout"]["bits"] == 12 and status["settings"]["auth"] is True
    assert status["settings"]["num_workers"] == 2
    assert srv.stop() in (0, -15)
    err = srv.stderr()
    assert "services.server: ShardOptions(host='127.0.0.1', port=0, fd=None, token=***" in err
    assert "tok-123" not in err


def test_service_with_a_typo_exits_2() -> None:
    done = subprocess.run([sys.executable, "-m", "services.server"], cwd=REPO, timeout=60,
                          env=clean_env(FTRL_PS_HOST="127.0.0.1", FTRL_PS_PROT="0"),
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "FTRL_PS_PROT (did you mean FTRL_PS_PORT?)" in done.stderr


def test_services_train_end_to_end(tmp_path: Path, procs: list[Proc]) -> None:
    """gen -> server -> wait -> 2 workers -> export, every process configured by env only."""
    data = tmp_path / "data"
    done = subprocess.run([sys.executable, "-m", "services.gen"], cwd=REPO, timeout=120,
                          env=clean_env(FTRL_PS_OUTDIR=str(data), FTRL_PS_ROWS="3000",
                                        FTRL_PS_TEST_ROWS="1000", FTRL_PS_BITS="12",
                                        FTRL_PS_QUIET="1"), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    common = {"FTRL_PS_TOKEN": "t0k"}
    srv = Proc("services.server", clean_env(**common, FTRL_PS_HOST="127.0.0.1",
                                            FTRL_PS_PORT="0", FTRL_PS_BITS="12",
                                            FTRL_PS_NUM_WORKERS="2"))
    procs.append(srv)
    url = srv.wait_line("listening on ")
    client_env = {**common, "FTRL_PS_SERVER": url}
    worker_env = {**client_env, "FTRL_PS_INPUT": str(data / "train.svm"),
                  "FTRL_PS_NUM_WORKERS": "2", "FTRL_PS_BATCH_SIZE": "200"}
    waited = subprocess.run([sys.executable, "-m", "services.wait", "worker", "--timeout", "30"],
                            cwd=REPO, env=clean_env(**worker_env, JOB_COMPLETION_INDEX="0"),
                            timeout=60, capture_output=True, text=True)
    assert waited.returncode == 0, waited.stderr
    workers = [subprocess.Popen([sys.executable, "-m", "services.worker"], cwd=REPO,
                                env=clean_env(**worker_env, JOB_COMPLETION_INDEX=str(i)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
               for i in range(2)]
    model = tmp_path / "model.ftrl"
    try:
        export = subprocess.run(
            [sys.executable, "-m", "services.export"], cwd=REPO, timeout=120, text=True,
            capture_output=True,
            env=clean_env(**client_env, FTRL_PS_WAIT="1", FTRL_PS_MODEL=str(model),
                          FTRL_PS_TEST=str(data / "test.svm"), FTRL_PS_TIMEOUT="100",
                          FTRL_PS_METRICS_JSON=str(tmp_path / "m.json")))
        for w in workers:
            assert w.wait(60) == 0, w.stderr.read() if w.stderr else ""
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    assert export.returncode == 0, export.stderr
    assert "test " in export.stdout and model.exists()
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["rows"] == 3000 and metrics["dead_workers"] == []
    assert 0 < metrics["test_logloss"] < 0.69


def test_wait_reports_what_is_missing(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    ns = SimpleNamespace(server="http://127.0.0.1:9/", input=str(tmp_path / "nope"))
    assert wait.prerequisites(ns) == (["http://127.0.0.1:9/"], [str(tmp_path / "nope")])
    environ = {"FTRL_PS_SERVER": "http://127.0.0.1:9", "FTRL_PS_INPUT": str(tmp_path / "nope"),
               "FTRL_PS_NUM_WORKERS": "1", "FTRL_PS_WORKER_INDEX": "0"}
    assert wait.main(["worker", "--timeout", "0.3"], environ) == 1
    err = capsys.readouterr().err
    assert "still missing after 0.3 s: http://127.0.0.1:9/health (not reachable" in err
    assert f"file {tmp_path / 'nope'}" in err
    assert wait.main(["worker", "--timeout", "1"], {"FTRL_PS_BOGUS": "1"}) == 2
    assert wait.main(["gen", "--timeout", "1"], {"FTRL_PS_OUTDIR": str(tmp_path)}) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_services_tolerate_the_worst_start_order(tmp_path: Path) -> None:
    """Export and workers first, then the server, the data last: the run completes,
    with no start ordering from outside (as in Kubernetes or podman-compose)."""
    data, port = tmp_path / "data", _free_port()
    url = f"http://127.0.0.1:{port}"
    common = {"FTRL_PS_TOKEN": "t0k", "FTRL_PS_SERVER": url, "FTRL_PS_START_TIMEOUT": "120"}
    logs = {name: (tmp_path / f"{name}.log").open("w")
            for name in ("export", "worker-a", "worker-b", "server")}

    def start(module: str, log: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", module], cwd=REPO, text=True,
                                env=clean_env(**env), stdout=logs[log], stderr=logs[log])

    started: list[subprocess.Popen[str]] = []
    try:
        started.append(start("services.export", "export", **common, FTRL_PS_WAIT="1",
                             FTRL_PS_MODEL=str(tmp_path / "model.ftrl"), FTRL_PS_TIMEOUT="120",
                             FTRL_PS_TEST=str(data / "test.svm"),
                             FTRL_PS_METRICS_JSON=str(tmp_path / "m.json")))
        workers = [start("services.worker", f"worker-{x}", **common,
                         FTRL_PS_INPUT=str(data / "train.svm"), FTRL_PS_NUM_WORKERS="2",
                         FTRL_PS_WORKER_INDEX="auto", FTRL_PS_BATCH_SIZE="200")
                   for x in "ab"]
        started += workers
        time.sleep(2)
        started.append(start("services.server", "server", FTRL_PS_TOKEN="t0k",
                             FTRL_PS_HOST="127.0.0.1", FTRL_PS_PORT=str(port),
                             FTRL_PS_BITS="12", FTRL_PS_NUM_WORKERS="2"))
        time.sleep(2)
        assert all(p.poll() is None for p in started), "a service gave up early"
        done = subprocess.run([sys.executable, "-m", "services.gen"], cwd=REPO, timeout=120,
                              env=clean_env(FTRL_PS_OUTDIR=str(data), FTRL_PS_ROWS="3000",
                                            FTRL_PS_TEST_ROWS="1000", FTRL_PS_BITS="12",
                                            FTRL_PS_QUIET="1"), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        export_rc = started[0].wait(120)
        worker_rcs = [w.wait(60) for w in workers]
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in logs.values():
            f.close()
    text = {name: (tmp_path / f"{name}.log").read_text() for name in logs}
    assert export_rc == 0, text["export"]
    assert worker_rcs == [0, 0], text
    assert "worker: waiting (up to 120 s) for " in text["worker-a"]
    assert f"file {data / 'train.svm'}" in text["worker-a"]
    assert "export: waiting (up to 120 s) for " in text["export"]
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["complete"] is True and metrics["workers_finished"] == [0, 1]
    assert metrics["rows"] == 3000 and 0 < metrics["test_logloss"] < 0.69
