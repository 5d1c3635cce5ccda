"""The data of the zooming page, encoded compactly for the browser to decode (one home of the
format; ``page_data.js`` is its reader).

What the page holds is every reading, as it was taken, so the reader can zoom to single rows:

- **Time**: per recording, each row's time in µs after the report's origin, stored as the first
  value, a step (the median spacing) and each row's difference from ``previous + step`` (zero
  on a regular grid, so it compresses to nearly nothing; the jitter of a live recording costs
  about a byte a row).
- **Readings**: a column's non-null cells only (rows between a source's readings are null:
  the value holds until the next reading, so it is stored once per reading): the row of each
  (``first`` and ``every`` when evenly spaced, else the step from the previous reading's row)
  and its value: integers as the first and the difference of each from the one before
  (exact), floats as float32 where that is exact enough (float32's step at the column's
  largest magnitude is at most 1/1000 of the column's range: a plot cannot tell them apart),
  float64 otherwise.
- **Spans**: what time each reading stands for is the static plots' rule
  (:func:`~stroboscope.export._downsample.reading_spans`: a level holds until the next reading,
  a rate stands for its window, a break where readings are missing); the page gets what that
  rule needs (the column's usual spacing, whether it is a rate, the gap factor) and applies it.
- **Scopes**: begin and end (µs after the origin), lane, and name of each interval.

Every array is byte-shuffled (all first bytes, then all second bytes, ...) and the whole is one
zlib stream, which the page decompresses with the browser's ``DecompressionStream``; the
manifest (JSON) says where each array lies. The coarse zoom levels (min/max per bucket of rows,
so no spike is hidden) are built in the page from the readings, not stored.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Array = np.ndarray[Any, Any]

FORMAT = 1
"""Version of the manifest and blob layout that ``page_data.js`` reads."""

FLOAT32_RESOLUTION = 1e-3
"""float32 is used for a float column when its step at the column's largest magnitude is at
most this share of the column's range (max - min)."""


@dataclass
class Blob:
    """Arrays appended one after the other, each byte-shuffled, compressed as they come (one
    zlib stream: ``DecompressionStream('deflate')`` reads it); :meth:`packed` ends it."""

    level: int = 1
    size: int = 0
    parts: list[bytes] = field(default_factory=list)
    _z: Any = None

    def add(self, a: Array) -> dict[str, Any]:
        """Append ``a`` (1-D; integers in the narrowest of int8, int16 and int32 that holds
        them); where it lies, for the manifest."""
        a = np.ascontiguousarray(_narrow(np.asarray(a)))
        width = a.dtype.itemsize
        raw = a.view(np.uint8).reshape(-1, width).T.tobytes() if width > 1 else a.tobytes()
        entry = {"at": self.size, "n": len(a), "dtype": _JS_TYPES[a.dtype.str[1:]]}
        if self._z is None:
            self._z = zlib.compressobj(self.level)
        self.parts.append(self._z.compress(raw))
        self.size += len(raw)
        return entry

    def packed(self) -> bytes:
        """The whole stream."""
        if self._z is None:
            self._z = zlib.compressobj(self.level)
        return b"".join([*self.parts, self._z.flush()])


_JS_TYPES = {"i1": "i8", "i2": "i16", "i4": "i32", "f4": "f32", "f8": "f64", "u1": "u8"}


def _narrow(a: Array) -> Array:
    """Integers in the narrowest signed type of 8, 16 or 32 bits that holds them all."""
    if a.dtype.kind not in "iu":
        return a
    lo, hi = (int(a.min()), int(a.max())) if len(a) else (0, 0)
    for t in (np.int8, np.int16, np.int32):
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return a.astype(t, copy=False)
    raise ValueError(f"integers from {lo} to {hi} do not fit the page's int32")


def rows_entry(blob: Blob, rows: Array) -> dict[str, Any]:
    """The rows of a column's readings: ``first`` and ``every`` when they are evenly spaced
    (a source read every n-th tick, no read failed), else the steps from one to the next."""
    steps = np.diff(rows, prepend=0)
    if len(rows) >= 2 and bool(np.all(steps[2:] == steps[1])):
        return {"first": int(rows[0]), "every": int(steps[1]), "n": len(rows)}
    return blob.add(steps.astype(np.int64))


def _as_int32_steps(v: Array) -> Array | None:
    """``v`` (integers) as the difference of each from the one before (the first from
    itself: 0), when every such difference fits int32; else None."""
    d = np.diff(v, prepend=v[:1])
    if len(d) and (d.min() < -(2**31) or d.max() >= 2**31):
        return None
    return d


def encode_values(blob: Blob, values: pa.Array) -> dict[str, Any]:
    """The readings' values of one column (no nulls): how ``page_data.js`` rebuilds them."""
    t = values.type
    big = pa.types.is_unsigned_integer(t) and (pc.max(values).as_py() or 0) >= 2**63
    if pa.types.is_integer(t) and not big:
        v = values.cast(pa.int64()).to_numpy(zero_copy_only=False)
        if np.abs(v).max(initial=0) < 2**53:  # exact as the page's float64
            steps = _as_int32_steps(v)
            if steps is not None:
                first = int(v[0]) if len(v) else 0
                return {"enc": "int-steps", "first": first, **blob.add(steps)}
        return {"enc": "plain", **blob.add(v.astype(np.float64))}
    v = values.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    ok = np.isfinite(v)
    finite = v if ok.all() else v[ok]  # no copy of a column that is all finite
    del ok
    if len(finite):
        big, lo, hi = float(np.abs(finite).max()), float(finite.min()), float(finite.max())
        fits = big < 3e38 and (big == 0 or np.abs(finite[finite != 0]).min() > 1e-37)
        # float32's spacing near the largest magnitude (2**-23 relative) against the range
        if fits and hi > lo and big * 2.0**-23 <= FLOAT32_RESOLUTION * (hi - lo):
            return {"enc": "plain", **blob.add(v.astype(np.float32))}
        if fits and np.array_equal(v.astype(np.float32).astype(np.float64), v, equal_nan=True):
            return {"enc": "plain", **blob.add(v.astype(np.float32))}
    return {"enc": "plain", **blob.add(v)}


def encode_time(blob: Blob, mono_ns: Array, origin_ns: int) -> dict[str, Any]:
    """Each row's time in µs after ``origin_ns`` (monotonic ns): first, step, differences."""
    # in place: a 1-hour 1 kHz run's 3.6M rows are 27 MiB an array, two of them at a time
    ns = mono_ns.astype(np.int64)
    ns -= origin_ns
    us_f = ns.astype(np.float64)
    del ns
    us_f /= 1000.0
    np.rint(us_f, out=us_f)
    us = us_f.astype(np.int64)
    del us_f
    rest = np.diff(us)
    step = int(np.median(rest)) if len(rest) else 0
    rest -= step
    if len(rest) and (rest.min() < -(2**31) or rest.max() >= 2**31):
        raise ValueError("rows more than 35 minutes apart cannot be stored by the page")
    return {"first_us": int(us[0]), "step_us": step, "rest": blob.add(rest)}


def encode_column(
    blob: Blob, column: pa.ChunkedArray, mono_ns: Array, rate: bool
) -> dict[str, Any] | None:
    """One column's readings: rows (as steps), values, and what
    :func:`~stroboscope.export._downsample.reading_spans` needs: the usual spacing (µs, the
    median time between readings), the usual number of rows between them, and whether the
    values are means over windows."""
    if pa.types.is_floating(column.type):
        nan = pc.is_nan(column)
        if pc.any(nan).as_py():  # a copy only of a column that has a NaN
            column = pc.if_else(nan, None, column)  # NaN is no reading
    if column.null_count == 0 and len(column) > 1:  # a reading on every row: no index of them
        return {
            "rows": {"first": 0, "every": 1, "n": len(column)},  # what rows_entry says of them
            "values": encode_values(blob, column.combine_chunks()),
            "period_us": float(np.median(np.diff(mono_ns))) / 1000.0,
            "every_rows": 1.0,
            "rate": rate,
        }
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(valid)
    if not len(rows):
        return None
    values = column.drop_null()
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return {
        "rows": rows_entry(blob, rows),
        "values": encode_values(blob, values),
        "period_us": float(np.median(np.diff(mono_ns[rows]))) / 1000.0 if len(rows) > 1 else 0.0,
        "every_rows": float(np.median(np.diff(rows))) if len(rows) > 1 else 1.0,
        "rate": rate,
    }
