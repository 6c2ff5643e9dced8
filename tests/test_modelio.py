from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRL, FTRLParams, fit_compact
from ftrl_ps.core.modelio import SavedModel, load_model, save_model
from ftrl_ps.core.multi import compact_keys
from ftrl_ps.errors import ModelFormatError
from tests.test_ftrl import random_rows


@pytest.fixture
def trained() -> FTRL:
    rng = np.random.default_rng(5)
    model = FTRL(8, FTRLParams(alpha=0.2, l1=0.5), dtype="float64")
    model.fit_rows(*random_rows(rng, 500, 256))
    return model


def test_roundtrip(tmp_path: Path, trained: FTRL) -> None:
    path = save_model(tmp_path / "sub" / "m.ftrl", trained, rows=500)
    saved = load_model(path)
    assert saved.bits == 8 and saved.dtype == "float64"
    assert saved.params == trained.params
    assert saved.training["rows"] == 500
    np.testing.assert_array_equal(saved.to_ftrl().state, trained.state)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_sparse_file_is_small(tmp_path: Path) -> None:
    model = FTRL(20)
    model.fit_rows([1.0], [0, 1], np.array([7], np.int32), np.ones(1, np.float32))
    path = save_model(tmp_path / "m", model)
    assert path.stat().st_size < 2000  # 2 keys (feature + bias), not 2**20


def test_corruption_is_detected(tmp_path: Path, trained: FTRL) -> None:
    path = save_model(tmp_path / "m", trained)
    blob = bytearray(path.read_bytes())
    cases = {
        "flip": blob[:100] + bytes([blob[100] ^ 1]) + blob[101:],
        "truncated": blob[:-10],
        "empty": b"",
        "foreign": b"PK\x03\x04" + bytes(100),
        "version": blob[:8] + (99).to_bytes(4, "little") + blob[12:],
    }
    for name, data in cases.items():
        bad = tmp_path / name
        bad.write_bytes(bytes(data))
        with pytest.raises(ModelFormatError):
            load_model(bad)
    with pytest.raises(ModelFormatError, match="cannot read"):
        load_model(tmp_path / "missing")


def test_failed_write_keeps_old_file(tmp_path: Path, trained: FTRL, monkeypatch) -> None:
    path = save_model(tmp_path / "m", trained)
    before = path.read_bytes()

    def boom(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        save_model(path, FTRL(4))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_a_valid_checksum_over_a_wrong_header_is_a_format_error(tmp_path: Path,
                                                                trained: FTRL) -> None:
    """A header that is JSON with a good CRC but a wrong field type: one clear error."""
    import json
    import zlib

    from ftrl_ps.core import modelio

    path = save_model(tmp_path / "m.ftrl", trained)
    blob = path.read_bytes()
    prefix = modelio._PREFIX
    head_len = prefix.unpack_from(blob, 0)[-1]
    header = json.loads(blob[prefix.size:prefix.size + head_len])
    header["training"] = 5
    head = json.dumps(header).encode()
    body = blob[prefix.size + head_len:-modelio._CRC.size]
    fields = list(prefix.unpack_from(blob, 0))
    fields[-1] = len(head)
    new = prefix.pack(*fields) + head + body
    path.write_bytes(new + modelio._CRC.pack(zlib.crc32(new)))
    with pytest.raises(ModelFormatError, match="'training' must be an object"):
        load_model(path)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_model_trained_on_compact_keys_is_the_model_trained_on_slots(tmp_path: Path,
                                                                       dtype: str) -> None:
    """``ftrl-ps tune``'s final model: trained on the compact keys of the rows
    and saved through SavedModel.from_compact, it is the file an FTRL of
    2**bits slots trained on the same rows saves, bit for bit."""
    rng = np.random.default_rng(5)
    labels, indptr, indices, values = random_rows(rng, 300, 1 << 12, max_nnz=12)
    params = FTRLParams(alpha=0.2, l1=0.05)
    full = FTRL(12, params, dtype=dtype)
    for _ in range(2):
        full.fit_rows(labels, indptr, indices, values)
    compact = indices.copy()
    slots, keys = compact_keys(compact, 1 << 12, in_place=True)
    assert keys is compact and np.array_equal(slots[compact], indices)
    state = np.zeros((slots.size + 1, 2), dtype=dtype)
    for _ in range(2):
        fit_compact(state, params, labels, indptr, compact, values)
    a, b = tmp_path / "full.ftrl", tmp_path / "compact.ftrl"
    save_model(a, full)
    save_model(b, SavedModel.from_compact(12, params, state, slots))
    one, two = load_model(a), load_model(b)
    assert one.dtype == two.dtype == dtype
    for name in ("keys", "n", "z"):
        assert np.array_equal(getattr(one, name), getattr(two, name)), name
    with pytest.raises(ModelFormatError, match="compact state"):
        SavedModel.from_compact(12, params, state[:-1], slots)


def test_a_big_sparse_model_loads_without_writing_its_empty_slots() -> None:
    import psutil

    saved = SavedModel(bits=28, params=FTRLParams(), dtype="float32",
                       keys=np.array([3, 1 << 28], dtype=np.uint32),
                       n=np.array([1.0, 2.0], dtype=np.float32),
                       z=np.array([0.5, -0.5], dtype=np.float32))
    rss = psutil.Process().memory_info().rss
    model = saved.to_ftrl()  # a (2**28 + 1, 2) float32 state: 2 GiB of address space
    grown = psutil.Process().memory_info().rss - rss
    assert model.state[3, 1] == 0.5 and model.state[1 << 28, 0] == 2.0
    assert model.state[4].sum() == 0
    assert grown < 64 << 20, grown  # was 2 GiB: the whole state was zeroed again
