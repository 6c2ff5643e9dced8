"""Feature hashing: fixed vectors, numba kernels == the Python reference in tests/naive.py,
determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ftrl_ps._kernels import mix as kernels
from ftrl_ps.core.params import check_bits
from ftrl_ps.data.hashing import fnv1a64, mix64, slot_of, slots_of
from ftrl_ps.errors import ConfigError, DataError
from tests.naive import MASK64, fnv1a64_reference, mix64_reference, slot_of_reference

NAMES = ["0", "1", "12", "1048575", "1048576", "007", "18446744073709551615",
         "18446744073709551616", "user=123", "site_abc", "-5", "1.5", "+7", "é", "日本",
         "a:b", " ", "qid"]

# computed once with the reference (slot_of_reference) and frozen: a change of the hash fails here
EXPECTED = {
    1: [0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1, 1],
    20: [0, 1, 12, 1048575, 335730, 7, 769403, 910566, 915723, 505650, 410334, 837059,
         834828, 414, 667398, 614911, 885539, 190643],
    30: [0, 1, 12, 1048575, 1048576, 7, 852213115, 139322598, 338557195, 829929266,
         491143902, 92063171, 606911756, 880804254, 990523142, 404316671, 951943971,
         180545715],
}


@pytest.mark.parametrize("mix, fnv", [(mix64, fnv1a64), (mix64_reference, fnv1a64_reference)])
def test_primitives_match_published_vectors(mix, fnv) -> None:
    # splitmix64 seeded with 0: first output is mix64(golden gamma)
    assert mix(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF
    assert mix(0) == 0
    # FNV-1a 64 reference vectors (Fowler/Noll/Vo test suite)
    assert fnv(b"") == 0xCBF29CE484222325
    assert fnv(b"a") == 0xAF63DC4C8601EC8C
    assert fnv(b"foobar") == 0x85944171F73967E8


def test_doctest_vectors_against_reference() -> None:
    # the examples of ftrl_ps.data.hashing's docstrings, checked against tests/naive.py
    mask = 2**20 - 1
    assert slot_of("12", 20) == slot_of_reference("12", 20) == 12
    assert slot_of("user=123", 20) == slot_of_reference("user=123", 20)
    assert slot_of_reference("user=123", 20) == mix64_reference(
        fnv1a64_reference(b"user=123")) & mask
    assert slot_of(str(2**20), 20) == slot_of_reference(str(2**20), 20)
    assert slot_of_reference(str(2**20), 20) == mix64_reference(2**20) & mask
    assert hex(mix64_reference(0x9E3779B97F4A7C15)) == "0xe220a8397b1dcdaf"
    assert hex(fnv1a64_reference(b"a")) == "0xaf63dc4c8601ec8c"


@pytest.mark.parametrize("bits", sorted(EXPECTED))
def test_fixed_vectors(bits: int) -> None:
    assert [slot_of_reference(n, bits) for n in NAMES] == EXPECTED[bits]
    assert [slot_of(n, bits) for n in NAMES] == EXPECTED[bits]
    assert slots_of(NAMES, bits).tolist() == EXPECTED[bits]


def test_rules() -> None:
    bits = 20
    mask = (1 << bits) - 1
    assert slot_of("5", bits) == 5
    assert slot_of("0005", bits) == 5
    assert slot_of(str(1 << bits), bits) == mix64_reference(1 << bits) & mask
    assert slot_of(str(MASK64), bits) == mix64_reference(MASK64) & mask
    big = str(MASK64 + 1)  # beyond 64 bits: hashed as a name
    assert slot_of(big, bits) == mix64_reference(fnv1a64_reference(big.encode())) & mask
    for name in ("-5", "1.5", "+7", "user=123", "١٢"):  # Arabic-Indic digits are not ASCII
        assert slot_of(name, bits) == mix64_reference(fnv1a64_reference(name.encode())) & mask


def test_bits_and_names_are_checked() -> None:
    for bad in (0, 31, -1, 2.0, "20", True):
        with pytest.raises(ConfigError):
            check_bits(bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            slot_of("a", bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            slots_of(["a"], bad)  # type: ignore[arg-type]
    with pytest.raises(DataError):
        slot_of("", 20)
    with pytest.raises(DataError):
        slots_of(["a", ""], 20)
    assert slots_of([], 20).tolist() == []


def _random_names(rng: np.random.Generator, count: int) -> list[str]:
    alphabet = list("abcxyz_=-+.:0123456789") + ["é", "日", "\t"]
    names = []
    for i in range(count):
        kind = i % 4
        if kind == 0:  # small integers
            names.append(str(int(rng.integers(0, 1 << 31))))
        elif kind == 1:  # integers near and beyond the 64-bit limit, leading zeros
            v = int(rng.integers(0, 1 << 62)) * int(rng.integers(1, 8)) + int(rng.integers(0, 2))
            names.append("0" * int(rng.integers(0, 3)) + str(v))
        elif kind == 2:
            names.append(str(MASK64 - int(rng.integers(-5, 5))))
        else:
            k = int(rng.integers(1, 12))
            names.append("".join(rng.choice(alphabet, size=k)))
    return names


@pytest.mark.parametrize("bits", [1, 7, 20, 24, 30])
def test_numba_equals_reference(bits: int) -> None:
    names = _random_names(np.random.default_rng(bits), 3000)
    expected = [slot_of_reference(n, bits) for n in names]
    assert [slot_of(n, bits) for n in names] == expected
    assert slots_of(names, bits).tolist() == expected
    assert all(0 <= s < (1 << bits) for s in expected)


def test_numba_mix64_and_fnv_match_reference() -> None:
    rng = np.random.default_rng(1)
    xs = [0, 1, MASK64, *(int(v) for v in rng.integers(0, 1 << 63, size=200))]
    for x in xs:
        assert int(kernels.mix64(np.uint64(x))) == mix64(x) == mix64_reference(x)
    assert mix64(-1) == mix64_reference(-1) == mix64_reference(MASK64)  # taken mod 2**64
    array = kernels.mix64_array(np.array(xs, dtype=np.uint64))
    assert array.dtype == np.uint64
    assert [int(v) for v in array] == [mix64_reference(x) for x in xs]
    for text in ["", "a", "foobar", "user=123", "日本"]:
        data = np.frombuffer(text.encode() or b"\0", dtype=np.uint8)
        expected = fnv1a64_reference(text.encode())
        assert int(kernels.fnv1a64(data, 0, len(text.encode()))) == expected
        assert fnv1a64(text.encode()) == expected


def test_deterministic_across_processes() -> None:
    code = (
        "import json, sys; from ftrl_ps.data.hashing import slot_of, slots_of; "
        "names = json.loads(sys.argv[1]); "
        "print(json.dumps([[slot_of(n, 24) for n in names], slots_of(names, 24).tolist()]))"
    )
    outputs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        result = subprocess.run([sys.executable, "-c", code, json.dumps(NAMES)], env=env,
                                capture_output=True, text=True, check=True, timeout=120)
        outputs.append(json.loads(result.stdout))
    here = [slot_of(n, 24) for n in NAMES]
    assert outputs[0] == outputs[1] == [here, here]
