"""Key layout: groups, shard ranges, splitting, validation."""

from __future__ import annotations

import numpy as np
import pytest

from ftrl_ps.core.params import MAX_BITS
from ftrl_ps.errors import ConfigError, LayoutMismatchError
from ftrl_ps.ps.layout import DEFAULT_GROUP_SIZE, Layout


@pytest.mark.parametrize(
    ("bits", "group_size", "num_shards"),
    [(1, 1, 1), (1, 1, 3), (4, 4, 2), (10, 64, 3), (12, 100, 7), (20, 4096, 5), (16, 4096, 17)],
)
def test_groups_and_shards_partition_the_key_space(bits, group_size, num_shards):
    lay = Layout(bits, group_size, num_shards)
    assert lay.num_keys == 2**bits + 1 and lay.bias_key == 2**bits
    # groups tile [0, D) in order, all of size G except possibly the last
    covered = [lay.group_range(g) for g in range(lay.num_groups)]
    assert covered[0][0] == 0 and covered[-1][1] == lay.num_keys
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:], strict=False))
    assert all(e - b == group_size for b, e in covered[:-1])
    # shards tile [0, D), are non-empty and start on group boundaries
    ranges = [lay.shard_range(i) for i in range(num_shards)]
    assert ranges[0][0] == 0 and ranges[-1][1] == lay.num_keys
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert all(b < e and b % group_size == 0 for b, e in ranges)
    # shard sizes in groups differ by at most one (even split)
    sizes = [np.subtract(*lay.shard_group_range(i)[::-1]) for i in range(num_shards)]
    assert max(sizes) - min(sizes) <= 1
    assert lay.shard_bounds.tolist() == [0] + [e for _, e in ranges]


def test_split_keys_and_shard_of_key_agree():
    lay = Layout(12, 64, 5)
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, lay.num_keys, 500)).astype(np.uint32)
    keys = np.union1d(keys, [0, lay.bias_key]).astype(np.uint32)
    s = lay.split_keys(keys)
    assert s[0] == 0 and s[-1] == keys.size and len(s) == 6
    for i in range(5):
        begin, end = lay.shard_range(i)
        part = keys[s[i] : s[i + 1]]
        assert np.all((part >= begin) & (part < end))
        assert all(lay.shard_of_key(int(k)) == i for k in part)
    assert lay.split_keys(np.zeros(0, np.uint32)).tolist() == [0] * 6


def test_split_groups_matches_shard_group_ranges():
    lay = Layout(10, 16, 3)
    groups = np.arange(lay.num_groups)
    s = lay.split_groups(groups)
    for i in range(3):
        g0, g1 = lay.shard_group_range(i)
        assert groups[s[i] : s[i + 1]].tolist() == list(range(g0, g1))


def test_group_keys_concatenates_group_ranges():
    lay = Layout(5, 8, 1)  # 33 keys: groups of 8, last group = [32, 33)
    keys = lay.group_keys(np.array([1, 4]))
    assert keys.tolist() == list(range(8, 16)) + [32]
    assert lay.group_keys(np.zeros(0, np.int64)).size == 0
    np.testing.assert_array_equal(lay.group_of(keys), [1] * 8 + [4])


def test_bias_key_lives_in_the_last_shard_and_group():
    lay = Layout(8, 16, 4)
    assert lay.shard_of_key(lay.bias_key) == 3
    assert lay.group_range(lay.num_groups - 1) == (256, 257)


def test_default_group_size_is_documented_value():
    assert Layout(20).group_size == DEFAULT_GROUP_SIZE == 4096


@pytest.mark.parametrize(
    "args",
    [(0, 16, 1), (MAX_BITS + 1, 16, 1), (10, 0, 1), (10, 16, 0), (4, 4, 6), (True, 4, 1),
     (10.0, 16, 1), ("10", 16, 1)],
)
def test_invalid_layouts_raise_config_error(args):
    with pytest.raises(ConfigError):
        Layout(*args)


def test_out_of_range_group_shard_key():
    lay = Layout(4, 4, 2)
    with pytest.raises(ConfigError):
        lay.group_range(5)
    with pytest.raises(ConfigError):
        lay.shard_range(2)
    with pytest.raises(ConfigError):
        lay.shard_of_key(17)


def test_dict_round_trip_and_mismatch_message():
    lay = Layout(12, 256, 2)
    assert Layout.from_dict(lay.to_dict()) == lay
    with pytest.raises(ConfigError):
        Layout.from_dict({"bits": 12, "group_size": 256})
    with pytest.raises(ConfigError):
        Layout.from_dict([12, 256, 2])
    with pytest.raises(LayoutMismatchError, match="bits: worker has 13, server has 12"):
        lay.check_same(Layout(13, 256, 2))
    lay.check_same(Layout(12, 256, 2))  # no error


def test_layout_is_frozen_and_hashable():
    lay = Layout(8)
    with pytest.raises(AttributeError):
        lay.bits = 9  # type: ignore[misc]
    assert {lay: 1}[Layout(8)] == 1
    with pytest.raises(ValueError):
        lay.shard_bounds[0] = 5  # read-only cached array
