"""Flame graphs of sampled stacks in the formats the field's tools read: ``collapsed`` (folded
stacks, for flamegraph.pl, inferno and speedscope), ``speedscope`` (speedscope's JSON file format)
and ``pprof`` (profile.proto, gzipped, for ``go tool pprof`` and the pprof viewers).

Every format gets the weights of :func:`stroboscope.analysis.stack_weights` as integers in one
unit (:func:`integer_weights`: ns for ``cpu`` and ``wall``; a column's weight in its unit, or a
thousandth, millionth, ... of it when the weights are fractions), each stack root first, each
frame named ``function (file:line)`` (``line``: the function's first line). Stacks whose weight
rounds to zero are left out. What a weight means (:attr:`StackWeights.rule`) goes where a format
has room for text: speedscope's profile name, pprof's comments; folded stacks have none
(``stroboscope stacks`` prints it on stderr).

profile.proto is written by a small protobuf encoder here (:class:`_Proto`): no maintained
package on PyPI ships the compiled message, and the package needs no protobuf runtime for it.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np
import pyarrow as pa

from stroboscope._base.text import printable
from stroboscope._base.version import __version__
from stroboscope.analysis import (
    WEIGHTS,
    StackWeights,
    stack_weights,
    weight_column,
    weight_source,
)

PathLike = Union[str, "os.PathLike[str]"]

FLAME_FORMATS = ("collapsed", "speedscope", "pprof")
"""The formats :func:`flame_bytes` writes."""
BINARY_FORMATS = frozenset({"pprof"})
"""Formats that are not text (``stroboscope stacks`` refuses to print them on a terminal)."""
SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"

_PREFIXES = {"J": ("mJ", "uJ", "nJ", "pJ"), "s": ("ms", "us", "ns", "ps")}
"""SI names of a unit's thousandth, millionth, billionth and trillionth."""
_SPEEDSCOPE_UNITS = {"ns": "nanoseconds", "bytes": "bytes"}
_PPROF_UNITS = {"ns": "nanoseconds", "bytes": "bytes"}


def frame_label(function: str, file: str, line: int) -> str:
    """How a frame is named in every format: ``function (file:line)``, with ``;`` (the folded
    format's separator) written as ``:`` and control characters as their escapes."""
    return printable(f"{function} ({file}:{line})").replace(";", ":")


def integer_weights(weights: StackWeights) -> tuple[Any, str]:
    """The stacks' weights as int64 and their unit.

    ``ns`` weights are rounded as they are. Others are scaled by the smallest power of 1000
    (up to 1e12) that gives the total at least 1e6 units, so rounding each stack costs under a
    millionth of the total: ``J`` becomes ``mJ``, ``uJ``, ... and another unit ``1e-3 UNIT``,
    ``1e-6 UNIT``, ...; weights already whole numbers (bytes) are kept as they are.
    """
    w = np.asarray(weights.stacks.column("weight").to_numpy(), dtype=np.float64)
    unit = weights.unit
    if unit == "ns" or not len(w) or bool(np.all(w == np.round(w))):
        return np.round(w).astype(np.int64), unit
    step = 0
    total = float(w.sum())
    while step < 4 and total * 1000.0**step < 1e6:
        step += 1
    if step == 0:
        return np.round(w).astype(np.int64), unit
    names = _PREFIXES.get(unit)
    label = names[step - 1] if names else f"1e-{3 * step} {unit}"
    return np.round(w * 1000.0**step).astype(np.int64), label


def _stacks(weights: StackWeights) -> tuple[list[list[int]], list[int], str, pa.Table]:
    """The stacks with a weight > 0 after rounding: each as frame keys root first, its integer
    weight; the unit; and the distinct frames (``function``, ``file``, ``line``) the keys index."""
    ints, unit = integer_weights(weights)
    ids = np.asarray(weights.stacks.column("stack_id").to_numpy(), dtype=np.int64)
    keep = ints > 0
    ids, ints = ids[keep], ints[keep]
    frames = weights.frames
    sid = np.asarray(frames.column("stack_id").to_numpy(), dtype=np.int64)
    on = np.isin(sid, ids)
    frames = frames.filter(pa.array(on))
    sid = sid[on]
    depth = np.asarray(frames.column("depth").to_numpy(), dtype=np.int64)
    order = np.lexsort((depth, sid))
    frames, sid = frames.take(pa.array(order)), sid[order]
    keyed = frames.select(["function", "file", "line"])
    distinct = keyed.group_by(["function", "file", "line"], use_threads=False).aggregate([])
    index = {
        key: i
        for i, key in enumerate(
            zip(
                distinct.column("function").to_pylist(),
                distinct.column("file").to_pylist(),
                distinct.column("line").to_pylist(),
            )
        )
    }
    keys = [
        index[k]
        for k in zip(
            keyed.column("function").to_pylist(),
            keyed.column("file").to_pylist(),
            keyed.column("line").to_pylist(),
        )
    ]
    starts = np.searchsorted(sid, ids, side="left")
    ends = np.searchsorted(sid, ids, side="right")
    stacks = [keys[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    return stacks, ints.tolist(), unit, distinct


def collapsed(weights: StackWeights) -> str:
    """Folded stacks: one ``root;...;leaf N`` line per stack (``N`` an integer in the unit of
    :func:`integer_weights`), identical stacks merged, lines sorted."""
    stacks, ints, _unit, distinct = _stacks(weights)
    labels = [
        frame_label(f, p, n)
        for f, p, n in zip(
            distinct.column("function").to_pylist(),
            distinct.column("file").to_pylist(),
            distinct.column("line").to_pylist(),
        )
    ]
    merged: dict[str, int] = {}
    for keys, n in zip(stacks, ints):
        text = ";".join(labels[k] for k in keys)
        merged[text] = merged.get(text, 0) + n
    return "".join(f"{text} {n}\n" for text, n in sorted(merged.items()))


def _title(weights: StackWeights, unit: str) -> str:
    return f"stroboscope stacks by {weights.weight} ({unit})"


def speedscope(weights: StackWeights, *, name: str | None = None) -> dict[str, Any]:
    """speedscope's file format (a ``sampled`` profile: one sample per stack, its integer weight
    as the sample's weight), as a JSON object. The unit is ``nanoseconds`` or ``bytes`` where the
    weights are those, else ``none`` with the unit in the profile's name; the rule of the weight
    follows in the name."""
    stacks, ints, unit, distinct = _stacks(weights)
    frames = [
        {"name": f, "file": p, "line": int(n)}
        for f, p, n in zip(
            distinct.column("function").to_pylist(),
            distinct.column("file").to_pylist(),
            distinct.column("line").to_pylist(),
        )
    ]
    title = f"{_title(weights, unit)}: {weights.rule}"
    return {
        "$schema": SPEEDSCOPE_SCHEMA,
        "name": name or _title(weights, unit),
        "activeProfileIndex": 0,
        "exporter": f"stroboscope {__version__}",
        "shared": {"frames": frames},
        "profiles": [
            {
                "type": "sampled",
                "name": title,
                "unit": _SPEEDSCOPE_UNITS.get(unit, "none"),
                "startValue": 0,
                "endValue": int(sum(ints)),
                "samples": stacks,
                "weights": ints,
            }
        ],
    }


class _Proto:
    """A protobuf message being written: fields appended in the wire format (varints,
    length-delimited bytes and packed repeated varints; all profile.proto needs)."""

    def __init__(self) -> None:
        self.out = bytearray()

    @staticmethod
    def varint(value: int) -> bytes:
        if value < 0:
            value += 1 << 64  # int64: two's complement, ten bytes
        out = bytearray()
        while True:
            byte = value & 0x7F
            value >>= 7
            if value:
                out.append(byte | 0x80)
            else:
                out.append(byte)
                return bytes(out)

    def number(self, field: int, value: int) -> _Proto:
        if value:  # proto3: a zero is not written
            self.out += self.varint(field << 3) + self.varint(value)
        return self

    def data(self, field: int, data: bytes | bytearray) -> _Proto:
        self.out += self.varint(field << 3 | 2) + self.varint(len(data)) + bytes(data)
        return self

    def message(self, field: int, message: _Proto) -> _Proto:
        return self.data(field, message.out)

    def packed(self, field: int, values: Sequence[int]) -> _Proto:
        if values:
            self.data(field, b"".join(self.varint(v) for v in values))
        return self


def pprof(weights: StackWeights) -> bytes:
    """profile.proto (gzipped), as google/pprof's ``proto/profile.proto`` defines it: two sample
    types, ``samples``/``count`` and the weight (type the weight's name, unit as
    :func:`integer_weights` gives it, ``nanoseconds`` for ns), the latter the default; one
    Function and one Location per distinct frame; each stack a Sample, leaf first; the rule of
    the weight in the profile's comments."""
    stacks, ints, unit, distinct = _stacks(weights)
    strings: dict[str, int] = {"": 0}

    def s(text: str) -> int:
        return strings.setdefault(text, len(strings))

    counts = _sample_counts(weights)
    profile = _Proto()
    kind = weights.weight
    profile.message(1, _Proto().number(1, s("samples")).number(2, s("count")))
    profile.message(1, _Proto().number(1, s(kind)).number(2, s(_PPROF_UNITS.get(unit, unit))))
    for keys, n, c in zip(stacks, ints, counts):
        sample = _Proto().packed(1, [k + 1 for k in reversed(keys)]).packed(2, [c, n])
        profile.message(2, sample)
    functions = zip(
        distinct.column("function").to_pylist(),
        distinct.column("file").to_pylist(),
        distinct.column("line").to_pylist(),
    )
    for i, (function, file, line) in enumerate(functions, start=1):
        name, path = s(function), s(file)
        profile.message(
            4, _Proto().number(1, i).message(4, _Proto().number(1, i).number(2, int(line)))
        )  # Location i: one Line in Function i, at its first line
        profile.message(
            5,
            _Proto()
            .number(1, i)
            .number(2, name)
            .number(3, name)
            .number(4, path)
            .number(5, int(line)),
        )
    comment = s(weights.rule)
    kind_index = s(kind)
    for text in strings:
        profile.data(6, text.encode())  # Arrow strings are UTF-8: no lone surrogate here
    profile.packed(13, [comment])
    profile.number(14, kind_index)
    return gzip.compress(bytes(profile.out), mtime=0)


def _sample_counts(weights: StackWeights) -> list[int]:
    """The samples of each stack kept by :func:`_stacks` (those of weight > 0 after rounding)."""
    ints, _unit = integer_weights(weights)
    n = np.asarray(weights.stacks.column("samples").to_numpy(), dtype=np.int64)
    return [int(c) for c in n[ints > 0]]


_WRITERS: dict[str, Callable[[StackWeights], bytes]] = {
    "collapsed": lambda w: collapsed(w).encode(),
    "speedscope": lambda w: json.dumps(speedscope(w), ensure_ascii=False).encode(),
    "pprof": pprof,
}


def flame_bytes(weights: StackWeights, format: str = "collapsed") -> bytes:
    """``weights`` in ``format`` (one of :data:`FLAME_FORMATS`), as the file's bytes."""
    if format not in _WRITERS:
        raise ValueError(f"format must be one of {', '.join(FLAME_FORMATS)}, got {format!r}")
    return _WRITERS[format](weights)


def flame_weights(
    source: Any,
    weight: str = "cpu",
    *,
    begin_ns: int | None = None,
    end_ns: int | None = None,
    scope: str | None = None,
    rows: pa.Table | None = None,
    intervals: pa.Table | None = None,
) -> StackWeights:
    """The stack weights of a recording, a running Sampler or two tables.

    Parameters
    ----------
    source : str, os.PathLike, Sampler or (samples, frames)
        A recording (``RUN.parquet``; its stacks beside it,
        :func:`stroboscope.formats.stacks.read_stacks`), anything with ``stacks()`` returning
        the two tables (a Sampler recording stacks; its ``snapshot()`` gives the rows and its
        ``scope_intervals()`` the scopes when it has them), or the two tables themselves.
    weight : str
        ``"cpu"``, ``"wall"`` or a metric column of the rows
        (:func:`stroboscope.analysis.stack_weights`).
    begin_ns, end_ns, scope
        Keep the samples in ``[begin_ns, end_ns)`` (CLOCK_MONOTONIC ns) and those of the thread
        that ran a call of ``scope`` while it was open.
    rows, intervals : pyarrow.Table, optional
        The rows and the scope intervals, when ``source`` is the two tables (or to replace those
        of a recording).
    """
    if isinstance(source, (str, os.PathLike)):
        samples, frames, rows, intervals = _from_recording(
            source, weight, scope is not None, rows, intervals
        )
    elif callable(getattr(source, "stacks", None)):
        samples, frames = source.stacks()
        if rows is None and weight not in WEIGHTS:
            rows = source.snapshot().to_arrow()
        if (
            intervals is None
            and scope is not None
            and callable(getattr(source, "scope_intervals", None))
        ):
            intervals = source.scope_intervals()
    elif isinstance(source, tuple) and len(source) == 2:
        samples, frames = source
    else:
        raise TypeError(
            "source must be a recording's path, a Sampler recording stacks or a (samples, "
            f"frames) pair of tables, got {type(source).__name__}"
        )
    return stack_weights(
        samples,
        frames,
        weight,
        rows=rows,
        begin_ns=begin_ns,
        end_ns=end_ns,
        scope=scope,
        intervals=intervals,
    )


def _from_recording(
    path: PathLike,
    weight: str,
    need_scopes: bool,
    rows: pa.Table | None,
    intervals: pa.Table | None,
) -> tuple[pa.Table, pa.Table, pa.Table | None, pa.Table | None]:
    from stroboscope.export._inputs import read_input, read_scopes, scopes_beside
    from stroboscope.formats.stacks import read_stacks

    samples, frames = read_stacks(path)
    if need_scopes and intervals is None:
        from pathlib import Path

        beside = scopes_beside(Path(os.fspath(path)))
        if beside is None:
            raise ValueError(
                f"{os.fspath(path)} has no scope intervals beside it "
                "(RUN.scopes.parquet): it was recorded without a scope"
            )
        intervals = read_scopes(beside)
    column = weight_source(weight)
    if rows is None and column is not None:
        # a Parquet file: that column only, and when each GPU reading was taken (a GPU's
        # value is placed at its poll's time, as in every figure of the package)
        (recording,) = read_input(path, [column, "*.read_mono_ns"])
        weight_column(recording.schema, column)  # a bad name: refused before any read
        read = [n for n in recording.column_names if n.endswith(".read_mono_ns")]
        rows = recording.columns([column, *read])
    return samples, frames, rows, intervals


def flame_graph(
    source: Any,
    weight: str = "cpu",
    format: str = "collapsed",
    *,
    begin_ns: int | None = None,
    end_ns: int | None = None,
    scope: str | None = None,
    rows: pa.Table | None = None,
    intervals: pa.Table | None = None,
) -> bytes:
    """A flame graph of ``source`` weighted by ``weight``, as the bytes of a ``format`` file
    (:func:`flame_weights` then :func:`flame_bytes`)."""
    if format not in FLAME_FORMATS:
        raise ValueError(f"format must be one of {', '.join(FLAME_FORMATS)}, got {format!r}")
    weights = flame_weights(
        source,
        weight,
        begin_ns=begin_ns,
        end_ns=end_ns,
        scope=scope,
        rows=rows,
        intervals=intervals,
    )
    return flame_bytes(weights, format)


def time_range_ns(
    path: PathLike, start: str | None, end: str | None
) -> tuple[int | None, int | None]:
    """``--from``/``--to`` of ``stroboscope stacks`` as CLOCK_MONOTONIC ns ``[begin, end)``:
    each is seconds after the recording's first row (``30``, ``1.5s``, ``250ms``, ``2m``) or an
    ISO-8601 time, as ``stroboscope report`` reads them (both ends included, as there). The
    recording's ``time`` and ``mono_ns`` are read for its first row and its clock anchor;
    None for an end not given."""
    if start is None and end is None:
        return None, None
    from stroboscope.export._inputs import read_input
    from stroboscope.export._select import parse_time

    (recording,) = read_input(path)
    times = recording.times
    if times.num_rows == 0:
        raise ValueError(f"{os.fspath(path)} has no row: --from/--to have no start to count from")
    first = int(times.column("time").cast(pa.int64())[0].as_py())
    anchor = recording.anchor_ns
    begin = None if start is None else parse_time("--from", start, first) - anchor
    stop = None if end is None else parse_time("--to", end, first) - anchor + 1
    if begin is not None and stop is not None and begin >= stop:
        raise ValueError(f"--from ({start}) is after --to ({end})")
    return begin, stop
