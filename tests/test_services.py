"""services/: FTRL_PS_* environment -> ftrl-ps argv, and the services as real processes."""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ftrl_ps.cli import build_parser
from ftrl_ps.errors import ConfigError
from services import SERVICE_MODULES, env, gen, server, table, wait, worker
from services.env import argv_from_env, env_vars, explicit_dests, masked, parse_switch

REPO = Path(__file__).resolve().parents[1]


def parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment without FTRL_PS_* variables, plus ``extra``."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("FTRL_PS_")}
    out.update(PYTHONUNBUFFERED="1", **extra)
    return out


# --- the mapping ------------------------------------------------------------------

@pytest.mark.parametrize("command", ["train", "eval", "predict", "gen", "server", "worker",
                                     "export"])
def test_every_argument_has_a_variable(command: str) -> None:
    sub = env.subparser(command)
    dests = {a.dest for a in sub._actions if not isinstance(a, argparse._HelpAction)}
    names = [v.name for v in env_vars(command)]
    assert {v.dest for v in env_vars(command)} == dests
    assert len(set(names)) == len(names) and all(n.startswith("FTRL_PS_") for n in names)


def test_names_follow_the_long_flags() -> None:
    by_name = {v.name: v for v in env_vars("worker")}
    assert by_name["FTRL_PS_WORKER_INDEX"].flag == "--worker-index"
    assert by_name["FTRL_PS_BATCH_SIZE"].flag == "--batch-size"
    assert by_name["FTRL_PS_QUIET"].switch and by_name["FTRL_PS_QUIET"].flag == "--quiet"
    assert {v.name for v in env_vars("train") if v.positional} == {"FTRL_PS_TRAIN"}
    assert {v.name for v in env_vars("eval") if v.positional} == {"FTRL_PS_MODEL",
                                                                   "FTRL_PS_TEST"}


def test_env_values_reach_the_real_parser() -> None:
    environ = {"FTRL_PS_SERVER": "http://a:1,http://b:2", "FTRL_PS_INPUT": "/d/train.svm",
               "FTRL_PS_WORKER_INDEX": "2", "FTRL_PS_NUM_WORKERS": "3",
               "FTRL_PS_BATCH_SIZE": "100", "FTRL_PS_ALPHA": "-0.5", "FTRL_PS_QUIET": "Yes",
               "FTRL_PS_SKIP_BAD_LINES": "off", "FTRL_PS_DTYPE": "", "PATH": "/bin"}
    args = parse(argv_from_env("worker", environ))
    assert (args.server, args.input, args.worker_index, args.num_workers) == (
        "http://a:1,http://b:2", "/d/train.svm", 2, 3)
    assert (args.batch_size, args.alpha, args.quiet, args.skip_bad_lines) == (100, -0.5, True,
                                                                               False)
    assert args.dtype is None  # empty = unset


def test_positionals_come_after_a_double_dash() -> None:
    argv = argv_from_env("train", {"FTRL_PS_TRAIN": "-", "FTRL_PS_EPOCHS": "2"})
    assert argv == ["train", "--epochs=2", "--", "-"]
    args = parse(argv)
    assert (args.train, args.epochs) == ("-", 2)
    eval_args = parse(argv_from_env("eval", {"FTRL_PS_MODEL": "m.ftrl", "FTRL_PS_TEST": "t"}))
    assert (eval_args.model, eval_args.test) == ("m.ftrl", "t")


def test_command_line_wins_over_env() -> None:
    environ = {"FTRL_PS_OUTDIR": "/env", "FTRL_PS_ROWS": "1000", "FTRL_PS_SEED": "1"}
    args = parse(argv_from_env("gen", environ, ["--rows", "5", "--see=9", "/cli"]))
    assert (args.outdir, args.rows, args.seed) == ("/cli", 5, 9)  # '--see' abbreviates --seed
    assert explicit_dests("gen", ["--rows", "5", "/cli"]) == {"rows", "outdir"}
    assert explicit_dests("gen", ["--rows"]) == set()  # broken: the real parse reports it


def test_unknown_variable_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"FTRL_PS_BACH_SIZE \(did you mean FTRL_PS_BATCH"):
        argv_from_env("worker", {"FTRL_PS_BACH_SIZE": "10"})
    with pytest.raises(ConfigError, match="FTRL_PS_PORT"):  # a server flag, not gen's
        argv_from_env("gen", {"FTRL_PS_OUTDIR": "/d", "FTRL_PS_PORT": "1"})
    assert argv_from_env("gen", {"FTRL_PS_X": "1"}, extras=["FTRL_PS_X"]) == ["gen"]


@pytest.mark.parametrize(("text", "value"), [("1", True), ("TRUE", True), (" yes", True),
                                             ("on", True), ("0", False), ("False", False),
                                             ("no", False), ("off", False)])
def test_switch_words(text: str, value: bool) -> None:
    assert parse_switch("FTRL_PS_WAIT", text) is value


def test_bad_switch_value_is_an_error() -> None:
    with pytest.raises(ConfigError, match="FTRL_PS_WAIT='2'"):
        argv_from_env("export", {"FTRL_PS_WAIT": "2"})


def test_unsupported_action_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = argparse.ArgumentParser()
    fake.add_argument("--tag", action="append")
    monkeypatch.setattr(env, "subparser", lambda command: fake)
    with pytest.raises(ConfigError, match="'tag'.*no environment mapping"):
        env_vars("x")


def test_token_is_masked() -> None:
    assert masked(["server", "--token=abc", "--port=1"]) == "server --token=*** --port=1"
    assert masked(["worker", "--token", "abc", "-q"]) == "worker --token *** -q"


# --- service-specific behaviour ---------------------------------------------------------

def test_server_defaults_and_k8s_ordinal() -> None:
    k8s = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "ftrl-ps-server-3"}
    args = parse(server.SERVICE.argv([], {**k8s, "FTRL_PS_NUM_SHARDS": "4"}))
    assert (args.host, args.port, args.shard_index) == ("0.0.0.0", 7000, 3)
    explicit = parse(server.SERVICE.argv([], {**k8s, "FTRL_PS_SHARD_INDEX": "1",
                                             "FTRL_PS_NUM_SHARDS": "4"}))
    assert explicit.shard_index == 1
    outside = parse(server.SERVICE.argv([], {"HOSTNAME": "build-07"}))  # not in Kubernetes
    assert outside.shard_index == 0
    cli = parse(server.SERVICE.argv(["--port", "0", "--host", "127.0.0.1"],
                                    {"FTRL_PS_PORT": "9"}))
    assert (cli.host, cli.port) == ("127.0.0.1", 0)
    assert [server.ordinal(h) for h in ("a-0", "web-12.x.svc", "web", "7f3a9c21")] == [
        0, 12, None, None]


def test_worker_index_from_indexed_job() -> None:
    base = {"FTRL_PS_SERVER": "http://s:7000", "FTRL_PS_INPUT": "in.svm",
            "FTRL_PS_NUM_WORKERS": "3", "JOB_COMPLETION_INDEX": "2"}
    assert parse(worker.SERVICE.argv([], base)).worker_index == 2
    assert parse(worker.SERVICE.argv([], {**base, "FTRL_PS_WORKER_INDEX": "0"})).worker_index == 0
    assert "--worker-index=auto" in worker.SERVICE.argv(
        [], {**base, "FTRL_PS_WORKER_INDEX": "auto"})


def test_gen_skips_existing_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.svm").write_text("1 1:1\n")
    environ = {"FTRL_PS_OUTDIR": str(tmp_path / "out"),
               "FTRL_PS_SKIP_IF_EXISTS": str(tmp_path / "train.svm")}
    assert gen.main([], environ) == 0
    assert "nothing generated" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert gen.main([], {**environ, "FTRL_PS_ROWZ": "5"}) == 2  # typos still caught
    assert "FTRL_PS_ROWZ" in capsys.readouterr().err


def test_service_modules_and_table() -> None:
    services = table.services()
    assert [s.name for s in services] == list(SERVICE_MODULES)
    text = table.markdown_table()
    for s in services:
        for var in env_vars(s.command):
            assert f"| `services.{s.name}` | `{var.name}` |" in text
    assert "| `services.gen` | `FTRL_PS_SKIP_IF_EXISTS` | (service only)" in text
    doc = f"intro\n{table.BEGIN}\nold\n{table.END}\nmore\n"
    assert table.embedded_table(table.replace_table(doc, text)) == text
    with pytest.raises(ValueError, match="env-table"):
        table.replace_table("no markers", text)


def test_env_cli_check_reports_stale_table(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text(f"{table.BEGIN}\nstale\n{table.END}\n")
    assert env.main(["--check", str(doc)]) == 1
    assert env.main(["--write", str(doc)]) == 0
    assert env.main(["--check", str(doc)]) == 0


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
    status = httpx.get(f"{url}/v1/status", timeout=5).json()
    assert status["layout"]["bits"] == 12 and status["settings"]["auth"] is True
    assert status["settings"]["num_workers"] == 2
    assert srv.stop() in (0, -15)
    err = srv.stderr()
    assert "services.server: ftrl-ps server --host=127.0.0.1 --port=0" in err
    assert "--token=***" in err and "tok-123" not in err


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


def test_wait_reports_what_is_missing(tmp_path: Path) -> None:
    ns = argparse.Namespace(server="http://127.0.0.1:9/", input=str(tmp_path / "nope"))
    todo = wait.missing(ns, timeout=0.5)
    assert len(todo) == 2 and todo[0].startswith("http://127.0.0.1:9/health")
    assert len(wait.wait_for(ns, timeout=0.2, interval=0.1)) == 2
    assert wait.main(["worker", "--timeout", "1"], {"FTRL_PS_BOGUS": "1"}) == 2
