"""A native Perfetto protobuf trace (``.pftrace``) of scopes and metrics, for runs too long for
JSON.

Structural packets (the clock snapshot, process/thread/counter track descriptors, scope slices)
are built with the ``perfetto`` package's protos and written with its
``StreamingTraceProtoBuilder``. Counter values, which are nearly all of a long run, are encoded
by hand in numpy: with realtime timestamps in [2**56, 2**63) ns (any date from 1972 to 2262) and
track uuids in [2**21, 2**28), every counter packet has the same 36-byte layout, so a whole
column is written at once; outside that range they go through the protos too. The bytes equal
what the protos serialise (a test checks).

Every packet is timed on CLOCK_REALTIME (``timestamp_clock_id = 1``), and the first packet is a
clock snapshot that makes REALTIME the trace's primary clock and relates it to MONOTONIC by the
sampler's anchor.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Union

import numpy as np
import pyarrow as pa

from stroboscope._base.extras import require
from stroboscope._base.files import replace_private
from stroboscope.analysis import F64, I64
from stroboscope.analysis.trace_data import TraceData, collect

PathLike = Union[str, "os.PathLike[str]"]

REALTIME = 1  # perfetto.protos BuiltinClock
MONOTONIC = 3
SEQUENCE = 1  # trusted_packet_sequence_id of every packet
COUNTER_UUID0 = 1 << 21  # counter track uuids: 4-byte varints
OTHER_UUID0 = 1 << 28
_FAST_MIN, _FAST_MAX = 1 << 56, 1 << 63
_RECORD = 36


def _protos() -> Any:
    what, extra = "write_perfetto_trace", "trace"
    protos = require("perfetto.protos.perfetto.trace.perfetto_trace_pb2", what, extra)
    builder = require("perfetto.trace_builder.proto_builder", what, extra)
    return protos, builder.StreamingTraceProtoBuilder


def counter_records(t: I64, v: F64, uuid: int) -> bytes:
    """Counter packets for one track, each wrapped as a ``Trace.packet`` field, as bytes.

    ``t`` must lie in [2**56, 2**63) and ``uuid`` in [2**21, 2**28) (see the module docstring).
    The field order is the one protobuf serialises: timestamp (8), trusted_packet_sequence_id
    (10), track_event (11: type 9 = COUNTER, track_uuid 11, double_counter_value 44),
    timestamp_clock_id (58).
    """
    n = len(t)
    out = np.zeros((n, _RECORD), dtype=np.uint8)
    out[:, 0], out[:, 1], out[:, 2] = 0x0A, _RECORD - 2, 0x40
    u = t.astype(np.uint64)
    for k in range(8):  # 9-byte varint: 8 bytes of 7 bits with the continuation bit, then 7
        out[:, 3 + k] = ((u >> np.uint64(7 * k)) & np.uint64(0x7F)) | np.uint64(0x80)
    out[:, 11] = u >> np.uint64(56)
    out[:, 12], out[:, 13] = 0x50, SEQUENCE
    out[:, 14], out[:, 15] = 0x5A, 17
    out[:, 16], out[:, 17], out[:, 18] = 0x48, 4, 0x58
    for k in range(4):
        byte = (uuid >> (7 * k)) & 0x7F
        out[:, 19 + k] = byte | (0x80 if k < 3 else 0)
    out[:, 23], out[:, 24] = 0xE1, 0x02
    out[:, 25:33] = np.ascontiguousarray(v.astype("<f8")).view(np.uint8).reshape(n, 8)
    out[:, 33], out[:, 34], out[:, 35] = 0xD0, 0x03, REALTIME
    return out.tobytes()


def _packet(pb: Any, ts: int) -> Any:
    p = pb.TracePacket()
    p.timestamp = ts
    p.timestamp_clock_id = REALTIME
    p.trusted_packet_sequence_id = SEQUENCE
    return p


def _write(f: Any, data: TraceData, process_name: str) -> None:
    pb, builder_type = _protos()
    builder = builder_type(f)
    s = data.slices
    starts = [int(s.begin.min())] if len(s.begin) else []
    starts += [int(c.t[0]) for c in data.counters if len(c.t)]
    t0 = min(starts, default=_FAST_MIN)
    clock = _packet(pb, t0)
    clock.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    clock.clock_snapshot.primary_trace_clock = REALTIME
    for clock_id, value in ((REALTIME, t0), (MONOTONIC, t0 - data.anchor)):
        entry = clock.clock_snapshot.clocks.add()
        entry.clock_id, entry.timestamp = clock_id, value
    builder.write_packet(clock)

    process_uuid = OTHER_UUID0
    desc = _packet(pb, t0)
    desc.track_descriptor.uuid = process_uuid
    desc.track_descriptor.process.pid = data.pid
    desc.track_descriptor.process.process_name = process_name
    builder.write_packet(desc)
    tracks = _slice_tracks(pb, builder, data, t0, process_uuid)
    for k, c in enumerate(data.counters):
        desc = _packet(pb, t0)
        desc.track_descriptor.uuid = COUNTER_UUID0 + k
        desc.track_descriptor.parent_uuid = process_uuid
        desc.track_descriptor.name = c.name
        desc.track_descriptor.counter.SetInParent()
        builder.write_packet(desc)
    _slices(pb, builder, data, tracks)
    for k, c in enumerate(data.counters):
        fast = (c.t >= _FAST_MIN) & (c.t < _FAST_MAX)
        f.write(counter_records(c.t[fast], c.v[fast], COUNTER_UUID0 + k))
        for ts, value in zip(c.t[~fast].tolist(), c.v[~fast].tolist()):
            p = _packet(pb, ts)
            p.track_event.type = pb.TrackEvent.TYPE_COUNTER
            p.track_event.track_uuid = COUNTER_UUID0 + k
            p.track_event.double_counter_value = value
            builder.write_packet(p)


def _slice_tracks(
    pb: Any, builder: Any, data: TraceData, t0: int, process_uuid: int
) -> dict[int, int]:
    """A track per stack: its thread's track, or a child of it for a thread's further stacks
    (asyncio tasks), so calls of different stacks never interleave on one track."""
    s = data.slices
    tracks: dict[int, int] = {}
    threads: dict[int, int] = {}
    for tid, stack in sorted(set(zip(s.thread.tolist(), s.stack))):
        if tid not in threads:
            uuid = threads[tid] = OTHER_UUID0 + 1 + len(tracks)
            desc = _packet(pb, t0)
            desc.track_descriptor.uuid = uuid
            desc.track_descriptor.parent_uuid = process_uuid
            desc.track_descriptor.thread.pid = data.pid
            desc.track_descriptor.thread.tid = tid
            desc.track_descriptor.thread.thread_name = f"thread {tid}"
            builder.write_packet(desc)
            tracks[stack] = uuid
            continue
        uuid = tracks[stack] = OTHER_UUID0 + 1 + len(tracks)
        desc = _packet(pb, t0)
        desc.track_descriptor.uuid = uuid
        desc.track_descriptor.parent_uuid = threads[tid]
        desc.track_descriptor.name = f"stack {stack}"
        builder.write_packet(desc)
    return tracks


def _slices(pb: Any, builder: Any, data: TraceData, tracks: dict[int, int]) -> None:
    """Begin and end events in time order; at one instant ends first (inner first), then
    begins (outer first), then the ends of empty calls (inner first), so every track nests."""
    s = data.slices
    n = len(s.begin)
    depth = s.depth
    times = np.concatenate((s.begin, s.end))
    # an empty call's end comes after the begins of its instant (its own included)
    empty = (s.end == s.begin).astype(np.int64) * 2
    kind = np.concatenate((np.ones(n, np.int64), empty))
    order = np.lexsort((np.concatenate((depth, -depth)), kind, times))
    for e in order.tolist():
        row = e % n
        p = _packet(pb, int(times[e]))
        p.track_event.track_uuid = tracks[s.stack[row]]
        if e < n:
            p.track_event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
            p.track_event.name = s.name[row]
            p.track_event.categories.append("scope")
            for key, value in s.args[row].items():
                note = p.track_event.debug_annotations.add()
                note.name, note.string_value = key, value
        else:
            p.track_event.type = pb.TrackEvent.TYPE_SLICE_END
        builder.write_packet(p)


def write_perfetto_trace(
    path: PathLike,
    samples: pa.Table,
    intervals: pa.Table,
    *,
    columns: Sequence[str] | None = None,
    anchor_realtime_ns: int | None = None,
    pid: int | None = None,
    process_name: str = "stroboscope",
) -> None:
    """Write scopes and metrics as a native Perfetto protobuf trace (open it in
    https://ui.perfetto.dev or with ``perfetto.trace_processor``), created 0600 and replaced
    whole. Needs the ``perfetto`` package (``pip install 'stroboscope[trace]'``).

    The arguments are those of :func:`stroboscope.export.traces.write_chrome_trace`. Scope
    calls are slices on a track per thread (and per further stack of a thread), labels as debug
    annotations; each metric column is a counter track under the process. Timestamps are
    CLOCK_REALTIME ns (``mono_ns`` + anchor).
    """
    _protos()  # fail before anything is written
    data = collect(
        samples, intervals, columns=columns, anchor_realtime_ns=anchor_realtime_ns, pid=pid
    )
    if len(data.counters) >= OTHER_UUID0 - COUNTER_UUID0:
        raise ValueError(f"too many counter columns ({len(data.counters)})")
    with replace_private(path) as f:
        _write(f, data, process_name)
