"""Parameter store: against a dict reference, validation, concurrency."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from ftrl_ps.core.memory import populate
from ftrl_ps.errors import ConfigError, ProtocolError
from ftrl_ps.ps import store as store_module
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.store import ParameterStore, segment_bounds
from tests.conftest import rss_kib, wait_until


class DictStore:
    """Slow, obvious reference: ``store[key] += val``."""

    def __init__(self) -> None:
        self.n: dict[int, float] = {}
        self.z: dict[int, float] = {}

    def push(self, keys, dn, dz) -> None:
        for k, a, b in zip(keys.tolist(), dn.tolist(), dz.tolist(), strict=True):
            self.n[k] = self.n.get(k, 0.0) + a
            self.z[k] = self.z.get(k, 0.0) + b

    def pull(self, keys):
        return ([self.n.get(k, 0.0) for k in keys.tolist()],
                [self.z.get(k, 0.0) for k in keys.tolist()])


def random_push(rng, begin, end, size):
    keys = np.unique(rng.integers(begin, end, size))
    return keys, rng.integers(0, 8, keys.size) / 4.0, rng.integers(-8, 8, keys.size) / 4.0


@pytest.mark.parametrize("max_locks", [1024, 3], ids=["lock per group", "lock per 9-22 groups"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("shard", "num_shards"), [(0, 1), (1, 3), (2, 3)])
def test_push_pull_match_dict_reference(dtype, shard, num_shards, max_locks, monkeypatch):
    monkeypatch.setattr(store_module, "MAX_LOCKS", max_locks)
    layout = Layout(bits=12, group_size=64, num_shards=num_shards)
    store = ParameterStore(layout, shard, dtype)
    assert len(store._locks) == min(max_locks, store.group_end - store.group_begin)
    ref = DictStore()
    rng = np.random.default_rng(shard)
    for _ in range(30):
        keys, dn, dz = random_push(rng, store.begin, store.end, 200)
        store.push(keys, dn, dz)
        ref.push(keys, dn, dz)
    probe = np.arange(store.begin, store.end)
    n, z = store.pull(probe)
    rn, rz = ref.pull(probe)
    assert n.dtype == np.dtype(dtype) and z.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(n, rn)
    np.testing.assert_array_equal(z, rz)
    keys, dn_all, dz_all = store.dump()
    assert keys.dtype == np.uint32
    touched = sorted(k for k in ref.n if ref.n[k] != 0 or ref.z[k] != 0)
    assert keys.tolist() == touched
    np.testing.assert_array_equal(dn_all, [ref.n[k] for k in touched])


def test_pull_groups_returns_whole_groups():
    layout = Layout(bits=8, group_size=16, num_shards=2)
    store = ParameterStore(layout, 1)  # groups 8..16 (the last one holds only the bias)
    store.push(np.array([130, 256]), np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    keys, n, z = store.pull_groups(np.array([8, 16]))
    assert keys.tolist() == list(range(128, 144)) + [256]
    assert n[2] == 1.0 and n[-1] == 2.0 and z[-1] == 4.0 and n.sum() == 3.0
    with pytest.raises(ProtocolError, match="group ids"):
        store.pull_groups(np.array([7]))  # owned by shard 0
    with pytest.raises(ProtocolError):
        store.pull_groups(np.array([9, 9]))


def test_a_shard_with_more_groups_than_locks_shares_each_lock_among_a_run_of_them(monkeypatch):
    """2**12 keys + the bias in groups of 16: 257 groups. With at most 10 locks
    each guards 26 consecutive groups (the last 23); pull_groups and the dump
    (chunks smaller than a lock's keys) see every key once, in order."""
    monkeypatch.setattr(store_module, "MAX_LOCKS", 10)
    layout = Layout(bits=12, group_size=16)
    store = ParameterStore(layout)
    assert (store.lock_span, len(store._locks)) == (26, 10)
    keys = np.arange(0, layout.num_keys, 5)
    store.push(keys, np.full(keys.size, 1.0), np.arange(keys.size, dtype=np.float64) + 1)
    got = list(store.iter_touched(chunk_keys=100))
    assert len(got) == 10  # one chunk per lock: 26 * 16 = 416 keys > 100
    np.testing.assert_array_equal(np.concatenate([g[0] for g in got]), keys)
    np.testing.assert_array_equal(np.concatenate([g[2] for g in got]), np.arange(keys.size) + 1)
    gk, gn, _ = store.pull_groups(np.array([25, 26, 256]))  # both sides of a lock's edge
    assert gk.tolist() == list(range(400, 432)) + [4096]
    assert gn.sum() == len([k for k in keys if 400 <= k < 432 or k == 4096])


def test_load_sets_values_and_dump_round_trips():
    layout = Layout(bits=10, group_size=32)
    a = ParameterStore(layout, dtype="float64")
    rng = np.random.default_rng(3)
    keys, dn, dz = random_push(rng, 0, layout.num_keys, 300)
    a.push(keys, dn, dz)
    b = ParameterStore(layout, dtype="float64")
    b.load(*a.dump())
    for x, y in zip(a.dump(), b.dump(), strict=True):
        np.testing.assert_array_equal(x, y)
    b.load(np.array([keys[0]]), np.array([5.0]), np.array([-1.0]))  # set, not add
    assert b.pull(np.array([keys[0]]))[0][0] == 5.0




BAD_PUSHES = [
    ("lengths", [1, 2, 3], [1.0, 1.0], [1.0, 1.0, 1.0], "delta_n has 2 values"),
    ("unsorted", [5, 3], [1.0, 1.0], [1.0, 1.0], "sorted strictly increasing"),
    ("duplicate", [3, 3], [1.0, 1.0], [1.0, 1.0], "sorted strictly increasing"),
    ("below range", [-1, 3], [1.0, 1.0], [1.0, 1.0], "outside"),
    ("above range", [3, 2000], [1.0, 1.0], [1.0, 1.0], "outside"),
    ("nan", [3, 4], [1.0, float("nan")], [1.0, 1.0], "finite"),
    ("inf", [3, 4], [1.0, 1.0], [float("inf"), 1.0], "finite"),
    ("overflow", [3, 4], [1.0, 1.0], [1e300, 1.0], "finite"),  # inf once cast to float32
    # two of these took a float32 key to inf (an unsaveable model); the limit is 3.2e32
    ("too large n", [3, 4], [1.0, 3e38], [1.0, 1.0], "too large for the float32 state"),
    ("too large z", [3, 4], [1.0, 1.0], [-1e33, 1.0], "too large"),
    ("negative n", [3, 4], [1.0, -0.5], [1.0, 1.0], "negative"),
    ("float keys", [3.0, 4.0], [1.0, 1.0], [1.0, 1.0], "integers"),
    ("2-D keys", [[3, 4]], [1.0, 1.0], [1.0, 1.0], "one-dimensional"),
    ("text values", [3, 4], ["a", "b"], [1.0, 1.0], "real numbers"),
]


@pytest.mark.parametrize(("case", "keys", "dn", "dz", "message"), BAD_PUSHES,
                         ids=[c[0] for c in BAD_PUSHES])
def test_bad_push_raises_and_changes_nothing(case, keys, dn, dz, message):
    store = ParameterStore(Layout(bits=10, group_size=4))
    store.push(np.array([1, 3, 4, 100]), np.full(4, 0.5), np.full(4, -0.5))
    before = store.dump()
    counters = store.counters()
    with pytest.raises(ProtocolError, match=message):
        store.push(keys, dn, dz)
    for x, y in zip(before, store.dump(), strict=True):
        np.testing.assert_array_equal(x, y)
    assert store.counters() == counters


def test_deltas_up_to_the_limit_are_applied_and_the_state_stays_finite():
    from ftrl_ps.ps.validate import delta_limit

    store = ParameterStore(Layout(bits=10, group_size=4))
    top = delta_limit(np.dtype(np.float32))
    for _ in range(3):
        store.push(np.array([3]), np.array([top]), np.array([-top]))
    keys, n, z = store.dump()
    assert keys.tolist() == [3] and np.isfinite(n).all() and np.isfinite(z).all()
    assert n[0] == pytest.approx(3 * top)


def test_merge_sections_on_a_shard_of_another_rule_are_refused_and_change_nothing():
    """Versions/rows/rho belong to the versioned rules: a shard merging by
    ``contraction`` (the servers' default) refuses them instead of merging that
    push by ``compose``; plain pushes and versioned shards are unaffected."""
    merge = (np.zeros(2, np.uint32), np.ones(2, np.uint32), np.full(2, 0.5))
    store = ParameterStore(Layout(bits=10, group_size=4), merge_rule="contraction")
    store.push(np.array([3, 4]), np.full(2, 0.5), np.full(2, -0.5))
    before = store.dump()
    with pytest.raises(ProtocolError, match="merges pushes by 'contraction'.*servers' merge"):
        store.push(np.array([3, 4]), np.ones(2), np.ones(2), merge)
    for x, y in zip(before, store.dump(), strict=True):
        np.testing.assert_array_equal(x, y)
    composing = ParameterStore(Layout(bits=10, group_size=4), merge_rule="compose")
    composing.push(np.array([3, 4]), np.ones(2), np.ones(2), merge)
    assert composing.dump()[0].tolist() == [3, 4]


def test_only_a_versioned_rule_keeps_versions():
    """A shard of an unversioned rule (``contraction``, the default; ``sum``;
    ``threshold``) keeps no per-key versions: no array, none pulled; pushes and
    pulls of n and z are the same as on a versioned shard."""
    keys, dn, dz = np.array([3, 4, 9]), np.array([0.5, 1.0, 2.0]), np.array([-1.0, 0.0, 1.0])
    plain = ParameterStore(Layout(bits=10, group_size=4), merge_rule="contraction")
    versioned = ParameterStore(Layout(bits=10, group_size=4), merge_rule="compose")
    for store in (plain, versioned):
        store.push(keys, dn, dz)
        store.push(keys[:2], dn[:2], dz[:2])
    assert not plain.keeps_versions and plain._merge.version.size == 0
    assert versioned.keeps_versions
    assert versioned._merge.version.size == versioned.end - versioned.begin
    n, z, v = plain.pull_versioned(keys)
    n2, z2, v2 = versioned.pull_versioned(keys)
    np.testing.assert_array_equal(n, n2)
    np.testing.assert_array_equal(z, z2)
    assert v.size == 0 and v2.tolist() == [2, 2, 1]


def test_bad_pull_and_load_raise_protocol_error():
    store = ParameterStore(Layout(bits=6, group_size=8, num_shards=2), 1)
    with pytest.raises(ProtocolError, match=r"outside this shard's range \[32, 65\)"):
        store.pull(np.array([31, 40]))
    with pytest.raises(ProtocolError):
        store.pull(np.array([40, 40]))
    with pytest.raises(ProtocolError, match="negative"):
        store.load(np.array([40]), np.array([-1.0]), np.array([0.0]))
    assert store.dump()[0].size == 0


def test_empty_requests_are_fine():
    store = ParameterStore(Layout(bits=6))
    n, z = store.pull(np.zeros(0, np.uint32))
    assert n.size == z.size == 0
    store.push([], [], [])
    assert store.pull_groups([])[0].size == 0
    assert store.counters()["pushes"] == 1


def test_counters():
    store = ParameterStore(Layout(bits=6))
    store.push([1, 2], [1.0, 1.0], [0.0, 0.0])
    store.pull([1, 2, 3])
    store.pull_groups([0])
    c = store.counters()
    assert (c["pushes"], c["pulls"], c["group_pulls"], c["keys_pushed"]) == (1, 1, 1, 2)
    assert c["keys_pulled"] == 3 + 65


def test_bad_dtype_is_config_error():
    with pytest.raises(ConfigError):
        ParameterStore(Layout(bits=6), dtype="float16")


def test_segment_bounds_matches_a_loop():
    for groups in ([], [0], [0, 0, 1, 1, 1, 3], [2, 3, 4], [5] * 7):
        arr = np.array(groups, dtype=np.int64)
        expected = [0] + [i for i in range(1, len(arr)) if arr[i] != arr[i - 1]]
        expected += [len(arr)] if len(arr) else []
        assert segment_bounds(arr).tolist() == expected


@pytest.mark.parametrize("max_locks", [1024, 5])
def test_concurrent_pushes_give_exact_sums(max_locks, monkeypatch):
    """16 threads push overlapping keys; every delta is exactly representable,
    so any lost or torn update would show up as a wrong sum (with a lock per
    group, 65 of them, and with 5 locks over runs of 13 groups)."""
    monkeypatch.setattr(store_module, "MAX_LOCKS", max_locks)
    layout = Layout(bits=14, group_size=256)
    store = ParameterStore(layout)
    threads, rounds = 16, 40
    shared = np.arange(0, layout.num_keys, 7)  # touched by every thread
    barrier = threading.Barrier(threads)

    def work(t: int) -> None:
        own = np.arange(t, layout.num_keys, 97)
        keys = np.union1d(shared, own)
        dn = np.where(np.isin(keys, shared), 0.5, 0.0) + np.where(np.isin(keys, own), 0.25, 0)
        dz = -dn
        barrier.wait()
        for _ in range(rounds):
            store.push(keys, dn, dz)
            store.pull(keys)  # reads interleave with writes

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    expected = np.zeros(layout.num_keys)
    expected[shared] += 0.5 * threads * rounds
    for t in range(threads):
        expected[np.arange(t, layout.num_keys, 97)] += 0.25 * rounds
    n, z = store.pull(np.arange(layout.num_keys))
    np.testing.assert_array_equal(n, expected)
    np.testing.assert_array_equal(z, -expected)
    assert store.counters()["pushes"] == threads * rounds



@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux madvise")
def test_a_large_store_is_faulted_in_at_start_and_stays_exact() -> None:
    """n, z and the push counts (2**22 keys: 32 + 32 + 16 MiB) become resident in the
    background while pushes already land; a small store starts no thread."""
    if not populate(np.zeros(1 << 20)):
        pytest.skip("kernel without MADV_POPULATE_WRITE (Linux < 5.14)")
    before = rss_kib()
    store = ParameterStore(Layout(bits=22, group_size=4096), dtype="float64")
    keys = np.arange(0, 3000, 3)  # a few pages (or one huge page): the rest stays untouched
    store.push(keys, np.full(keys.size, 0.5), np.full(keys.size, -0.25))
    wait_until(lambda: rss_kib() - before > 72 << 10, 20, "80 MiB of store made resident")
    n, z = store.pull(keys)
    assert np.all(n == 0.5) and np.all(z == -0.25)
    assert store.keys_with_state() == keys.size
    running = set(threading.enumerate())
    ParameterStore(Layout(bits=12, group_size=64))
    started = set(threading.enumerate()) - running
    assert not [t for t in started if t.name == "ftrl-ps-populate"]
