"""Work handed out on demand: the queue on shard 0, its routes, and clusters that use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import fsspec
import numpy as np
import pytest
from fastapi.testclient import TestClient

from ftrl_ps.core.ftrl import FTRLParams
from ftrl_ps.data.sources import expand
from ftrl_ps.errors import ConfigError, WorkerStateError
from ftrl_ps.ps.client import PSClient
from ftrl_ps.ps.handout import WorkClient, plan, train_units
from ftrl_ps.ps.worker import Worker, WorkerConfig
from ftrl_ps.ps.worker_main import WorkerOptions
from ftrl_ps.ps.workqueue import WorkQueue
from tests._servers import in_process_cluster
from tests.test_sources import _lines, parts  # noqa: F401  (fixture)


def _plan(n: int) -> list[dict]:
    return [{"id": i, "part": "p", "start": 10 * i, "end": 10 * i + 10, "gzip": False}
            for i in range(n)]


def test_every_unit_is_handed_out_once_and_done_once() -> None:
    q = WorkQueue()
    assert q.load(_plan(5), "x") == 5 and q.load(_plan(5), "x") == 5  # idempotent
    got = {0: q.next(0, holding=[])["id"], 1: q.next(1, holding=[])["id"]}
    assert got == {0: 0, 1: 1}
    seen = [0, 1]
    a = q.next(0, done=[(0, 7)], holding=[])["id"]
    b = q.next(0, done=[(a, 7)], holding=[])["id"]
    c = q.next(1, done=[(1, 7)], holding=[])["id"]
    seen += [a, b, c]
    assert sorted(seen) == [0, 1, 2, 3, 4]
    assert q.next(0, done=[(b, 7)], holding=[]) is None
    assert q.next(0, done=[(b, 7)], holding=[]) is None  # a retried report is fine
    assert q.next(1, done=[(c, 7)], holding=[]) is None
    assert q.summary() == {"plan": "x", "units": 5, "pending": 0, "assigned": 0, "done": 5,
                           "held": {}, "rows_done": 35}


def test_a_restarted_worker_resumes_its_unit_and_dead_workers_units_are_taken() -> None:
    q = WorkQueue()
    q.load(_plan(3), "x")
    first = q.next(0, holding=[])["id"]
    q.next(0, holding=[first], progress=[(first, 4)])  # holds two units now
    # the worker restarts: it holds nothing, so it gets its units back, with the rows
    # already applied of the first
    again = q.next(0, holding=[])
    assert again["id"] == first and again["rows_done"] == 4
    q.next(1, holding=[])  # takes the last pending unit
    assert q.next(1, done=[(2, 10)], holding=[]) is None  # worker 0's units are its own
    taken = q.next(1, holding=[], dead=[0])
    assert taken is not None and taken["id"] in (0, 1)



def test_a_restarted_worker_resumes_after_the_rows_its_journal_says_were_applied() -> None:
    """Units resume after the worker's applied rows (``applied``, from its push
    journal), not after the progress it last reported, which may lag a push."""
    q = WorkQueue()
    q.load(_plan(3), "x")
    assert q.next(0, holding=[], position=100, applied=100)["id"] == 0  # begun at row 100
    q.progress(0, [(0, 20)])  # reported: 20 of its rows applied
    # unit 0 read to its end at row 150 (50 rows): unit 1 begins there, unit 0 still held
    assert q.next(0, holding=[0], position=150, applied=120)["id"] == 1
    # killed; the journal's pushes cover rows up to 135: unit 0 resumes after 35 rows
    again = q.next(0, holding=[], position=135, applied=135)
    assert (again["id"], again["rows_done"]) == (0, 35)
    # killed again, after its pushes covered every row of unit 0 and 10 of unit 1:
    # unit 0 is done (all 50 rows), unit 1 resumes after 10
    again = q.next(0, holding=[], position=160, applied=160)
    assert (again["id"], again["rows_done"]) == (1, 10)
    assert q.summary()["done"] == 1 and q.summary()["rows_done"] == 50
    # without the counts (an older worker) the reported progress stands
    q.progress(0, [(1, 12)])
    assert q.next(0, holding=[])["rows_done"] == 12


def test_a_dead_workers_units_are_taken_over_after_its_pushes_applied_here() -> None:
    """Shard 0 knows the position of a worker's last push it applied: a dead
    worker's unit is handed on after those rows, even if it never reported them."""
    q = WorkQueue()
    q.load(_plan(4), "x")
    assert q.next(0, holding=[], position=0, applied=0)["id"] == 0
    assert q.next(0, holding=[0], position=50, applied=0)["id"] == 1  # unit 0 had 50 rows
    q.progress(0, [(0, 20)])  # reported: 20 rows of unit 0
    q.next(1, holding=[], position=0, applied=0)  # takes unit 2
    q.next(1, holding=[2], position=10, applied=0)  # takes unit 3: nothing pending
    assert q.summary()["held"] == {"0": 2, "1": 2}  # by worker index
    # worker 0 dies after pushes covering its first 60 rows were applied: unit 0
    # is done (all 50 rows), unit 1 goes on after its first 10
    taken = q.next(1, done=[(2, 10)], holding=[3], dead=[0], position=20, applied=10,
                   applied_by={0: 60})
    assert (taken["id"], taken["rows_done"]) == (1, 10)
    assert q.summary()["done"] == 2 and q.summary()["rows_done"] == 60
    # without the position, after the rows reported (the older rule)
    q2 = WorkQueue()
    q2.load(_plan(2), "x")
    q2.next(0, holding=[], position=0, applied=0)
    q2.progress(0, [(0, 20)])
    assert q2.next(1, holding=[], dead=[0])["id"] == 1
    assert q2.next(1, done=[(1, 5)], holding=[], dead=[0])["rows_done"] == 20


def test_every_change_of_the_queue_is_logged_and_replayed(tmp_path: Path) -> None:
    """A shard 0 killed after its checkpoint gets the queue back from the
    checkpoint and the log lines after it (or from the log alone)."""
    from ftrl_ps.ps.worklog import WorkLog

    q = WorkQueue()
    q.attach(WorkLog(tmp_path / "w.log"))
    q.load(_plan(4), "x")
    q.next(0, holding=[], position=0, applied=0)
    q.next(1, holding=[], position=0, applied=0)
    saved = q.state()  # a checkpoint here
    q.progress(0, [(0, 4)])
    q.next(1, done=[(1, 10)], holding=[], position=10, applied=10)
    q.next(0, holding=[0], position=10, applied=4)
    for restored in (saved, None):
        again = WorkQueue()
        if restored is not None:
            again.restore(restored)
        replayed = again.attach(WorkLog(tmp_path / "w.log"))
        assert replayed == (3 if restored is not None else 6)
        assert again.state() == q.state() and again.summary() == q.summary()
        # and it goes on as the queue it replaces: unit 1 is done, units 0 and 3 held
        with pytest.raises(WorkerStateError, match="not held by worker 1"):
            again.next(1, done=[(3, 5)], holding=[])



def test_the_log_is_rewritten_as_a_snapshot_and_stays_bounded(tmp_path: Path) -> None:
    """Many changes: the log is rewritten as one snapshot line now and then, its
    size stays bounded, and replaying it gives the queue back from any of the
    checkpoints taken along the way (older or newer than the last snapshot)."""
    from ftrl_ps.ps.worklog import WorkLog

    path = tmp_path / "w.log"
    q = WorkQueue()
    q.compact_bytes = 2_000
    q.attach(WorkLog(path))
    q.load(_plan(40), "x")
    saved, sizes = [None], []
    for i in range(40):
        w = i % 2
        unit = q.next(w, holding=[], position=10 * i, applied=10 * i)["id"]
        for rows in range(1, 10):
            q.progress(w, [(unit, rows)])
        q.next(w, done=[(unit, 10)], holding=[], position=10 * i + 10, applied=10 * i + 10)
        sizes.append(path.stat().st_size)
        if i % 7 == 3:
            saved.append(q.state())
    assert q.summary()["done"] == 40 and q.summary()["rows_done"] == 400
    assert max(sizes) < 3 * 2_000 + 2 * len(json.dumps(q.state()))  # ~400 changes, bounded
    assert sum(1 for _ in WorkLog(path).lines()) < 100
    assert "snapshot" in next(iter(WorkLog(path).lines()))
    for restored in saved:
        again = WorkQueue()
        if restored is not None:
            again.restore(restored)
        again.attach(WorkLog(path))
        assert again.state() == q.state()


@pytest.mark.parametrize("call, error", [
    (lambda q: q.load(_plan(2), "other"), WorkerStateError),
    (lambda q: q.next(1, done=[(0, 3)]), WorkerStateError),  # not its unit
    (lambda q: q.next(0, done=[(9, 3)]), WorkerStateError),  # no such unit
])
def test_bad_requests_are_refused(call, error) -> None:
    q = WorkQueue()
    q.load(_plan(2), "x")
    q.next(0, holding=[])
    with pytest.raises(error):
        call(q)
    with pytest.raises(WorkerStateError, match="malformed"):
        WorkQueue().load([{"id": 1, "part": "p", "start": 0, "end": 1, "gzip": False}], "y")
    with pytest.raises(WorkerStateError, match="no work plan"):
        WorkQueue().next(0)


def _memory_input(d: Path) -> str:
    root = f"memory://h{uuid.uuid4().hex}"
    for f in d.rglob("*"):
        if f.is_file():
            with fsspec.open(f"{root}/{f.relative_to(d).as_posix()}", "wb") as out:
                out.write(f.read_bytes())
    return root + "/"


@pytest.mark.parametrize("where", ["local", "memory"])
def test_workers_in_threads_train_every_row_once(parts, where: str) -> None:  # noqa: F811
    d, lines = parts
    spec = str(d) if where == "local" else _memory_input(d)
    units, plan_id = plan(spec, num_workers=3, epochs=1, unit_bytes=2000)
    assert len(units) > 6
    reports = {}
    with in_process_cluster(2, bits=12, group_size=64, staleness=1) as shards:
        def work(index: int) -> None:
            own = [TestClient(s.app, base_url="http://shard") for s in shards]  # per thread
            with PSClient(["http://s0", "http://s1"], http_clients=own) as ps:
                ps.register(index, 3)
                wc = WorkClient(ps)
                assert wc.load(units, plan_id) == len(units)
                w = Worker(ps, 12, FTRLParams(), WorkerConfig(batch_size=25, fetch_step=2,
                                                               push_step=2))
                reports[index] = (train_units(w, wc, index), w.report.rows)
                ps.finish()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        summary = shards[0].get("/v1/work").json()
    assert sum(n for n, _ in reports.values()) == len(units)
    assert sum(r for _, r in reports.values()) == len(lines)  # every row exactly once
    assert summary["done"] == len(units) and summary["rows_done"] == len(lines)


def test_local_cluster_trains_a_directory_of_parts(parts, tmp_path) -> None:  # noqa: F811
    d, lines = parts
    out = tmp_path / "m.json"
    res = subprocess.run([sys.executable, "-m", "ftrl_ps", "train", str(d), "--workers", "2",
                          "--bits", "12", "-q", "--split", "units", "--unit-mb", "0.0625",
                          "--metrics-json",
                          str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    metrics = json.loads(out.read_text())
    assert metrics["rows"] == len(lines)
    assert sum(r["rows"] for r in metrics["worker_reports"]) == len(lines)
    assert len(expand(str(d))) == 3


@pytest.mark.parametrize("command", [
    ["train", "t.svm", "--workers", "2"],
    ["worker", "--server", "http://x", "--input", "t.svm", "--worker-index", "0",
     "--num-workers", "2"],
])
def test_unit_mb_is_held_to_the_defaults_bounds(command, capsys) -> None:
    """Below 64 KiB a usage error (0.0001 cut a9a's 32,561 rows into 39,161 units that
    took minutes); the lower bound itself and anything up to 64 MiB are fine; over it
    a warning (one worker trains each unit)."""
    from ftrl_ps.cli import build_parser
    from ftrl_ps.data.sources import check_unit_mb

    parser = build_parser()
    for small in ("0.0001", "0.06"):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([*command, "--unit-mb", small])
        assert exc.value.code == 2
        assert "below 64 KiB" in capsys.readouterr().err
    for fine in ("0.0625", "64"):
        assert parser.parse_args([*command, "--unit-mb", fine]).unit_mb == float(fine)
        assert check_unit_mb(float(fine)) is None
    assert parser.parse_args([*command, "--unit-mb", "1e9"]).unit_mb == 1e9
    assert "over 64 MiB" in (check_unit_mb(1e9) or "")
    with pytest.raises(ConfigError, match="below 64 KiB"):  # the services' env too
        WorkerOptions("http://x", "t.svm", 2, unit_mb=0.001, split="units").check()
    assert any("over 64 MiB" in w for w in WorkerOptions("http://x", "t.svm", 2,
                                                         unit_mb=100.0).warnings())


def test_many_small_parts_are_packed_into_few_units_and_every_row_is_trained_once(
        tmp_path: Path) -> None:
    """A folder of 300 small parts (every 7th gzipped, one empty): consecutive whole
    parts are packed into units of at most the unit size (not one hand-out per
    file), the same plan on every call; a local cluster of 2 worker processes
    trains every row once."""
    import gzip

    d = tmp_path / "many"
    d.mkdir()
    lines = _lines(1200, 5)
    for i in range(300):
        text = b"".join(lines[4 * i:4 * i + 4])
        if i % 7:
            (d / f"part-{i:04d}").write_bytes(text)
        else:
            (d / f"part-{i:04d}.gz").write_bytes(gzip.compress(text))
    (d / "part-0150-empty").write_bytes(b"")
    units, plan_id = plan(str(d), num_workers=2, epochs=2, unit_bytes=8000)
    assert plan(str(d), 2, 2, 8000)[1] == plan_id
    assert 2 * 8 <= len(units) <= 2 * 12 and all(u.end - u.start <= 8000 for u in units)
    assert sum(len(u.parts) for u in units) == 2 * 300  # each part once per pass, whole
    out = tmp_path / "m.json"
    res = subprocess.run([sys.executable, "-m", "ftrl_ps", "train", str(d), "--workers", "2",
                          "--bits", "12", "-q", "--unit-mb", "0.0625",
                          "--epochs", "2", "--metrics-json", str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    metrics = json.loads(out.read_text())
    assert metrics["rows"] == metrics["rows_applied"] == 2 * len(lines)


def test_a_worker_with_other_input_is_refused(parts, tmp_path) -> None:  # noqa: F811
    d, _ = parts
    other = tmp_path / "other.svm"
    other.write_bytes(b"".join(_lines(50, 2)))
    with in_process_cluster(1, bits=12, group_size=64) as shards:
        with PSClient("http://s0", http_clients=shards) as ps:
            ps.register(0, 2)
            wc = WorkClient(ps)
            wc.load(*plan(str(d), 2, 1))
            # what differs is named: the input changed, or this worker reads another one
            with pytest.raises(WorkerStateError, match=r"\(3 part\(s\)\); this worker's input "
                               r"gives plan \w+ \(1 part\(s\)\): the input changed since the "
                               r"plan was made .* the same input"):
                wc.load(*plan(str(other), 2, 1))
            (d / "sub" / "c.svm").write_bytes(b"".join(_lines(10, 3)))  # a part rewritten
            with pytest.raises(WorkerStateError, match=r"\(unit \d+: bytes 0-\d+ of .*c.svm\)"):
                wc.load(*plan(str(d), 2, 1))


def test_workers_spelling_the_input_differently_make_the_same_plan(
    parts, tmp_path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """Hand-started workers given ``d``, ``./d/`` or its absolute path, from
    different folders, make one plan whose units name files each can open."""
    d, lines = parts
    monkeypatch.chdir(d.parent)
    relative = plan(d.name, 2, 1)
    dotted = plan(f"./{d.name}/", 2, 1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    absolute = plan(str(d), 2, 1)
    assert relative[1] == dotted[1] == absolute[1]
    assert all(os.path.isabs(u.part) for u in relative[0])
    with in_process_cluster(1, bits=12, group_size=64) as shards:
        with PSClient("http://s0", http_clients=shards) as ps:
            ps.register(0, 2)
            wc = WorkClient(ps)
            assert wc.load(*relative) == len(relative[0])
            assert wc.load(*absolute) == len(relative[0])  # the second worker: accepted
    from ftrl_ps.data.inputs import read_unit

    assert sum(b.rows for u in relative[0] for b in read_unit(u, 12)) == len(lines)


def test_a_plan_reads_every_line_once_with_a_finer_tail(parts) -> None:  # noqa: F811
    from ftrl_ps.data.inputs import read_unit

    d, lines = parts
    units, plan_id = plan(str(d), num_workers=2, epochs=2, unit_bytes=3000)
    assert plan(str(d), 2, 2, 3000)[1] == plan_id  # the same input gives the same plan
    assert [u.id for u in units] == list(range(len(units)))
    sizes = [u.end - u.start for u in units if not u.gzip]
    assert min(sizes) < max(sizes) / 3  # the last quarter of a pass is cut finer
    rows = sum(b.rows for u in units for b in read_unit(u, 12))
    assert rows == 2 * len(lines)


@pytest.mark.parametrize("reported", [True, False])
@pytest.mark.parametrize("packed", [False, True])
def test_a_dead_workers_unit_is_taken_over_after_its_applied_rows(
    parts, reported: bool, packed: bool  # noqa: F811
) -> None:
    """Worker 0 trains part of a unit, pushes, then dies (having reported that
    progress or not: killed before its next batch): worker 1 trains the rest of
    that unit (after the rows its pushes covered) and everything else; no row twice.
    ``packed``: the three small parts are one unit, and worker 0 dies in its second
    part (a .gz)."""
    import itertools
    import time

    from ftrl_ps.ps.handout import UnitStream

    d, lines = parts
    units, plan_id = plan(str(d), num_workers=2, epochs=1,
                          unit_bytes=1 << 20 if packed else 20_000)
    assert [len(u.parts) for u in units] == ([3] if packed else [0, 0, 0])
    first_rows, took = (900, 75) if packed else (300, 7)
    cfg = WorkerConfig(batch_size=10, fetch_step=1, push_step=1, chunk_bytes=300)
    # 2 s: worker 1's heartbeats (a thread sharing the GIL with worker 0's training)
    # came over 0.5 s apart on a loaded CI machine, and a cold start of the kernels
    # kept worker 0 from its first push for longer than 0.5 s
    with in_process_cluster(1, bits=12, group_size=64, worker_timeout=2.0,
                            staleness=None) as shards:
        own = [TestClient(shards[0].app, base_url="http://shard") for _ in range(2)]
        with PSClient("http://s0", http_clients=own[:1]) as a, \
                PSClient("http://s0", http_clients=own[1:]) as b:
            a.register(0, 2)
            b.register(1, 2)
            b.start_heartbeat(0.1)  # worker 1 stays alive, worker 0 will not
            wa, wc_a = Worker(a, 12, FTRLParams(), cfg), WorkClient(a)
            wc_a.load(units, plan_id)
            stream = UnitStream(wa, wc_a, 0)
            batches = stream.batches()
            wa.train_batches(itertools.islice(batches, took))  # some rows of the first unit
            wa.push()
            if reported:
                next(batches)  # pulled (not trained): reports the progress
            applied = wa.rows_applied
            assert 0 < applied < first_rows and stream.units == 0  # inside the first unit
            assert (applied > 300) is packed  # (packed: past the end of the first part)
            time.sleep(3.0)  # no heartbeat from worker 0: the clock declares it dead
            wb, wc_b = Worker(b, 12, FTRLParams(), cfg), WorkClient(b)
            wc_b.load(units, plan_id)
            train_units(wb, wc_b, 1)
            summary = own[1].get("/v1/work").json()
    assert applied + wb.report.rows == len(lines)
    assert summary["done"] == len(units)


def test_the_queue_survives_a_checkpoint() -> None:
    q = WorkQueue()
    q.load(_plan(3), "x")
    q.next(0, holding=[], progress=[])
    q.next(1, holding=[])
    q.next(0, done=[(0, 10)], holding=[], progress=[])
    again = WorkQueue()
    again.restore(q.state())
    assert again.summary() == q.summary()
    assert again.next(1, holding=[], progress=[(1, 4)])["id"] == 1  # its unit, resumed
    assert WorkQueue().state() is None


def test_a_slow_worker_is_left_out_of_the_tail_and_every_unit_is_still_done_once() -> None:
    now = [0.0]
    q = WorkQueue(clock=lambda: now[0])
    q.load(_plan(40), "x")
    done: dict[int, list[int]] = {0: [], 1: [], 2: []}
    held: dict[int, int | None] = {0: None, 1: None, 2: None}

    def ask(w: int) -> int | None:
        report = [] if held[w] is None else [(held[w], 10)]
        if held[w] is not None:
            done[w].append(held[w])
        got = q.next(w, done=report, holding=[])
        held[w] = None if got is None else got["id"]
        return held[w]

    # workers 1 and 2 take a unit every 0.1 s, worker 0 (the straggler) every 1 s
    finished: set[int] = set()
    for tick in range(1, 400):
        now[0] = tick * 0.1
        for w in (1, 2) if tick % 10 else (0, 1, 2):
            if w not in finished and ask(w) is None:
                finished.add(w)
        if finished == {0, 1, 2}:
            break
    assert finished == {0, 1, 2}
    units = sorted(done[0] + done[1] + done[2])
    assert units == list(range(40))  # every unit done, once
    assert q.summary()["done"] == 40
    # the straggler took a few units early, none of the last ones
    assert 1 <= len(done[0]) <= 4 and max(done[0]) < 30


def test_a_worker_the_others_are_held_at_is_left_out_early() -> None:
    """Workers 1 and 2 took 4 units each in 0.5 s but the SSP clock held them 0.4 s of
    it (waiting for worker 0, which took 2): with the holds known, worker 0 is left
    out at once, the pass ends sooner without it; without them it is not."""
    def queue(held: dict[int, float] | None) -> WorkQueue:
        now = [0.0]
        q = WorkQueue(clock=lambda: now[0])
        q.load(_plan(40), "x")
        zero = None if held is None else {0: 0.0, 1: 0.0, 2: 0.0}
        units = {w: q.next(w, holding=[], held=zero)["id"] for w in range(3)}
        for t, w in ((0.1, 1), (0.1, 2), (0.2, 1), (0.2, 2), (0.3, 1), (0.3, 2), (0.25, 0)):
            now[0] = t
            units[w] = q.next(w, done=[(units[w], 10)], holding=[], held=zero)["id"]
        now[0] = 0.5
        got = q.next(0, done=[(units[0], 10)], holding=[], held=held)
        assert q.summary()["done"] == 8 and q.summary()["rows_done"] == 80
        return got
    assert queue({0: 0.0, 1: 0.4, 2: 0.4}) is None  # left out, 31 units pending
    assert queue(None) is not None  # the same hand-out, holds unknown: it takes one
    # held as much, so as fast per second not held (3 units in 0.1 s): not the cause
    assert queue({0: 0.4, 1: 0.4, 2: 0.4}) is not None


@pytest.mark.parametrize("ticks", [True, False])
def test_an_idle_worker_asks_again_right_after_its_tick(monkeypatch: pytest.MonkeyPatch,
                                                        ticks: bool) -> None:
    """Waiting for units others hold, a worker under SSP ticks and asks again at once
    (a sleep there held lockstep peers to one round per sleep); asynchronously (no
    tick) it sleeps between asks."""
    from types import SimpleNamespace

    from ftrl_ps.ps import handout

    slept: list[float] = []
    monkeypatch.setattr(handout.time, "sleep", slept.append)
    answers = iter([handout.WAIT, handout.WAIT, handout.WAIT, None])

    class Work:
        def next(self, *args: object) -> object:
            return next(answers)

    worker = SimpleNamespace(
        report=SimpleNamespace(rows=0, epochs=0, idle_seconds=0.0), rows_applied=0, position=0,
        config=SimpleNamespace(epochs=1), round_length=None,
        train_batches=lambda batches: list(batches), push=lambda final: None,
        idle=lambda: ticks)
    assert handout.train_units(worker, Work(), 0) == 0  # type: ignore[arg-type]
    assert slept == ([] if ticks else [handout.IDLE_POLL] * 2)


@pytest.mark.parametrize("staleness", [3, None])
def test_time_idle_for_units_is_idle_seconds_not_a_training_wait(
        monkeypatch: pytest.MonkeyPatch, staleness: int | None) -> None:
    """QA: a worker waiting for units others held showed as busy (its idle time was
    reported nowhere). From the WAIT after its last push until shard 0's next answer
    it is idle: ``idle_seconds`` in its report and in the stats of its ticks, its
    idle ticks (an SSP wait each) not in ``wait_seconds``. A fake clock: every ask
    takes 0.1 s, every tick 0.5 s, the asynchronous poll IDLE_POLL."""
    from ftrl_ps.ps import handout
    from ftrl_ps.ps.layout import Layout
    from ftrl_ps.ps.local_client import LocalClient
    from ftrl_ps.ps.store import ParameterStore

    now = [100.0]

    def passes(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(time, "perf_counter", lambda: now[0])  # the worker's and handout's
    monkeypatch.setattr(time, "sleep", passes)

    class Server(LocalClient):
        ticks: list[dict[str, float]]

        def clock(self, stats: dict[str, float] | None = None) -> None:
            super().clock(stats)
            self.ticks.append(dict(stats or {}))
            passes(0.5)  # held by the SSP clock

    client = Server(ParameterStore(Layout(8, group_size=16), dtype="float64"))
    client.ticks = []
    client.server_settings = {"staleness": staleness}
    # the first WAIT ends the stream of batches (a worker still trains the rows read
    # before it and pushes them: not idle); the next three asks are made idle
    answers = iter([handout.WAIT, handout.WAIT, handout.WAIT, None])

    class Work:
        def next(self, *args: object) -> object:
            passes(0.1)
            return next(answers)

    worker = Worker(client, 8, FTRLParams(), WorkerConfig())
    assert handout.train_units(worker, Work(), 0) == 0  # type: ignore[arg-type]
    each = 0.5 if staleness is not None else handout.IDLE_POLL
    assert worker.report.idle_seconds == pytest.approx(2 * (each + 0.1))
    assert worker.report.wait_seconds == 0.0  # the idle ticks are no training wait
    assert worker.stats()["idle_seconds"] == pytest.approx(2 * (each + 0.1))
    assert worker.stats()["wait_seconds"] == 0.0
    # each idle tick's stats carry the idle time so far (shard 0 shows it meanwhile)
    assert [t["idle_seconds"] for t in client.ticks] == pytest.approx(
        [0.0, 0.6] if staleness is not None else [])


def test_the_last_worker_asking_is_never_refused() -> None:
    now = [0.0]
    q = WorkQueue(clock=lambda: now[0])
    q.load(_plan(12), "x")
    assert q.next(0, holding=[])["id"] == 0
    held = q.next(1, holding=[])["id"]
    for t in range(1, 7):  # worker 1 takes a unit every 0.5 s
        now[0] = t * 0.5
        held = q.next(1, done=[(held, 10)], holding=[])["id"]
    now[0] = 10.0
    # worker 0 took 1 unit in 10 s, worker 1 seven: the 5 left are worker 1's
    assert q.next(0, done=[(0, 10)], holding=[]) is None
    while held is not None:
        got = q.next(1, done=[(held, 10)], holding=[])
        held = None if got is None else got["id"]
    assert q.summary()["done"] == 12
    assert q.next(0, holding=[]) is None
    # alone, a slow worker still gets every unit
    q = WorkQueue(clock=lambda: now[0])
    q.load(_plan(3), "y")
    held, now[0] = q.next(0, holding=[])["id"], 0.0
    for t in (100.0, 200.0):
        now[0] = t
        held = q.next(0, done=[(held, 10)], holding=[])["id"]
    assert q.next(0, done=[(held, 10)], holding=[]) is None and q.summary()["done"] == 3


def test_equally_fast_workers_are_never_left_out() -> None:
    now = [0.0]
    q = WorkQueue(clock=lambda: now[0])
    q.load(_plan(30), "x")
    held = {w: q.next(w, holding=[])["id"] for w in range(3)}
    done = 0
    while held:
        now[0] += 0.4
        for w in list(held):
            got = q.next(w, done=[(held[w], 10)], holding=[])
            done += 1
            if got is None:
                del held[w]
                assert q.summary()["pending"] == 0  # only when nothing is left
            else:
                held[w] = got["id"]
    assert done == 30 and q.summary()["done"] == 30


def test_a_dead_workers_push_that_missed_shard_0_is_withdrawn_and_never_replayed(
    parts, tmp_path: Path  # noqa: F811
) -> None:
    """Worker 0's last push reaches shard 1 but not shard 0 (the commit point) and
    the worker dies. Worker 1, handed its unit after the rows of its last push on
    shard 0, first withdraws that push on shard 1 (a fence): every row counts once
    on every shard. When worker 0's process comes back with its journal, the
    withdrawn push is dropped from it, not replayed."""
    import itertools
    import time

    from ftrl_ps.errors import TransportError
    from ftrl_ps.ps.handout import UnitStream
    from tests._servers import Switchable

    d, lines = parts
    units, plan_id = plan(str(d), num_workers=2, epochs=1, unit_bytes=20_000)
    # summed pushes, as the servers' default rule: a compose push cannot be withdrawn
    cfg = WorkerConfig(batch_size=10, fetch_step=1, push_step=1, chunk_bytes=300,
                       merge_rule="contraction")
    urls = ["http://s0", "http://s1"]
    with in_process_cluster(2, bits=12, group_size=64, worker_timeout=2.0,
                            staleness=None) as shards:
        def own() -> list[TestClient]:
            return [TestClient(s.app, base_url=f"http://s{i}") for i, s in enumerate(shards)]

        def records(worker: int) -> list[dict]:
            return [next(r for r in s.get("/v1/streams").json() if r["worker"] == worker)
                    for s in shards]

        zero = own()
        away = Switchable(zero[0], only="/v1/push")
        with PSClient(urls, http_clients=[away, zero[1]], commit_on_shard0=True,
                      retry_seconds=0, state_dir=tmp_path) as a, \
                PSClient(urls, http_clients=own(), commit_on_shard0=True) as b:
            a.register(0, 2)
            b.register(1, 2)
            for c in (a, b):  # alive until worker 0 "dies" below, also on a loaded machine
                c.start_heartbeat(0.1)
            wa, wc_a = Worker(a, 12, FTRLParams(), cfg), WorkClient(a)
            wc_a.load(units, plan_id)
            batches = UnitStream(wa, wc_a, 0).batches()
            wa.train_batches(itertools.islice(batches, 7))
            wa.push()  # everything pushed and ticked
            a.stop_heartbeat()  # worker 0 dies with its next push half sent
            away.down = True  # worker 0's pushes no longer reach shard 0
            with pytest.raises(TransportError):
                wa.train_batches(itertools.islice(batches, 2))
                wa.push()
            late = a.stream.journal.last
            on0, on1 = records(0)
            assert on1["last_seq"] == late.seq > on0["last_seq"]  # applied on shard 1 only
            committed = on0["position"]
            time.sleep(3.0)  # no heartbeat from worker 0: the clock declares it dead
            wb, wc_b = Worker(b, 12, FTRLParams(), cfg), WorkClient(b)
            wc_b.load(units, plan_id)
            train_units(wb, wc_b, 1)
        assert committed + wb.report.rows == len(lines)  # every row once
        on0, on1 = records(0)
        assert on1["last_seq"] < late.seq and on1["fence_seq"] == on0["last_seq"]
        before = [(c - 1, (dg - late.digests[i]) % (1 << 64)) if late.parts[i] else (c, dg)
                  for i, (c, dg) in enumerate(late.totals)]  # the totals without it
        assert [(r["pushes"], int(r["digest"], 16)) for r in (on0, on1)] == before
        assert shards[1].get("/v1/status").json()["counters"]["withdrawals"] == 1
        # worker 0's process comes back with its journal: nothing is replayed
        with PSClient(urls, http_clients=own(), commit_on_shard0=True,
                      state_dir=tmp_path) as again:
            again.register(0, 2)
            assert again.resume_point()[0] == committed
            assert again.stream_totals() == before
            again.push(np.array([5, 3000]), np.ones(2), np.ones(2), position=committed + 1)
        on0, on1 = records(0)
        assert on1["pushes"] == before[1][0] + 1 and on0["fence_seq"] is None
        assert shards[1].get("/v1/status").json()["counters"]["withdrawals"] == 1
