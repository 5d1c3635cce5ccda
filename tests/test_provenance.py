"""Provenance: what a recording carries about its run, checked against independent references
(psutil, os.uname, the rows themselves, the fake NVML library's script)."""

from __future__ import annotations

import gc
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import stroboscope
from stroboscope.formats.segments import segment_paths
from stroboscope.formats.writers import sidecar_path, write_csv
from stroboscope.sampling import CoreSampler as Sampler
from stroboscope.sampling._provenance import (
    PROVENANCE_KEY,
    for_table,
    from_schema,
    iso_utc,
)
from stroboscope.sampling._provenance_identity import rank_of


def _times(table: pa.Table) -> list[int]:
    return [int(v) for v in table.column("time").cast(pa.int64()).to_pylist()]


def test_a_frame_carries_its_run_and_rows() -> None:
    s = Sampler(0.01, sources={"memory": None, "cpu": 0.03})
    s.tick_now(7)
    frame = s.snapshot()
    s.close()
    prov = frame.provenance
    assert prov is not None
    table = frame.to_arrow()
    me = psutil.Process()
    assert prov["stroboscope_version"] == stroboscope.__version__
    assert prov["host"] == os.uname().nodename
    assert prov["pid"] == os.getpid()
    assert prov["cmdline"] == me.cmdline()
    assert prov["interval_s"] == 0.01
    by_name = {src["name"]: src for src in prov["sources"]}
    assert by_name["cpu"]["every"] == 3 and by_name["cpu"]["interval_s"] == pytest.approx(0.03)
    for source in s.stats().sources:  # as the sampler's own figures say, interface included
        assert by_name[source.name]["every"] == source.every
        assert by_name[source.name]["interval_s"] == pytest.approx(source.every * 0.01)
        assert by_name[source.name]["interface"] == (getattr(source, "interface", None) or None)
    times = _times(table)
    assert prov["rows"] == 7 == table.num_rows
    assert (prov["start_ns"], prov["end_ns"]) == (times[0], times[-1])
    assert prov["start_time"] == iso_utc(times[0]) and prov["end_time"].endswith("Z")
    monos = table.column("mono_ns").to_pylist()
    # One anchor for the whole run: time is mono_ns plus it in every row.
    assert {t - m for t, m in zip(times, monos)} == {prov["clock"]["anchor_ns"]}
    assert prov["clock"]["anchor_uncertainty_ns"] == s.stats().clock_anchor_uncertainty_ns
    assert prov["rows_lost"] == 0 and prov["gpus"] is None
    # The same dict in the Arrow schema every consumer sees, and not in the sampler's schema.
    assert from_schema(table.schema) == prov == from_schema(pa.table(frame).schema)
    assert s.schema.metadata is None or PROVENANCE_KEY.encode() not in s.schema.metadata


def test_iso_utc_by_hand() -> None:
    assert iso_utc(0) == "1970-01-01T00:00:00.000000000Z"
    assert iso_utc(1_700_000_000_123_456_789) == "2023-11-14T22:13:20.123456789Z"


def test_rows_lost_is_counted(tmp_path: Path) -> None:
    s = Sampler(0.001, sources=["memory"], capacity=16)
    s.tick_now(40)  # 16 rows fit: 24 were overwritten before any drain
    frame = s.drain()
    s.close()
    prov = frame.provenance
    assert prov is not None
    assert prov["rows_lost"] == s.stats().rows_lost == 24
    assert prov["table_rows_lost"] == frame.rows_lost == 24


def test_rank_from_torchrun_then_slurm_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rank_of({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}) == {
        "rank": 3,
        "world_size": 8,
        "local_rank": 1,
    }
    assert rank_of({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "2"}) == {
        "rank": 5,
        "world_size": 6,
        "local_rank": 2,
    }
    assert rank_of({"RANK": "x"}) == {"rank": None, "world_size": None, "local_rank": None}
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    s = Sampler(0.01, sources=["memory"])
    s.tick_now(1)
    prov = s.snapshot().provenance
    s.close()
    assert prov is not None
    assert (prov["rank"], prov["world_size"], prov["local_rank"]) == (2, 4, None)


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "RANK": "7", "WORLD_SIZE": "9"}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    yield proc
    proc.kill()
    proc.wait()


def test_another_process_its_rank_and_command_line_after_it_exits(
    child: subprocess.Popen[bytes],
) -> None:
    s = Sampler(0.01, pid=child.pid, sources=["process"])
    first = s.provenance()
    expected = psutil.Process(child.pid).cmdline()
    child.kill()
    child.wait()
    later = s.provenance()  # the process is gone: the last command line read is kept
    s.close()
    assert first["pid"] == later["pid"] == child.pid
    assert first["cmdline"] == later["cmdline"] == expected
    assert (later["rank"], later["world_size"]) == (7, 9)  # from /proc/PID/environ
    assert later["missing"] == []


def test_parquet_and_csv_outputs_carry_it(tmp_path: Path) -> None:
    s = Sampler(0.01, sources=["memory"])
    s.tick_now(4)
    frame = s.snapshot()
    s.close()
    frame.write_parquet(tmp_path / "a.parquet")
    frame.write_csv(tmp_path / "a.csv")
    prov = frame.provenance
    assert from_schema(pq.read_schema(tmp_path / "a.parquet")) == prov
    side = Path(sidecar_path(tmp_path / "a.csv"))
    assert side.name == "a.csv.meta.json"
    assert json.loads(side.read_text()) == prov
    assert stat.S_IMODE(side.stat().st_mode) == 0o600
    # No temporary file is left beside them (each is written whole, then renamed).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.csv.meta.json", "a.parquet"]


def test_a_csv_without_provenance_removes_a_stale_sidecar(tmp_path: Path) -> None:
    out = tmp_path / "b.csv"
    Path(sidecar_path(out)).write_text('{"host": "another run"}')
    write_csv(pa.table({"x": [1, 2]}), out)
    assert out.read_text().splitlines() == ['"x"', "1", "2"]
    assert not Path(sidecar_path(out)).exists()


def _spool_run(path: Path, rows: int, *, segments: bool = False) -> None:
    """A recording into a spool that dies without closing: ``rows`` rows taken inline, or, with
    ``segments``, a live run until at least one Parquet segment is beside the spool."""
    live = (
        "import glob, time\n"
        "s.start()\n"
        "deadline = time.monotonic() + 60\n"
        f"while not glob.glob({str(path)!r} + '.seg-*.parquet') and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "time.sleep(0.05)\n"
    )
    code = (
        "import os, stroboscope\n"
        f"s = stroboscope.Sampler(0.01, sources=['memory'], spool={str(path)!r}, capacity=64,\n"
        "                         segment_seconds=0.1)\n"
        + (live if segments else f"s.tick_now({rows})\n")
        + "os._exit(0)\n"  # dies without closing: the spool is what is left
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("segments", [False, True], ids=["spool only", "with segments"])
def test_a_recovered_spool_says_what_it_does_not_know(tmp_path: Path, segments: bool) -> None:
    spool = tmp_path / "run.spool"
    _spool_run(spool, 5, segments=segments)
    assert bool(segment_paths(spool)) == segments
    frame = stroboscope.recover(spool)
    table = frame.to_arrow()
    prov = frame.provenance
    assert prov is not None and from_schema(table.schema) == prov
    assert prov["recorded_by"] == "spool recovery"
    assert prov["interval_s"] == 0.01 and prov["rows"] == table.num_rows
    assert prov["rows_lost"] == frame.rows_lost
    times = _times(table)
    assert (prov["start_ns"], prov["end_ns"]) == (times[0], times[-1])
    monos = table.column("mono_ns").to_pylist()
    assert {t - m for t, m in zip(times, monos)} == {prov["clock"]["anchor_ns"]}
    for unknown in ("host", "cmdline", "sources", "gpus", "rank", "stroboscope_version"):
        assert unknown in prov["missing"] and prov[unknown] is None
    assert "clock.anchor_uncertainty_ns" in prov["missing"]


def _run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stroboscope", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_record_output_and_info(tmp_path: Path) -> None:
    out = tmp_path / "rec.parquet"
    done = _run_cli("record", "-o", str(out), "--interval", "0.01", "--", "sleep", "0.2")
    assert done.returncode == 0, done.stderr
    prov = from_schema(pq.read_schema(out))
    assert prov is not None
    table = pq.read_table(out)
    assert prov["cmdline"] == ["sleep", "0.2"] and prov["recorded_by"] == "sampler"
    assert prov["rows"] == table.num_rows > 0
    assert (prov["start_ns"], prov["end_ns"]) == (_times(table)[0], _times(table)[-1])
    assert prov["host"] == os.uname().nodename
    shown = _run_cli("info", str(out))
    assert shown.returncode == 0, shown.stderr
    lines = dict(line.split(":", 1) for line in shown.stdout.splitlines() if ":" in line)
    assert lines["command line"].strip() == "sleep 0.2"
    assert lines["rows"].strip() == str(table.num_rows)
    assert lines["start"].strip() == prov["start_time"]
    as_json = _run_cli("info", "--json", str(out))
    assert json.loads(as_json.stdout) == prov


def test_info_of_a_csv_a_spool_and_bad_files(tmp_path: Path) -> None:
    out = tmp_path / "rec.csv"
    done = _run_cli("record", "-o", str(out), "--duration", "0.1", "--sources", "memory")
    assert done.returncode == 0, done.stderr
    shown = _run_cli("info", "--json", str(out))
    assert json.loads(shown.stdout) == json.loads(Path(sidecar_path(out)).read_text())
    spool = tmp_path / "s.spool"
    _spool_run(spool, 3)
    shown = _run_cli("info", str(spool))
    assert shown.returncode == 0 and "not known:" in shown.stdout and "host" in shown.stdout
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"x": [1]}), plain)
    bad = _run_cli("info", str(plain))
    assert bad.returncode == 2 and "no stroboscope.provenance" in bad.stderr
    Path(sidecar_path(out)).unlink()
    bad = _run_cli("info", str(out))
    assert bad.returncode == 2 and "has no sidecar rec.csv.meta.json" in bad.stderr
    bad = _run_cli("info", str(tmp_path / "missing.parquet"))
    assert bad.returncode == 2 and "no such file" in bad.stderr


def test_recover_command_keeps_the_spools_provenance(tmp_path: Path) -> None:
    spool = tmp_path / "r.spool"
    _spool_run(spool, 4)
    out = tmp_path / "r.csv"
    done = _run_cli("recover", str(spool), "-o", str(out))
    assert done.returncode == 0, done.stderr
    prov = json.loads(Path(sidecar_path(out)).read_text())
    assert prov["recorded_by"] == "spool recovery" and prov["rows"] == 4


def test_gpus_from_the_fake_nvml(
    fake_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "script.txt"
    script.write_text(
        "devices 2\ndriver 550.54.15\nname 0 Fake H200\nname 1 Fake L4\n"
        "uuid 0 GPU-aaaaaaaa-0000-0000-0000-000000000000\n"
        "uuid 1 GPU-bbbbbbbb-0000-0000-0000-000000000000\nset 0 util 42\nset 1 util 7\n"
    )
    gc.collect()
    monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(fake_libs["new"]))
    monkeypatch.setenv("FAKE_NVML_SCRIPT", str(script))
    s = Sampler(0.01, sources=["gpu"], gpus=[1])
    s.tick_now(2)
    prov = s.snapshot().provenance
    s.close()
    gc.collect()
    assert prov is not None and prov["gpus"] is not None
    assert prov["gpus"]["driver_version"] == "550.54.15"
    assert prov["gpus"]["devices"] == [
        {
            "label": 1,
            "index": 1,
            "name": "Fake L4",
            "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000",
        }
    ]


def test_first_and_last_row_across_empty_chunks() -> None:
    """Recovered tables are parts put together, some of them empty."""

    def part(times: list[int], monos: list[int]) -> pa.RecordBatch:
        return pa.record_batch(
            {
                "time": pa.array(times, pa.timestamp("ns", "UTC")),
                "mono_ns": pa.array(monos, pa.int64()),
            }
        )

    table = pa.Table.from_batches([part([], []), part([105, 109], [5, 9]), part([], [])])
    got = for_table({"clock": {"clock": "CLOCK_MONOTONIC"}}, table)
    assert (got["start_ns"], got["end_ns"], got["rows"]) == (105, 109, 2)
    assert got["clock"] == {"clock": "CLOCK_MONOTONIC", "anchor_ns": 100}
    empty = for_table({}, pa.Table.from_batches([part([], [])]))
    assert (empty["start_time"], empty["end_time"], empty["rows"]) == (None, None, 0)


def test_record_pid_keeps_the_command_line_of_a_process_that_exited(tmp_path: Path) -> None:
    # The target lives until the recorder watches it (it holds the target's /proc files open:
    # its sampler exists, and it reads the command line just after starting), then exits; a
    # fixed sleep raced the recorder's start-up on a loaded machine.
    target = subprocess.Popen(["sleep", "600"])
    out = tmp_path / "pid.parquet"
    argv = ["record", "-o", str(out), "--pid", str(target.pid), "--sources", "process"]
    cli = subprocess.Popen(
        [sys.executable, "-m", "stroboscope", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and cli.poll() is None:
            if _holds_proc_file_of(cli.pid, target.pid):
                break
            time.sleep(0.01)
        time.sleep(0.5)  # the rest of the sampler's construction, then its provenance()
    finally:
        target.kill()
        target.wait()
    _, err = cli.communicate(timeout=120)
    assert cli.returncode == 0, err
    prov = from_schema(pq.read_schema(out))
    assert prov is not None
    # Read while it ran: by the time the output is written the process is gone.
    assert prov["pid"] == target.pid and prov["cmdline"] == ["sleep", "600"]


def _holds_proc_file_of(holder: int, pid: int) -> bool:
    """Whether process ``holder`` has a file under /proc/``pid`` open."""
    try:
        fds = os.listdir(f"/proc/{holder}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{holder}/fd/{fd}").startswith(f"/proc/{pid}/"):
                return True
        except OSError:
            continue  # closed meanwhile
    return False
