"""The zooming page's encoding of readings: what each kind of column is stored as."""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
from stroboscope.export._page_data import Blob, encode_column, encode_time, encode_values


def test_values_are_stored_exactly_or_as_float32_where_a_plot_cannot_tell() -> None:
    blob = Blob()
    ints = encode_values(blob, pa.array([2**40, 2**40 + 4096, 2**40], pa.int64()))
    assert ints["enc"] == "int-steps" and ints["dtype"] == "i16"  # steps of 4096: exact
    huge = encode_values(blob, pa.array([2**64 - 1], pa.uint64()))
    assert huge["enc"] == "plain"  # a float (2**64, as the PNG draws it), not wrapped to -1
    pct = encode_values(blob, pa.array([0.0, 12.5, 99.123456789]))
    assert pct["dtype"] == "f32"
    # a value that moves by a millionth of itself keeps float64 (float32 would flatten it)
    disk = encode_values(blob, pa.array([26.52012, 26.520121, 26.520122]))
    assert disk["dtype"] == "f64"
    const = encode_values(blob, pa.array([26.52012] * 3))
    assert const["dtype"] == "f64"  # not exact in float32
    assert encode_values(blob, pa.array([25.0] * 3))["dtype"] == "f32"  # exact


def test_rows_time_and_the_stream() -> None:
    blob = Blob()
    mono = 10**9 + np.arange(10, dtype=np.int64) * 1_000_000
    mono[7] += 3_000  # 3 µs late
    t = encode_time(blob, mono, 10**9)
    assert (t["first_us"], t["step_us"]) == (0, 1000) and t["rest"]["dtype"] == "i8"
    every = encode_column(blob, pa.chunked_array([[1.0, None, 2.0, None, 3.0]]), mono[:5], False)
    assert every is not None and every["rows"] == {"first": 0, "every": 2, "n": 3}
    assert every["period_us"] == 2000.0 and every["rate"] is False
    nan = encode_column(blob, pa.chunked_array([[1.0, float("nan"), None, 4.0]]), mono[:4], True)
    assert nan is not None and nan["values"]["n"] == 2  # NaN is no reading
    assert (
        encode_column(blob, pa.chunked_array([[None, None]], pa.float64()), mono[:2], True) is None
    )
    raw = zlib.decompress(blob.packed())
    assert len(raw) == blob.size
    # each array byte-shuffled: the int8 time differences are the bytes themselves
    rest = t["rest"]
    assert list(np.frombuffer(raw[rest["at"] : rest["at"] + rest["n"]], np.int8)) == [
        0, 0, 0, 0, 0, 0, 3, -3, 0
    ]  # fmt: skip
