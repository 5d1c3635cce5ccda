"""Flame graph formats (export/flame_formats.py), each read back by an independent reader: the
folded lines parsed here, speedscope's JSON checked against the required fields and types of its
published schema (file-format-schema.json) and walked as speedscope's importer does, and pprof's
profile.proto decoded by the protobuf runtime from a descriptor of the message written here from
google/pprof's proto/profile.proto (field numbers and types)."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from stroboscope.analysis import StackWeights, stack_weights
from stroboscope.export import FLAME_FORMATS, flame_bytes, flame_graph
from stroboscope.export.flame_formats import collapsed, integer_weights, pprof, speedscope

FRAMES = pa.table(
    {
        "stack_id": [0, 0, 1, 1, 1, 2, 3],
        "depth": [0, 1, 0, 1, 2, 0, 0],
        "function": ["main", "a", "main", "b", "b", "odd;name\n", "idle"],
        "file": ["m.py", "m.py", "m.py", "m.py", "m.py", "w.py", "w.py"],
        "line": [1, 10, 1, 20, 20, 5, 7],
    }
)
SAMPLES = pa.table(
    {
        "mono_ns": [10, 20, 30, 40, 50],
        "pid": [1] * 5,
        "tid": [1, 1, 1, 2, 3],
        "stack_id": [0, 1, 1, 2, 3],
        "cpu_ns": [600, 250, 750, 400, 0],  # stack 0: 600, 1: 1000, 2: 400, 3 (idle): 0
        "thread": ["t"] * 5,
    }
)
EXPECTED = {  # folded stacks root first, by the CPU weights above; idle (0) left out
    "main (m.py:1);a (m.py:10)": 600,
    "main (m.py:1);b (m.py:20);b (m.py:20)": 1000,
    "odd:name\\n (w.py:5)": 400,
}


def weights() -> StackWeights:
    return stack_weights(SAMPLES, FRAMES, "cpu")


def parse_folded(text: str) -> dict[str, int]:
    """flamegraph.pl's reading: the count after the last space, frames split on ';'."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        assert stack and count.isdigit(), line
        out[stack] = out.get(stack, 0) + int(count)
    return out


def test_collapsed_is_one_folded_line_per_stack_root_first() -> None:
    text = collapsed(weights())
    assert parse_folded(text) == EXPECTED
    assert text.endswith("\n") and len(text.splitlines()) == 3


def test_fractional_weights_become_integers_of_a_smaller_unit() -> None:
    """0.03 + 0.05 J in all: scaled to nJ (the first power of 1000 that makes the total at
    least a million), each stack rounded on its own."""
    w = StackWeights(
        pa.table(
            {
                "stack_id": pa.array([0, 1], pa.int32()),
                "samples": pa.array([3, 4], pa.int64()),
                "weight": [0.03, 0.05000000049],
            }
        ),
        FRAMES,
        "gpu.0.power_w",
        "J",
        "rule",
        0.08000000049,
    )
    ints, unit = integer_weights(w)
    assert ints.tolist() == [30_000_000, 50_000_000] and unit == "nJ"
    pct = StackWeights(w.stacks, FRAMES, "cpu.util_pct", "%·s", "rule", 0.08)
    assert integer_weights(pct)[1] == "1e-9 %·s"
    whole = StackWeights(
        w.stacks.set_column(2, "weight", pa.array([3.0, 5.0])), FRAMES, "d", "bytes", "r", 8.0
    )
    assert integer_weights(whole)[0].tolist() == [3, 5] and integer_weights(whole)[1] == "bytes"


def check_speedscope_schema(doc: dict[str, Any]) -> None:
    """The required fields and types of speedscope's file-format-schema.json (draft-06) for a
    file of sampled profiles."""
    assert {"$schema", "profiles", "shared"} <= set(doc)
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    assert isinstance(doc.get("name", ""), str) and isinstance(doc.get("exporter", ""), str)
    assert isinstance(doc.get("activeProfileIndex", 0), (int, float))
    frames = doc["shared"]["frames"]
    for frame in frames:
        assert isinstance(frame["name"], str)
        assert isinstance(frame.get("file", ""), str)
        assert isinstance(frame.get("line", 0), (int, float))
    for profile in doc["profiles"]:
        required = {"endValue", "name", "samples", "startValue", "type", "unit", "weights"}
        assert required <= set(profile)
        assert profile["type"] == "sampled"
        assert profile["unit"] in {
            "bytes",
            "microseconds",
            "milliseconds",
            "nanoseconds",
            "none",
            "seconds",
        }
        assert isinstance(profile["name"], str)
        assert len(profile["samples"]) == len(profile["weights"])  # the importer's check
        for stack in profile["samples"]:
            assert all(isinstance(i, int) and 0 <= i < len(frames) for i in stack)
        assert profile["endValue"] >= profile["startValue"]


def test_speedscope_follows_the_schema_and_holds_the_same_stacks() -> None:
    doc = json.loads(flame_bytes(weights(), "speedscope"))
    check_speedscope_schema(doc)
    (profile,) = doc["profiles"]
    assert profile["unit"] == "nanoseconds"
    assert "CPU time since the thread's previous sample" in profile["name"]
    frames = doc["shared"]["frames"]
    got: dict[str, int] = {}
    for stack, weight in zip(profile["samples"], profile["weights"]):
        names = [f"{frames[i]['name']} ({frames[i]['file']}:{frames[i]['line']})" for i in stack]
        got[";".join(names)] = weight
    assert got == {
        "main (m.py:1);a (m.py:10)": 600,
        "main (m.py:1);b (m.py:20);b (m.py:20)": 1000,
        "odd;name\n (w.py:5)": 400,  # JSON keeps the name as it is
    }
    assert profile["endValue"] == 2000
    assert speedscope(weights(), name="run 7")["name"] == "run 7"


def _profile_class() -> Any:
    """The pprof ``Profile`` message class, from a descriptor made here (google/pprof's
    proto/profile.proto: the fields this test reads, by number and type)."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="test_profile.proto", package="perftools.profiles", syntax="proto3"
    )
    t = descriptor_pb2.FieldDescriptorProto
    rep, opt = t.LABEL_REPEATED, t.LABEL_OPTIONAL

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        m = fdp.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = f".perftools.profiles.{type_name}"

    i64, u64, msg, string = t.TYPE_INT64, t.TYPE_UINT64, t.TYPE_MESSAGE, t.TYPE_STRING
    message(
        "Profile",
        ("sample_type", 1, msg, rep, "ValueType"),
        ("sample", 2, msg, rep, "Sample"),
        ("location", 4, msg, rep, "Location"),
        ("function", 5, msg, rep, "Function"),
        ("string_table", 6, string, rep, ""),
        ("comment", 13, i64, rep, ""),
        ("default_sample_type", 14, i64, opt, ""),
    )
    message("ValueType", ("type", 1, i64, opt, ""), ("unit", 2, i64, opt, ""))
    message("Sample", ("location_id", 1, u64, rep, ""), ("value", 2, i64, rep, ""))
    message(
        "Location",
        ("id", 1, u64, opt, ""),
        ("mapping_id", 2, u64, opt, ""),
        ("line", 4, msg, rep, "Line"),
    )
    message("Line", ("function_id", 1, u64, opt, ""), ("line", 2, i64, opt, ""))
    message(
        "Function",
        ("id", 1, u64, opt, ""),
        ("name", 2, i64, opt, ""),
        ("system_name", 3, i64, opt, ""),
        ("filename", 4, i64, opt, ""),
        ("start_line", 5, i64, opt, ""),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("perftools.profiles.Profile"))


def test_pprof_decodes_with_protobuf_into_the_same_stacks() -> None:
    data = pprof(weights())
    assert data[:2] == b"\x1f\x8b"  # gzipped, as pprof's files are
    profile = _profile_class().FromString(gzip.decompress(data))
    st = list(profile.string_table)
    assert st[0] == ""
    types = [(st[v.type], st[v.unit]) for v in profile.sample_type]
    assert types == [("samples", "count"), ("cpu", "nanoseconds")]
    assert st[profile.default_sample_type] == "cpu"
    assert "CPU time since the thread's previous sample" in st[profile.comment[0]]
    functions = {f.id: f for f in profile.function}
    locations = {loc.id: loc for loc in profile.location}
    got: dict[str, tuple[int, int]] = {}
    for sample in profile.sample:
        names = []
        for loc_id in reversed(sample.location_id):  # the leaf is location_id[0]
            (line,) = locations[loc_id].line
            f = functions[line.function_id]
            assert line.line == f.start_line
            names.append(f"{st[f.name]} ({st[f.filename]}:{f.start_line})")
        got[";".join(names)] = (sample.value[0], sample.value[1])
    assert got == {
        "main (m.py:1);a (m.py:10)": (1, 600),
        "main (m.py:1);b (m.py:20);b (m.py:20)": (2, 1000),
        "odd;name\n (w.py:5)": (1, 400),
    }


def test_pprof_names_a_column_weight_and_its_unit() -> None:
    w = StackWeights(
        pa.table(
            {
                "stack_id": pa.array([0], pa.int32()),
                "samples": pa.array([2], pa.int64()),
                "weight": [0.5],
            }
        ),
        FRAMES,
        "gpu.0.power_w",
        "J",
        "J drawn while it ran",
        0.5,
    )
    profile = _profile_class().FromString(gzip.decompress(pprof(w)))
    st = list(profile.string_table)
    assert [(st[v.type], st[v.unit]) for v in profile.sample_type][1] == ("gpu.0.power_w", "nJ")
    assert [list(s.value) for s in profile.sample] == [
        [2, 500_000_000]
    ]  # 0.5 J: under a million uJ


def test_flame_graph_takes_two_tables_and_checks_the_format() -> None:
    assert parse_folded(flame_graph((SAMPLES, FRAMES), "cpu").decode()) == EXPECTED
    assert set(FLAME_FORMATS) == {"collapsed", "speedscope", "pprof"}
    with pytest.raises(ValueError, match=r"format must be one of collapsed, speedscope, pprof"):
        flame_graph((SAMPLES, FRAMES), "cpu", "svg")
    with pytest.raises(TypeError, match=r"source must be a recording's path"):
        flame_graph(42, "cpu")


def test_flame_graph_takes_anything_with_stacks_and_snapshot() -> None:
    """A running Sampler's face: stacks() gives the tables, snapshot().to_arrow() the rows."""
    rows = pa.table(
        {"mono_ns": pa.array([0, 30, 60], pa.int64()), "x": pa.array([2.0, 4.0, 6.0])},
        schema=pa.schema(
            [
                pa.field("mono_ns", pa.int64()),
                pa.field("x", pa.float64(), metadata={"unit": "W", "kind": "gauge"}),
            ]
        ),
    )

    class Snapshot:
        def to_arrow(self) -> pa.Table:
            return rows

    class Running:
        def stacks(self) -> tuple[pa.Table, pa.Table]:
            return SAMPLES, FRAMES

        def snapshot(self) -> Snapshot:
            return Snapshot()

    assert parse_folded(flame_graph(Running(), "cpu").decode()) == EXPECTED
    # samples at 10 and 20 ns fall in row 0, those at 30, 40 and 50 ns in row 1: row 1's cover
    # 20 to 50 ns, the power linear from 10/3 to 16/3 W: 130 nJ, shared by CPU 750 : 400 : 0
    # between stacks 1, 2 and 3; in pJ (a total under a million nJ: the smallest unit, 1e-12 J)
    got = parse_folded(flame_graph(Running(), "x").decode())
    assert got == {
        "main (m.py:1);b (m.py:20);b (m.py:20)": round(130e-9 * 750 / 1150 * 1e12),
        "odd:name\\n (w.py:5)": round(130e-9 * 400 / 1150 * 1e12),
    }
