"""The streaming libsvm reader: against sklearn, a naive reference, and bad input."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ftrl_ps._kernels import parse as kernels
from ftrl_ps.data.hashing import slot_of
from ftrl_ps.data.libsvm import Batch, LibsvmReader, read_all, split_ranges
from ftrl_ps.errors import ConfigError, DataError, ParseError

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
REAL_FILES = ["libsvm/a9a", "libsvm/a9a.t", "libsvm/agaricus_train.txt",
              "libsvm/agaricus_test.txt", "ipinyou/train.fm.txt", "ipinyou/test.fm.txt",
              "rcv1/rcv1_small.dat", "rcv1/rcv1_small_test.data"]


def naive_parse(text: bytes, bits: int) -> Batch:
    """Slow, obvious reference of the documented rules (valid input only)."""
    labels, indptr, indices, values = [], [0], [], []
    for line in text.split(b"\n"):
        tokens = line.split(b"#", 1)[0].replace(b"\t", b" ").replace(b"\r", b" ").split()
        if not tokens:
            continue
        label = float(tokens[0])
        assert label in (-1.0, 0.0, 1.0)
        feats: dict[int, float] = {}
        for tok in tokens[1:]:
            if tok.startswith(b"|") or (tok.startswith(b"qid:") and tok.count(b":") == 1):
                continue
            name, value = tok.rsplit(b":", 1) if b":" in tok else (tok, b"1")
            v = float(np.float32(float(value)))
            if v != 0.0:
                slot = slot_of(name.decode(), bits)
                feats[slot] = feats.get(slot, 0.0) + v
        row = sorted((s, v) for s, v in feats.items() if v != 0.0)
        labels.append(1.0 if label == 1.0 else 0.0)
        indices += [s for s, _ in row]
        values += [v for _, v in row]
        indptr.append(len(indices))
    return Batch(np.array(labels, np.float32), np.array(indptr, np.int64),
                 np.array(indices, np.int32), np.array(values, np.float32))


def assert_same(a: Batch, b: Batch) -> None:
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.values, b.values, rtol=1e-6)


def write(tmp_path: Path, data: bytes, name: str = "f.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# --------------------------------------------------------------------------- real data


@pytest.mark.parametrize("rel", REAL_FILES)
def test_matches_sklearn_on_real_files(rel: str, tmp_path: Path) -> None:
    from sklearn.datasets import load_svmlight_file

    path = DATA / rel
    if not path.exists():
        pytest.skip(f"{path} not present")
    ours = read_all(path, bits=20)
    sk_path = path
    if rel.startswith("rcv1/"):  # VW text: drop the |f namespace token for sklearn
        sk_path = write(tmp_path, path.read_bytes().replace(b" |f ", b" "))
    x, y = load_svmlight_file(str(sk_path), zero_based=True, dtype=np.float64)
    x.sum_duplicates()
    x.eliminate_zeros()
    assert ours.rows == x.shape[0] == len(y) > 0
    np.testing.assert_array_equal(ours.labels, (y > 0).astype(np.float32))
    np.testing.assert_array_equal(ours.indptr, x.indptr)
    np.testing.assert_array_equal(ours.indices, x.indices)
    np.testing.assert_allclose(ours.values, x.data.astype(np.float32), rtol=1e-7)
    # several batches give the same rows as one
    assert_same(read_all(path, bits=20, chunk_bytes=1 << 16), ours)


# --------------------------------------------------------------------------- tricky input

TRICKY = (
    b"# header comment\n"
    b"+1 3:0.5 1:2 # trailing comment 9:9\n"
    b"\n"
    b"   \t \n"
    b"-1\t7\t2:-1.5e-1\r\n"
    b"0 5:1 5:2 1:1 5:3\n"  # duplicates summed, unsorted
    b"1.0 qid:4 |ns user=123:1 site_abc 123456789:2\n"
    b"-1.0 4:0 6:0.0 8:1E+2 9:.5 10:5. 11:1e-60 12:-0e5\n"  # zeros (after float32) dropped
    b"0.0 a:b:3 2:1 2:-1\n"  # name 'a:b'; 2 sums to zero and is dropped
    b"1 00012:1 12:1\n"  # same slot: 2.0
    b"1"  # label only, no trailing newline
)


def test_tricky_input_matches_reference(tmp_path: Path) -> None:
    batch = read_all(write(tmp_path, TRICKY), bits=20)
    assert_same(batch, naive_parse(TRICKY, 20))
    assert batch.labels.tolist() == [1, 0, 0, 1, 0, 0, 1, 1]
    assert batch.indices[:5].tolist() == [1, 3, 2, 7, 1]
    assert batch.values[:5].tolist() == pytest.approx([2, 0.5, -0.15, 1, 1])
    assert np.all(batch.values != 0)
    assert batch.indices[batch.indptr[4]:batch.indptr[5]].tolist() == [8, 9, 10]
    assert batch.indices[batch.indptr[2]:batch.indptr[3]].tolist() == [1, 5]
    assert batch.values[batch.indptr[2]:batch.indptr[3]].tolist() == [1.0, 6.0]
    assert batch.indices[batch.indptr[5]:batch.indptr[6]].tolist() == [slot_of("a:b", 20)]
    assert batch.indices[batch.indptr[6]:batch.indptr[7]].tolist() == [12]
    assert batch.values[batch.indptr[6]:batch.indptr[7]].tolist() == [2.0]
    assert batch.indptr[-1] == batch.indptr[-2]  # the label-only last row
    for start, stop in zip(batch.indptr[:-1], batch.indptr[1:], strict=True):
        assert np.all(np.diff(batch.indices[start:stop]) > 0)


def test_every_chunk_size_gives_the_same_rows(tmp_path: Path) -> None:
    path = write(tmp_path, TRICKY)
    expected = read_all(path, bits=20)
    for chunk in range(1, len(TRICKY) + 2):
        reader = LibsvmReader(path, 20, chunk_bytes=chunk)
        assert_same(Batch.concat(list(reader)), expected)
        assert_same(Batch.collect(LibsvmReader(path, 20, chunk_bytes=chunk)), expected)
        assert reader.stats.lines == TRICKY.count(b"\n") + 1
        assert reader.stats.rows == expected.rows
        assert reader.stats.bytes_read == len(TRICKY)


def test_random_input_matches_reference(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    names = ["0", "1", "5", "17", "99999", "123456789012", "98765432109876543210123",
             "user=1", "é", "a:b", "-3", "1.5"]
    vals = ["1", "2.5", "-0.25", "1e-3", "-7E+2", ".5", "3.", "0", "+4", "6.2699720e-02", "1e-60",
            "123456789012345678901234", "-1.5e-40"]
    lines = []
    for _ in range(400):
        if rng.random() < 0.1:
            lines.append(rng.choice(["", "# c", " \t", "\r"]))
            continue
        toks = [str(rng.choice(["1", "-1", "+1", "0", "1.0", "-1.0", "0.0"]))]
        for _ in range(int(rng.integers(0, 12))):
            name = str(rng.choice(names))
            r = rng.random()
            bare = r < 0.2 and ":" not in name  # "a:b" alone would mean name a, value b
            toks.append(name if bare else f"{name}:{rng.choice(vals)}")
        if rng.random() < 0.1:
            toks.insert(1, "|ns")
        sep = str(rng.choice([" ", "\t", "  "]))
        end = str(rng.choice(["", " ", "\r", " # tail"]))
        lines.append(sep.join(toks) + end)
    text = "\n".join(lines).encode()
    path = write(tmp_path, text)
    for bits in (4, 20):
        expected = naive_parse(text, bits)
        for chunk in (7, 100, 1 << 20):
            assert_same(read_all(path, bits=bits, chunk_bytes=chunk), expected)


def _plain_lines(rng: np.random.Generator, count: int) -> list[str]:
    """Lines in the parser's fast-path shape, and near misses that must leave it."""
    values = ["1", "0", "2.5", ".5", "3.", "0.693", "00012.50", "123456789012345",
              "1234567890123456", "0.000000000000001", "9.99999999999999", "1e-3", "-0.25"]
    lines = []
    for _ in range(count):
        label = str(rng.choice(["0", "1", "-1", "+1"]))
        k = int(rng.integers(0, 40))
        names = np.sort(rng.choice(1 << 22, size=k, replace=False))
        if k > 1 and rng.random() < 0.05:
            names[-1] = names[0]  # repeated: summed by the general scanner
        if k > 1 and rng.random() < 0.05:
            names = names[::-1]  # out of order: sorted by the general scanner
        toks = [label] + [f"{n}:{rng.choice(values)}" for n in names]
        if rng.random() < 0.05:
            toks.append("98765432109876543210:1" if rng.random() < 0.5 else "4194304:2")
        end = str(rng.choice(["", "", "", " ", "  ", "\r"]))
        lines.append(" ".join(toks) + end)
    return lines


@pytest.mark.parametrize("bits", [10, 22])
def test_plain_lines_parse_exactly_as_the_general_scanner(bits: int) -> None:
    """The fast path for plain lines gives the general scanner's rows, bit for bit.

    A tab after the label is valid input that only the general scanner takes, so
    the same text with tabs is the reference; values are compared exactly.
    """
    lines = _plain_lines(np.random.default_rng(11), 3000)
    plain = "\n".join(lines).encode()
    general = "\n".join(line.replace(" ", "\t", 1) for line in lines).encode()
    for text in (plain, plain + b"\n"):
        got = kernels.parse_chunk(np.frombuffer(text, np.uint8), len(text), bits, False, 4)
        ref_text = general + text[len(plain):]
        ref = kernels.parse_chunk(np.frombuffer(ref_text, np.uint8), len(ref_text), bits,
                                  False, 4)
        assert got[5] == ref[5] == 0 and got[4] == ref[4]
        for a, b in zip(got[:4], ref[:4], strict=True):
            np.testing.assert_array_equal(a, b)
        assert len(got[0]) == len(lines)
    expected = naive_parse(plain, bits)
    batch = Batch(*kernels.parse_chunk(np.frombuffer(plain, np.uint8), len(plain), bits,
                                       False, 4)[:4])
    assert_same(batch, expected)
    np.testing.assert_array_equal(batch.values, expected.values)  # exactly, not to 1e-6


@pytest.mark.parametrize("width", [3, 39, 64, 65, 300])
def test_hashed_rows_are_sorted_and_summed_as_the_reference(width: int) -> None:
    """Names of 2**bits or more are mixed into the table in any order and may
    collide: the fast path sorts and sums them at the end of the line (insertion
    sort up to 64 slots, a merge sort above) and gives the naive reference's rows,
    as the general scanner does with the same text (a tab after the label)."""
    rng = np.random.default_rng(width)
    lines = []
    for i in range(400):
        names = rng.integers(0, 1 << 40, size=width)
        if width > 1:
            names[-1] = names[0]  # a repeat: one slot, the values summed
        values = rng.choice(["1", "0.5", "2.25", "3"], size=width)
        toks = [f"{n}:{v}" for n, v in zip(names, values, strict=True)]
        lines.append(" ".join([str(i % 2), *toks]))
    text = "\n".join(lines).encode()
    general = "\n".join(line.replace(" ", "\t", 1) for line in lines).encode()
    for bits in (8, 20):
        expected = naive_parse(text, bits)
        for data in (text, general):
            got = Batch(*kernels.parse_chunk(np.frombuffer(data, np.uint8), len(data), bits,
                                             False, 4)[:4])
            assert_same(got, expected)
            np.testing.assert_array_equal(got.values, expected.values)
            for r in range(got.rows):
                row = got.indices[got.indptr[r]:got.indptr[r + 1]]
                assert (np.diff(row) > 0).all()


def test_line_longer_than_chunk(tmp_path: Path) -> None:
    long_line = "1 " + " ".join(f"{i}:1" for i in range(5000))
    text = f"0 1:1\n{long_line}\n-1 2:3\n".encode()
    path = write(tmp_path, text)
    batches = list(LibsvmReader(path, 20, chunk_bytes=64))
    whole = Batch.concat(batches)
    assert whole.rows == 3
    assert whole.indptr.tolist() == [0, 1, 5001, 5002]
    assert_same(whole, naive_parse(text, 20))


def test_empty_and_tiny_files(tmp_path: Path) -> None:
    for data in (b"", b"\n\n", b"# only a comment\n", b"  \r\n"):
        path = write(tmp_path, data)
        assert list(LibsvmReader(path, 20)) == []  # no batches, not an empty batch
        empty = read_all(path, 20)
        assert empty.rows == 0 and empty.indptr.tolist() == [0] and empty.nnz == 0
    one = read_all(write(tmp_path, b"1 4:2"), 20)
    assert (one.rows, one.indices.tolist(), one.values.tolist()) == (1, [4], [2.0])


def test_sources(tmp_path: Path) -> None:
    text = b"1 1:1 2:2\n0 3:3\n"
    expected = naive_parse(text, 20)
    assert_same(read_all(io.BytesIO(text), 20), expected)
    gz = write(tmp_path, gzip.compress(text), "data.txt")  # detected by magic, not suffix
    assert_same(read_all(gz, 20), expected)
    assert_same(read_all(io.BytesIO(gzip.compress(text)), 20), expected)
    with open(gz, "rb") as f:
        assert_same(read_all(f, 20), expected)
    code = ("from ftrl_ps.data.libsvm import read_all; b = read_all('-', 20); "
            "print(b.rows, b.indices.tolist())")
    for payload in (text, gzip.compress(text)):
        out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True,
                             check=True, timeout=120)
        assert out.stdout.decode().strip() == "2 [1, 2, 3]"


def test_source_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(DataError, match="nope.txt"):
        LibsvmReader(missing, 20)
    with pytest.raises(DataError, match="cannot open"):
        LibsvmReader(tmp_path, 20)  # a directory
    truncated = write(tmp_path, gzip.compress(b"1 1:1\n" * 1000)[:-20], "t.gz")
    with pytest.raises(DataError, match="t.gz"):
        read_all(truncated, 20)
    with pytest.raises(ConfigError), open(write(tmp_path, b"1 1:1\n"), encoding="utf-8") as f:
        LibsvmReader(f, 20)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        LibsvmReader(io.BytesIO(b""), 20, byte_range=(0, 1))
    with pytest.raises(ConfigError):
        LibsvmReader(write(tmp_path, gzip.compress(b"1\n"), "g"), 20, byte_range=(0, 1))
    for kw in ({"chunk_bytes": 0}, {"byte_range": (5, 2)}, {"byte_range": (-1, 2)}):
        with pytest.raises(ConfigError):
            LibsvmReader(write(tmp_path, b"1\n"), 20, **kw)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        LibsvmReader(write(tmp_path, b"1\n"), 31)
    with pytest.raises(DataError):
        Batch(np.zeros(1, np.float64), np.zeros(2, np.int64), np.zeros(0, np.int32),
              np.zeros(0, np.float32))


def test_kernel_releases_the_gil() -> None:
    assert kernels.parse_chunk.targetoptions["nogil"] is True
    line = b"1 " + b" ".join(b"%d:1" % (1000000 + 7919 * i) for i in range(39)) + b"\n"
    data = np.frombuffer(bytearray(line * 100_000), dtype=np.uint8)  # ~40 MB
    window: list[float] = []

    def work() -> None:
        window.append(time.perf_counter())
        kernels.parse_chunk(data, len(data), 24, False, 10)
        window.append(time.perf_counter())

    worker = threading.Thread(target=work)
    ticks = []
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    worker.join()
    start, stop = window
    # with the GIL held, this thread could not run while the kernel ran
    assert sum(start < t < stop for t in ticks) >= 3, (stop - start, len(ticks))


# --------------------------------------------------------------------------- bad input

BAD_LINES = [
    ("2 1:1", "2", "label"),
    ("abc 1:1", "abc", "label"),
    ("1: 1:1", "1:", "label"),
    (" |f 1:1", "|f", "label"),
    ("1 :3", ":3", "empty feature name"),
    ("1 5:", "5:", "empty feature value"),
    ("1 5:abc", "5:abc", "not a decimal"),
    ("1 5:1.5.2", "5:1.5.2", "not a decimal"),
    ("1 5:--1", "5:--1", "not a decimal"),
    ("1 5:1e", "5:1e", "not a decimal"),
    ("1 5:0x10", "5:0x10", "not a decimal"),
    ("1 5:nan", "5:nan", "NaN"),
    ("1 5:-inf", "5:-inf", "NaN"),
    ("1 5:1e999", "5:1e999", "float32"),
    ("1 5:4e38", "5:4e38", "float32"),
    ("1 5:3e38 5:3e38", "1 5:3e38 5:3e38", "overflows"),
]


@pytest.mark.parametrize(("bad", "token", "reason"), BAD_LINES)
def test_bad_line_raises_with_line_and_token(bad: str, token: str, reason: str,
                                             tmp_path: Path) -> None:
    text = f"1 1:1\n# comment\n\n{bad}\r\n0 2:1\n".encode()
    path = write(tmp_path, text)
    for chunk in (3, 1 << 20):
        with pytest.raises(ParseError) as info:
            read_all(path, 20, chunk_bytes=chunk)
        err = info.value
        assert (err.source, err.line, err.token) == (str(path), 4, token)
        assert reason in err.reason
        assert f"{path}:4:" in str(err)


def test_skip_bad_lines(tmp_path: Path) -> None:
    good = [f"{i % 2} {i}:1 {i + 1}:2" for i in range(30)]
    lines: list[str] = []
    bad_at = []
    for i, line in enumerate(good):
        lines.append(line)
        if i % 2 == 0:
            bad, token, _ = BAD_LINES[i % len(BAD_LINES)]
            lines.append(bad)
            bad_at.append((len(lines), token))
    path = write(tmp_path, "\n".join(lines).encode())
    for chunk in (10, 1 << 20):
        reader = LibsvmReader(path, 20, chunk_bytes=chunk, skip_bad_lines=True)
        batch = Batch.concat(list(reader))
        assert_same(batch, naive_parse("\n".join(good).encode(), 20))
        assert reader.stats.bad_lines == 15
        assert reader.stats.rows == 30
        assert [(ln, tok) for ln, tok, _ in reader.stats.bad_examples] == bad_at[:10]
        assert "15 bad lines" in reader.stats.report()


# --------------------------------------------------------------------------- byte ranges

RANGE_FILES = {
    "trailing_newline": "".join(f"{i % 2} {i}:1\n" for i in range(50)).encode(),
    "no_trailing_newline": "\n".join(f"1 {i}:{i + 1}" for i in range(37)).encode(),
    "crlf_blank_comments": b"".join(
        (f"0 {i}:1\r\n" if i % 5 else f"\r\n# c {i}\n1 {i}:2\r\n").encode() for i in range(40)),
    "tiny": b"1 1:1\n0 2:1",
    "one_line": b"1 7:1",
    "long_lines": "".join(
        "1 " + " ".join(f"{j}:1" for j in range(i, i + 300)) + "\n" for i in range(5)).encode(),
}


@pytest.mark.parametrize("name", sorted(RANGE_FILES))
def test_split_ranges_read_every_line_once(name: str, tmp_path: Path) -> None:
    text = RANGE_FILES[name]
    path = write(tmp_path, text)
    expected = read_all(path, 20)
    for parts in [1, 2, 3, 4, 5, 7, 8, 13, len(text) // 2 + 1, len(text) + 3]:
        ranges = split_ranges(path, parts)
        assert len(ranges) == parts and ranges[0][0] == 0 and ranges[-1][1] == len(text)
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
        for chunk in (5, 1 << 20):
            pieces = [read_all(path, 20, byte_range=r, chunk_bytes=chunk) for r in ranges]
            assert_same(Batch.concat(pieces), expected)


def test_range_reads_lines_starting_inside(tmp_path: Path) -> None:
    text = b"1 1:1\n0 2:1\n\n1 3:1\n0 4:1"
    path = write(tmp_path, text)
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == ord("\n")]
    rng = np.random.default_rng(0)
    for _ in range(200):
        start, end = sorted(int(x) for x in rng.integers(0, len(text) + 2, size=2))
        kept = [s for s in starts if start <= s < end]
        wanted = b"".join(text[s:].split(b"\n", 1)[0] + b"\n" for s in kept)
        got = read_all(path, 20, byte_range=(start, end), chunk_bytes=int(rng.integers(1, 9)))
        assert_same(got, naive_parse(wanted, 20))


def test_range_errors_report_file_line_numbers(tmp_path: Path) -> None:
    lines = [f"1 {i}:1" for i in range(100)]
    lines[70] = "1 5:oops"
    text = "\n".join(lines).encode()
    path = write(tmp_path, text)
    start = text.index(b"1 60:1")
    with pytest.raises(ParseError) as info:
        read_all(path, 20, byte_range=(start, len(text)), chunk_bytes=16)
    assert (info.value.line, info.value.token) == (71, "5:oops")
    reader = LibsvmReader(path, 20, byte_range=(start, len(text)), skip_bad_lines=True)
    assert Batch.concat(list(reader)).rows == 39
    assert reader.stats.bad_examples[0][:2] == (71, "5:oops")


def test_split_ranges_checks(tmp_path: Path) -> None:
    assert split_ranges(write(tmp_path, b""), 3) == [(0, 0), (0, 0), (0, 0)]
    with pytest.raises(ConfigError):
        split_ranges(write(tmp_path, b"1\n"), 0)
    with pytest.raises(DataError):
        split_ranges(tmp_path / "missing", 2)


@pytest.mark.parametrize("threads", [2, 3])
def test_parallel_parsing_matches_sequential(tmp_path: Path, threads: int) -> None:
    rng = np.random.default_rng(3)
    lines = []
    for i in range(3000):
        feats = " ".join(f"{j}:{rng.integers(1, 9)}" for j in sorted(rng.choice(500, 5, False)))
        lines.append(f"{i % 2} {feats}")
    lines[1234] = "1 4:nope"
    lines[2500] = "7 1:1"
    path = tmp_path / "p.svm"
    path.write_text("\n".join(lines) + "\n")
    seq = LibsvmReader(path, 12, chunk_bytes=2048, skip_bad_lines=True)
    par = LibsvmReader(path, 12, chunk_bytes=2048, skip_bad_lines=True, threads=threads)
    a, b = Batch.concat(list(seq)), Batch.concat(list(par))
    for name in ("labels", "indptr", "indices", "values"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert seq.stats == par.stats
    assert [ex[0] for ex in par.stats.bad_examples] == [1235, 2501]
    with pytest.raises(ParseError) as info:
        list(LibsvmReader(path, 12, chunk_bytes=2048, threads=threads))
    assert info.value.line == 1235  # the first bad line in file order, not in finish order


@pytest.mark.parametrize("threads", [2, 3])
def test_parallel_parsing_with_long_lines_ranges_and_reused_buffers(
        tmp_path: Path, threads: int) -> None:
    """The parser threads get the read buffers themselves (handed back once parsed,
    then read into again): lines longer than a chunk, byte ranges and bad lines'
    tokens come out as with one thread."""
    rng = np.random.default_rng(11)
    lines = []
    for i in range(1500):
        width = 300 if i % 97 == 0 else 6  # some lines several chunks long
        slots = sorted(rng.choice(5000, width, False))
        feats = " ".join(f"{j}:{rng.integers(1, 9)}" for j in slots)
        lines.append(f"{i % 2} {feats}")
    for k in (3, 700, 1499):
        lines[k] = f"1 {k}:bad{k}"
    path = tmp_path / "long.svm"
    path.write_text("\n".join(lines) + "\n")
    for byte_range in [None, *split_ranges(path, 3)]:
        seq = LibsvmReader(path, 14, chunk_bytes=256, skip_bad_lines=True, byte_range=byte_range)
        par = LibsvmReader(path, 14, chunk_bytes=256, skip_bad_lines=True, byte_range=byte_range,
                           threads=threads)
        a, b = Batch.concat(list(seq)), Batch.concat(list(par))
        for name in ("labels", "indptr", "indices", "values"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert seq.stats == par.stats
    whole = LibsvmReader(path, 14, chunk_bytes=256, skip_bad_lines=True, threads=threads)
    assert sum(b.rows for b in whole) == 1497
    assert [ex[1] for ex in whole.stats.bad_examples] == ["3:bad3", "700:bad700", "1499:bad1499"]


@pytest.mark.parametrize("label_optional", [False, True])
def test_the_densest_text_fits_the_capacity_from_its_length(label_optional: bool) -> None:
    """The kernel sizes its arrays from the text's length alone (a row and a
    feature each take at least two bytes): one-byte tokens, one-byte rows, with
    and without a final newline, all fit and parse as the reference does."""
    texts = [b"1 1 2 3 4 5 6 7 8 9", b"1\n0\n1\n0", b"1 1\n0 2\n1 3\n", b"1", b"1 7",
             b"1 " + b" ".join(str(i % 10).encode() for i in range(1, 2001)) + b"\n",
             b"\n".join([b"1", b"0 5", b"-1 1 2", b"+1"] * 300)]
    for text in texts:
        got = kernels.parse_chunk(np.frombuffer(text, np.uint8), len(text), 10, False, 4,
                                  label_optional)
        assert got[5] == 0
        if label_optional:  # the label is read and ignored: labels come out 0
            expected = naive_parse(text, 10)
            np.testing.assert_array_equal(got[1], expected.indptr)
            np.testing.assert_array_equal(got[2], expected.indices)
            assert not got[0].any()
        else:
            assert_same(Batch(*got[:4]), naive_parse(text, 10))


@pytest.mark.parametrize("room", [(1, 1), (5, 2), (300, 40)])
def test_arrays_made_for_fewer_rows_and_features_grow_to_the_same_parse(
        room: tuple[int, int]) -> None:
    """``capacity``/``row_capacity`` (the reader's guess from the chunk before)
    below what a chunk holds: the arrays grow as lines need, in the fast path
    and the general scanner alike, and the parse is the worst-case sized one's,
    exactly (rows, values, line and bad-line counts, bad examples)."""
    rng = np.random.default_rng(3)
    lines = _plain_lines(rng, 500)
    plain = "\n".join(lines).encode()
    texts = [TRICKY, plain, plain + b"\n", "\n".join(line.replace(" ", "\t", 1)
                                                     for line in lines).encode(),
             b"1 1 2 3 4 5 6 7 8 9", b"\n".join([b"1", b"0 5", b"-1 1 2", b"+1"] * 300),
             b"1 3:1\n0 x:y:z\n1 4:bad\n\n# c\n0 9:2\n" * 50]
    for text in texts:
        arr = np.frombuffer(text, np.uint8)
        for skip in (False, True):
            ref = kernels.parse_chunk(arr, len(text), 20, skip, 4)
            got = kernels.parse_chunk(arr, len(text), 20, skip, 4, False, *room)
            for a, b in zip(got, ref, strict=True):
                np.testing.assert_array_equal(a, b)


def test_a_reader_whose_chunks_grow_denser_reads_every_row(tmp_path: Path) -> None:
    """The reader makes a chunk's arrays for the last chunk's density: sparse
    lines first, then ones with ten times the features, read as the reference."""
    sparse = [f"{i % 2} {i}:1" for i in range(2000)]
    dense = [f"{i % 2} " + " ".join(f"{j}:1" for j in range(i % 7, 40, 3)) for i in range(2000)]
    text = "\n".join(sparse + dense + sparse).encode()
    path = write(tmp_path, text)
    for chunk in (4096, 65536):
        assert_same(read_all(path, bits=16, chunk_bytes=chunk), naive_parse(text, 16))
