"""Start order: bounded waits for servers and files (ps/waiting.py), and an export that
will not pass an incomplete run for a finished one (ps/completion.py, ps/export.py)."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest

from ftrl_ps.errors import ConfigError, IncompleteRunError, StartupTimeoutError
from ftrl_ps.ps.client import PSClient
from ftrl_ps.ps.completion import RunProgress
from ftrl_ps.ps.export import ExportOptions, run_export
from ftrl_ps.ps.waiting import unmet, wait_until_ready
from ftrl_ps.ps.worker_main import WorkerOptions, run_worker
from tests._servers import TOKEN, real_server
from tests.conftest import run_cli

# --- waiting for servers and files -----------------------------------------------------


def test_unmet_names_servers_and_files(tmp_path: Path) -> None:
    with real_server(["--bits", "10"]) as srv:
        todo = unmet([srv.url, "http://127.0.0.1:9"], [str(tmp_path / "a.svm"), "-"],
                     probe_timeout=0.5)
    assert len(todo) == 2
    assert todo[0].startswith("http://127.0.0.1:9/health (not reachable")
    assert todo[1] == f"file {tmp_path / 'a.svm'}"


def test_wait_returns_when_the_file_appears(tmp_path: Path) -> None:
    path = tmp_path / "train.svm"
    threading.Timer(0.6, path.write_text, args=("1 1:1\n",)).start()
    out = io.StringIO()
    waited = wait_until_ready([], [str(path)], timeout=20, who="worker 0", interval=0.1, out=out)
    assert 0.4 < waited < 10
    lines = out.getvalue().splitlines()
    assert lines[0] == f"worker 0: waiting (up to 20 s) for file {path}"
    assert lines[-1].startswith("worker 0: ready after ")


def test_wait_gives_up_naming_everything_missing(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(StartupTimeoutError) as info:
        wait_until_ready(["http://127.0.0.1:9"], [str(tmp_path / "x")], timeout=0.5,
                         who="export", interval=0.1, out=None)
    assert time.monotonic() - start < 5
    message = str(info.value)
    assert message.startswith("export: still missing after 0.5 s: http://127.0.0.1:9/health")
    assert f"file {tmp_path / 'x'}" in message


def test_worker_without_start_timeout_fails_at_once(tmp_path: Path) -> None:
    options = WorkerOptions(server="http://127.0.0.1:9", input=str(tmp_path / "x.svm"),
                            num_workers=1, worker_index=0)
    with pytest.raises(ConfigError, match="input file not found"):
        run_worker(options)
    with pytest.raises(ConfigError, match="start_timeout must be >= 0"):
        run_worker(WorkerOptions(server="http://s", input="x", num_workers=1, start_timeout=-1))


def test_worker_without_start_timeout_fails_at_once_for_a_server_that_refuses(
        tmp_path: Path) -> None:
    """--start-timeout 0 ("fail at once"): a wrong URL, alone or beside a right one, is
    an error at once, not after the --retry-seconds window (which rides out a shard
    restart during a run)."""
    data = tmp_path / "x.svm"
    data.write_text("1 1:1\n")
    with real_server(["--bits", "12", "--group-size", "64", "--num-shards", "2",
                      "--num-workers", "1"]) as srv:
        for urls in ("http://127.0.0.1:9", f"{srv.url},http://127.0.0.1:9"):
            start = time.monotonic()
            with pytest.raises(StartupTimeoutError, match=r"no server answers at "
                               r"http://127.0.0.1:9/health \(not reachable.*--start-timeout"):
                run_worker(WorkerOptions(server=urls, input=str(data), num_workers=1,
                                         worker_index=0, retry_seconds=20))
            assert time.monotonic() - start < 10


def test_export_without_start_timeout_fails_at_once_for_a_server_that_refuses(
        tmp_path: Path) -> None:
    """As the worker's: export retried a wrong URL for the client's 120 s (QA)."""
    failed: list[BaseException] = []

    def export() -> None:
        try:
            run_export(ExportOptions(server="http://127.0.0.1:9", model=str(tmp_path / "m")))
        except BaseException as exc:  # noqa: BLE001 - kept for the assertion
            failed.append(exc)

    thread = threading.Thread(target=export, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "export still retrying after 10 s"
    assert isinstance(failed[0], StartupTimeoutError)
    assert "export: no server answers at http://127.0.0.1:9/health" in str(failed[0])


def test_worker_waits_for_its_input_and_names_it(tmp_path: Path) -> None:
    options = WorkerOptions(server="http://127.0.0.1:9", input=str(tmp_path / "x.svm"),
                            num_workers=1, worker_index=0, start_timeout=0.3)
    with pytest.raises(StartupTimeoutError, match=r"worker 0: still missing after 0.3 s: .*"
                       r"127.0.0.1:9/health .*file .*x\.svm"):
        run_worker(options)


@pytest.mark.parametrize("form", ["glob", "directory", "directory not there yet"])
def test_worker_waits_for_a_glob_or_directory_to_have_files(tmp_path: Path, form: str) -> None:
    """``ftrl-ps worker --start-timeout``: a glob waits for a matching file, a
    directory (there, or not yet) for a file in it, as a file path waits for the
    file; then the worker trains them (a real server and worker process)."""
    later = tmp_path / "later"
    if form == "directory":
        later.mkdir()  # there, but its files are not copied in yet
    spec = str(later / "part-*") if form == "glob" else str(later)
    assert unmet([], [], inputs=[spec]) == [f"a file matching {spec}" if form == "glob"
                                 else f"a file in the directory {spec}" if form == "directory"
                                 else f"file {spec}"]

    def copy() -> None:
        later.mkdir(exist_ok=True)
        (later / "part-0").write_text("1 1:1\n0 2:1\n")

    timer = threading.Timer(1.5, copy)
    with real_server(["--bits", "10", "--token", TOKEN]) as srv:
        timer.start()
        res = run_cli("worker", "--server", srv.url, "--input", spec, "--start-timeout", "30",
                      "--worker-index", "0", "--num-workers", "1", "--bits", "10",
                      env={**os.environ, "FTRL_PS_TOKEN": TOKEN})
    timer.cancel()
    assert res.returncode == 0, res.stderr
    assert "waiting (up to 30 s) for" in res.stderr and "2 rows" in res.stderr


# --- a run's completeness ----------------------------------------------------------------


def test_progress_of_a_run() -> None:
    done = RunProgress.from_snapshot({"num_workers": 2, "workers": [
        {"index": 0, "state": "finished"}, {"index": 1, "state": "dead"},
        {"index": 1, "state": "finished"}]})
    assert done.complete and not done.stalled and done.dead == ()
    running = RunProgress.from_snapshot({"num_workers": 2, "workers": [
        {"index": 0, "state": "dead"}, {"index": 0, "state": "live"}]})
    assert (running.live, running.dead, running.missing) == ((0,), (), (1,))
    assert not running.stalled
    assert running.describe() == ("0 of 2 configured workers finished; running: worker 0; "
                                  "never registered: worker 1")
    empty = RunProgress.from_snapshot({"num_workers": None, "workers": []})
    assert not empty.complete and not empty.stalled
    assert empty.describe() == "no worker has registered yet"
    # worker 1 never registered: stalled only once the clock stops expecting it
    early = {"num_workers": 2, "workers": [{"index": 0, "state": "finished"}]}
    assert not RunProgress.from_snapshot({**early, "missing_indices": [1]}).stalled
    assert RunProgress.from_snapshot({**early, "missing_indices": []}).stalled


def _one_of_two_workers_finishes(url: str) -> None:
    """Worker 0 of 2 registers and finishes; worker 1 never shows up."""
    with PSClient(url) as client:
        client.register(0, 2)
        client.finish()


def test_export_refuses_an_incomplete_run(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The registration timeout has passed (the clock no longer lists worker 1 as
    missing), yet the export does not take the run for finished."""
    with real_server(["--bits", "10", "--num-workers", "2",
                      "--registration-timeout", "0.2"]) as srv:
        _one_of_two_workers_finishes(srv.url)
        time.sleep(0.5)
        with PSClient(srv.url) as client:
            assert client.status()["clock"]["missing_indices"] == []
        model = tmp_path / "m.ftrl"
        options = ExportOptions(server=srv.url, model=str(model), wait=True, timeout=1.5)
        with pytest.raises(IncompleteRunError, match=r"incomplete after 1.5 s: 1 of 2 "
                           r"configured workers finished; never registered: worker 1"):
            run_export(options)
        assert not model.exists()
        err = capsys.readouterr().err
        assert "WARNING: the run is incomplete" in err
        assert "with the same --num-workers (FTRL_PS_NUM_WORKERS for the services)" in err
        metrics = tmp_path / "m.json"
        results = run_export(ExportOptions(server=srv.url, model=str(model), wait=True,
                                           timeout=5, allow_incomplete=True,
                                           metrics_json=str(metrics)))
    assert model.exists() and results["complete"] is False
    assert json.loads(metrics.read_text())["workers_finished"] == [0]
    assert "INCOMPLETE RUN: 1 of 2 configured workers finished" in capsys.readouterr().err


def test_export_refuses_a_model_a_shard_lost_pushes_of(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Shard 1 restarted empty (no checkpoint) after the worker finished: the clock
    says complete, but shard 1 no longer holds the worker's pushes (its finish said
    which it sent there), so the export refuses as for an incomplete run, or with
    --allow-incomplete writes it marked incomplete. (It wrote half a model marked
    complete, exit 0.)"""
    from tests.test_serve_ops import free_port

    data = tmp_path / "t.svm"
    data.write_text("".join(f"{i % 2} {i * 37 % 4000}:1 {i * 91 % 4000}:1\n" for i in range(300)))
    common = ["--bits", "12", "--group-size", "64", "--num-shards", "2", "--num-workers", "1"]
    shard1 = [*common, "--shard-index", "1", "--port", str(free_port())]
    model = tmp_path / "m.ftrl"
    with real_server([*common, "--shard-index", "0"]) as s0:
        with real_server(shard1) as s1:
            urls = f"{s0.url},{s1.url}"
            run_worker(WorkerOptions(server=urls, input=str(data), num_workers=1,
                                     worker_index=0, quiet=True, batch_size=10))
            whole = run_export(ExportOptions(server=urls, model=str(model), wait=True))
        assert whole["complete"] is True and whole["rows"] == 300
        model.unlink()
        with real_server(shard1):  # the same URL, started empty
            with pytest.raises(IncompleteRunError, match=r"incomplete: shard 1 \(http\S+\) "
                               r"lacks pushes of finished worker\(s\) \[0\].*--allow-incomplete"):
                run_export(ExportOptions(server=urls, model=str(model), wait=True, timeout=5))
            assert not model.exists()
            part = run_export(ExportOptions(server=urls, model=str(model), wait=True,
                                            allow_incomplete=True))
    assert part["complete"] is False and part["keys"] < whole["keys"]
    assert "INCOMPLETE RUN: 1 of 1 configured workers finished; shard 1" \
        in capsys.readouterr().err


def test_exports_lines_are_json_with_log_format_json(tmp_path: Path) -> None:
    """``export --log-format json``: its waiting, incomplete-run and dead-worker
    lines are JSON objects like every other stderr line (they were plain prints)."""
    from tests.conftest import run_cli

    with real_server(["--bits", "10", "--num-workers", "2",
                      "--registration-timeout", "0.2"]) as srv:
        _one_of_two_workers_finishes(srv.url)
        time.sleep(0.5)
        res = run_cli("export", "--server", srv.url, "--model", str(tmp_path / "m.ftrl"),
                      "--wait", "--timeout", "5", "--allow-incomplete", "--log-format", "json")
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in res.stderr.splitlines()]  # each line an object
    assert any(o["message"].startswith("INCOMPLETE RUN: 1 of 2 configured workers")
               and o["level"] == "warning" for o in lines), [o["message"] for o in lines]


# --- a server waits for its checkpoint volume (server/run.py) ---------------------------


def test_server_waits_for_its_checkpoint_dir(tmp_path: Path) -> None:
    from ftrl_ps.server.options import ShardOptions
    from ftrl_ps.server.run import wait_for_checkpoint_dir

    ckpt = tmp_path / "checkpoints"
    threading.Timer(0.6, ckpt.mkdir).start()
    out = io.StringIO()
    options = ShardOptions(checkpoint_dir=str(ckpt), start_timeout=20, shard_index=1)
    waited = wait_for_checkpoint_dir(options, interval=0.1, out=out)
    assert 0.4 < waited < 10
    lines = out.getvalue().splitlines()
    assert lines[0] == (f"ftrl-ps server shard 1: --checkpoint-dir (a volume not mounted yet?): "
                        f"waiting (up to 20 s) for file {ckpt}")
    assert lines[-1].startswith("ftrl-ps server shard 1: --checkpoint-dir (a volume not "
                                "mounted yet?): ready after ")
    # nothing to wait for: no directory, or start_timeout 0 (the command line's default)
    assert wait_for_checkpoint_dir(ShardOptions(start_timeout=20), out=None) == 0.0
    assert wait_for_checkpoint_dir(ShardOptions(checkpoint_dir=str(tmp_path / "new")),
                                   out=None) == 0.0


def test_server_gives_up_on_a_missing_checkpoint_dir_without_creating_it(
        tmp_path: Path) -> None:
    from ftrl_ps.server.options import ShardOptions
    from ftrl_ps.server.run import run_shard

    ckpt = tmp_path / "checkpoints"
    options = ShardOptions(checkpoint_dir=str(ckpt), start_timeout=0.3)
    start = time.monotonic()
    with pytest.raises(StartupTimeoutError, match=r"still missing after 0\.3 s: file .*checkp"):
        run_shard(options)
    assert time.monotonic() - start < 5
    assert not ckpt.exists()  # not silently created in the wrong place
    ckpt.write_text("not a directory")
    with pytest.raises(ConfigError, match="exists but is not a directory"):
        run_shard(options)
    with pytest.raises(ConfigError, match="start_timeout must be >= 0"):
        run_shard(ShardOptions(checkpoint_dir=str(tmp_path), start_timeout=-1))


def test_export_takes_test_parts_as_a_glob_a_directory_or_a_url(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``export --test`` reads the forms ``train --test`` and ``eval`` read (a glob
    and a file:// URL were refused as 'test file not found'); nothing matching is
    an error naming the input, before anything is written."""
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "t-0.svm").write_text("1 3:1 5:1\n0 4:1\n")
    (parts / "t-1.svm").write_text("0 3:1\n1 5:1 6:1\n")
    with real_server(["--bits", "10", "--num-workers", "2"]) as srv:
        _one_of_two_workers_finishes(srv.url)
        for test in (str(parts / "t-*"), parts.as_uri(), str(parts)):
            model = tmp_path / "m.ftrl"
            results = run_export(ExportOptions(server=srv.url, model=str(model), test=test,
                                               allow_incomplete=True))
            assert model.exists() and results["test_rows"] == 4, test
            model.unlink()
        with pytest.raises(ConfigError, match=r"no input files match .*nope-\*"):
            run_export(ExportOptions(server=srv.url, model=str(tmp_path / "x.ftrl"),
                                     test=str(parts / "nope-*")))
        assert not (tmp_path / "x.ftrl").exists()


def test_export_keeps_the_complete_verdict_its_wait_ended_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The wait saw every worker finished; a worker registering again before the
    export's last status (a restart with nothing left to do) no longer labels the
    model 'INCOMPLETE RUN' (QA saw it once: every row was trained)."""
    real_status, real_dump = PSClient.status, PSClient.dump_state
    dumped = {"at": False}

    def dump_state(self: PSClient) -> tuple:
        dumped["at"] = True
        return real_dump(self)

    def status(self: PSClient, shard: int = 0) -> dict:
        answer = real_status(self, shard)
        if dumped["at"] and shard == 0:  # after the wait and the dump: index 1 back, live
            workers = [w for w in answer["clock"]["workers"] if w["index"] != 1]
            answer["clock"]["workers"] = [*workers, {"index": 1, "state": "live"}]
        return answer

    with real_server(["--bits", "10", "--num-workers", "2"]) as srv:
        for index in (0, 1):
            with PSClient(srv.url) as client:
                client.register(index, 2)
                client.finish()
        monkeypatch.setattr(PSClient, "status", status)
        monkeypatch.setattr(PSClient, "dump_state", dump_state)
        model = tmp_path / "m.ftrl"
        results = run_export(ExportOptions(server=srv.url, model=str(model), wait=True,
                                           timeout=5))
    assert dumped["at"] and results["complete"] is True
    assert "INCOMPLETE" not in capsys.readouterr().err
