"""Shard 0's log of the work hand-out: whole lines back, torn ones skipped."""

from __future__ import annotations

from pathlib import Path

from ftrl_ps.ps.worklog import WorkLog


def test_a_torn_line_is_skipped_and_lines_after_it_are_read(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    log = WorkLog(path)
    log.append({"seq": 1, "set": [[0, "assigned", 1, 0]]})
    log.close()
    with path.open("ab") as f:
        f.write(b'\n{"seq": 2, "set": [[1, "assi')  # a kill mid-write
    again = WorkLog(path)  # the restarted shard appends after it
    again.append({"seq": 2, "set": [[1, "assigned", 0, 0]]})
    again.close()
    assert [line["set"][0][2] for line in WorkLog(path).lines()] == [1, 0]


def test_no_file_is_no_lines_and_foreign_lines_are_skipped(tmp_path: Path) -> None:
    assert list(WorkLog(tmp_path / "none.log").lines()) == []
    path = tmp_path / "w.log"
    path.write_text('\n[1, 2]\n{"no_seq": 1}\n{"seq": "3"}\n{"seq": 4}\n')
    assert [line["seq"] for line in WorkLog(path).lines()] == [4]
