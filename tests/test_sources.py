"""Inputs as directories, globs and fsspec URLs (data/sources.py, data/inputs.py), for one
process; their units read every line exactly once."""

from __future__ import annotations

import gzip
import io
import uuid
from pathlib import Path

import fsspec
import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.data.inputs import InputReader, read_unit
from ftrl_ps.data.libsvm import read_all
from ftrl_ps.data.sources import check_shares, estimate_rows, expand, split_for, work_units
from ftrl_ps.errors import ConfigError
from ftrl_ps.learn.training import train


def _lines(count: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        feats = sorted(set(rng.integers(0, 500, rng.integers(1, 12)).tolist()))
        out.append((f"{rng.integers(0, 2)} " + " ".join(f"{f}:{rng.random():.3f}"
                                                         for f in feats) + "\n").encode())
    return out


@pytest.fixture
def parts(tmp_path: Path) -> tuple[Path, list[bytes]]:
    """A directory of three parts (one gzip, one in a sub-directory) plus junk to skip."""
    lines = _lines(900, 1)
    d = tmp_path / "in"
    (d / "sub").mkdir(parents=True)
    (d / "a.svm").write_bytes(b"".join(lines[:300]))
    (d / "b.svm.gz").write_bytes(gzip.compress(b"".join(lines[300:600])))
    (d / "sub" / "c.svm").write_bytes(b"".join(lines[600:]))
    (d / "_SUCCESS").write_bytes(b"")
    (d / ".crc").write_bytes(b"junk")
    return d, lines


def _memory_copy(d: Path) -> str:
    root = f"memory://t{uuid.uuid4().hex}"
    for f in d.rglob("*"):
        if f.is_file():
            with fsspec.open(f"{root}/{f.relative_to(d).as_posix()}", "wb") as out:
                out.write(f.read_bytes())
    return root


def test_expand_lists_sorted_files_and_detects_gzip(parts) -> None:
    d, _ = parts
    got = expand(str(d))
    assert [Path(p.name).relative_to(d).as_posix() for p in got] == [
        "a.svm", "b.svm.gz", "sub/c.svm"]
    assert [p.gzip for p in got] == [False, True, False]
    assert [p.name for p in expand(str(d / "*.svm*"))] == [str(d / "a.svm"), str(d / "b.svm.gz")]
    assert len(expand(str(d / "**" / "*.svm"))) == 2
    url = _memory_copy(d)
    assert [p.name.rsplit("/", 1)[1] for p in expand(url + "/")] == ["a.svm", "b.svm.gz",
                                                                    "c.svm"]
    assert len(expand(url + "/*.svm")) == 1


def test_a_cluster_shares_one_plain_file_and_hands_out_anything_else(parts) -> None:
    d, _ = parts
    assert split_for(str(d / "a.svm")) == "shares"
    assert split_for(str(d / "_SUCCESS")) == "shares"  # empty: no gzip magic to read
    assert split_for(str(d / "b.svm.gz")) == "units"  # gzip has no byte ranges
    (d / "plain.gz").write_bytes(b"1 1:1\n")  # told by its bytes, not its name
    assert split_for(str(d / "plain.gz")) == "shares"
    for spec in (str(d), str(d / "*.svm"), _memory_copy(d) + "/a.svm"):
        assert split_for(spec) == "units", spec
    # a path not there yet (a worker waiting with --start-timeout): shares, as before
    assert split_for(str(d / "later.svm")) == "shares" and split_for("-") == "shares"


def test_only_one_plain_file_can_be_cut_into_shares(parts) -> None:
    d, _ = parts
    for spec in (str(d / "a.svm"), str(d / "later.svm"), "-"):
        check_shares(spec)  # a plain file, one not there yet, stdin: no objection
    with pytest.raises(ConfigError, match="b.svm.gz is gzip-compressed"):
        check_shares(str(d / "b.svm.gz"))
    for spec in (str(d), str(d / "*.svm"), _memory_copy(d) + "/a.svm"):
        with pytest.raises(ConfigError, match="reads byte ranges of one plain file; .* is not"):
            check_shares(spec)


@pytest.mark.parametrize("spec", ["/nonexistent/x.svm", "/nonexistent/*.svm",
                                  "memory://nothing/here.svm"])
def test_no_files_is_a_clear_error(spec: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found|no input files"):
        expand(spec)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".hidden.svm").write_text("1 1:1\n")
    with pytest.raises(ConfigError, match="no input files in the directory .*hidden ones"):
        expand(str(empty))


@pytest.mark.parametrize("where", ["local", "memory"])
@pytest.mark.parametrize("unit_bytes", [1000, 7777, 1 << 20])
def test_units_read_every_line_exactly_once(parts, where: str, unit_bytes: int) -> None:
    d, lines = parts
    spec = str(d) if where == "local" else _memory_copy(d)
    units = work_units(expand(spec), unit_bytes, epochs=2)
    assert [u.id for u in units] == list(range(len(units)))
    gz = [u for u in units if u.gzip or any(gzip for _, _, gzip in u.parts)]
    assert len(gz) == 2 and all(u.start == 0 for u in gz)  # a .gz part is one unit per epoch
    if unit_bytes == 1 << 20:  # all three parts fit: packed into one unit per epoch
        assert len(units) == 2 and [len(u.parts) for u in units] == [3, 3]
    got = [b for u in units for b in read_unit(u, 12)]
    expect = read_all(io.BytesIO(b"".join(lines * 2)), 12)
    np.testing.assert_array_equal(np.concatenate([b.labels for b in got]), expect.labels)
    np.testing.assert_array_equal(np.concatenate([b.indices for b in got]), expect.indices)


@pytest.mark.parametrize("where", ["local", "memory"])
def test_one_process_trains_a_directory_as_the_concatenated_file(parts, tmp_path, where) -> None:
    d, lines = parts
    whole = tmp_path / "whole.svm"
    whole.write_bytes(b"".join(lines))
    spec = str(d) if where == "local" else _memory_copy(d) + "/"
    a, b = FTRL(12), FTRL(12)
    ra, rb = train(a, str(whole)), train(b, spec)
    assert ra.rows == rb.rows == 900
    np.testing.assert_array_equal(a.state, b.state)
    reader = InputReader(spec, 12)
    assert sum(x.rows for x in reader) == 900 and reader.stats.rows == 900
    assert reader.size == sum(p.size for p in expand(spec))


def test_estimate_rows_counts_gzip_parts_by_their_text(parts) -> None:
    d, _ = parts
    assert 600 <= estimate_rows(str(d)) <= 1300


def test_two_readers_of_one_memory_file_have_their_own_positions() -> None:
    """fsspec's memory filesystem returns the same file object to every opener; the
    reader's files must not share a position (workers in threads read units of it)."""
    from ftrl_ps.data.sources import open_binary

    url = f"memory://{uuid.uuid4().hex}/a.svm"
    with fsspec.open(url, "wb") as f:
        f.write(b"1 1:1\n0 2:1\n")
    a, b = open_binary(url), open_binary(url)
    assert a.read(6) == b"1 1:1\n"
    assert b.read(6) == b"1 1:1\n"  # not where a stopped
    a.seek(0)
    assert b.read() == b"0 2:1\n"


@pytest.mark.parametrize(("kind", "module"), [("bzip2", "bz2"), ("xz", "lzma")])
def test_other_compressions_are_a_clear_error(tmp_path: Path, kind: str, module: str) -> None:
    import importlib

    from ftrl_ps.errors import ConfigError

    part = tmp_path / "part-0.svm.x"
    part.write_bytes(importlib.import_module(module).compress(b"1 3:1\n0 4:1\n"))
    with pytest.raises(ConfigError, match=f"is {kind}-compressed; .* decompress it first"):
        expand(str(part))
    with pytest.raises(ConfigError, match=f"is {kind}-compressed"):
        expand(str(tmp_path))  # a folder of parts: each is looked at


def test_a_skipped_line_of_a_folder_of_parts_is_told_by_part_and_line(tmp_path: Path) -> None:
    (tmp_path / "part-0").write_text("1 3:1\n0 4:1\n")
    (tmp_path / "part-1").write_text("1 3:1\nbad line\n")
    reader = InputReader(str(tmp_path), 10, skip_bad_lines=True)
    assert sum(b.rows for b in reader) == 3
    assert reader.stats.bad_examples == [(f"{tmp_path}/part-1:2", "bad", "label must be -1, 0 "
                                          "or 1")]


def test_lines_ending_with_a_bare_cr_are_a_clear_error(tmp_path: Path) -> None:
    from ftrl_ps.errors import ConfigError

    cr = tmp_path / "cr.svm"
    cr.write_bytes(b"1 1:1\r0 2:1\r")  # was read as one row, '0' a feature name
    with pytest.raises(ConfigError, match="bare CR"):
        expand(str(cr))
    crlf = tmp_path / "crlf.svm"
    crlf.write_bytes(b"1 1:1\r\n0 2:1\r\n")
    assert sum(b.rows for b in InputReader(str(crlf), 10)) == 2


def test_progress_is_the_share_of_bytes_on_disk_gzip_parts_whole(tmp_path: Path) -> None:
    """Progress divided the text read (decompressed) by the size on disk: a gzip
    input showed 100 % a third of the way through (found by QA, session 32)."""
    text = b"".join(b"1 %d:1 %d:0.5\n" % (i, i + 7) for i in range(40_000))
    (tmp_path / "one.svm.gz").write_bytes(gzip.compress(text))
    (tmp_path / "dir").mkdir()
    for i in range(4):
        (tmp_path / "dir" / f"part-{i}.gz").write_bytes(gzip.compress(text[:50_000]))
    (tmp_path / "plain.svm").write_bytes(text)

    def shares(source: Path) -> list[float | None]:
        reader = InputReader(str(source), 12, chunk_bytes=1 << 16)
        return [reader.fraction() for _ in reader] + [reader.fraction()]

    assert set(shares(tmp_path / "one.svm.gz")) == {None}  # unknown, not a wrong 100 %
    parts = shares(tmp_path / "dir")  # by parts read whole: 0, 1/4, 2/4, 3/4, then 1
    assert parts == sorted(parts) and parts[0] == 0.0 and parts[-1] == 1.0
    assert {round(p * 4) for p in parts[:-1] if p is not None} == {0, 1, 2, 3}
    plain = shares(tmp_path / "plain.svm")
    assert plain == sorted(plain) and 0 < plain[0] < 0.5 and plain[-1] == 1.0


def test_a_file_and_its_gzip_twin_in_one_input_are_warned_about_once(tmp_path: Path,
                                                                   caplog) -> None:
    """They were both read, every row twice, without a word (found by QA, session 32)."""
    (tmp_path / "x.svm").write_bytes(b"1 1:1\n")
    (tmp_path / "x.svm.gz").write_bytes(gzip.compress(b"1 1:1\n"))
    (tmp_path / "y.svm").write_bytes(b"0 2:1\n")
    with caplog.at_level("WARNING", logger="ftrl_ps.data.sources"):
        assert len(expand(str(tmp_path))) == 3
        expand(str(tmp_path))  # said once
        expand(str(tmp_path / "y.svm"))  # no twins: nothing
    said = [r.getMessage() for r in caplog.records if r.name == "ftrl_ps.data.sources"]
    assert len(said) == 1 and "holds both" in said[0] and "x.svm.gz" in said[0]
