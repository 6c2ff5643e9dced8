"""The merge rule (ftrl_ps.ps.merge): a plain-Python reference, its tested properties,
and float64 end to end through the HTTP client."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRL, FTRLParams
from ftrl_ps.errors import ProtocolError
from ftrl_ps.ps.client import PSClient
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.merge import DEFAULT_RULE, RULES, composed, saturation
from ftrl_ps.ps.store import ParameterStore
from ftrl_ps.ps.worker import Worker, WorkerConfig
from tests._servers import in_process_cluster
from tests.test_worker import MemoryServer, as_batches


# --- a plain-Python reference of ComposeState, one key at a time -----------------------------
@dataclass
class RefKey:
    n: float = 0.0
    z: float = 0.0
    version: int = 0
    base: int = 0
    count: int = 0
    weight: float = 0.0
    rho: float = 0.0
    mean_n: float = 0.0
    mean_z: float = 0.0

    def push(self, dn: float, dz: float, pulled: int, rows: int, rho: float) -> None:
        w = float(max(rows, 1))
        missed = self.version - pulled
        if missed == 0:  # nothing happened since the pull: a new group, added as it is
            self.base, self.count, self.weight, self.rho = self.version, 1, w, rho
            self.mean_n, self.mean_z = dn, dz
            add_n, add_z = dn, dz
        elif pulled == self.base:  # concurrent with exactly the current group
            total = lambda: sum(self.rho**i for i in range(self.count))  # noqa: E731
            before_n, before_z = self.mean_n * total(), self.mean_z * total()
            share = w / (self.weight + w)
            self.mean_n += (dn - self.mean_n) * share
            self.mean_z += (dz - self.mean_z) * share
            self.rho += (rho - self.rho) * share
            self.weight += w
            self.count += 1
            add_n, add_z = self.mean_n * total() - before_n, self.mean_z * total() - before_z
        else:  # it missed older pushes: the last of missed + 1
            add_n, add_z = dn * rho**missed, dz * rho**missed
        self.n = max(self.n + add_n, 0.0)
        self.z += add_z
        self.version += 1


def test_compose_store_matches_the_reference_on_random_pushes() -> None:
    rng = np.random.default_rng(5)
    layout = Layout(6, group_size=8)
    store = ParameterStore(layout, dtype="float64")
    ref = [RefKey() for _ in range(layout.num_keys)]
    for _ in range(300):
        keys = np.unique(rng.integers(0, layout.num_keys, rng.integers(1, 20)))
        _, _, versions = store.pull_versioned(keys)
        # a push may name an older version (the worker pulled before others pushed)
        pulled = np.maximum(versions.astype(np.int64) - rng.integers(0, 3, keys.size), 0)
        pulled = np.where(rng.random(keys.size) < 0.5, versions, pulled)
        dn = rng.random(keys.size)
        dz = rng.normal(size=keys.size)
        rows = rng.integers(0, 50, keys.size)
        rho = rng.choice([0.0, 1.0, 0.3], keys.size)
        store.push(keys, dn, dz, (pulled, rows, rho))
        for i, k in enumerate(keys.tolist()):
            ref[k].push(dn[i], dz[i], int(pulled[i]), int(rows[i]), rho[i])
    everything = np.arange(layout.num_keys)
    n, z, v = store.pull_versioned(everything)
    np.testing.assert_allclose(n, [r.n for r in ref], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(z, [r.z for r in ref], rtol=1e-9, atol=1e-12)
    assert v.tolist() == [r.version for r in ref]


def test_composed_is_the_geometric_sum() -> None:
    rho = np.array([0.0, 0.25, 0.999999999999, 1.0])
    expect = [sum(r**i for i in range(4)) for r in rho]
    np.testing.assert_allclose(composed(rho, np.full(4, 4)), expect, rtol=1e-9)


def test_saturation_marks_dense_keys_and_the_bias() -> None:
    rho = saturation(np.array([10, 50, 2]), np.array([1, 2, 7]), 7, 100, 0.5)
    assert rho.tolist() == [1.0, 0.0, 0.0]
    # a short last push (5 rows) is judged against a full push of 100 rows
    assert saturation(np.array([5]), np.array([1]), 7, 100, 0.5).tolist() == [1.0]


def test_a_bad_merge_section_changes_nothing() -> None:
    store = ParameterStore(Layout(6, group_size=8), dtype="float64")
    keys = np.array([1, 2])
    store.push(keys, [1.0, 1.0], [1.0, 1.0])
    before = store.pull_versioned(np.arange(65))
    bad = [
        (np.array([0, 0]), np.array([1, 1]), np.array([0.0, 2.0])),  # rho > 1
        (np.array([0, 0]), np.array([1, -1]), np.array([0.0, 0.0])),  # negative rows
        (np.array([0]), np.array([1, 1]), np.array([0.0, 0.0])),  # wrong length
    ]
    for merge in bad:
        with pytest.raises(ProtocolError):
            store.push(keys, [1.0, 1.0], [1.0, 1.0], merge)
    after = store.pull_versioned(np.arange(65))
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_version_the_shard_has_not_reached_starts_a_new_group() -> None:
    """After a restart from a checkpoint (which keeps no versions) a push names a
    version above the shard's: it is added as it is, as the first of a group."""
    store = ParameterStore(Layout(6, group_size=8), dtype="float64")
    keys = np.array([1, 2])
    store.push(keys, [1.0, 1.0], [1.0, -1.0], (np.array([7, 9]), np.array([3, 3]),
                                                 np.array([0.0, 1.0])))
    n, z, v = store.pull_versioned(keys)
    assert n.tolist() == [1.0, 1.0] and z.tolist() == [1.0, -1.0] and v.tolist() == [1, 1]


# --- the tested properties, with real Worker objects ------------------------------------------
BITS = 6
PARAMS = FTRLParams(alpha=0.2, l1=0.1)


def _rows(rng: np.random.Generator, count: int, own: list[int]) -> tuple[np.ndarray, ...]:
    """Rows with key 0 in every row (dense) and one of ``own`` keys in each (rare)."""
    labels = (rng.random(count) < 0.3).astype(np.float32)
    indices = np.stack([np.zeros(count, np.int32),
                        rng.choice(own, count).astype(np.int32)], axis=1).reshape(-1)
    values = np.ones(indices.size, np.float32)
    return labels, np.arange(0, indices.size + 1, 2), indices, values


def _bsp_round(server: MemoryServer, data: list[tuple[np.ndarray, ...]],
               rule: str = "compose") -> list[Worker]:
    """One BSP round: every worker pulls, then trains, then pushes (in index order)."""
    cfg = WorkerConfig(batch_size=40, fetch_step=1, push_step=1, merge_rule=rule)
    workers = [Worker(server, BITS, PARAMS, cfg) for _ in data]
    rounds = [w._open(as_batches(*d, per=40)) for w, d in zip(workers, data, strict=True)]
    for w, rnd in zip(workers, rounds, strict=True):
        w._step(rnd)
    for w in workers:
        w.push()
    return workers


def _single(data: tuple[np.ndarray, ...]) -> FTRL:
    model = FTRL(BITS, PARAMS, dtype="float64")
    model.fit_rows(*data)
    return model


def test_a_key_one_worker_touched_gets_exactly_that_workers_update() -> None:
    rng = np.random.default_rng(1)
    a, b = _rows(rng, 40, [3, 4, 5]), _rows(rng, 40, [9, 10])
    server = MemoryServer(FTRL(BITS).state.shape[0])
    _bsp_round(server, [a, b])
    alone_a, alone_b = _single(a), _single(b)
    for keys, alone in (([3, 4, 5], alone_a), ([9, 10], alone_b)):
        np.testing.assert_allclose(server.n[keys], alone.n[keys], rtol=1e-12)
        np.testing.assert_allclose(server.z[keys], alone.z[keys], rtol=1e-12)
    # key 0 (dense) was moved by both: neither update alone, their (weighted) mean
    mean_z = (alone_a.z[0] + alone_b.z[0]) / 2
    assert server.z[0] == pytest.approx(mean_z, rel=1e-12)


@pytest.mark.parametrize("workers", [2, 4])
def test_identical_workers_give_the_single_worker_weights_on_keys_the_round_pins_down(
    workers: int,
) -> None:
    rng = np.random.default_rng(2)
    data = _rows(rng, 40, [3, 4, 5, 6, 7, 8, 9, 10])
    server = MemoryServer(FTRL(BITS).state.shape[0])
    _bsp_round(server, [data] * workers)
    alone = _single(data)
    model = FTRL(BITS, PARAMS, dtype="float64")
    model.state[:, 0], model.state[:, 1] = server.n, server.z
    dense = [0, alone.bias_key]  # in every row: rho = 0, the workers' mean
    np.testing.assert_allclose(model.weights()[dense], alone.weights()[dense], rtol=1e-12)
    np.testing.assert_allclose(server.n[dense], alone.n[dense], rtol=1e-12)
    # rare keys (rho = 1): the sum, as one process would apply the same steps N times
    rare = [3, 4, 5]
    np.testing.assert_allclose(server.z[rare], workers * alone.z[rare], rtol=1e-12)
    np.testing.assert_allclose(server.n[rare], workers * alone.n[rare], rtol=1e-12)


@pytest.mark.parametrize("rule", RULES)
def test_float64_end_to_end_through_http(rule: str) -> None:
    """A float64 server keeps what a single worker learns to the last bit (no float32 cast)."""
    rng = np.random.default_rng(4)
    data = _rows(rng, 200, list(range(1, 40)))
    alone = _single(data)
    settings: dict[str, object] = {} if rule == DEFAULT_RULE else {"merge_rule": rule}
    params = {"alpha": PARAMS.alpha, "beta": PARAMS.beta, "l1": PARAMS.l1, "l2": PARAMS.l2}
    with in_process_cluster(2, bits=BITS, group_size=8, dtype="float64", **settings,
                            **params) as shards:
        with PSClient(["http://s0", "http://s1"], http_clients=shards) as ps:
            assert ps.dtype == np.float64 and ps.server_settings["merge_rule"] == rule
            ps.register(0, 1)
            cfg = WorkerConfig(batch_size=20, fetch_step=2, push_step=3, merge_rule=rule)
            worker = Worker(ps, BITS, PARAMS, cfg)
            worker.train_batches(iter(as_batches(*data, per=64)))
            worker.push()
            keys, n, z = ps.dump_state()
    # pushed as deltas: within a few ulps (a float32 cast anywhere would cost ~1e-7)
    np.testing.assert_allclose(n, alone.n[keys], rtol=1e-14)
    # compose-n rescales z through the weight: a few more ulps
    rtol = 1e-13 if rule in ("compose-n", "curvature") else 1e-14
    np.testing.assert_allclose(z, alone.z[keys], rtol=rtol, atol=1e-15)


# --- the default rule (contraction): which of the properties it keeps -------------------------
# docs/algorithm.md, "Item 1's properties, rule by rule": the default scales a worker's
# dense keys before it pushes and the shards sum, so a key below the density line is
# exact, pinned keys of identical workers end at one worker's weights, and the factor
# is float64; a key dense in one worker's push alone is scaled all the same (not exact).
def _default_round(data: list[tuple[np.ndarray, ...]], per: int) -> MemoryServer:
    server = MemoryServer(FTRL(BITS).state.shape[0], merge_rule=DEFAULT_RULE)
    cfg = WorkerConfig(batch_size=per, fetch_step=1, push_step=1, merge_rule=DEFAULT_RULE,
                       num_workers=len(data))
    workers = [Worker(server, BITS, PARAMS, cfg) for _ in data]
    rounds = [w._open(as_batches(*d, per=per)) for w, d in zip(workers, data, strict=True)]
    for w, rnd in zip(workers, rounds, strict=True):
        w._step(rnd)
    for w in workers:
        w.push()
    return server


def test_default_rule_gives_a_key_below_the_density_line_exactly_its_workers_update() -> None:
    assert DEFAULT_RULE == "contraction"
    rng = np.random.default_rng(1)
    a, b = _rows(rng, 40, [3, 4, 5]), _rows(rng, 40, [9, 10, 11])
    server = _default_round([a, b], per=40)
    alone_a, alone_b = _single(a), _single(b)
    for keys, alone in (([3, 4, 5], alone_a), ([9, 10, 11], alone_b)):  # < half the rows each
        np.testing.assert_allclose(server.n[keys], alone.n[keys], rtol=1e-12)
        np.testing.assert_allclose(server.z[keys], alone.z[keys], rtol=1e-12)
    # key 0 (in every row): each worker's update scaled by C(rho, 2) / 2, in [1/2, 1]
    both = alone_a.z[0] + alone_b.z[0]
    assert abs(both) / 2 <= abs(server.z[0]) + 1e-12 and abs(server.z[0]) <= abs(both)


@pytest.mark.parametrize("workers", [2, 4])
def test_default_rule_gives_identical_workers_one_workers_weights_on_pinned_keys(
    workers: int,
) -> None:
    """4,000 rows in one push pin key 0 and the bias (rho = exp(-K) below 1e-9): N
    identical pushes add up to one worker's update there; rare keys are summed."""
    rng = np.random.default_rng(2)
    data = _rows(rng, 4000, list(range(3, 60)))
    server = _default_round([data] * workers, per=4000)
    alone = _single(data)
    dense = [0, alone.bias_key]
    np.testing.assert_allclose(server.z[dense], alone.z[dense], rtol=1e-9)
    np.testing.assert_allclose(server.n[dense], alone.n[dense], rtol=1e-9)
    rare = [3, 4, 5]
    np.testing.assert_allclose(server.z[rare], workers * alone.z[rare], rtol=1e-12)


def test_default_rule_scales_in_float64_with_several_workers() -> None:
    """The factor C(exp(-K), N) / N and the scaled deltas stay float64 for a float64
    server (a float32 factor would round every dense key's delta to ~1e-8)."""
    from types import SimpleNamespace

    from ftrl_ps.ps.merge import push_payload

    keys = np.array([3, 5, 8, 64])
    kappa = np.array([0.0, 0.3, 1.7, 0.9])
    rows = np.array([2, 30, 50, 50])  # key 3 rare, the others dense (and 64, the bias)
    delta = np.column_stack([np.full(4, 0.1234567890123), np.full(4, -0.9876543210987)])
    todo = SimpleNamespace(keys=keys, delta=delta, rows=rows, kappa=kappa, versions=None)
    dn, dz, merge = push_payload("contraction", todo, 64, 50, 50, 3, 0.5, np.dtype(np.float64))
    assert merge is None and dn.dtype == dz.dtype == np.float64
    rho = [math.exp(-k) for k in kappa]
    share = [1.0] + [(1 - r**3) / (3 * (1 - r)) for r in rho[1:]]
    assert dn.tolist() == [d * s for d, s in zip(delta[:, 0], share, strict=True)]
    assert dz.tolist() == [d * s for d, s in zip(delta[:, 1], share, strict=True)]
