"""ParentReceiver and odd rows: a bad row never stops the receiver, and no value is silently lost.

Issue 9, items 4 (one odd row killed the receiving thread) and 8 (keys that collide after
flattening or JSON encoding lost a value).
"""

from __future__ import annotations

import logging
import queue
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest
from stroboscope.compat.aitune import ParentReceiver
from stroboscope.compat.aitune._journal import (
    MAX_DEPTH,
    encode_batch,
    encode_rows,
    parse_journal,
    rows_to_table,
)


class MultiElementTensor:
    """Like a torch tensor of two elements: ``.item()`` raises, ``str()`` works."""

    def item(self) -> float:
        raise RuntimeError("a Tensor with 2 elements cannot be converted to Scalar")

    def __str__(self) -> str:
        return "tensor([1., 2.])"


class Unprintable:
    """Neither ``.item()`` nor ``str()`` works."""

    def item(self) -> float:
        raise ValueError("no")

    def __str__(self) -> str:
        raise RuntimeError("no text either")


def nested(depth: int) -> dict[str, Any]:
    row: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        row = {"d": row}
    return row


@pytest.fixture
def receiver() -> Iterator[tuple[ParentReceiver, queue.Queue[Any]]]:
    q: queue.Queue[Any] = queue.Queue()
    r = ParentReceiver(q, crash_safe=False)
    yield r, q
    if r.running:
        r.stop()


def test_a_value_whose_item_raises_is_written_as_text(
    receiver: tuple[ParentReceiver, queue.Queue[Any]],
) -> None:
    r, q = receiver
    r.start()
    for row in ({"id": 0, "t": 1.5}, {"id": 1, "t": MultiElementTensor()}, {"id": 2, "t": 2.5}):
        q.put(row)
    r.stop()
    df = r.get_metrics()
    assert df["id"].tolist() == [0, 1, 2]
    # One column, one type: the column holds text once one of its values is text.
    assert df["t"].tolist() == ["1.5", "tensor([1., 2.])", "2.5"]
    assert r.stats()["rows_with_text"] == 1 and r.stats()["rows_refused"] == 0


def test_bad_rows_are_refused_counted_and_the_receiver_goes_on(
    receiver: tuple[ParentReceiver, queue.Queue[Any]], caplog: pytest.LogCaptureFixture
) -> None:
    r, q = receiver
    r.start()
    circular: dict[str, Any] = {"id": -2}
    circular["self"] = circular
    bad = [
        nested(2000),
        {"id": -1, "u": Unprintable()},
        nested(MAX_DEPTH + 1),
        "not a row",
        circular,
    ]
    q.put({"id": 0})
    for row in bad:
        q.put(row)
    q.put({"id": 1})
    r.stop()
    assert r.get_metrics()["id"].tolist() == [0, 1]
    assert r.rows_received == 2
    assert r.rows_refused == len(bad) and r.stats()["rows_refused"] == len(bad)
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1  # rate-limited: the first at once, the others counted
    assert "refused" in warnings[0].getMessage()


def test_receiver_thread_survives_every_bad_row(
    receiver: tuple[ParentReceiver, queue.Queue[Any]],
) -> None:
    r, q = receiver
    r.start()
    q.put(nested(2000))
    q.put({"id": 1, "t": MultiElementTensor()})
    q.put({"id": 2})
    deadline = time.monotonic() + 60.0
    while r.rows_received < 2:  # the thread lives on: it takes the later rows
        assert time.monotonic() < deadline, f"{r.rows_received} rows, {r.stats()}"
        time.sleep(0.01)
    assert r.running and r.stats()["rows_refused"] == 1
    r.stop()


def test_deepest_row_allowed_round_trips() -> None:
    row = nested(MAX_DEPTH)
    data, written, refused = encode_rows([row])
    assert (written, refused) == (1, 0)
    rows, damaged = parse_journal(data)
    assert rows == [row] and damaged == 0
    assert rows_to_table(rows).column_names == ["d." * (MAX_DEPTH - 1) + "leaf"]


def test_keys_colliding_after_flattening_keep_both_values() -> None:
    data, written, refused = encode_rows([{"x.y": 1, "x": {"y": 2}}, {"x": {"y": 3}, "x.y": 4}])
    assert (written, refused) == (2, 0)
    table = rows_to_table(parse_journal(data)[0])
    # The first in the row's order (depth first) keeps the name; the next gets "~2".
    assert table.column_names == ["x.y", "x.y~2"]
    assert table.to_pylist() == [{"x.y": 1, "x.y~2": 2}, {"x.y": 3, "x.y~2": 4}]


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({1: "a", "1": "b"}, {"1": "a", "1~2": "b"}),
        ({"1": "a", 1: "b"}, {"1": "a", "1~2": "b"}),
        # A key whose text is unique keeps it; a clash takes the first free "~n".
        ({True: 1, "true": 2, "true~2": 3}, {"true": 1, "true~3": 2, "true~2": 3}),
        ({None: 0, "null": 1}, {"null": 0, "null~2": 1}),
        ({1.5: 0, "1.5": 1}, {"1.5": 0, "1.5~2": 1}),
        ({"n": {2: "x", "2": "y"}}, {"n.2": "x", "n.2~2": "y"}),
        ({(1, 2): "t", "(1, 2)": "s"}, {"(1, 2)": "t", "(1, 2)~2": "s"}),
        # Mappings that are not dicts, and dict subclasses, nested or as the row itself.
        ({"m": MappingProxyType({1: "a", "1": "b"})}, {"m.1": "a", "m.1~2": "b"}),
        ({"o": OrderedDict([(1, "a"), ("1", "b")])}, {"o.1": "a", "o.1~2": "b"}),
        (MappingProxyType({"k": [{2: 0, "2": 1}]}), {"k": '[{"2":0,"2~2":1}]'}),
    ],
)
def test_keys_colliding_in_json_keep_both_values(
    row: Mapping[Any, Any], expected: dict[str, Any]
) -> None:
    data, written, refused = encode_rows([row])
    assert (written, refused) == (1, 0)
    rows, damaged = parse_journal(data)
    assert damaged == 0
    assert rows_to_table(rows).to_pylist() == [expected]


def test_numpy_values_and_dates_are_values_not_text() -> None:
    import datetime

    import numpy as np

    deep: dict[str, Any] = {"n": np.int16(3)}  # a numpy leaf in the deepest level allowed
    for _ in range(MAX_DEPTH - 2):
        deep = {"d": deep}
    row = {
        "f": np.float32(0.5),
        "i": np.int64(7),
        "t": np.datetime64("2024-01-02T03:04:05"),
        "deep": deep,
        "d": datetime.date(2024, 1, 2),
    }
    batch = encode_batch([row])
    assert (batch.rows, batch.refused, batch.with_text) == (1, 0, 0)
    got = parse_journal(batch.data)[0][0]
    assert (got["f"], got["i"], got["t"], got["d"]) == (0.5, 7, "2024-01-02T03:04:05", "2024-01-02")
    assert rows_to_table([got]).column("deep" + ".d" * (MAX_DEPTH - 2) + ".n").to_pylist() == [3]


def test_objects_without_a_json_form_are_text_and_counted() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque!"

    data, written, refused = encode_rows([{"a": Opaque(), "b": {"c": Opaque()}}])
    assert (written, refused) == (1, 0)
    assert parse_journal(data)[0] == [{"a": "opaque!", "b": {"c": "opaque!"}}]
    assert encode_batch([{"a": Opaque()}, {"a": 1}]).with_text == 1


def test_renamed_keys_are_counted(receiver: tuple[ParentReceiver, queue.Queue[Any]]) -> None:
    r, q = receiver
    r.start()
    q.put({1: "a", "1": "b"})
    q.put({"plain": 1})
    r.stop()
    assert r.stats()["rows_renamed"] == 1
    assert r.get_metrics().to_dict("records")[0]["1~2"] == "b"


def test_a_text_column_spells_nan_and_infinities_as_a_float_column_does() -> None:
    """A column of numbers and strings is text: NaN and the infinities in it are ``nan``,
    ``inf`` and ``-inf``, as a float column's cells are in CSV, not JSON's ``NaN`` and
    ``-Infinity``; whether the kinds meet in one block of the journal or in two."""
    import math

    from stroboscope.formats.journal_read import TableBuilder

    rows = [{"a": 1, "b": math.inf}, {"a": math.nan}, {"a": -math.inf}, {"a": "txt"}]
    parsed = parse_journal(encode_batch(rows).data)[0]
    one = rows_to_table(parsed)
    assert one.column("a").to_pylist() == ["1", "nan", "-inf", "txt"]
    assert one.column("b").to_pylist() == [math.inf, None, None, None]
    two = TableBuilder()
    two.add_rows(parsed[:3])  # a float block (1, NaN, -inf), then a text one
    two.add_rows(parsed[3:])
    # the first block a float column (1 is 1.0 there), then text: its cells as CSV spells them
    assert two.table().column("a").to_pylist() == ["1.0", "nan", "-inf", "txt"]
