"""The local cluster (``ftrl-ps train --workers N``): real uvicorn servers and worker processes."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ftrl_ps.core.modelio import load_model
from tests.conftest import REPO, run_cli

COMMON = ["--bits", "18", "--batch-size", "100", "--fetch-step", "2", "--push-step", "2", "-q"]


@pytest.fixture(scope="module")
def single_a9a(a9a: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> float:
    train, test = a9a
    out = tmp_path_factory.mktemp("single") / "m.json"
    res = run_cli(
        "train", str(train), "--test", str(test), "--bits", "18", "-q", "--metrics-json", str(out)
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(out.read_text())["test_logloss"]
    assert got <= 0.326
    return float(got)


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers, staleness, servers",
    [(w, s, 1) for w in (2, 4) for s in ("0", "3", "inf")] + [(2, "3", 2), (4, "inf", 2)],
)
def test_cluster_quality_matches_single_process(
    a9a: tuple[Path, Path],
    single_a9a: float,
    tmp_path: Path,
    workers: int,
    staleness: str,
    servers: int,
) -> None:
    train, test = a9a
    metrics, model = tmp_path / "m.json", tmp_path / "m.ftrl"
    res = run_cli(
        "train",
        str(train),
        "--test",
        str(test),
        "--workers",
        str(workers),
        "--staleness",
        staleness,
        "--servers",
        str(servers),
        "--model",
        str(model),
        "--metrics-json",
        str(metrics),
        *COMMON,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(metrics.read_text())
    assert got["rows"] == 32561  # every line read exactly once across the workers
    assert abs(got["test_logloss"] - single_a9a) <= 0.003, (got["test_logloss"], single_a9a)
    # the whole run, and the workers' span inside it (comparable with one process's loop)
    assert 0 < got["workers_seconds"] < got["train_seconds"]
    assert f"the workers trained for {got['workers_seconds']:.2f} s" in res.stdout
    if staleness != "inf":
        assert got["max_gap_allowed"] <= int(staleness)
    saved = load_model(model)
    assert saved.bits == 18 and saved.keys.size > 100


def _logs_in(tmp_path: Path, **env: str) -> dict[str, str]:
    """Environment for a launcher whose kept logs go under ``tmp_path``."""
    return dict(os.environ, TMPDIR=str(tmp_path), **env)


def _children_of(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_failing_worker_stops_the_cluster(tmp_path: Path) -> None:
    """A bad line ends the run at once (exit code 3: a data error, not restarted: a new
    worker would stop on the same line), naming the file and line."""
    bad = tmp_path / "bad.svm"
    lines = [f"{i % 2} {i % 50}:1 {50 + i % 7}:1" for i in range(4000)]
    lines[3500] = "1 7:oops"  # in the last worker's share (fixed shares)
    bad.write_text("\n".join(lines) + "\n")
    res = run_cli(
        "train", str(bad), "--workers", "2", "--split", "shares", *COMMON, timeout=120,
        env=_logs_in(tmp_path)
    )
    assert res.returncode == 1
    assert "worker 1 exited with code 3 (an error in its input data: not restarted)" in res.stderr
    assert "restarted (it resumes" not in res.stderr
    assert "bad.svm:3501" in res.stderr  # the worker's own message is shown
    assert "Traceback" not in res.stderr.split("its log")[0]


@pytest.mark.parametrize("broken", ["bad line", "truncated gzip"])
def test_a_data_error_in_a_folder_of_parts_ends_the_run_at_once(tmp_path: Path,
                                                                 broken: str) -> None:
    """Units of a folder: a bad line or a truncated .gz part (like a part that cannot
    be opened: each a DataError) stops its worker with exit code 3, and the run ends
    with that error, not after --max-restarts restarts with another one."""
    d = tmp_path / "in"
    d.mkdir()
    lines = "".join(f"{i % 2} {i % 50}:1 {50 + i % 7}:1\n" for i in range(3000))
    (d / "a.svm").write_text(lines)
    if broken == "bad line":
        (d / "b.svm").write_text(lines[:3000] + "1 7:oops\n" + lines)
        why = "b.svm:"
    else:
        (d / "b.svm.gz").write_bytes(gzip.compress(lines.encode())[:-40])
        why = "b.svm.gz: Compressed file ended"
    res = run_cli("train", str(d), "--workers", "2", *COMMON, timeout=120,
                  env=_logs_in(tmp_path))
    assert res.returncode == 1, res.stderr
    assert "exited with code 3 (an error in its input data: not restarted)" in res.stderr
    assert "restarted (it resumes" not in res.stderr and "plan" not in res.stderr
    assert why in res.stderr.split("its log")[1], res.stderr


def test_skipped_lines_are_reported_at_the_end_as_in_one_process(tmp_path: Path) -> None:
    """--skip-bad-lines in a cluster: the same "skipped N malformed line(s)" block as
    one process (the total over the workers, their first lines named by part and line,
    in input order), and the total in --metrics-json."""
    d = tmp_path / "in"
    d.mkdir()
    lines = [f"{i % 2} {i % 50}:1 {50 + i % 7}:1\n" for i in range(10000)]  # 138 KiB:
    (d / "a.svm").write_text("".join(lines))  # 3 units of the smallest size, 64 KiB
    (d / "b.svm").write_text("".join(lines[:1233]) + "2 3:1\n" + "".join(lines[:500]))
    (d / "c.svm.gz").write_bytes(gzip.compress(("".join(lines[:6]) + "x 3:1\n").encode()))
    out = tmp_path / "m.json"
    res = run_cli("train", str(d), "--workers", "2", "--skip-bad-lines", "--unit-mb", "0.0625",
                  "--metrics-json", str(out), *COMMON, timeout=120, env=_logs_in(tmp_path))
    assert res.returncode == 0, res.stderr
    assert (f"skipped 2 malformed line(s); first ones:\n  {d}/b.svm:1234: '2': label must be "
            f"-1, 0 or 1\n  {d}/c.svm.gz:7: 'x': label must be -1, 0 or 1\n") in res.stderr
    got = json.loads(out.read_text())
    assert got["bad_lines"] == 2 and got["rows"] == 10000 + 1733 + 6


@pytest.mark.parametrize("method", ["fork", "exec"])
def test_ctrl_c_stops_every_process(tmp_path: Path, method: str) -> None:
    data = tmp_path / "d.svm"
    data.write_text("".join(f"{i % 2} {i % 97}:1 {100 + i % 13}:1\n" for i in range(200000)))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ftrl_ps",
            "train",
            str(data),
            "--workers",
            "2",
            "--bits",
            "10",
            "--batch-size",
            "10",
            "--fetch-step",
            "1",
            "--push-step",
            "1",
            "-q",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_logs_in(tmp_path, FTRL_PS_LAUNCH=method),
    )
    try:
        deadline = time.monotonic() + 60
        while len(_children_of(proc.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        children = _children_of(proc.pid)
        assert len(children) >= 3, "servers and workers did not start"
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"left running: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_failing_server_is_named_with_its_log(tmp_path: Path) -> None:
    data = tmp_path / "d.svm"
    data.write_text("1 1:1\n0 2:1\n")
    # 3 shards of a 2-group key space: the server refuses to start
    res = run_cli(
        "train", str(data), "--workers", "1", "--servers", "3", "--bits", "4",
        "--group-size", "16", timeout=120, env=_logs_in(tmp_path),
    )
    assert res.returncode == 1
    assert "server 0 exited with code 2" in res.stderr
    assert "exceeds the number of parameter groups" in res.stderr  # the tail of its log
    kept = [ln for ln in res.stderr.splitlines() if ln.startswith("logs kept in ")]
    logdir = Path(kept[0].split(" ", 3)[3])
    assert len(kept) == 1 and (logdir / "server-0.log").is_file()
    assert logdir.parent == tmp_path


def test_workers_zero_is_single_process(tmp_path: Path) -> None:
    data = tmp_path / "d.svm"
    data.write_text("1 1:1\n0 2:1\n")
    res = run_cli("train", str(data), "--workers", "0", "--bits", "4", "-q")
    assert res.returncode == 0 and "trained 2 rows" in res.stdout


@pytest.mark.slow
def test_cluster_on_generated_ctr_data_matches_single_process(
    synth_small: Path, tmp_path: Path
) -> None:
    """Dense numeric fields plus power-law categorical ones, launcher defaults."""
    train, test = synth_small / "train.svm", synth_small / "test.svm"
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    res = run_cli(
        "train", str(train), "--test", str(test), "--bits", "18", "-q", "--metrics-json", str(one)
    )
    assert res.returncode == 0, res.stderr
    res = run_cli(
        "train",
        str(train),
        "--test",
        str(test),
        "--bits",
        "18",
        "-q",
        "--workers",
        "2",
        "--metrics-json",
        str(two),
        timeout=240,
    )
    assert res.returncode == 0, res.stderr
    single, cluster = json.loads(one.read_text()), json.loads(two.read_text())
    # no worse than one process (on 20k rows averaging the dense keys' deltas
    # even helps a little: measured 0.411 vs 0.414)
    assert cluster["test_logloss"] - single["test_logloss"] <= 0.003, (cluster, single)
    assert abs(cluster["test_auc"] - single["test_auc"]) <= 0.005


@pytest.mark.parametrize("fraction", ["0.2", "0"])
def test_warm_start_has_one_worker_train_alone_first(
    synth_small: Path, tmp_path: Path, fraction: str
) -> None:
    """``--warm-fraction 0.2``: 20,000 rows in rounds of 100 x 2 rows -> about 20
    rounds (the launcher estimates the rows from a sample of the file) that one
    worker trains, in one push and one tick, before the other begins (its first
    step comes later)."""
    metrics = tmp_path / "m.json"
    res = run_cli("train", str(synth_small / "train.svm"), "--workers", "2", "--staleness",
                  "0", "--warm-fraction", fraction, "--metrics-json", str(metrics), *COMMON,
                  timeout=240)
    assert res.returncode == 0, res.stderr
    got = json.loads(metrics.read_text())
    assert got["rows"] == 20000
    if fraction == "0":
        assert got["warm_start"] is None
        return
    warm = got["warm_start"]
    assert warm["rounds"] == 1 and warm["over"] and warm["worker"] in (0, 1)
    lone, other = warm["worker"], 1 - warm["worker"]
    # (which worker's process began first says nothing: the lone one is the first
    # whose first round is read and numbered)
    # the lone worker's one push before the other began is merged as one worker's
    alone = {r["worker_index"]: r["pushes_alone"] for r in got["worker_reports"]}
    assert alone == {lone: 1, other: 0}
    # ... and carried about 20 % of the rows (18-22 rounds of 200), all trained
    # before the other worker's first step
    timeline = {r["worker_index"]: r["timeline"] for r in got["worker_reports"]}
    first_step = min(t for t, rows in timeline[other] if rows > 0)
    assert max(rows for t, rows in timeline[lone] if t <= first_step) >= 3600


def test_warm_fraction_out_of_range_is_a_clear_error(tmp_path: Path) -> None:
    data = tmp_path / "d.svm"
    data.write_text("1 1:1\n0 2:1\n")
    res = run_cli("train", str(data), "--workers", "2", "--warm-fraction", "1", "-q")
    assert res.returncode != 0 and "--warm-fraction must be in [0, 1)" in res.stderr


def test_a_directory_is_handed_out_in_units_unless_shares_are_asked(tmp_path: Path) -> None:
    """A directory of parts (one gzip) has no byte ranges to share: by default
    (--split auto) the cluster hands out its units; '--split shares' is refused
    before any process starts, not by workers that fail and are restarted."""
    import gzip

    parts = tmp_path / "parts"
    parts.mkdir()
    lines = [f"{i % 2} {i % 7}:1 {7 + i % 5}:1\n" for i in range(300)]
    (parts / "a.svm").write_text("".join(lines[:200]))
    (parts / "b.svm.gz").write_bytes(gzip.compress("".join(lines[200:]).encode()))
    metrics = tmp_path / "m.json"
    res = run_cli("train", str(parts), "--workers", "2", "--bits", "6", "-q",
                  "--metrics-json", str(metrics), env=_logs_in(tmp_path))
    assert res.returncode == 0, res.stderr
    got = json.loads(metrics.read_text())
    assert got["split"] == "units" and got["rows"] == 300
    logs = list(tmp_path.glob("ftrl-ps-cluster-*"))
    res = run_cli("train", str(parts), "--workers", "2", "--bits", "6", "-q", "--split", "shares",
                  env=_logs_in(tmp_path))
    assert res.returncode == 2
    assert "'--split shares' reads byte ranges of one plain file" in res.stderr
    assert "worker 0" not in res.stderr
    assert list(tmp_path.glob("ftrl-ps-cluster-*")) == logs  # refused before anything started


def test_gzip_input_is_refused_with_fixed_shares_and_trained_with_units(tmp_path: Path) -> None:
    import gzip

    data = tmp_path / "d.svm.gz"
    data.write_bytes(gzip.compress(b"1 1:1\n0 2:1\n"))
    res = run_cli("train", str(data), "--workers", "2", "--bits", "4", "-q", "--split", "shares",
                  env=_logs_in(tmp_path))
    assert res.returncode == 2
    assert "gzip-compressed" in res.stderr and "worker 0" not in res.stderr
    # refused before any process started: no empty log folder is left behind
    assert not list(tmp_path.glob("ftrl-ps-cluster-*"))
    for split in ("units", "auto"):  # auto: a gzip file has no byte ranges, units
        res = run_cli("train", str(data), "--workers", "2", "--bits", "4", "-q", "--split", split)
        assert res.returncode == 0, res.stderr
        assert "trained 2 rows" in res.stdout
        # one worker reads the one .gz whole: the run says the other one idles
        assert (f"{data} is one gzip file: a gzip stream cannot be split, so one worker reads "
                "each whole and 1 of the 2 workers will idle") in res.stderr
    (tmp_path / "p").mkdir()  # as many .gz parts as workers: no warning
    for i in range(2):
        (tmp_path / "p" / f"{i}.gz").write_bytes(gzip.compress(b"1 1:1\n0 2:1\n"))
    res = run_cli("train", str(tmp_path / "p"), "--workers", "2", "--bits", "4", "-q")
    assert res.returncode == 0 and "will idle" not in res.stderr, res.stderr


@pytest.mark.slow
def test_cluster_resumes_from_a_saved_model(a9a: tuple[Path, Path], tmp_path: Path) -> None:
    train, test = a9a
    first, again = tmp_path / "first.ftrl", tmp_path / "again.json"
    res = run_cli("train", str(train), "--bits", "18", "--model", str(first), "-q")
    assert res.returncode == 0, res.stderr
    res = run_cli(
        "train",
        str(train),
        "--test",
        str(test),
        "--workers",
        "2",
        "--resume",
        str(first),
        "--metrics-json",
        str(again),
        "-q",
        timeout=240,
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(again.read_text())
    assert got["bits"] == 18  # taken from the model
    # the servers start from the saved state: the second pass predicts far better
    # than a fresh first pass (progressive logloss 0.335 on a9a)
    assert got["progressive_logloss"] < 0.33
    assert got["test_logloss"] <= 0.326


@pytest.mark.parametrize("rows, workers, fraction, expected", [
    # capped at 50,000 rows: one push of one 50,000-row step, not a round of 4 steps
    (20_000_000, 2, 0.05, (1, 1)),
    (5_000_000, 2, 0.05, (1, 2)),  # capped: 2 steps of 31,250 rows, not 4
    (2_000_000, 2, 0.05, (1, None)),  # capped, but one round is 4 x 12,500 rows: 50,000
    (1_000_000, 2, 0.05, (1, 8)),  # 50,000 rows: 2 pushes of 4 x 6,250, in one
    (26_773, 8, 0.05, (1, 28)),  # iPinYou: 1,339 rows, 7 pushes of 4 x 50 (the batch floor)
    (1_200_000, 8, 0.05, (1, 28)),  # capped at 50,000 rows: 7 pushes of 4 x 1,875
    (1_000, 8, 0.05, (1, None)),  # at least one round
    (1_000_000, 2, 0.0, (0, None)),  # none
])
def test_the_warm_start_is_a_share_of_the_input_in_whole_pushes_and_one_tick(
    rows: int, workers: int, fraction: float, expected: tuple[int, int | None],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    import ftrl_ps.cluster.local as local

    monkeypatch.setattr(local, "estimate_rows", lambda _: rows)
    opts = local.LocalClusterOptions(train="t.svm", workers=workers, epochs=1,
                                     warm_fraction=fraction)
    assert local.local_warm_start(opts) == expected


def test_the_lone_workers_push_step_reaches_the_worker_config() -> None:
    """From the launcher (local_warm_start's second figure) and from ``ftrl-ps
    worker --warm-push-step`` to the worker loop's config."""
    from ftrl_ps.cli import build_parser
    from ftrl_ps.cli._common import options_from
    from ftrl_ps.cluster.local import LocalClusterOptions, _worker_options
    from ftrl_ps.core.params import FTRLParams
    from ftrl_ps.ps.worker_main import WorkerOptions, worker_config

    opts = LocalClusterOptions(train="t.svm", workers=2, batch_size=100)
    launched = _worker_options(opts, ["http://x"], FTRLParams(), 20, 0, Path("m.json"),
                               "float32", 1)
    assert worker_config(launched).warm_push_step == 1
    assert _worker_options(opts, ["http://x"], FTRLParams(), 20, 0, Path("m.json"),
                           "float32").warm_push_step is None
    command = ["worker", "--server", "http://x", "--input", "t.svm", "--num-workers", "2",
               "--worker-index", "0"]
    parser = build_parser()
    assert options_from(WorkerOptions, parser.parse_args(command)).warm_push_step is None
    given = options_from(WorkerOptions, parser.parse_args([*command, "--warm-push-step", "2"]))
    assert worker_config(given).warm_push_step == 2


def test_train_warm_push_step_is_the_lone_workers_not_the_warm_fractions(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ftrl-ps train --workers N --warm-push-step K`` reaches the lone worker (it was
    parsed, checked, then replaced by local_warm_start's figure); without a warm start
    it would do nothing, so it is refused."""
    import ftrl_ps.cluster.local as local
    from ftrl_ps.cli import build_parser
    from ftrl_ps.cli._common import options_from
    from ftrl_ps.errors import ConfigError

    monkeypatch.setattr(local, "estimate_rows", lambda _: 1_000_000)
    command = ["train", "t.svm", "--workers", "2"]
    for given, expected in ((None, (1, 8)), ("1", (1, 1)), ("40", (1, 40))):
        flags = [] if given is None else ["--warm-push-step", given]
        opts = options_from(local.LocalClusterOptions, build_parser().parse_args(
            [*command, *flags]), epochs=1)
        assert local.local_warm_start(opts) == expected
    off = options_from(local.LocalClusterOptions, build_parser().parse_args(
        [*command, "--warm-push-step", "3", "--warm-fraction", "0"]), epochs=1)
    with pytest.raises(ConfigError, match="--warm-push-step"):
        off.check()


def test_train_help_of_warm_push_step_is_trains() -> None:
    from ftrl_ps.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command" or a.choices)
    text = " ".join(sub.choices["train"].format_help().split())
    assert "from --warm-fraction" in text
    assert "while this worker trains alone" not in text


@pytest.mark.parametrize("rows, workers, expected", [
    (20_000_000, 2, 50_000),  # capped: 50 rounds of 4 x 50,000 rows per worker
    (6_000_000, 2, 37_500),  # 20 rounds of 4 x 37,500 rows
    (1_000_000, 2, 6_250),  # 20 rounds of 4 x 6,250 rows
    (32_561, 4, 101),  # a9a: 20 rounds
    (1_000, 8, 50),  # floor: a round or two per worker
])
def test_default_batch_gives_about_20_rounds_within_bounds(
    rows: int, workers: int, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ftrl_ps.cluster.local as local

    monkeypatch.setattr(local, "estimate_rows", lambda _: rows)
    opts = local.LocalClusterOptions(train="t.svm", workers=workers, epochs=1)
    assert local.local_batch_size(opts) == expected
    assert local.local_batch_size(local.LocalClusterOptions(
        train="t.svm", workers=workers, epochs=1, batch_size=7)) == 7
