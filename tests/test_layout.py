"""The package's rooms: a lazy face, one frame type, typed stats, the deterministic tick, the
spool layout from C++, the lifecycle registry, and a watchdog child that loads no extension."""

from __future__ import annotations

import dataclasses
import importlib
import os
import queue
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import stroboscope
from stroboscope import _core
from stroboscope._base.lazy import face
from stroboscope.compat.aitune import ParentReceiver
from stroboscope.export import output_format
from stroboscope.formats import spool_layout
from stroboscope.recording.watchdog import DumpJob, Watchdog
from stroboscope.sampling import Frame, SamplerStats, SourceStats

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
        check=True,
    )
    return out.stdout


def test_importing_the_package_loads_no_room() -> None:
    loaded = _run(
        """
        import sys, stroboscope
        print(sorted(m for m in sys.modules if m.startswith("stroboscope")))
        """
    )
    # the face's own leaves, the version and the PEP 562 helper: nothing of another room
    base = ["stroboscope._base", "stroboscope._base.lazy", "stroboscope._base.version"]
    assert loaded.strip() == str(["stroboscope", *base])
    names = _run(
        """
        import sys, stroboscope
        stroboscope.open_dataset
        print("stroboscope.formats.dataset" in sys.modules, "stroboscope.cli" in sys.modules)
        """
    )
    assert names.split() == ["True", "False"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        stroboscope.nope  # noqa: B018


def test_every_public_name_resolves() -> None:
    for name in stroboscope.__all__:
        assert getattr(stroboscope, name) is not None, name
    assert stroboscope.Sampler.__module__ == "stroboscope.recording.sampler"
    assert issubclass(stroboscope.Sampler, stroboscope.sampling.CoreSampler)


FACES = [
    "stroboscope",
    "stroboscope._base",
    "stroboscope.analysis",
    "stroboscope.cli",
    "stroboscope.cluster",
    "stroboscope.compat",
    "stroboscope.compat.aitune",
    "stroboscope.export",
    "stroboscope.formats",
    "stroboscope.recording",
    "stroboscope.sampling",
    "stroboscope.scopes",
    "stroboscope.senders",
]


@pytest.mark.parametrize("name", FACES)
def test_every_face_lists_what_it_exports(name: str) -> None:
    """``dir()`` of a face is its ``__all__``, and each name of it resolves."""
    module = importlib.import_module(name)
    assert dir(module) == sorted(module.__all__)
    for attr in module.__all__:
        assert getattr(module, attr) is not None, f"{name}.{attr}"


def test_the_face_holds_what_a_user_needs() -> None:
    """One Sampler, about 15-20 names; the compat classes and the senders' types live in their
    rooms only, and no other room's class is called Sampler."""
    assert len(stroboscope.__all__) <= 20
    for gone in ("SystemMonitor", "ParentReceiver", "AbstractBackendSender", "Watchdog"):
        assert gone not in stroboscope.__all__
        with pytest.raises(AttributeError, match=f"no attribute '{gone}'"):
            getattr(stroboscope, gone)
    samplers = [f for f in FACES if "Sampler" in importlib.import_module(f).__all__]
    assert samplers == ["stroboscope", "stroboscope.recording"]
    assert stroboscope.recording.Sampler is stroboscope.Sampler


def test_the_lazy_helper_refuses_what_would_hide_an_import() -> None:
    with pytest.raises(ValueError, match=r"relative to the package \(\.module\)"):
        face("stroboscope.x", ["a"], {"a": "stroboscope.cli"})
    with pytest.raises(ValueError, match=r"lazy names \['b'\] are not in __all__"):
        face("stroboscope.x", ["a"], {"b": ".y"})


def test_spool_layout_is_the_one_cpp_defines() -> None:
    core = _core.SPOOL_LAYOUT
    assert core["magic"] == spool_layout.MAGIC
    assert core["version"] == spool_layout.VERSION
    assert core["versions_read"] == spool_layout.VERSIONS_READ
    assert core["block_rows"] == spool_layout.BLOCK_ROWS
    assert core["page"] == spool_layout.PAGE
    assert core["schema_offset"] == spool_layout.SCHEMA_OFFSET
    expected = textwrap.indent(
        "".join(f'("{n}", {o}, "{c}"),\n' for n, o, c in core["fields"]), "    "
    )
    assert tuple(tuple(f) for f in core["fields"]) == spool_layout.FIELDS, (
        "formats/spool_layout.py is out of date with spool.hpp; its FIELDS must read:\n" + expected
    )


def test_a_spool_written_by_cpp_decodes_with_the_layout(tmp_path: Path) -> None:
    path = tmp_path / "run.spool"
    s = stroboscope.Sampler(
        0.002, sources=["memory"], spool=path, capacity=256, segment_seconds=0.25
    )
    assert s.tick_now(7) == 7
    data = path.read_bytes()
    fields = {n: (o, c) for n, o, c in spool_layout.FIELDS}

    def field(name: str) -> Any:
        offset, code = fields[name]
        return struct.unpack_from("<8s" if code == "s" else "<" + code, data, offset)[0]

    ncols = len(s.columns) - 1  # the ring has mono_ns and the metrics, not `time`
    assert field("magic") == b"STROBSPL"
    assert field("version") == spool_layout.VERSION
    assert field("capacity") == 256
    assert field("columns") == ncols
    assert field("interval_ns") == 2_000_000
    assert field("pid") == os.getpid()
    assert field("block_rows") == 64
    # 256 rows = 4 blocks of 64 cells per column + the validity words padded to 8
    assert (
        field("total_size")
        == len(data)
        == field("header_size") + 4 * 8 * (64 * ncols + (ncols + 7) // 8 * 8)
    )
    assert field("head") == field("write_begin") == 7
    schema = data[
        spool_layout.SCHEMA_OFFSET : spool_layout.SCHEMA_OFFSET + int(field("schema_size"))
    ]
    assert schema.decode().splitlines()[0].split("\t")[0] == "mono_ns"
    s.close()


def test_tick_now_is_deterministic_and_keeps_per_source_intervals() -> None:
    s = stroboscope.Sampler(0.001, sources={"memory": 0.004, "process": None})
    assert s.tick_now(8) == 8
    table = s.snapshot().to_arrow()
    assert table.num_rows == 8
    assert table.column("mem.total_bytes").null_count == 6  # read on ticks 0 and 4
    assert table.column("proc.rss_bytes").null_count == 0
    assert s.stats().ticks_taken == 0  # tick_now is not the thread's schedule
    assert s.stats().rows_written == 8
    with pytest.raises(
        ValueError, match=r"^n must be an int \[1, 1073741824\] \(ticks\), got int 0$"
    ):
        s.tick_now(0)
    s.start()
    try:
        with pytest.raises(RuntimeError, match="needs a stopped Sampler"):
            s.tick_now()
    finally:
        s.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.tick_now()


def test_stats_are_typed_and_frozen() -> None:
    s = stroboscope.Sampler(0.001, sources={"memory": None, "process": None})
    s.tick_now(3)
    st = s.stats()
    assert isinstance(st, SamplerStats)
    assert all(isinstance(src, SourceStats) for src in st.sources)
    assert st.source("memory").reads == 3 and st.rows_written == 3
    assert st.process_exited is False and st.source("process").process_exited is False
    assert st.segments_written is None  # no spool
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.rows_written = 0  # type: ignore[misc]
    with pytest.raises(KeyError, match="no source 'gpu'"):
        st.source("gpu")
    assert st.as_dict()["sources"][0]["name"] == "memory"
    s.close()


def test_process_exited_comes_from_the_core() -> None:
    # The child lives until its stdin closes, so it is alive for the first tick however slowly
    # the sampler is built on a loaded machine.
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    s = stroboscope.Sampler(0.001, pid=child.pid, sources=["process"])
    s.tick_now(1)
    assert s.stats().process_exited is False
    assert child.stdin is not None
    child.stdin.close()
    child.wait()
    s.tick_now(1)
    st = s.stats()
    assert st.process_exited is True and st.source("process").process_exited is True
    s.close()


def test_schema_is_arrow_with_units_and_equals_the_frames() -> None:
    s = stroboscope.Sampler(0.001, sources=["memory"])
    s.tick_now(2)
    assert isinstance(s.schema, pa.Schema)
    assert s.schema.field("mem.total_bytes").metadata[b"unit"] == b"bytes"
    assert s.snapshot().schema == s.schema
    assert [c.name for c in s.columns] == s.schema.names
    s.close()


def test_one_frame_type_for_live_and_recovered_rows(tmp_path: Path) -> None:
    path = tmp_path / "r.spool"
    s = stroboscope.Sampler(
        0.002, sources={"memory": None}, spool=path, capacity=256, segment_seconds=0.25
    )
    s.tick_now(5)
    live = s.snapshot()
    back = stroboscope.recover(path)
    assert type(live) is type(back) is Frame
    assert back.rows_lost == 0 and len(back) == len(live) == 5
    for frame in (live, back):
        batch = pa.record_batch(frame)  # __arrow_c_array__
        assert batch.num_rows == 5
        assert pa.table(frame).column("mono_ns").equals(live.to_arrow().column("mono_ns"))
        arr = frame.to_numpy()
        assert isinstance(arr, np.ndarray) and arr.dtype.names == tuple(frame.column_names)
        assert arr["time"].dtype == np.dtype("datetime64[ns]")
        assert arr["mem.total_bytes"].dtype == np.int64  # no nulls: the integer type stays
        with pytest.raises(AttributeError, match="cannot be changed"):
            frame._rows = pa.table({})
    s.close()


def test_one_output_format_rule() -> None:
    assert output_format("a.PARQUET") == output_format("b.pq") == "parquet"
    assert output_format("c.csv") == "csv"
    assert output_format("d.txt", default="csv") == "csv"
    with pytest.raises(ValueError, match=r"must end in \.parquet, \.pq or \.csv"):
        output_format("d.txt")


def test_receiver_snapshot_to_pq_writes_parquet(tmp_path: Path) -> None:
    q: queue.Queue[dict[str, float]] = queue.Queue()
    r = ParentReceiver(q, crash_safe=False)
    r.start()
    q.put({"a": 1.0})
    q.put({"a": 2.0})
    deadline = time.monotonic() + 10
    while r.rows_received < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    r.snapshot(tmp_path / "m.pq")
    r.stop()
    assert pq.read_table(tmp_path / "m.pq").column("a").to_pylist() == [1.0, 2.0]


def test_network_totals_use_the_sources_parser() -> None:
    def python_totals(include_lo: bool) -> tuple[int, int]:
        sent = recv = 0
        for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
            name, _, rest = line.partition(":")
            f = rest.split()
            if name.strip() == "lo" and not include_lo:
                continue
            recv += int(f[0])
            sent += int(f[8])
        return sent, recv

    for include_lo in (False, True):
        before = python_totals(include_lo)
        got = _core.net_dev_totals("/proc", include_lo)
        after = python_totals(include_lo)
        assert before[0] <= got[0] <= after[0] and before[1] <= got[1] <= after[1]
    with pytest.raises(ValueError, match="cannot read /nonexistent/net/dev"):
        _core.net_dev_totals("/nonexistent", False)


def test_lifecycle_registry_runs_exit_hooks_newest_first() -> None:
    out = _run(
        """
        from stroboscope._base import lifecycle as _lifecycle

        class Hook:
            def __init__(self, name):
                self.name = name
                _lifecycle.register(self)
            def _at_exit(self):
                print("exit", self.name, flush=True)

        a, b, c = Hook("a"), Hook("b"), Hook("c")
        _lifecycle.unregister(b)
        """
    )
    assert out.split("\n")[:2] == ["exit c", "exit a"]


def test_the_scope_switchboard_forgets_its_samplers_in_a_forked_child() -> None:
    # One registry for fork hooks: the switchboard's goes through _base.lifecycle too. A thread
    # of the parent holds its lock at the fork; the child still attaches (a new lock).
    out = _run(
        """
        import os, threading, time, types
        from stroboscope.scopes import _switchboard as _events
        from stroboscope.sampling._scope_log import Recorder, _running
        from stroboscope._base import lifecycle as _lifecycle

        print(_events in _lifecycle.live(types.ModuleType), flush=True)
        _running.add(Recorder("parent's sampler", None))  # a sampler starts: the switchboard hears
        held, done = threading.Event(), threading.Event()

        def hold():
            with _events._lock:
                held.set()
                done.wait()

        t = threading.Thread(target=hold)
        t.start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            before = (_events.state.recorders, _events.state.recording)
            _running.add(Recorder("child's sampler", None))
            print(before, _events.state.recorders, flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        done.set()
        t.join()
        print(_events.state.recorders, flush=True)
        """
    )
    assert out.split("\n")[:3] == [
        "True",
        '((), False) ("child\'s sampler",)',
        '("parent\'s sampler",)',
    ]


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_idle_watchdog_child_loads_neither_arrow_nor_the_extension(tmp_path: Path) -> None:
    source = tmp_path / "j.jsonl"
    source.write_text("")
    w = Watchdog([DumpJob("journal", source, dump=tmp_path / "d.csv")]).start()
    try:
        assert w.pid is not None
        maps = _maps(w.pid)
        assert "libarrow" not in maps and "_core" not in maps and "numpy" not in maps
        cmdline = Path(f"/proc/{w.pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[-4].endswith(b"_watchdog_child.py")  # a script, not the package
    finally:
        w.stop()


def test_recovering_and_dumping_a_spool_loads_no_extension(tmp_path: Path) -> None:
    """The crash path outlives the process it guards: a fresh process that reads a spool (with
    its segments) and dumps it as the watchdog child does loads the formats and the stdlib
    leaves only, never ``_core`` nor the sampling facade (which imports it)."""
    spool = tmp_path / "run.spool"
    s = stroboscope.Sampler(0.01, sources=["memory"], spool=spool, capacity=256, segment_seconds=1)
    try:
        s.tick_now(200)
        assert s._segments is not None
        s._segments.flush()  # a segment of 200 rows, then 100 rows only in the ring
        s.tick_now(100)
        expected = stroboscope.recover(spool).to_arrow()
        out = _run(
            f"""
            import sys
            from stroboscope.formats.spool_read import recover_table
            from stroboscope.recording import _watchdog_child

            table, lost = recover_table({str(spool)!r})
            job = {{"kind": "spool", "source": {str(spool)!r}, "dump": {str(tmp_path / "d.csv")!r},
                   "dump_dir": {str(tmp_path)!r}, "format": "csv"}}
            print(_watchdog_child.run_job(job, 4242))
            print(table.num_rows, lost)
            print(" ".join(m for m in sys.modules if m.startswith("stroboscope")))
            """
        )
    finally:
        s.close()
    line, rows, loaded = out.strip().splitlines()
    child = {"stroboscope", "stroboscope.recording", "stroboscope.recording._watchdog_child"}
    rooms = {m.split(".")[1] for m in set(loaded.split()) - child}
    assert rooms == {"_base", "formats"}  # never _core, sampling or another room
    assert expected.num_rows == 300 and rows.split() == ["300", "0"]
    assert "wrote 300 rows of spool" in line
    dumped = pacsv.read_csv(tmp_path / "d.csv")
    assert dumped.column("mono_ns").to_pylist() == expected.column("mono_ns").to_pylist()


def test_the_public_recover_loads_no_extension(tmp_path: Path) -> None:
    """``stroboscope.recover()`` as a user calls it after a crash: a fresh process reads the
    spool into a Frame, converts and writes it, and never loads ``_core``."""
    spool = tmp_path / "run.spool"
    s = stroboscope.Sampler(0.01, sources=["memory"], spool=spool, capacity=4096)
    try:
        s.tick_now(150)
        out = _run(
            f"""
            import sys, stroboscope
            frame = stroboscope.recover({str(spool)!r})
            frame.write_parquet({str(tmp_path / "r.parquet")!r})
            print(frame.to_arrow().num_rows, "stroboscope._core" in sys.modules)
            """
        )
    finally:
        s.close()
    assert out.split() == ["150", "False"]
    assert pq.read_table(tmp_path / "r.parquet").num_rows == 150


def test_to_arrow_does_not_import_pandas() -> None:
    """pa.table() looks for a pandas DataFrame first and so imports pandas (~45 MB RSS): the
    frame's conversions must not."""
    out = _run(
        """
        import sys, stroboscope
        s = stroboscope.Sampler(0.001, sources=["memory"])
        s.tick_now(3)
        f = s.snapshot()
        print(f.to_arrow().num_rows, f.schema.names[0], "pandas" in sys.modules)
        s.close()
        """
    )
    assert out.split() == ["3", "time", "False"]
