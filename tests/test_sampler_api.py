"""The Sampler's arguments, lifecycle, schema and self-measurement."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import stroboscope
from stroboscope import Sampler, sampling

# Bad arguments (interval, capacity, sources, pid, disk_paths, ...) are rows of the one table
# of bad inputs in test_bad_inputs.py.


def wait_rows(s: sampling.CoreSampler, n: int, timeout: float = 30.0) -> int:
    """Wait until the running sampler has written ``n`` rows (its own count, not a sleep)."""
    deadline = time.monotonic() + timeout
    while (written := s.stats().rows_written) < n:
        assert time.monotonic() < deadline, f"{written} of {n} rows after {timeout} s"
        time.sleep(0.002)
    return written


def test_capacity_rounds_up_to_power_of_two() -> None:
    s = Sampler(0.01, sources=["memory"], capacity=1000)
    assert s.stats().capacity == 1024


def test_source_interval_is_a_multiple_of_the_base() -> None:
    s = Sampler(0.01, sources={"memory": 0.05, "cpu": None})
    every = {src.name: src.every for src in s.stats().sources}
    assert every == {"memory": 5, "cpu": 1}


def test_default_schema_has_units_and_seed_columns() -> None:
    s = Sampler(0.01)
    names = [c.name for c in s.columns]
    assert names[:2] == ["time", "mono_ns"]
    for required in [
        "cpu.util_pct",
        "mem.util_pct",
        "mem.available_bytes",
        "net.sent_bytes",
        "net.recv_bytes",
        "disk.used_pct",
        "proc.rss_bytes",
        "proc.mem_pct",
        "proc.threads",
        "proc.cpu_pct",
        "net.sent_bytes_per_s",
        "disk.read_bytes_per_s",
    ]:
        assert required in names
    assert all(c.unit for c in s.columns)
    assert "cpu.0.util_pct" not in names  # per-core is opt-in
    sources = {i["name"]: i for i in stroboscope.available_sources()}
    assert sources["cpu"]["default"] and not sources["cpu_cores"]["default"]


def test_lifecycle_is_forgiving() -> None:
    s = Sampler(0.002, sources=["memory"])
    s.stop()  # stop without start
    s.start()
    s.start()  # start twice
    assert s.running
    wait_rows(s, 6)
    s.stop()
    s.stop()
    n = len(s.snapshot())
    assert n == s.stats().rows_written >= 6
    s.close()
    s.close()  # close twice
    assert len(s.snapshot()) == n  # nothing recorded is lost by closing
    with pytest.raises(RuntimeError, match="closed"):
        s.start()


def test_context_manager_stops() -> None:
    with Sampler(0.002, sources=["memory"]) as s:
        wait_rows(s, 4)
        assert s.running
    assert not s.running and s.closed
    assert len(s.snapshot()) == s.stats().rows_written >= 4


def test_stats_report_ring_memory_and_counts() -> None:
    s = Sampler(0.001, sources={"memory": None, "cpu": None}, capacity=4096)
    st = s.stats()
    cols = st.num_columns + 1  # + mono_ns
    # Blocks of 64 rows: 8-byte cells, and a cache line of validity words per 8 columns.
    assert st.ring_bytes == 4096 * cols * 8 + (4096 // 64) * ((cols + 7) // 8) * 64
    with s:
        wait_rows(s, 20)
    st = s.stats()
    assert st.ticks_taken == st.rows_written == len(s.snapshot())
    assert st.ticks_scheduled == st.ticks_taken + st.ticks_missed
    assert st.thread_cpu_ns > 0
    assert st.lateness_p50_ns <= st.lateness_p99_ns <= st.lateness_max_ns
    assert [src.name for src in st.sources] == ["memory", "cpu"]
    assert all(src.reads == st.ticks_taken for src in st.sources)


def test_snapshot_keeps_rows_drain_moves_on() -> None:
    s = Sampler(0.001, sources=["memory"], capacity=1 << 12)
    with s:
        wait_rows(s, 10)
        a = s.drain()
        wait_rows(s, len(a) + 10)
    b = s.drain()
    c = s.drain()
    snap = s.snapshot()
    assert len(c) == 0
    assert len(a) + len(b) == len(snap)
    mono = a.to_numpy()["mono_ns"].tolist() + b.to_numpy()["mono_ns"].tolist()
    assert mono == snap.to_numpy()["mono_ns"].tolist()


def test_overwritten_rows_are_counted_not_silent() -> None:
    s = Sampler(0.0005, sources=["memory"], capacity=16)
    with s:
        wait_rows(s, 40)
    f = s.drain()
    st = s.stats()
    assert len(f) == 16
    assert f.rows_lost == st.rows_written - 16 == st.rows_lost
    assert st.rows_overwritten == st.rows_written - 16


def test_fork_child_has_no_half_alive_sampler() -> None:
    s = Sampler(0.001, sources=["memory"]).start()
    wait_rows(s, 2)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the inherited sampler is stopped; it and a new one can run
        code = 1
        try:
            ok = not s.running
            s.start()
            wait_rows(s, s.stats().rows_written + 1)
            s.stop()
            t = Sampler(0.001, sources=["memory"]).start()
            wait_rows(t, 4)
            t.close()
            ok = ok and len(t.snapshot()) >= 4 and len(s.snapshot()) > 0
            code = 0 if ok else 3
        finally:
            os.write(w, bytes([code]))
            os._exit(code)
    os.close(w)
    result = os.read(r, 1)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert result == b"\x00"
    assert os.WEXITSTATUS(status) == 0
    assert s.running  # the parent's sampler kept running through the fork...
    wait_rows(s, s.stats().rows_written + 5)  # ...and still takes ticks
    s.close()


def test_running_sampler_is_stopped_at_interpreter_exit(tmp_path: os.PathLike[str]) -> None:
    import subprocess
    import sys

    code = (
        "import stroboscope, time\n"
        "s = stroboscope.Sampler(0.001, sources=['memory']).start()\n"
        "time.sleep(0.05)\n"
        "print('ok', flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_ring_file_directory_follows_the_spool_rule(tmp_path: Path) -> None:
    # One rule for the directory of every file the sampler creates: a directory others can
    # write is refused unless sticky (then the file is created O_EXCL | O_NOFOLLOW).
    from stroboscope import sampling

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ValueError, match=r"^ring_file: directory .* writable by others"):
        sampling.CoreSampler(0.01, sources=["memory"], ring_file=str(shared / "ring"))
    assert list(shared.iterdir()) == []
    shared.chmod(0o1777)
    s = sampling.CoreSampler(0.01, sources=["memory"], ring_file=str(shared / "ring"))
    s.close()
    assert (shared / "ring").exists()
    # An existing file is never reused.
    with pytest.raises(ValueError, match="already exists"):
        sampling.CoreSampler(0.01, sources=["memory"], ring_file=str(shared / "ring"))
