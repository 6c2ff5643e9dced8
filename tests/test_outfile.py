"""core/outfile.py: outputs written whole or not at all, checked before a run."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ftrl_ps.core.outfile import check_writable, replacing
from ftrl_ps.errors import OutputError


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "preds.txt"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), replacing(target) as f:
        f.write("half")
        raise RuntimeError("the input had a bad line")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["preds.txt"]


def test_the_new_file_keeps_the_old_permissions_or_takes_the_umask(tmp_path: Path) -> None:
    old = tmp_path / "model.ftrl"
    old.write_bytes(b"x")
    old.chmod(0o640)
    with replacing(old, "wb") as f:
        f.write(b"y")
    assert stat.S_IMODE(old.stat().st_mode) == 0o640
    mask = os.umask(0o027)
    try:
        with replacing(tmp_path / "new.ftrl", "wb") as f:
            f.write(b"y")
    finally:
        os.umask(mask)
    # not mkstemp's 0600: a service under another user (the group here) can read it
    assert stat.S_IMODE((tmp_path / "new.ftrl").stat().st_mode) == 0o640


@pytest.mark.parametrize("where", ["missing/x.txt", "adir"])
def test_a_path_that_cannot_be_written_fails_at_once(tmp_path: Path, where: str) -> None:
    (tmp_path / "adir").mkdir()
    with pytest.raises(OutputError, match="--output: cannot write"):
        check_writable(tmp_path / where, "--output")
    with pytest.raises(OutputError, match="cannot write"), replacing(tmp_path / where):
        pass
    check_writable(tmp_path / "missing" / "m.ftrl", "--model", make_parents=True)
    assert (tmp_path / "missing").is_dir()
    assert list((tmp_path / "missing").iterdir()) == []  # the probe file is gone
    check_writable("-", "--json")  # stdout


def test_a_full_disk_names_the_file(tmp_path: Path) -> None:
    """'No space left on device' without the file it was writing (found by QA,
    session 32): the error now carries the target's path."""
    import errno

    target = tmp_path / "m.ftrl"
    with pytest.raises(OSError) as caught, replacing(target, "wb") as f:
        f.write(b"x")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []
