"""The watchdog run from this process and its dump writer: a clean, detached child process,
DumpJob's checks, spools through recover, journals a block at a time, default names that never
replace a file, and a dump on disk before it gets its name."""

from __future__ import annotations

import os
import signal
import stat
import sys
import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.recording import _watchdog_child
from stroboscope.recording.watchdog import DumpJob, Watchdog, _resolve


def test_watchdog_process_is_clean_and_detached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STROBOSCOPE_TEST_SECRET", "1")
    (tmp_path / "j.jsonl").write_bytes(b'{"id":0}\n')
    watchdog = Watchdog([DumpJob("journal", "j.jsonl")])
    assert watchdog.pid is None and not watchdog.running
    keep_open = open(tmp_path / "open-in-parent", "wb")  # noqa: SIM115 - must not leak
    try:
        watchdog.start()
        pid = watchdog.pid
        assert pid is not None and watchdog.running
        with pytest.raises(RuntimeError, match="already started"):
            watchdog.start()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        names = {e.split(b"=", 1)[0].decode() for e in environ if e}
        temp = {"TMPDIR", "TEMP", "TMP"}
        assert names <= {"PATH", "PYTHONPATH", "LD_LIBRARY_PATH", *temp}, names
        assert "PYTHONPATH" in names
        # the parent's temporary directory (where its private events directory is)
        for name in temp & set(os.environ):
            assert f"{name}={os.environ[name]}".encode() in environ
        fds = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        extra = {fd: target for fd, target in fds.items() if fd > 2}
        assert all(t.startswith("pipe:") or "pidfd" in t for t in extra.values()), extra
        assert len(extra) <= 2, extra  # the control pipe and the pidfd; the ready pipe is closed
        assert fds[0] == "/dev/null"
        assert os.getsid(pid) == pid != os.getsid(0)  # its own session
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            os.kill(pid, sig)  # ignored: a signal delivered before the stop message would kill it
    finally:
        keep_open.close()
        watchdog.stop()
    proc = watchdog._proc
    # Exited on the stop message, not a signal (stop() waits a while for it; a loaded machine
    # may take longer: wait for the exit itself).
    assert proc is not None and proc.wait(60) == 0
    assert not watchdog.running
    watchdog.stop()  # harmless
    assert not list(tmp_path.glob("stroboscope-dump-*"))


def test_dump_job_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind"):
        DumpJob("core", "x")
    with pytest.raises(ValueError, match="format"):
        DumpJob("journal", "x", format="xlsx")
    with pytest.raises(ValueError, match="source"):
        DumpJob("journal", "")
    with pytest.raises(ValueError, match="jobs is empty"):
        Watchdog([])
    with pytest.raises(TypeError, match="DumpJob"):
        Watchdog([{"kind": "journal"}])  # type: ignore[list-item]
    missing = Watchdog([DumpJob("journal", "x", tmp_path / "no" / "dump.csv")])
    with pytest.raises(ValueError, match="not an existing directory"):
        missing.start()
    assert missing.pid is None


def test_spool_job_goes_through_recover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The "spool" kind calls stroboscope.formats.spool_read.recover_parts and writes the parts it
    returns with the same code as journals (a stand-in module replaces the real one here)."""
    table = pa.table(
        {
            "mono_ns": pa.array([1, 2], pa.int64()),
            "cpu.util_pct": pa.array([12.5, None], pa.float64()),
        }
    )
    calls: list[str] = []

    def recover_parts(path: str) -> types.SimpleNamespace:
        calls.append(path)
        if path.endswith("bad.spool"):
            raise ValueError(f"{path}: wrong magic")
        return types.SimpleNamespace(schema=table.schema, parts=iter([table]), rows=len(table))

    fake = types.ModuleType("stroboscope.formats.spool_read")
    fake.recover_parts = recover_parts  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "stroboscope.formats.spool_read", fake)
    monkeypatch.chdir(tmp_path)
    job = _resolve(DumpJob("spool", "run.spool", "out.parquet", "parquet"))
    line = _watchdog_child.run_job(job, 4242)
    assert calls == [str(tmp_path / "run.spool")]
    assert pq.read_table(tmp_path / "out.parquet").equals(table)
    assert stat.S_IMODE((tmp_path / "out.parquet").stat().st_mode) == 0o600
    assert "parent 4242 died; wrote 2 rows of spool" in line
    bad = _resolve(DumpJob("spool", "bad.spool", "bad.csv"))
    with pytest.raises(ValueError, match="wrong magic"):
        _watchdog_child.run_job(bad, 4242)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.parquet"]  # no partial file


def test_default_names_never_replace(tmp_path: Path) -> None:
    existing = tmp_path / "stroboscope-dump-20240101-000000-1.csv"
    existing.write_bytes(b"keep")
    for expected in ("-1.csv", "-2.csv"):
        tmp = tmp_path / "t.tmp"
        tmp.write_bytes(b"new")
        got = _watchdog_child._publish_unique(str(tmp), str(existing))
        assert got == str(existing)[: -len(".csv")] + expected
        assert Path(got).read_bytes() == b"new" and not tmp.exists()
    assert existing.read_bytes() == b"keep"
    assert _watchdog_child.default_dump_name("parquet", 77, 0.0).endswith("-77.parquet")


def test_journal_job_reads_a_block_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash dump of a journal goes through the block reader (issue 9, item 14): with blocks
    of a few rows, the dump still holds the union of the columns, a column that turns from
    integers to floats as float64, and every row once; damaged lines are counted in the log."""
    from stroboscope.compat.aitune._journal import encode_rows
    from stroboscope.formats import journal_read

    rows: list[dict[str, Any]] = [{"id": i, "v": i if i < 50 else i + 0.5} for i in range(100)]
    rows[70]["late"] = "x"
    data = encode_rows(rows)[0]
    journal = tmp_path / "journal.jsonl"
    cut = data.index(b"\n", 200) + 1
    journal.write_bytes(data[:cut] + b"not json\n" + data[cut:])  # a damaged line, between rows
    monkeypatch.setattr(journal_read, "BLOCK_BYTES", 64)
    job = _resolve(DumpJob("journal", journal, tmp_path / "dump.parquet", "parquet"))
    line = _watchdog_child.run_job(job, 4242)
    table = pq.read_table(tmp_path / "dump.parquet")
    assert table.column_names == ["id", "v", "late"]
    assert table.column("id").to_pylist() == list(range(100))
    assert table.schema.field("v").type == pa.float64()
    assert table.column("v").to_pylist() == [float(r["v"]) for r in rows]
    assert table.column("late").to_pylist() == [("x" if i == 70 else None) for i in range(100)]
    assert "wrote 100 rows of journal" in line and "(1 damaged line(s) skipped)" in line


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_dump_is_on_disk_before_it_gets_its_name(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A crash of the machine right after the rename must not leave an empty or partial dump.
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    def replace(a: str, b: str) -> None:
        events.append("replace")
        real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    table = pa.table({"x": [1, 2, 3]})
    out = tmp_path / f"dump.{fmt}"
    job = {"format": fmt, "dump": str(out), "dump_dir": str(tmp_path)}
    assert _watchdog_child.write_dump(table, job, 4242) == str(out)
    assert events == ["fsync", "replace"]


def test_a_csv_dump_of_a_spool_has_its_provenance_sidecar(tmp_path: Path) -> None:
    """The watchdog writes its dumps with the writers every output uses: a CSV dump of a spool
    gets the provenance sidecar ``FILE.meta.json`` (the same JSON as the Parquet dump's schema
    metadata), and a CSV dump without provenance (a journal) removes a stale one."""
    from stroboscope import Sampler
    from stroboscope.formats.provenance import PROVENANCE_KEY, loads
    from stroboscope.formats.writers import sidecar_path

    spool = tmp_path / "run.spool"
    s = Sampler(0.01, sources=["memory"], spool=spool, capacity=256, segment_seconds=1)
    try:
        s.tick_now(5)
        for fmt in ("csv", "parquet"):
            job = _resolve(DumpJob("spool", spool, tmp_path / f"dump.{fmt}", fmt))
            assert "wrote 5 rows of spool" in _watchdog_child.run_job(job, 4242)
    finally:
        s.close()
    side = Path(sidecar_path(tmp_path / "dump.csv"))
    stored = pq.read_schema(tmp_path / "dump.parquet").metadata[PROVENANCE_KEY.encode()]
    assert loads(side.read_bytes(), str(side)) == loads(stored, PROVENANCE_KEY)
    assert loads(stored, PROVENANCE_KEY)["recorded_by"] == "spool recovery"
    assert stat.S_IMODE(side.stat().st_mode) == 0o600
    # A journal has no provenance: its CSV dump leaves no sidecar of an earlier run beside it.
    journal = tmp_path / "j.jsonl"
    journal.write_bytes(b'{"id":0}\n')
    _watchdog_child.run_job(_resolve(DumpJob("journal", journal, tmp_path / "dump.csv")), 4242)
    assert not side.exists()


@pytest.mark.parametrize("planted", ["symlink", "fifo", "directory"])
def test_a_dump_path_that_is_no_regular_file_is_refused_and_the_rows_kept(
    tmp_path: Path, planted: str
) -> None:
    """A symlink, a FIFO or a directory at a job's dump path is never replaced nor written
    through (the package's rule for every file it writes): the dump fails naming the path, the
    source (which still holds the rows, even with ``remove_source``) is kept, and the log line
    says where the rows are."""
    journal = tmp_path / "j.jsonl"
    journal.write_bytes(b'{"id":0}\n{"id":1}\n')
    target = tmp_path / "theirs.csv"
    target.write_bytes(b"theirs")
    dump = tmp_path / "dump.csv"
    if planted == "symlink":
        dump.symlink_to(target)
    elif planted == "fifo":
        os.mkfifo(dump)
    job = _resolve(DumpJob("journal", journal, dump, "csv", remove_source=True))
    if planted == "directory":  # made after the job was resolved (else it names a folder)
        dump.mkdir()
    with pytest.raises(OSError, match=r"dump\.csv") as info:
        _watchdog_child.run_job(job, 4242)
    assert target.read_bytes() == b"theirs"
    assert {"symlink": dump.is_symlink, "fifo": dump.is_fifo, "directory": dump.is_dir}[planted]()
    assert journal.read_bytes() == b'{"id":0}\n{"id":1}\n'
    assert not list(tmp_path.glob(".dump.csv.*"))  # no temporary file left either
    line = _watchdog_child.failure_line(job, 4242, info.value)
    assert f"the rows are still in {journal}" in line and str(dump) in line, line
