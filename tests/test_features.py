"""Python inputs become the rows the libsvm reader makes from the same examples."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftrl_ps.data.features import (
    NameCache,
    binary_labels,
    column_slots,
    rows_from_csr,
    rows_from_dense,
    rows_from_dicts,
)
from ftrl_ps.data.hashing import slot_of
from ftrl_ps.data.libsvm import read_all
from ftrl_ps.errors import DataError

NAMES = st.one_of(
    st.integers(0, 5000).map(str),
    st.text("abcxyz=_-.0123", min_size=1, max_size=6),
)
VALUES = st.one_of(st.integers(-3, 3), st.floats(-100, 100, width=32), st.just("v"))
ROWS = st.lists(st.dictionaries(NAMES, VALUES, max_size=6), min_size=1, max_size=8)


def _line(row: dict[str, object]) -> str:
    tokens = []
    for name, value in row.items():
        if isinstance(value, str):
            tokens.append(f"{name}={value}:1")
        else:
            tokens.append(f"{name}:{float(value)!r}")
    return " ".join(["1", *tokens])


@settings(max_examples=60, deadline=None)
@given(ROWS, st.sampled_from([4, 10, 20]))
def test_dicts_give_the_rows_the_reader_gives(rows: list[dict[str, object]], bits: int) -> None:
    text = "\n".join(_line(r) for r in rows) + "\n"
    expected = read_all(io.BytesIO(text.encode()), bits)
    got = rows_from_dicts(rows, bits)
    assert got.indptr.tolist() == expected.indptr.tolist()
    assert got.indices.tolist() == expected.indices.tolist()
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-6, atol=1e-30)


def test_columns_map_like_libsvm_indices() -> None:
    bits = 4
    cols = column_slots(40, bits)
    assert cols.tolist() == [slot_of(str(j), bits) for j in range(40)]
    assert cols[:16].tolist() == list(range(16))


def test_dense_and_csr_agree_and_sum_hash_collisions() -> None:
    sparse = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 50))
    x[rng.random(x.shape) < 0.7] = 0.0
    labels = np.zeros(30, np.float32)
    dense = rows_from_dense(labels, x, bits=3)  # 50 columns onto 8 slots: collisions
    csr = sparse.csr_matrix(x)
    from_csr = rows_from_csr(labels, csr.indptr, csr.indices, csr.data, 50, bits=3)
    for a, b in [(dense.indptr, from_csr.indptr), (dense.indices, from_csr.indices)]:
        assert a.tolist() == b.tolist()
    np.testing.assert_allclose(dense.values, from_csr.values, rtol=1e-6)
    # the reader on the same rows written as libsvm lines
    lines = [" ".join(["0", *(f"{j}:{float(x[i, j])!r}" for j in np.flatnonzero(x[i]))])
             for i in range(30)]
    expected = read_all(io.BytesIO(("\n".join(lines) + "\n").encode()), 3)
    assert dense.indices.tolist() == expected.indices.tolist()
    np.testing.assert_allclose(dense.values, expected.values, rtol=1e-5)


def test_unsorted_csr_with_repeats_and_zeros() -> None:
    labels = np.zeros(2, np.float32)
    rows = rows_from_csr(labels, [0, 3, 4], np.array([5, 1, 5, 2]), np.array([1.0, 2, 3, 0]),
                         n_features=8, bits=10)
    assert rows.indptr.tolist() == [0, 2, 2]  # row 1's only value is 0: dropped
    assert rows.indices.tolist() == [1, 5]
    assert rows.values.tolist() == [2.0, 4.0]


def test_labels() -> None:
    assert binary_labels(np.array([True, False]), 2).tolist() == [1.0, 0.0]
    with pytest.raises(DataError, match="labels must be -1, 0 or 1"):
        binary_labels([2], 1)
    with pytest.raises(DataError, match="labels for"):
        binary_labels([1, 0], 3)
    with pytest.raises(DataError, match="numbers or booleans"):
        binary_labels(["yes"], 1)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"a": float("nan")}, "not a finite float32"),
        ({"a": 1e39}, "not a finite float32"),
        ({"a": [1]}, "value must be a number"),
        ({None: 1}, "names must be str or int"),
        ({"": 1}, "empty feature name"),
    ],
)
def test_bad_dicts_raise_clear_errors(row: dict, message: str) -> None:
    with pytest.raises(DataError, match=message):
        rows_from_dicts([row], 10)


def test_bad_arrays_raise_clear_errors() -> None:
    labels = np.zeros(1, np.float32)
    with pytest.raises(DataError, match="finite"):
        rows_from_dense(labels, np.array([[np.nan]]), 10)
    with pytest.raises(DataError, match="2-D"):
        rows_from_dense(labels, np.array([1.0]), 10)
    with pytest.raises(DataError, match=r"column indices must be in \[0, 3\)"):
        rows_from_csr(labels, [0, 1], np.array([3]), np.array([1.0]), 3, 10)


def test_name_cache_hashes_in_bulk_like_one_by_one() -> None:
    names = [f"user={i}" for i in range(300)] + ["7", "007"]
    cache = NameCache(12, limit=100)
    assert cache.slots(names) == [slot_of(n, 12) for n in names]
    assert cache.slot("user=5") == slot_of("user=5", 12)
