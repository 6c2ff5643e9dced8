"""Shard checkpoints and the worker's push journal: atomic files, corrupt and partial
files detected, the previous checkpoint used, state restored exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from ftrl_ps.errors import ConfigError, ModelFormatError, WorkerStateError
from ftrl_ps.ps.checkpoint import KEEP, checkpoint_files, read_checkpoint
from ftrl_ps.ps.client import PSClient
from ftrl_ps.ps.journal import PushJournal
from ftrl_ps.ps.shard_settings import ServerSettings
from ftrl_ps.server.app import create_app
from tests.conftest import REPO, wait_until

KEYS = np.array([1, 2, 700, 4096])


def settings(tmp: Path, **kw) -> ServerSettings:
    return ServerSettings(bits=12, group_size=64, checkpoint_dir=str(tmp),
                          checkpoint_interval=3600, **kw)


def train_some(app, pushes: int, checkpoint_after: int | None = None) -> PSClient:
    with TestClient(app) as c:
        ps = PSClient("http://testserver", http_clients=[c])
        ps.register(0, 1)
        for i in range(pushes):
            ps.push(KEYS, np.full(4, 0.5), np.arange(4.0) - i, position=10 * (i + 1))
            if checkpoint_after is not None and i + 1 == checkpoint_after:
                app.state.ftrl.checkpointer.write()
        return ps


def restored(tmp: Path, **kw) -> tuple[dict, list, list]:
    app = create_app(settings(tmp, **kw))
    with TestClient(app) as c:
        status = c.get("/v1/status").json()
        values = c.post("/v1/pull", json={"keys": KEYS.tolist()}).json()
        return status, values["n"], c.get("/v1/streams").json()


def test_restore_gives_back_state_streams_and_registry(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]):
    train_some(create_app(settings(tmp_path)), 6)  # the final checkpoint at shutdown
    status, n, streams = restored(tmp_path)
    assert status["restored_from"].endswith("shard-0-00000001.ckpt")
    assert n == [3.0] * 4
    assert [(s["last_seq"], s["position"], s["pushes"], s["durable_seq"]) for s in streams] == [
        (6, 60, 6, 6)]
    assert [w["state"] for w in status["clock"]["workers"]] == ["live"]
    assert "restored checkpoint" in capsys.readouterr().err


def test_corrupt_or_partial_newest_falls_back_to_the_previous(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]):
    app = create_app(settings(tmp_path))
    train_some(app, 5, checkpoint_after=3)  # version 1 after 3 pushes, version 2 at exit
    (v2, newest), (v1, _) = checkpoint_files(tmp_path, 0)
    assert (v2, v1) == (2, 1)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    status, n, streams = restored(tmp_path)
    assert status["restored_from"].endswith("00000001.ckpt")
    assert n == [1.5] * 4 and streams[0]["last_seq"] == 3
    assert "checksum mismatch" in capsys.readouterr().err
    # a torn write (no end marker) is skipped the same way
    for _, path in checkpoint_files(tmp_path, 0):
        path.write_bytes(path.read_bytes()[:-7])
    (tmp_path / "shard-0-00000009.ckpt").write_bytes(b"")
    status, n, _ = restored(tmp_path)
    assert status["restored_from"] is None and n == [0.0] * 4
    assert "no end marker" in capsys.readouterr().err


def test_only_the_newest_are_kept_and_temporaries_ignored(tmp_path: Path):
    app = create_app(settings(tmp_path))
    with TestClient(app):
        for _ in range(5):
            app.state.ftrl.checkpointer.write()
    (tmp_path / ".shard-0-00000099.ckpt.tmp").write_bytes(b"partial")
    assert [v for v, _ in checkpoint_files(tmp_path, 0)] == [6, 5, 4][:KEEP]


def test_a_full_disk_leaves_no_partial_file_and_names_the_shard_and_folder(
    tmp_path: Path, monkeypatch
):
    from ftrl_ps.errors import ServerError
    from ftrl_ps.ps import checkpoint

    app = create_app(settings(tmp_path))
    with TestClient(app):
        app.state.ftrl.checkpointer.write()
        before = sorted(p.name for p in tmp_path.iterdir())

        def full(self, data: bytes) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(checkpoint._CrcWriter, "write", full)
        for _ in range(3):  # every interval tries again: each left its .tmp behind
            with pytest.raises(ServerError, match=f"shard 0 cannot write its checkpoint in "
                                                  f"{tmp_path}: No space left on device"):
                app.state.ftrl.checkpointer.write()
        assert sorted(p.name for p in tmp_path.iterdir()) == before
        monkeypatch.undo()


def test_a_checkpoint_of_other_flags_is_a_clear_error(tmp_path: Path):
    train_some(create_app(settings(tmp_path)), 2)
    with pytest.raises(ConfigError, match="alpha"):
        create_app(settings(tmp_path, alpha=0.5))
    with pytest.raises(ModelFormatError, match="not an ftrl-ps checkpoint"):
        bad = tmp_path / "x.ckpt"
        bad.write_bytes(b"garbage" * 10)
        read_checkpoint(bad, np.dtype(np.float32))


def test_float64_shard_round_trips_exactly(tmp_path: Path):
    app = create_app(settings(tmp_path, dtype="float64"))
    with TestClient(app) as c:
        c.post("/v1/push", json={"entries": [[3, 0.1, 1 / 3]]})
    app2 = create_app(settings(tmp_path, dtype="float64"))
    with TestClient(app2) as c:
        assert c.post("/v1/pull", json={"keys": [3]}).json() == {"n": [0.1], "z": [1 / 3]}


@pytest.mark.timeout(120)
def test_kill_9_of_a_real_server_and_restart_on_the_same_dir(tmp_path: Path):
    cmd = [sys.executable, "-m", "ftrl_ps", "server", "--bits", "12", "--group-size", "64",
           "--checkpoint-dir", str(tmp_path), "--checkpoint-interval", "0.2", "--port", "0"]

    def start() -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        assert proc.stdout is not None
        return proc, proc.stdout.readline().split()[-1]

    proc, url = start()
    with PSClient(url) as ps:
        ps.register(0, 1)
        for _ in range(4):
            ps.push(KEYS, np.ones(4), np.ones(4))
        # a checkpoint (every 0.2 s) covers the 4 pushes before the kill (a bounded
        # number of pushes without a pause could all go out before the first one)
        wait_until(lambda: ps.streams(0)[0]["durable_seq"] >= 4, what="a checkpoint of them")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        run = ps.runs[0]
    proc, url = start()
    try:
        n = httpx.post(url + "/v1/pull", json={"keys": KEYS.tolist()}, trust_env=False).json()["n"]
        assert n == [4.0] * 4
        # the same run: a worker's journal of it is still this run's (ps.journal)
        status = httpx.get(url + "/v1/status", trust_env=False).json()
        assert status["shard"]["run"] == run
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert "restored checkpoint" in err


def test_journal_survives_a_torn_last_record(tmp_path: Path):
    path = tmp_path / "worker-0.journal"
    j = PushJournal(path, 0, 2, np.float32)
    from ftrl_ps.ps.replay import PushStream

    stream = PushStream(j)
    splits = np.array([0, 1, 2])
    for i in range(3):
        stream.record(np.array([1, 3000], np.uint32), np.ones(2, np.float32),
                      np.ones(2, np.float32), splits, position=100 * (i + 1), loss_sum=i)
    j.close()
    with open(path, "ab") as f:
        f.write(b"\x50\x00\x00\x00garbage")  # a record cut short by kill -9
    again = PushJournal(path, 0, 2, np.float32)
    assert again.dropped_torn and [e.seq for e in again.entries] == [1, 2, 3]
    assert again.last is not None and again.last.position == 300
    assert again.totals() == j.totals()
    again.release([3, 3])
    assert [e.seq for e in again.entries] == [3]
    with pytest.raises(ConfigError, match="another worker"):
        PushJournal(path, 1, 2, np.float32)


def _spilled(entry: Any) -> bool:
    return entry.spilled_to is not None and "keys" not in vars(entry)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sent_journal_entries_are_read_back_from_the_file(tmp_path: Path, dtype: type):
    """A spilled entry's keys and deltas are read back from its record in the journal
    file (not kept in memory), equal to what was journaled, through a rewrite
    (compaction, a withdrawal) of the file, with no file left open; a journal
    without a file, or an entry not in it, keeps its arrays."""
    from ftrl_ps.ps.replay import PushStream

    rng = np.random.default_rng(3)
    j = PushJournal(tmp_path / "worker-0.journal", 0, 2, dtype)
    stream = PushStream(j)
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
    sent = []
    for i in range(5):
        keys = np.sort(rng.choice(4096, 300, replace=False)).astype(np.uint32)
        dn, dz = rng.random(300).astype(dtype), rng.normal(size=300).astype(dtype)
        entry = stream.record(keys, dn, dz, np.array([0, 150, 300]), position=10 * (i + 1),
                              loss_sum=float(i))
        sent.append((keys.copy(), dn.copy(), dz.copy()))
        assert j.spill(entry) and _spilled(entry) and not j.spill(entry)

    def same() -> None:
        for e in j.entries:
            for got, want in zip((e.keys, e.delta_n, e.delta_z), sent[e.seq - 1], strict=True):
                np.testing.assert_array_equal(got, want)

    same()
    j.release([2, 2])  # seqs 1-2 durable everywhere
    j._rewrite()  # as a compaction does: spilled entries read from the old file, then the new
    assert [e.seq for e in j.entries] == [3, 4, 5]
    same()
    assert all(map(_spilled, j.entries))
    same()
    if fds:
        assert len(os.listdir("/proc/self/fd")) == fds  # nothing held open per entry
    again = PushJournal(tmp_path / "worker-0.journal", 0, 2, dtype)  # a restarted worker
    assert [e.seq for e in again.entries] == [3, 4, 5]
    j.entries = again.entries
    same()
    stranger = again.entries[0]
    again.replace(again.entries[1:])
    assert not again.spill(stranger)  # no longer in the journal: its offset is another's
    gone = j.entries[0]
    assert j.spill(gone)
    j.release([4, 4])  # seqs 3-4 durable: gone (seq 3) leaves the journal
    with pytest.raises(WorkerStateError, match="left the journal"):
        gone.keys  # noqa: B018 - read from a record that may be another's now
    kept = j.entries[-1]
    assert j.spill(kept)
    (tmp_path / "worker-0.journal").unlink()  # the state directory removed under the worker
    with pytest.raises(WorkerStateError, match="cannot read push 5 back"):
        kept.delta_n  # noqa: B018
    memory = PushJournal(None, 0, 2, dtype)
    entry = PushStream(memory).record(*sent[0], np.array([0, 150, 300]), position=1,
                                      loss_sum=0.0)
    assert not memory.spill(entry) and not _spilled(entry)


def test_durable_writes_a_checkpoint_only_for_a_stream_changed_since_the_newest(
        tmp_path: Path) -> None:
    """Workers finishing together: the checkpoint written for the first one's
    ``/durable`` already holds the second one's pushes, so the second one's is
    answered without a write (and covers them); a stream that pushed since gets
    a new one (docs/durability.md, section 4)."""
    app = create_app(settings(tmp_path, num_workers=2))
    with TestClient(app) as c:
        ckpt = app.state.ftrl.checkpointer
        one, two = (PSClient("http://testserver", http_clients=[c]) for _ in range(2))
        one.register(0, 2)
        two.register(1, 2)
        one.push(KEYS, np.full(4, 0.5), np.arange(4.0), position=10)
        two.push(KEYS, np.full(4, 0.25), np.arange(4.0), position=20)
        written = ckpt.written
        one.make_durable()
        assert ckpt.written == written + 1
        two.make_durable()  # its push was in before that checkpoint began
        assert ckpt.written == written + 1
        assert [s["durable_seq"] for s in c.get("/v1/streams").json()] == [1, 1]
        two.push(KEYS, np.full(4, 0.25), np.arange(4.0), position=40)
        two.make_durable()
        assert ckpt.written == written + 2
        one.make_durable()  # nothing of worker 0 changed since
        assert ckpt.written == written + 2
        assert [s["durable_seq"] for s in c.get("/v1/streams").json()] == [1, 2]


def test_finishing_worker_costs_shard_0_one_checkpoint_that_holds_its_pushes(
        tmp_path: Path) -> None:
    """finish() on one shard: no ``/durable`` there; the finish answer's
    checkpoint says finished and holds the pushes (``durable_seq``), and the
    answer carries the stream record."""
    app = create_app(settings(tmp_path, num_workers=1))
    with TestClient(app) as c:
        ckpt = app.state.ftrl.checkpointer
        ps = PSClient("http://testserver", http_clients=[c])
        ps.register(0, 1)
        for i in range(3):
            ps.push(KEYS, np.full(4, 0.5), np.arange(4.0) - i, position=10 * (i + 1))
        written = ckpt.written
        ps.finish()
        assert ckpt.written == written + 1
        assert c.get("/v1/streams").json()[0]["durable_seq"] == 3
        done = c.post(f"/v1/workers/{ps.worker_id}/finish", json={"sent": 3}).json()
        assert done["state"] == "finished" and done["stream"]["durable_seq"] == 3
        gap = c.post(f"/v1/workers/{ps.worker_id}/finish", json={"sent": 4})  # never sent
        assert gap.status_code == 409 and gap.json()["error"] == "PushGapError"
        assert ckpt.written == written + 1  # the repeated finish and the gap: none


def test_an_idle_shard_does_not_rewrite_its_checkpoint_every_interval(tmp_path: Path) -> None:
    """QA: a finished, idle cluster rewrote its whole state every interval (512 MiB
    at --bits 26 every 30 s, for ever). A change of the state, the streams or the
    clock still gets its checkpoint at the next interval."""
    app = create_app(settings(tmp_path, num_workers=1))
    with TestClient(app) as c:
        ckpt = app.state.ftrl.checkpointer
        ps = PSClient("http://testserver", http_clients=[c])
        ps.register(0, 1)
        ps.push(KEYS, np.full(4, 0.5), np.arange(4.0), position=10)
        assert ckpt.write_if_changed() is not None
        ckpt.write_if_changed()  # at most one more: the first marked its push durable
        written, files = ckpt.written, sorted(tmp_path.glob("shard-0-*.ckpt"))
        for _ in range(3):
            assert ckpt.write_if_changed() is None  # was: a new file every interval
        assert ckpt.written == written and sorted(tmp_path.glob("shard-0-*.ckpt")) == files
        assert ckpt.age() < 1  # the newest file holds the state as it is now
        ps.push(KEYS, np.full(4, 0.5), np.arange(4.0), position=20)
        assert ckpt.write_if_changed() is not None and ckpt.written == written + 1
        ps.finish()  # the clock changes (finished): written by finish, then idle again
        assert ckpt.write_if_changed() is None or ckpt.write_if_changed() is None
        _, n, streams = restored(tmp_path, num_workers=1)
        assert n == [1.0] * 4 and streams[0]["last_seq"] == 2


def test_the_checkpoint_thread_of_an_idle_shard_writes_nothing(tmp_path: Path) -> None:
    app = create_app(ServerSettings(bits=12, group_size=64, checkpoint_dir=str(tmp_path),
                                    checkpoint_interval=0.05, num_workers=1))
    with TestClient(app) as c:
        ckpt = app.state.ftrl.checkpointer
        ps = PSClient("http://testserver", http_clients=[c])
        ps.register(0, 1)
        ps.push(KEYS, np.full(4, 0.5), np.arange(4.0), position=10)
        ps.finish()
        time.sleep(0.5)  # the push's checkpoints are written by now
        written = ckpt.written
        time.sleep(0.5)  # ten intervals: was ten more files written
        assert ckpt.written == written and ckpt.age() < 0.5


def test_a_journal_knows_its_run_and_refuses_another_one(tmp_path: Path):
    """The header keeps each shard's run id: a journal none of whose shards' runs is
    the servers' is another run's (refused); one shard restarted empty (a new run
    there) is the same run; a synced shard's new run is noted; a version 1 file
    (no run ids) is taken as this run's and upgraded."""
    import struct

    from ftrl_ps.ps.replay import PushStream

    path = tmp_path / "worker-0.journal"
    j = PushJournal(path, 0, 2, np.float32, ["a" * 16, "b" * 16])
    PushStream(j).record(np.array([1, 3000], np.uint32), np.ones(2, np.float32),
                         np.ones(2, np.float32), np.array([0, 1, 2]), position=7, loss_sum=1)
    j.close()
    with pytest.raises(ConfigError, match="another cluster run.*another --state-dir"):
        PushJournal(path, 0, 2, np.float32, ["c" * 16, "d" * 16])
    with pytest.raises(ConfigError, match="another cluster run"):  # checked, nothing written
        PushJournal.check_file(path, 0, 2, np.float32, ["c" * 16, "d" * 16])
    PushJournal(path, 0, 2, np.float32, [None, None]).close()  # servers that do not say
    again = PushJournal(path, 0, 2, np.float32, ["a" * 16, "e" * 16])  # shard 1 restarted
    assert again.runs == ["a" * 16, "e" * 16] and again.last is not None
    again.note_run(0, "f" * 16)  # shard 0 restarted empty and was synced
    again.close()
    assert PushJournal(path, 0, 2, np.float32, ["f" * 16, "e" * 16]).last.position == 7
    # an older worker's journal: the version 1 header, no run ids
    data = path.read_bytes()
    head = struct.pack("<8sIIIc3x", b"FTPSJRNL", 1, 0, 2, b"f")
    path.write_bytes(head + data[len(head) + 32:])
    old = PushJournal(path, 0, 2, np.float32, ["g" * 16, "h" * 16])
    assert old.last is not None and old.last.position == 7 and old.runs == ["g" * 16, "h" * 16]
    old.close()
    with pytest.raises(ConfigError, match="another cluster run"):  # upgraded: it says now
        PushJournal(path, 0, 2, np.float32, ["i" * 16, "j" * 16])
