"""The ``compose-late``, ``compose-n`` and ``curvature`` merge rules (ftrl_ps.ps.late,
ftrl_ps.ps.wspace, ftrl_ps.ps.curvature): their tested properties on the store and with real
Worker objects (float64 through HTTP: tests/test_merge.py, for every rule)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.ps.curvature import from_wire, shrink, to_wire
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.store import ParameterStore
from ftrl_ps.ps.wspace import precision, rescaled
from tests.test_merge import BITS, PARAMS, _bsp_round, _rows, _single
from tests.test_worker import MemoryServer

FTRL4 = (PARAMS.alpha, PARAMS.beta, PARAMS.l1, PARAMS.l2)
RULES = ["compose-late", "compose-n", "curvature"]


def _store(rule: str) -> ParameterStore:
    return ParameterStore(Layout(6, group_size=8), dtype="float64", merge_rule=rule, ftrl=FTRL4)


def _server(rule: str) -> MemoryServer:
    server = MemoryServer(FTRL(BITS).state.shape[0])
    server.store = ParameterStore(Layout(BITS, group_size=16), dtype="float64",
                                  merge_rule=rule, ftrl=FTRL4)
    return server


def _group(rng: np.random.Generator, rule: str, members: int) -> list[tuple]:
    """``members`` pushes of keys 1..6 from version 0 (one group per key)."""
    keys = np.arange(1, 7)
    out = []
    for _ in range(members):
        rho = rng.choice([0.0, 1.0, 0.4], keys.size)
        if rule == "curvature":
            rho = to_wire(rng.choice([0.0, 0.3, 5.0, 400.0], keys.size))
        out.append((keys, rng.random(keys.size), rng.normal(size=keys.size),
                    (np.zeros(keys.size, np.uint32), rng.integers(1, 30, keys.size), rho)))
    return out


@pytest.mark.parametrize("rule", RULES)
def test_a_key_one_worker_touched_gets_exactly_that_workers_update(rule: str) -> None:
    rng = np.random.default_rng(1)
    a, b = _rows(rng, 40, [3, 4, 5]), _rows(rng, 40, [9, 10])
    server = _server(rule)
    _bsp_round(server, [a, b], rule)
    for keys, alone in (([3, 4, 5], _single(a)), ([9, 10], _single(b))):
        np.testing.assert_allclose(server.n[keys], alone.n[keys], rtol=1e-12)
        np.testing.assert_allclose(server.z[keys], alone.z[keys], rtol=1e-12)


@pytest.mark.parametrize("rule", RULES)
def test_a_group_is_merged_the_same_whatever_the_order_of_its_pushes(rule: str) -> None:
    rng = np.random.default_rng(3)
    start = _store(rule)
    start.push(np.arange(1, 7), rng.random(6) * 3, rng.normal(size=6) * 3)  # a plain start
    pushes = _group(rng, rule, 3)
    results = []
    for order in itertools.permutations(range(3)):
        store = _store(rule)
        store.push(np.arange(1, 7), *start.pull(np.arange(1, 7)))
        for i in order:
            keys, dn, dz, (_, rows, rho) = pushes[i]
            store.push(keys, dn, dz, (np.ones(keys.size, np.uint32), rows, rho))
        results.append(store.pull(np.arange(1, 7)))
    for n, z in results[1:]:
        np.testing.assert_allclose(n, results[0][0], rtol=1e-12)
        np.testing.assert_allclose(z, results[0][1], rtol=1e-12, atol=1e-12)


def test_compose_n_sums_n_and_keeps_composes_weights() -> None:
    rng = np.random.default_rng(6)
    pushes = _group(rng, "compose-n", 4)
    late = (np.arange(1, 7), rng.random(6), rng.normal(size=6),
            (np.zeros(6, np.uint32), np.full(6, 5), np.full(6, 0.5)))
    plain, summed = _store("compose"), _store("compose-n")
    for store in (plain, summed):
        for keys, dn, dz, merge in pushes:
            store.push(keys, dn, dz, merge)
        store.push(late[0], late[1], late[2], (np.full(6, 2, np.uint32), *late[3][1:]))
    n_c, z_c = plain.pull(np.arange(1, 7))
    n_s, z_s = summed.pull(np.arange(1, 7))
    np.testing.assert_allclose(n_s, sum(p[1] for p in pushes) + late[1], rtol=1e-12)
    # compose's weight at compose's n is the weight at the summed n
    np.testing.assert_allclose(z_s, rescaled(z_c, n_c, n_s, FTRL4), rtol=1e-12, atol=1e-12)
    w_c = -(z_c - np.sign(z_c) * PARAMS.l1) / precision(n_c, *FTRL4[:2], FTRL4[3])
    w_s = -(z_s - np.sign(z_s) * PARAMS.l1) / precision(n_s, *FTRL4[:2], FTRL4[3])
    out = np.abs(z_c) > PARAMS.l1
    np.testing.assert_allclose(w_s[out], w_c[out], rtol=1e-12)


@pytest.mark.parametrize("rule", RULES)
def test_after_a_group_a_lone_push_is_still_applied_exactly(rule: str) -> None:
    rng = np.random.default_rng(8)
    store = _store(rule)
    for keys, dn, dz, merge in _group(rng, rule, 2):  # version 0 -> 2, n and z composed
        store.push(keys, dn, dz, merge)
    keys = np.arange(1, 7)
    n0, z0, v = store.pull_versioned(keys)
    dn, dz = rng.random(6), rng.normal(size=6)
    store.push(keys, dn, dz, (v, np.full(6, 3), np.zeros(6) if rule != "curvature"
                              else to_wire(np.full(6, 50.0))))
    n1, z1 = store.pull(keys)
    np.testing.assert_allclose(n1, n0 + dn, rtol=1e-14)
    np.testing.assert_allclose(z1, z0 + dz, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("workers", [2, 4])
def test_compose_n_identical_workers_give_the_single_worker_weights_on_pinned_keys(
    workers: int,
) -> None:
    rng = np.random.default_rng(2)
    data = _rows(rng, 40, [3, 4, 5, 6, 7, 8, 9, 10])
    server = _server("compose-n")
    _bsp_round(server, [data] * workers, "compose-n")
    alone = _single(data)
    model = FTRL(BITS, PARAMS, dtype="float64")
    model.state[:, 0], model.state[:, 1] = server.n, server.z
    dense = [0, alone.bias_key]  # in every row: rho = 0
    np.testing.assert_allclose(model.weights()[dense], alone.weights()[dense], rtol=1e-12)
    # n is summed, as one process given the N copies of the rows would (roughly) have it
    np.testing.assert_allclose(server.n[dense], workers * alone.n[dense], rtol=1e-12)
    rare = [3, 4, 5]  # rho = 1: the sum, as under compose
    np.testing.assert_allclose(server.z[rare], workers * alone.z[rare], rtol=1e-12)


def test_curvature_sums_uncontracted_updates_and_averages_pinned_ones() -> None:
    store = _store("curvature")
    keys = np.array([1, 2, 3])
    k = np.array([0.0, 1e6, 2.0])  # none, pinned, in between
    dn = [np.array([1.0, 1.0, 1.0]), np.array([3.0, 3.0, 3.0])]
    dz = [np.array([2.0, 2.0, 2.0]), np.array([-1.0, -1.0, -1.0])]
    for i in range(2):
        store.push(keys, dn[i], dz[i], (np.zeros(3, np.uint32), np.ones(3, np.int64), to_wire(k)))
    n, z = store.pull(keys)
    assert n[0] == pytest.approx(4.0) and z[0] == pytest.approx(1.0)  # the sum
    assert n[1] == pytest.approx(2.0, rel=1e-5) and z[1] == pytest.approx(0.5, rel=1e-5)
    expect = shrink(np.array(4.0)) / shrink(np.array(2.0))
    assert n[2] == pytest.approx(4.0 * expect) and z[2] == pytest.approx(1.0 * expect)
    np.testing.assert_allclose(from_wire(to_wire(np.array([0.0, 1e-4, 3.0, 1e9]))),
                               [0.0, 1e-4, 3.0, 1e9], rtol=1e-9, atol=1e-15)
