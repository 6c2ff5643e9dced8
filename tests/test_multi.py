"""The K-model kernels (ftrl_ps._kernels.tune behind core.multi) against the
plain-Python reference FTRL of tests/naive.py."""

from __future__ import annotations

import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.core.multi import MultiFTRL, compact_keys
from ftrl_ps.core.params import FTRLParams
from ftrl_ps.errors import ConfigError, DataError
from tests.naive import ReferenceFTRL, logloss
from tests.test_ftrl import random_rows

GRID = [
    FTRLParams(),
    FTRLParams(alpha=0.5, beta=0.5, l1=0.0, l2=0.0),
    FTRLParams(alpha=2.0, beta=0.1, l1=0.3, l2=2.0),
    FTRLParams(alpha=0.01, beta=3.0, l1=0.0, l2=10.0),
    FTRLParams(alpha=5.0, beta=1.0, l1=0.05, l2=0.0),
]


def _features(indptr, indices, values, r):  # type: ignore[no-untyped-def]
    return [(int(indices[j]), float(values[j])) for j in range(indptr[r], indptr[r + 1])]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_model_matches_the_reference(dtype: str) -> None:
    rng = np.random.default_rng(11)
    keys = 40
    labels, indptr, indices, values = random_rows(rng, 300, keys - 1)
    multi = MultiFTRL(keys, GRID, dtype=dtype)
    refs = [ReferenceFTRL(p.alpha, p.beta, p.l1, p.l2, bias_key=keys - 1) for p in GRID]
    loss = np.zeros(len(GRID))
    for a, b in [(0, 1), (1, 120), (120, 120), (120, 300)]:  # uneven ranges, one empty
        loss += multi.fit(labels, indptr, indices, values, np.arange(a, b))
    ref_loss = np.zeros(len(GRID))
    for r in range(300):
        feats = _features(indptr, indices, values, r)
        for k, ref in enumerate(refs):
            ref_loss[k] += ref.update(feats, float(labels[r]))
    tol = 1e-4 if dtype == "float32" else 1e-9
    np.testing.assert_allclose(loss, ref_loss, rtol=tol)
    weights = multi.weights()
    for k, ref in enumerate(refs):
        n, z = multi.state_of(k)
        touched = sorted(ref.n)
        np.testing.assert_allclose(n[touched], [ref.n[i] for i in touched], rtol=tol, atol=tol)
        np.testing.assert_allclose(z[touched], [ref.z[i] for i in touched], rtol=tol, atol=tol)
        untouched = np.setdiff1d(np.arange(keys), touched)
        assert not n[untouched].any() and not z[untouched].any()
        np.testing.assert_allclose(
            weights[:, k], [ref.weight(i) for i in range(keys)], rtol=tol, atol=tol
        )
    # held-out loss of the trained models = the reference's predictions
    hl, hp, hi, hv = random_rows(np.random.default_rng(12), 50, keys - 1)
    held = multi.logloss(hl, hp, hi, hv)
    for k, ref in enumerate(refs):
        probs = [ref.predict(_features(hp, hi, hv, r)) for r in range(50)]
        assert held[k] / 50 == pytest.approx(logloss(hl.tolist(), probs), rel=tol)


def test_one_model_agrees_with_the_single_model_kernel() -> None:
    rng = np.random.default_rng(5)
    labels, indptr, indices, values = random_rows(rng, 500, 64)
    params = FTRLParams(alpha=0.3, l1=0.5, l2=0.5)
    single = FTRL(6, params, dtype="float64")
    loss = single.fit_rows(labels, indptr, indices, values)
    multi = MultiFTRL(65, [params], dtype="float64")
    assert multi.fit(labels, indptr, indices, values)[0] == pytest.approx(loss, rel=1e-12)
    n, z = multi.state_of(0)
    np.testing.assert_allclose(n, single.n, rtol=1e-12)
    np.testing.assert_allclose(z, single.z, rtol=1e-12, atol=1e-15)


def test_keep_selects_models_with_their_state() -> None:
    rng = np.random.default_rng(6)
    labels, indptr, indices, values = random_rows(rng, 200, 30)
    multi = MultiFTRL(31, GRID)
    multi.fit(labels, indptr, indices, values)
    before = [multi.state_of(k) for k in range(len(GRID))]
    multi.keep([3, 1])
    assert multi.size == 2 and multi.params == [GRID[3], GRID[1]]
    for k, old in zip(range(2), (3, 1), strict=True):
        np.testing.assert_array_equal(multi.state_of(k)[0], before[old][0])
        np.testing.assert_array_equal(multi.state_of(k)[1], before[old][1])
    # training goes on with the kept settings
    more = multi.fit(labels, indptr, indices, values)
    assert more.shape == (2,) and np.all(np.isfinite(more))


def test_split_and_join_keep_every_model() -> None:
    rng = np.random.default_rng(9)
    labels, indptr, indices, values = random_rows(rng, 150, 30)
    whole = MultiFTRL(31, GRID)
    whole.fit(labels, indptr, indices, values)
    parts = whole.split(2)
    assert [g.size for g in parts] == [2, 3] or [g.size for g in parts] == [3, 2]
    for g in parts:  # training the groups apart = training them together
        g.fit(labels, indptr, indices, values)
    whole.fit(labels, indptr, indices, values)
    again = MultiFTRL.join(parts)
    assert again.params == GRID
    np.testing.assert_array_equal(again.state, whole.state)
    assert len(MultiFTRL(31, GRID[:1]).split(4)) == 1


@pytest.mark.parametrize("parts", [1, 2, 3, 8])
def test_regroup_is_join_keep_split(parts: int) -> None:
    rng = np.random.default_rng(11)
    labels, indptr, indices, values = random_rows(rng, 150, 30)
    whole = MultiFTRL(31, GRID)
    groups = whole.split(2)
    for g in groups:
        g.fit(labels, indptr, indices, values)
    which = [0, 2, 3]  # models of both groups (sizes 2 and 3 or 3 and 2)
    expected = MultiFTRL.join(groups)
    expected.keep(which)
    got = MultiFTRL.regroup(groups, which, parts)
    assert [g.size for g in got] == [g.size for g in expected.split(parts)]
    again = MultiFTRL.join(got)
    assert again.params == expected.params == [GRID[0], GRID[2], GRID[3]]
    np.testing.assert_array_equal(again.state, expected.state)
    # the scores of the regrouped models are those of the kept ones
    scores = np.concatenate([g.logloss(labels, indptr, indices, values) for g in got])
    np.testing.assert_array_equal(scores, expected.logloss(labels, indptr, indices, values))
    with pytest.raises(ConfigError, match="models to keep"):
        MultiFTRL.regroup(groups, [5], parts)
    fresh = MultiFTRL.fresh_groups(31, GRID, parts)
    assert [g.params for g in fresh] == [g.params for g in MultiFTRL(31, GRID).split(parts)]
    assert all(not g.state.any() for g in fresh)

def test_rows_in_any_order_and_repeated() -> None:
    """order = [3, 0, 3, 1]: the same as training on those rows copied in that order."""
    rng = np.random.default_rng(8)
    labels, indptr, indices, values = random_rows(rng, 4, 20)
    order = [3, 0, 3, 1]
    multi = MultiFTRL(21, GRID[:3])
    loss = multi.fit(labels, indptr, indices, values, order)
    copy = MultiFTRL(21, GRID[:3])
    parts = [(indices[indptr[r]:indptr[r + 1]], values[indptr[r]:indptr[r + 1]]) for r in order]
    cp = np.concatenate([[0], np.cumsum([p[0].size for p in parts])])
    copy_loss = copy.fit(labels[order], cp, np.concatenate([p[0] for p in parts]),
                         np.concatenate([p[1] for p in parts]))
    np.testing.assert_array_equal(loss, copy_loss)
    np.testing.assert_array_equal(multi.state, copy.state)
    held = multi.logloss(labels, indptr, indices, values, [2])
    assert held.shape == (3,) and np.all(held > 0)


@pytest.mark.parametrize("num_slots", [None, 1024])
def test_compact_keys_keep_order(num_slots: int | None) -> None:
    slots, compact = compact_keys(np.array([7, 3, 1000, 3, 7], np.int32), num_slots)
    assert slots.tolist() == [3, 7, 1000]
    assert compact.tolist() == [1, 0, 2, 0, 1]
    assert compact.dtype == np.int32
    rng = np.random.default_rng(3)
    many = rng.integers(0, 5000, 20000).astype(np.int32)
    a, b = compact_keys(many, 8192), compact_keys(many)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0][a[1]], many)
    with pytest.raises(DataError):
        compact_keys([5], num_slots=4)


@pytest.mark.parametrize("num_slots", [None, 1024])
def test_compact_keys_in_place_rewrites_the_indices(num_slots: int | None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import ftrl_ps.core.multi as multi_mod

    monkeypatch.setattr(multi_mod, "_IN_PLACE_STEP", 7)  # several steps and a short last one
    rng = np.random.default_rng(4)
    many = rng.integers(0, 1000, 100).astype(np.int32)
    work = many.copy()
    slots, compact = compact_keys(work, num_slots, in_place=True)
    assert compact is work
    expected = compact_keys(many, num_slots)
    np.testing.assert_array_equal(slots, expected[0])
    np.testing.assert_array_equal(compact, expected[1])
    for bad in (many.astype(np.int64), [1, 2], many[::2]):
        with pytest.raises(ConfigError, match="in_place"):
            compact_keys(bad, num_slots, in_place=True)


def test_bad_inputs_raise_clear_errors_and_leave_state_alone() -> None:
    multi = MultiFTRL(5, GRID[:2])
    labels = np.array([1.0], np.float32)
    with pytest.raises(DataError, match=r"indices must be in \[0, 4\)"):
        multi.fit(labels, [0, 1], np.array([4], np.int32), np.ones(1, np.float32))
    with pytest.raises(DataError, match="labels for"):
        multi.fit(np.ones(2, np.float32), [0, 1], np.array([1], np.int32), np.ones(1, np.float32))
    with pytest.raises(DataError, match=r"row numbers in order must be in \[0, 1\)"):
        multi.fit(labels, [0, 1], np.array([1], np.int32), np.ones(1, np.float32), [0, 1])
    with pytest.raises(DataError, match="1-D array of row numbers"):
        multi.fit(labels, [0, 1], np.array([1], np.int32), np.ones(1, np.float32), [0.5])
    assert not multi.state.any()
    with pytest.raises(ConfigError):
        MultiFTRL(5, [])
    with pytest.raises(ConfigError):
        MultiFTRL(0, GRID)
    with pytest.raises(ConfigError):
        multi.keep([2])
