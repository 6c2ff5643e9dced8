from __future__ import annotations

import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRL, FTRLParams, num_keys
from ftrl_ps.errors import ConfigError, DataError
from tests.naive import ReferenceFTRL


def random_rows(rng: np.random.Generator, rows: int, slots: int, max_nnz: int = 8):
    lens = rng.integers(0, max_nnz + 1, rows)  # includes empty rows
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    indices = np.concatenate(
        [np.sort(rng.choice(slots, size=k, replace=False)) for k in lens] or [np.array([])]
    ).astype(np.int32)
    values = rng.normal(size=indices.size).astype(np.float32)
    values[rng.random(values.size) < 0.5] = 1.0
    labels = (rng.random(rows) < 0.3).astype(np.float32)
    return labels, indptr, indices, values


@pytest.mark.parametrize(
    "params",
    [FTRLParams(), FTRLParams(alpha=0.5, beta=0.5, l1=0.0, l2=0.0), FTRLParams(l1=0.3, l2=2.0)],
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernel_matches_reference(params: FTRLParams, dtype: str) -> None:
    rng = np.random.default_rng(1)
    bits = 6
    labels, indptr, indices, values = random_rows(rng, 400, 1 << bits)
    model = FTRL(bits, params, dtype=dtype)
    ref = ReferenceFTRL(params.alpha, params.beta, params.l1, params.l2, bias_key=1 << bits)
    # train in uneven batches to exercise batch boundaries
    ref_loss = 0.0
    loss = 0.0
    cuts = [0, 1, 7, 150, 400]
    for a, b in zip(cuts, cuts[1:], strict=False):
        sl = slice(indptr[a], indptr[b])
        loss += model.fit_rows(labels[a:b], indptr[a : b + 1] - indptr[a], indices[sl], values[sl])
    for r in range(400):
        feats = [(int(indices[j]), float(values[j])) for j in range(indptr[r], indptr[r + 1])]
        ref_loss += ref.update(feats, float(labels[r]))
    tol = 1e-4 if dtype == "float32" else 1e-10
    assert loss == pytest.approx(ref_loss, rel=tol)
    keys = sorted(ref.n)
    assert np.allclose(model.n[keys], [ref.n[k] for k in keys], rtol=tol, atol=tol)
    assert np.allclose(model.z[keys], [ref.z[k] for k in keys], rtol=tol, atol=tol)
    untouched = np.setdiff1d(np.arange(num_keys(bits)), keys)
    assert not model.n[untouched].any() and not model.z[untouched].any()
    w = model.weights()
    assert np.allclose(w[keys], [ref.weight(k) for k in keys], rtol=tol, atol=tol)
    probs = model.predict_rows(indptr, indices, values)
    ref_probs = [
        ref.predict([(int(indices[j]), float(values[j])) for j in range(indptr[r], indptr[r + 1])])
        for r in range(400)
    ]
    assert np.allclose(probs, ref_probs, rtol=tol, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rows_longer_than_the_kernel_scratch_match_the_reference(dtype: str) -> None:
    """The training loop keeps one row's weights in a scratch of ROW_SCRATCH
    features and grows it for longer rows: short, long and longer rows mixed in
    one batch give the reference's state, and the same bits as one row per call."""
    from ftrl_ps._kernels.ftrl import ROW_SCRATCH

    rng = np.random.default_rng(7)
    bits = 12
    lens = [3, ROW_SCRATCH + 1, 5, 0, 3 * ROW_SCRATCH, ROW_SCRATCH, 2, 5 * ROW_SCRATCH + 7, 1]
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    indices = np.concatenate(
        [np.sort(rng.choice(1 << bits, size=k, replace=False)) for k in lens]).astype(np.int32)
    values = rng.normal(size=indices.size).astype(np.float32)
    labels = np.array([1, 0, 1, 1, 0, 1, 0, 1, 0], dtype=np.float32)
    params = FTRLParams(alpha=0.3, l1=0.01)
    model = FTRL(bits, params, dtype=dtype)
    loss = model.fit_rows(labels, indptr, indices, values)
    one_by_one = FTRL(bits, params, dtype=dtype)
    loss_1 = sum(one_by_one.fit_rows(labels[r:r + 1], indptr[r:r + 2] - indptr[r],
                                     indices[indptr[r]:indptr[r + 1]],
                                     values[indptr[r]:indptr[r + 1]]) for r in range(len(lens)))
    assert loss == loss_1
    assert np.array_equal(model.n, one_by_one.n) and np.array_equal(model.z, one_by_one.z)
    ref = ReferenceFTRL(params.alpha, params.beta, params.l1, params.l2, bias_key=1 << bits)
    ref_loss = sum(ref.update([(int(indices[j]), float(values[j]))
                               for j in range(indptr[r], indptr[r + 1])], float(labels[r]))
                   for r in range(len(lens)))
    tol = 1e-4 if dtype == "float32" else 1e-10
    assert loss == pytest.approx(ref_loss, rel=tol)
    keys = sorted(ref.n)
    assert np.allclose(model.n[keys], [ref.n[k] for k in keys], rtol=tol, atol=tol)
    assert np.allclose(model.z[keys], [ref.z[k] for k in keys], rtol=tol, atol=tol)


def test_l1_gives_sparse_weights_and_bias_learns_base_rate() -> None:
    rng = np.random.default_rng(2)
    labels, indptr, indices, values = random_rows(rng, 3000, 256)
    strong = FTRL(8, FTRLParams(l1=5.0))
    weak = FTRL(8, FTRLParams(l1=0.0))
    for m in (strong, weak):
        m.fit_rows(labels, indptr, indices, values)
    assert np.count_nonzero(strong.weights()) < np.count_nonzero(weak.weights())
    # empty rows see only the bias: its prediction tracks the positive rate (0.3)
    p_empty = strong.predict_rows([0, 0], np.array([], np.int32), np.array([], np.float32))[0]
    assert 0.2 < p_empty < 0.4


def test_learns_a_separable_signal() -> None:
    rng = np.random.default_rng(3)
    rows = 5000
    indices = rng.integers(0, 2, rows).astype(np.int32)
    labels = indices.astype(np.float32)  # feature 1 <=> positive
    indptr = np.arange(rows + 1)
    model = FTRL(4, FTRLParams(alpha=0.5, l1=0.1))
    loss = model.fit_rows(labels, indptr, indices, np.ones(rows, np.float32))
    assert loss / rows < 0.3
    p = model.predict_rows([0, 1, 2], np.array([0, 1], np.int32), np.ones(2, np.float32))
    assert p[0] < 0.1 and p[1] > 0.9


@pytest.mark.parametrize(
    "kwargs", [{"alpha": 0.0}, {"alpha": -1.0}, {"l1": -0.1}, {"beta": float("nan")}, {"l2": "x"}]
)
def test_bad_params(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        FTRLParams(**kwargs)


@pytest.mark.parametrize("bits", [0, 31, -3, 2.5, True])
def test_bad_bits(bits: object) -> None:
    with pytest.raises(ConfigError):
        FTRL(bits)  # type: ignore[arg-type]


def test_bad_rows_leave_state_untouched() -> None:
    model = FTRL(4)
    good = (np.array([1.0], np.float32), [0, 2], np.array([1, 3], np.int32), np.ones(2, np.float32))
    model.fit_rows(*good)
    before = model.state.copy()
    bad_cases = [
        (good[0], [0, 2], np.array([1, 16], np.int32), good[3]),  # index out of range
        (good[0], [0, 2], np.array([-1, 3], np.int32), good[3]),  # negative index
        (good[0], [0, 3], good[2], good[3]),  # indptr beyond data
        (good[0], [1, 2], good[2], good[3]),  # indptr not starting at 0
        (good[0], [0, 2], good[2], np.array([1.0, np.nan], np.float32)),  # NaN value
        (good[0], [0, 2], good[2], np.array([1.0, np.inf], np.float32)),  # inf value
        (np.array([2.0], np.float32), [0, 2], good[2], good[3]),  # label not 0/1
        (np.array([1.0, 0.0], np.float32), [0, 2], good[2], good[3]),  # label count
        (good[0], [0, 2], good[2], np.ones(3, np.float32)),  # length mismatch
        (good[0], [0, 2], np.array([1.5, 2.5]), good[3]),  # float indices
    ]
    for case in bad_cases:
        with pytest.raises(DataError):
            model.fit_rows(*case)
    np.testing.assert_array_equal(model.state, before)


def test_load_state_roundtrip() -> None:
    rng = np.random.default_rng(4)
    labels, indptr, indices, values = random_rows(rng, 200, 64)
    a = FTRL(6)
    a.fit_rows(labels, indptr, indices, values)
    keys = a.touched_keys()
    b = FTRL(6)
    b.load_state(keys, a.n[keys], a.z[keys])
    np.testing.assert_array_equal(a.state, b.state)


def test_margins_match_the_reference_and_the_probabilities() -> None:
    rng = np.random.default_rng(21)
    labels, indptr, indices, values = random_rows(rng, 300, 64)
    params = FTRLParams(alpha=0.7, l1=0.2)
    model = FTRL(6, params)
    model.fit_rows(labels, indptr, indices, values)
    ref = ReferenceFTRL(params.alpha, params.beta, params.l1, params.l2, bias_key=64)
    for r in range(300):
        ref.update([(int(indices[j]), float(values[j])) for j in range(indptr[r], indptr[r + 1])],
                   float(labels[r]))
    margins = model.margin_rows(indptr, indices, values)
    expected = [ref.weight(64) + sum(ref.weight(int(indices[j])) * float(values[j])
                                     for j in range(indptr[r], indptr[r + 1])) for r in range(300)]
    np.testing.assert_allclose(margins, expected, rtol=1e-4, atol=1e-5)
    probs = model.predict_rows(indptr, indices, values)
    np.testing.assert_allclose(1 / (1 + np.exp(-margins)), probs, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_touched_keys_and_nonzero_weight_count_match_the_plain_definitions(dtype: str) -> None:
    rng = np.random.default_rng(8)
    labels, indptr, indices, values = random_rows(rng, 300, 256)
    model = FTRL(8, FTRLParams(l1=0.5), dtype=dtype)
    model.fit_rows(labels, indptr, indices, values)
    # a key with only negative zeros counts as untouched, as state != 0 says; one
    # non-zero half of the pair is enough to count
    model.state[3] = (-0.0, -0.0)
    model.state[5] = (0.0, -1e-30 if dtype == "float64" else -1e-40)
    model.state[7] = (2.0, -0.0)
    expected = np.flatnonzero(np.any(model.state != 0, axis=1))
    keys = model.touched_keys()
    assert keys.dtype == np.uint32
    np.testing.assert_array_equal(keys, expected)
    assert 3 not in keys and 5 in keys and 7 in keys
    dense = int((model.weights() != 0).sum())
    assert model.count_nonzero_weights() == dense == model.count_nonzero_weights(keys)
    assert 0 < dense < keys.size  # l1 keeps some touched keys at weight 0
    got, n, z, nonzero = model.touched_state()
    np.testing.assert_array_equal(got, expected)
    assert n.dtype == z.dtype == np.dtype(dtype) and nonzero == dense
    np.testing.assert_array_equal(n, model.n[expected])
    np.testing.assert_array_equal(z, model.z[expected])
    assert model.state[-1].any() and got[-1] == model.bias_key  # the bias, last


def test_touched_state_of_an_untouched_model_is_empty() -> None:
    keys, n, z, nonzero = FTRL(4).touched_state()
    assert keys.size == n.size == z.size == nonzero == 0 and keys.dtype == np.uint32
