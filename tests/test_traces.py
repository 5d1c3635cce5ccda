"""Chrome JSON and Perfetto protobuf traces: required fields, exact times, values, and the merge
into a real torch.profiler trace (tests/data/traces, recorded together with our frame).

Perfetto's trace processor needs a binary it downloads on first use, which these tests cannot
do offline; the protobuf trace is checked by decoding it with the perfetto package's protos.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _scope_tables import ANCHOR, Call, frame, intervals
from stroboscope.export.perfetto import counter_records
from stroboscope.export.traces import merge_into_trace, write_chrome_trace, write_perfetto_trace

DATA = Path(__file__).parent / "data" / "traces"
MS = 1_000_000

CALLS: list[Call] = [
    ("step", "step", 11, 11, 0, 1 * MS, 9 * MS + 123, {"module": "net"}),
    ("fwd", "step/fwd", 11, 11, 1, 2 * MS, 4 * MS, {"module": "net", "backend": "trt"}),
    ("load", "load", 12, 12, 0, 3 * MS + 7, None, {}),
    ("mark", "step/mark", 11, 11, 1, 5 * MS, 5 * MS, {}),  # empty: begins before it ends
]


def small() -> tuple[pa.Table, pa.Table]:
    samples = frame(
        [0, 5 * MS, 10 * MS],
        {"proc.cpu_pct": [10.0, None, 30.5], "gpu.0.power_w": [100.0, 200.0, 150.0]},
    )
    return samples, intervals(CALLS)


def load(path: Path) -> dict[str, Any]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data: dict[str, Any] = json.load(f)
    return data


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_chrome_trace_fields_times_and_values(tmp_path: Path, name: str) -> None:
    samples, iv = small()
    path = tmp_path / name
    write_chrome_trace(path, samples, iv, pid=4242)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    trace = load(path)
    base = trace["baseTimeNanoseconds"]
    assert isinstance(base, int) and base % 1_000_000_000 == 0 and base <= ANCHOR
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    for e in slices:
        assert {"ts", "dur", "pid", "tid", "name"} <= e.keys() and e["pid"] == 4242
    got = {(e["name"], e["tid"]): e for e in slices}
    step = got[("step", 11)]
    assert step["ts"] == pytest.approx((1 * MS + ANCHOR - base) / 1000, abs=1e-6)
    assert step["dur"] == pytest.approx((8 * MS + 123) / 1000, abs=1e-6)  # ns precision
    assert step["args"] == {"module": "net", "path": "step"}
    assert got[("fwd", 11)]["args"] == {"backend": "trt", "module": "net", "path": "step/fwd"}
    load_ = got[("load", 12)]  # open: drawn up to the last sample
    assert load_["args"]["open"] == "true"
    assert load_["dur"] == pytest.approx((10 * MS - 3 * MS - 7) / 1000, abs=1e-6)
    counters = [e for e in events if e["ph"] == "C"]
    for e in counters:
        assert len(e["args"]) == 1 and e["name"] in e["args"]  # one series per event
    cpu = [(e["ts"], e["args"]["proc.cpu_pct"]) for e in counters if e["name"] == "proc.cpu_pct"]
    assert cpu == [
        pytest.approx(((ANCHOR - base) / 1000, 10.0)),
        pytest.approx(((10 * MS + ANCHOR - base) / 1000, 30.5)),
    ]
    assert len([e for e in counters if e["name"] == "gpu.0.power_w"]) == 3
    meta = {(e["name"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M"}
    assert meta == {
        ("process_name", 0): "stroboscope",
        ("thread_name", 11): "thread 11",
        ("thread_name", 12): "thread 12",
    }


def test_chrome_trace_columns_choice_and_errors(tmp_path: Path) -> None:
    samples, iv = small()
    write_chrome_trace(tmp_path / "t.json", samples, iv, columns=["gpu.0.power_w"])
    names = {e["name"] for e in load(tmp_path / "t.json")["traceEvents"] if e["ph"] == "C"}
    assert names == {"gpu.0.power_w"}
    with pytest.raises(ValueError, match="columns not in samples: nope"):
        write_chrome_trace(tmp_path / "u.json", samples, iv, columns=["nope"])
    assert not (tmp_path / "u.json").exists()
    with pytest.raises(ValueError, match="anchor is unknown"):
        write_chrome_trace(
            tmp_path / "u.json", samples.drop_columns(["time"]), intervals(CALLS, anchor=None)
        )


def torch_fixture() -> tuple[Path, pa.Table, pa.Table]:
    return (
        DATA / "torch_cpu_matmul.json",
        pq.read_table(DATA / "torch_cpu_matmul.samples.parquet"),
        pq.read_table(DATA / "torch_cpu_matmul.intervals.parquet"),
    )


def test_merge_into_a_real_torch_trace_keeps_both_timings(tmp_path: Path) -> None:
    trace_in, samples, iv = torch_fixture()
    original = load(trace_in)
    out = tmp_path / "merged.json"
    merge_into_trace(trace_in, out, samples, iv)
    merged = load(out)
    base = original["baseTimeNanoseconds"]
    assert merged["baseTimeNanoseconds"] == base
    theirs = original["traceEvents"]
    assert merged["traceEvents"][: len(theirs)] == theirs  # torch's events untouched
    ours = merged["traceEvents"][len(theirs) :]
    int_pids = [e["pid"] for e in theirs if isinstance(e.get("pid"), int)]
    assert {e["pid"] for e in ours} == {max(int_pids) + 1}
    steps = sorted((e for e in ours if e["ph"] == "X"), key=lambda e: e["ts"])
    ops = sorted((e for e in theirs if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    assert len(steps) == 5 and len(ops) == 600
    # Each step ran 20 matmul+tanh (120 ops); the ops of a step lie inside its slice and the
    # last one ended just before the step's edge was stamped: within 1 ms on both clocks.
    for k, step in enumerate(steps):
        mine = ops[120 * k : 120 * (k + 1)]
        first, last_end = mine[0]["ts"], max(o["ts"] + o["dur"] for o in mine)
        assert step["ts"] - 1000 < first and last_end < step["ts"] + step["dur"] + 1000
        assert step["ts"] + step["dur"] - last_end < 1000
        if k > 0:  # (the first step's first op waits for torch's warm-up)
            assert first - step["ts"] < 1000
    # The counters sit on the same clock: the frame's realtime, minus torch's base, in µs.
    cpu = [e for e in ours if e["ph"] == "C" and e["name"] == "cpu.util_pct"]
    times = samples.filter(samples.column("cpu.util_pct").is_valid()).column("time")
    expect = (np.asarray(times.cast(pa.int64()).to_numpy()) - base) / 1000
    assert np.allclose([e["ts"] for e in cpu], expect, atol=0.002)


def test_merge_needs_torch_base_time(tmp_path: Path) -> None:
    samples, iv = small()
    bare = tmp_path / "old.json"
    bare.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 1}]}))
    with pytest.raises(ValueError, match="baseTimeNanoseconds"):
        merge_into_trace(bare, tmp_path / "out.json", samples, iv)
    assert not (tmp_path / "out.json").exists()


def decode(path: Path) -> Any:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    trace = Trace()
    trace.ParseFromString(path.read_bytes())
    return trace


@pytest.mark.parametrize("anchor", [ANCHOR, 0])  # 0: times below 2**56, the protos' path
def test_perfetto_trace_decodes_to_the_same_content(tmp_path: Path, anchor: int) -> None:
    pytest.importorskip("perfetto")
    samples, iv = small()
    path = tmp_path / "t.pftrace"
    write_perfetto_trace(path, samples, iv, anchor_realtime_ns=anchor, pid=77)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    packets = list(decode(path).packet)
    clock = packets[0].clock_snapshot
    assert clock.primary_trace_clock == 1  # REALTIME
    by_id = {c.clock_id: c.timestamp for c in clock.clocks}
    assert by_id[1] - by_id[3] == anchor
    assert all(p.timestamp_clock_id == 1 and p.trusted_packet_sequence_id == 1 for p in packets)
    tracks = {
        p.track_descriptor.uuid: p.track_descriptor
        for p in packets
        if p.HasField("track_descriptor")
    }
    threads = {d.thread.tid: uuid for uuid, d in tracks.items() if d.HasField("thread")}
    assert set(threads) == {11, 12} and all(tracks[u].thread.pid == 77 for u in threads.values())
    counters = {d.name: uuid for uuid, d in tracks.items() if d.HasField("counter")}
    assert set(counters) == {"proc.cpu_pct", "gpu.0.power_w"}
    events = [p for p in packets if p.HasField("track_event")]
    power = [
        (p.timestamp, p.track_event.double_counter_value)
        for p in events
        if p.track_event.track_uuid == counters["gpu.0.power_w"]
    ]
    assert power == [(anchor, 100.0), (5 * MS + anchor, 200.0), (10 * MS + anchor, 150.0)]
    on_main = [
        (p.timestamp - anchor, p.track_event.type, p.track_event.name)
        for p in events
        if p.track_event.track_uuid == threads[11]
    ]
    assert on_main == [
        (1 * MS, 1, "step"),
        (2 * MS, 1, "fwd"),
        (4 * MS, 2, ""),
        (5 * MS, 1, "mark"),
        (5 * MS, 2, ""),
        (9 * MS + 123, 2, ""),
    ]
    begin = next(p for p in events if p.track_event.name == "fwd").track_event
    assert {(a.name, a.string_value) for a in begin.debug_annotations} == {
        ("module", "net"),
        ("backend", "trt"),
        ("path", "step/fwd"),
    }


def test_hand_encoded_counter_packets_equal_the_protos() -> None:
    pytest.importorskip("perfetto")
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    rng = np.random.default_rng(5)
    t = rng.integers(1 << 56, (1 << 63) - 1, size=50, dtype=np.int64)
    t[:2] = [1 << 56, (1 << 63) - 1]
    v = rng.normal(0, 1e6, size=50)
    v[:3] = [0.0, -0.0, np.inf]
    for uuid in ((1 << 21), (1 << 21) + 12345, (1 << 28) - 1):
        expected = Trace()
        for ts, value in zip(t.tolist(), v.tolist()):
            p = expected.packet.add()
            p.timestamp, p.trusted_packet_sequence_id, p.timestamp_clock_id = ts, 1, 1
            p.track_event.type = 4
            p.track_event.track_uuid = uuid
            p.track_event.double_counter_value = value
        assert counter_records(t, v, uuid) == expected.SerializeToString()
