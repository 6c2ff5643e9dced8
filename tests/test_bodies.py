"""Request bodies of the prediction service: text, JSON and binary rows; the change log."""

from __future__ import annotations

import io

import numpy as np
import pytest

from ftrl_ps.data.bodies import canonical_batch, parse_json_rows, parse_text
from ftrl_ps.data.hashing import slot_of
from ftrl_ps.data.libsvm import read_all
from ftrl_ps.errors import DataError, ParseError, ProtocolError
from ftrl_ps.ps import rowwire
from ftrl_ps.ps.changes import ChangeLog
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.store import ParameterStore

BITS = 12


def _rows(batch):  # noqa: ANN001, ANN202 - list of {slot: value} per row
    return [dict(zip(batch.indices[a:b].tolist(), batch.values[a:b].tolist(), strict=True))
            for a, b in zip(batch.indptr[:-1], batch.indptr[1:], strict=True)]


def test_text_with_labels_equals_the_file_reader() -> None:
    text = b"1 3:0.5 user=9 3:1\n# comment\n\n-1 7 |f 2:2\r\n0 4095:1 4096:1\n"
    assert _rows(parse_text(text, BITS, labels=True)) == _rows(read_all(io.BytesIO(text), BITS))
    assert parse_text(text, BITS, labels=True).labels.tolist() == [1.0, 0.0, 0.0]


def test_text_label_is_optional_for_scoring() -> None:
    with_labels = parse_text(b"1 3:0.5 5:1\n-1 user=1\n0.5 7:2\n", BITS, labels=False)
    without = parse_text(b"3:0.5 5:1\nuser=1\n7:2\n", BITS, labels=False)
    assert _rows(with_labels) == _rows(without)
    assert with_labels.labels.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(("text", "line", "token", "reason"), [
    (b"1 3:1\n1 5:x\n", 2, "5:x", "not a decimal number"),
    (b"1 3:1\n\n1 :4\n", 3, ":4", "empty feature name"),
    (b"2 3:1\n", 1, "2", "label must be"),
    (b"1 3:nan\n", 1, "3:nan", "NaN"),
])
def test_text_errors_name_line_and_token(text: bytes, line: int, token: str,
                                         reason: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_text(text, BITS, labels=True)
    assert info.value.line == line and info.value.token == token
    assert reason in str(info.value) and str(info.value).startswith(f"body:{line}:")


def test_json_rows_hash_names_like_the_reader() -> None:
    body = b'{"rows": [{"features": {"user=42": 1, "123": 0.5, "5000": 2}, "label": -1},' \
           b' {"features": {}, "label": 1}]}'
    batch = parse_json_rows(body, BITS, labels=True)
    text = parse_text(b"-1 user=42:1 123:0.5 5000:2\n1\n", BITS, labels=True)
    assert _rows(batch) == _rows(text)
    assert batch.labels.tolist() == [0.0, 1.0]
    assert slot_of("user=42", BITS) in _rows(batch)[0]


@pytest.mark.parametrize(("body", "match"), [
    (b'{"rows": [{"features": {"a": "x"}}]}', "rows[0].features['a']: value must be a number"),
    (b'{"rows": [{"features": {"a": 1}}, {"features": {"b": true}}]}', "rows[1].features['b']"),
    (b'{"rows": [{"features": {"a": 1e39}}]}', "beyond float32"),
    # these two answered 500 (OverflowError, UnicodeEncodeError)
    (b'{"rows": [{"features": {"a": ' + b"9" * 400 + b'}}]}', "beyond float32"),
    (b'{"rows": [{"features": {"a": 1}}, {"features": {"b": 1, "\\ud800": 2}}]}',
     "rows[1].features['\\\\ud800']: feature name is not valid Unicode"),
    (b'{"rows": [{"features": {"": 1}}]}', "empty feature name"),
    (b'{"rows": [{"feature": {"a": 1}}]}', "rows[0]"),
    (b'{"row": []}', '{"rows": [...]}'),
    (b'{"rows": [', "invalid JSON"),
])
def test_json_errors_name_row_and_field(body: bytes, match: str) -> None:
    with pytest.raises(DataError, match=match.replace("[", r"\[").replace("(", r"\(")):
        parse_json_rows(body, BITS, labels=False)


def test_json_labels_required_for_learning() -> None:
    with pytest.raises(DataError, match=r"rows\[0\]: missing 'label'"):
        parse_json_rows(b'{"rows": [{"features": {"a": 1}}]}', BITS, labels=True)
    with pytest.raises(DataError, match=r"rows\[0\].label"):
        parse_json_rows(b'{"rows": [{"features": {"a": 1}, "label": 2}]}', BITS, labels=True)


def test_canonical_rows_sum_repeats_and_drop_zeros() -> None:
    batch = canonical_batch(np.zeros(2, np.float32), np.array([0, 4, 5]),
                            np.array([9, 2, 9, 4, 1]), np.array([1.0, 2.0, -1.0, 3.0, 0.0]))
    assert _rows(batch) == [{2: 2.0, 4: 3.0}, {}]
    assert batch.indptr.tolist() == [0, 2, 2]


def test_binary_rows_round_trip_and_validation() -> None:
    ptr, slots, vals = np.array([0, 2, 3]), np.array([7, 3, 1]), np.array([1.0, 0.5, 2.0])
    body = rowwire.encode_rows(ptr, slots, vals, labels=np.array([1.0, 0.0]),
                               dtype=np.float64)
    batch = rowwire.decode_rows(body, BITS, labels=True)
    assert _rows(batch) == [{3: 0.5, 7: 1.0}, {1: 2.0}] and batch.labels.tolist() == [1, 0]
    with pytest.raises(DataError, match="no labels"):
        rowwire.decode_rows(rowwire.encode_rows(ptr, slots, vals), BITS, labels=True)
    with pytest.raises(DataError, match=r"rows\[1\]: slot 5000"):
        rowwire.decode_rows(rowwire.encode_rows(ptr, [7, 3, 5000], vals), BITS, labels=False)
    with pytest.raises(DataError, match=r"rows\[0\]: value is NaN"):
        rowwire.decode_rows(rowwire.encode_rows(ptr, slots, [np.nan, 1, 1]), BITS, labels=False)
    with pytest.raises(ProtocolError, match="expected"):
        rowwire.decode_rows(body[:-4], BITS, labels=True)
    with pytest.raises(ProtocolError, match="indptr"):
        rowwire.decode_rows(rowwire.encode_rows([0, 2, 1], [1], [1.0]), BITS, labels=False)


def test_store_reports_only_groups_written_since_a_version() -> None:
    store = ParameterStore(Layout(bits=10, group_size=64))
    v0, keys, _, _ = store.changed_since(0)
    assert v0 == 0 and keys.size == 0
    store.push(np.array([3, 700]), np.array([1.0, 1.0]), np.array([0.5, 0.5]))
    v1, keys, n, z = store.changed_since(0)
    assert v1 == 1 and keys.tolist() == [3, 700] and n.tolist() == [1.0, 1.0]
    store.push(np.array([5]), np.array([1.0]), np.array([1.0]))
    v2, keys, _, _ = store.changed_since(v1)
    assert v2 == 2 and keys.tolist() == [3, 5]  # group 0's touched keys; not group 10's
    assert store.changed_since(v2)[1].size == 0


def test_change_log_instance_differs_per_log() -> None:
    assert ChangeLog(4).instance != ChangeLog(4).instance
