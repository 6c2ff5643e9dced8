"""The ``compose-late`` merge rule (ftrl_ps.ps.late): against a plain-Python reference, a late
push's ``n`` in full at ``compose``'s weight, and the density of a short push (the rule's
shared properties: tests/test_merge_rules.py; float64 through HTTP: tests/test_merge.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.merge import push_payload
from ftrl_ps.ps.store import ParameterStore
from tests.test_merge import RefKey

FTRL4 = (0.2, 1.0, 0.1, 1.0)  # alpha, beta, l1, l2


def _precision(n: float) -> float:
    alpha, beta, _, l2 = FTRL4
    return (beta + np.sqrt(max(n, 0.0))) / alpha + l2


def _weight(n: float, z: float) -> float:
    l1 = FTRL4[2]
    return 0.0 if abs(z) <= l1 else -(z - np.sign(z) * l1) / _precision(n)


class RefLate(RefKey):
    """One key under ``compose-late``: ``compose``, except a late push with ``rho < 1``."""

    def push(self, dn: float, dz: float, pulled: int, rows: int, rho: float) -> None:
        missed = self.version - pulled
        if missed <= 0 or pulled == self.base or rho >= 1.0:
            super().push(dn, dz, pulled, rows, rho)
            return
        n_c, z_c = max(self.n + dn * rho**missed, 0.0), self.z + dz * rho**missed
        n_new = max(self.n + dn, 0.0)
        l1 = FTRL4[2]
        if abs(z_c) > l1:  # the same weight at n_new as compose's at n_c
            z_c = np.sign(z_c) * (l1 + (abs(z_c) - l1) * _precision(n_new) / _precision(n_c))
        self.n, self.z = n_new, z_c
        self.version += 1


def _store(rule: str) -> ParameterStore:
    return ParameterStore(Layout(6, group_size=8), dtype="float64", merge_rule=rule, ftrl=FTRL4)


def test_compose_late_store_matches_the_reference_on_random_pushes() -> None:
    rng = np.random.default_rng(11)
    store = _store("compose-late")
    size = store.layout.num_keys
    ref = [RefLate() for _ in range(size)]
    late = 0
    for _ in range(300):
        keys = np.unique(rng.integers(0, size, rng.integers(1, 20)))
        _, _, versions = store.pull_versioned(keys)
        pulled = np.maximum(versions.astype(np.int64) - rng.integers(0, 4, keys.size), 0)
        pulled = np.where(rng.random(keys.size) < 0.4, versions, pulled)
        dn, dz = rng.random(keys.size), rng.normal(size=keys.size) * 3
        rows, rho = rng.integers(0, 50, keys.size), rng.choice([0.0, 1.0, 0.3], keys.size)
        for i, k in enumerate(keys.tolist()):
            r = ref[k]
            late += int(r.version > pulled[i] and pulled[i] != r.base and rho[i] < 1)
            r.push(dn[i], dz[i], int(pulled[i]), int(rows[i]), rho[i])
        store.push(keys, dn, dz, (pulled, rows, rho))
    assert late > 100  # the late case is exercised
    n, z, v = store.pull_versioned(np.arange(size))
    np.testing.assert_allclose(n, [r.n for r in ref], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(z, [r.z for r in ref], rtol=1e-9, atol=1e-12)
    assert v.tolist() == [r.version for r in ref]


def test_a_late_push_adds_its_n_in_full_at_composes_weight() -> None:
    keys = np.array([1, 2, 3])
    rho = np.array([0.0, 0.4, 1.0])  # pinned, between, rare
    zero = np.zeros(3, np.uint32)
    late_dn, late_dz = np.array([2.0, 2.0, 2.0]), np.array([-3.0, -3.0, -3.0])
    stores = {rule: _store(rule) for rule in ("compose", "compose-late")}
    for store in stores.values():
        store.push(keys, [4.0] * 3, [5.0] * 3, (zero, np.full(3, 9), rho))  # a group from 0
        store.push(keys, [3.0] * 3, [2.0] * 3, (zero + 1, np.full(3, 9), rho))  # a new one
        store.push(keys, late_dn, late_dz, (zero, np.full(3, 9), rho))  # late: missed 2
    n_c, z_c = stores["compose"].pull(keys)
    n_l, z_l = stores["compose-late"].pull(keys)
    np.testing.assert_allclose(n_l, 7.0 + late_dn, rtol=1e-14)  # every row's n
    assert n_c.tolist() == [7.0, 7.0 + 2.0 * 0.16, 9.0]  # compose: rho**2 of it
    w_c = [_weight(a, b) for a, b in zip(n_c, z_c, strict=True)]
    w_l = [_weight(a, b) for a, b in zip(n_l, z_l, strict=True)]
    np.testing.assert_allclose(w_l, w_c, rtol=1e-12)  # compose's weights
    assert z_l[2] == z_c[2] and n_l[2] == n_c[2]  # rho = 1: compose's sum, exactly


def _payload(rule: str, rows_in_push: int) -> np.ndarray:
    todo = SimpleNamespace(keys=np.array([3, 5, 99]), delta=np.ones((3, 2)),
                           rows=np.array([1, 300, 300]), versions=np.zeros(3, np.uint32))
    _, _, merge = push_payload(rule, todo, 99, rows_in_push, 2000, 3, 0.5,
                               np.dtype(np.float64))
    return merge[2]


def test_a_short_push_is_judged_by_its_own_rows() -> None:
    # 300 of a short push's 400 rows: dense for compose-late, rare for compose (< 1000)
    assert _payload("compose-late", 400).tolist() == [1.0, 0.0, 0.0]
    assert _payload("compose", 400).tolist() == [1.0, 1.0, 0.0]
    # in a full push both judge alike
    assert _payload("compose-late", 2000).tolist() == _payload("compose", 2000).tolist()
