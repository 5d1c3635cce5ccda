"""Faults of the partitioned dataset: a partition another run holds, a rank killed while writing a
part (its partial file never appears), a root that cannot be written (refused at construction; a
failure later leaves the rows in the ring, counted, and written once the root is back), and
conflicting rank variables."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import stroboscope
from _dataset_ranks import SAMPLES_GLOB, rank_env
from stroboscope._base.identity import Identity
from stroboscope.formats.dataset import open_dataset, partition_dir, write_part
from stroboscope.formats.dataset_owner import read_owner
from stroboscope.recording.sampler import Sampler

# DuckDB and polars are test extras: skipped, not failed, where they are missing.
duckdb = pytest.importorskip("duckdb")

DEADLINE_S = 60.0  # only for a child or a sampler that never gets there


def wait_for(what: str, check: object) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_partition_another_run_holds_is_refused_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    who = Identity(host="h", rank=1, world_size=2, job="j")
    # The other run: a real process that claims rank 1 of job j, then exits.
    code = (
        "import sys\nfrom stroboscope._base.identity import Identity\n"
        "from stroboscope.recording.sampler import Sampler\n"
        "s = Sampler(0.01, sources=['memory'], dataset=sys.argv[1], segment_seconds=0.1,\n"
        "            identity=Identity(host='h', rank=1, world_size=2, job='j'))\n"
        "s.tick_now(1); s.close()\n"  # it recorded a row: the claim stays
    )
    env = rank_env(0, 0, 1, None)
    subprocess.run([sys.executable, "-c", code, str(root)], env=env, check=True, timeout=120)
    owner = read_owner(partition_dir(root, who))
    assert owner["pid"] > 0 and owner["pid"] != os.getpid()
    with pytest.raises(ValueError) as info:
        Sampler(0.01, sources=["memory"], dataset=root, identity=who, segment_seconds=0.1)
    text = str(info.value)
    for part in (str(root), "job 'j'", "rank 1", f"pid {owner['pid']}", owner["start_time"]):
        assert part in text, (part, text)
    assert "fresh job id" in text
    # Nothing of the refused run was written; a fresh job id or another rank is accepted.
    assert owner == read_owner(partition_dir(root, who))
    fresh = Identity(host="h", rank=1, world_size=2, job="j2")
    with Sampler(0.01, sources=["memory"], dataset=root, identity=fresh, segment_seconds=0.1) as s:
        wait_for("a row", lambda: s.stats().rows_written > 0)
    assert set(open_dataset(root).to_table().column("job").to_pylist()) == {"j", "j2"}


def test_two_samplers_of_one_process_cannot_share_a_partition(tmp_path: Path) -> None:
    who = Identity(host="h", rank=0, job="j")
    first = Sampler(0.01, sources=["memory"], dataset=tmp_path, identity=who, segment_seconds=0.1)
    try:
        with pytest.raises(ValueError, match=f"pid {os.getpid()}"):
            Sampler(0.01, sources=["memory"], dataset=tmp_path, identity=who, segment_seconds=0.1)
    finally:
        first.close()


def test_single_process_runs_without_a_job_id_each_get_a_job_of_their_own(
    tmp_path: Path,
) -> None:
    # A job of their own each, so recording twice into one root needs no new name; ranks of a
    # job without a job id keep job=none and a rerun of that rank is refused, naming --job.
    jobs = []
    for _ in range(2):
        s = Sampler(
            0.01, sources=["memory"], dataset=tmp_path, identity=Identity(host="h"),
            segment_seconds=0.1,
        )  # fmt: skip
        with s:
            wait_for("a row", lambda s=s: s.stats().rows_written > 0)
            assert s.identity is not None and s.identity.job is not None
            assert s.identity.job.startswith("run-")
            jobs.append(s.identity.job)
    assert jobs[0] != jobs[1]
    from stroboscope import cluster

    c = cluster.rank_sampler(
        0.01, sources=["memory"], dataset=tmp_path, identity=Identity(host="g")
    )
    try:  # the job its parts are written under, not the one it was given (none)
        assert c.identity is not None  # a rank sampler always has one
        assert c.identity.job is not None and c.identity.job.startswith("run-")
    finally:
        c.close()
    assert set(open_dataset(tmp_path).to_table().column("job").to_pylist()) == set(jobs)
    rank = Identity(host="h", rank=1, world_size=2)
    first = Sampler(0.01, sources=["memory"], dataset=tmp_path, identity=rank)
    first.tick_now(1)  # it recorded a row: the claim stays
    first.close()
    with pytest.raises(ValueError, match="--job"):
        Sampler(0.01, sources=["memory"], dataset=tmp_path, identity=rank)


KILLED_WRITER = r"""
import sys, time
import pyarrow as pa
import pyarrow.parquet as pq
from stroboscope._base.identity import Identity
from stroboscope.formats.dataset import write_part

root = sys.argv[1]
who = Identity(host="h", rank=0, job="j")
table = pa.table({"mono_ns": pa.array(range(1000), pa.int64()), "v": pa.array([1.0] * 1000)})
write_part(table.slice(0, 10), root, identity=who, name="part-r-000001.parquet")

def stalled(table, where, **kwargs):
    # Half a Parquet file in the temporary, flushed to disk, then killed in the middle.
    where.write(b"PAR1" + b"\0" * 4096)
    where.flush()
    print("writing", flush=True)
    time.sleep(600)

pq.write_table = stalled
write_part(table, root, identity=who, name="part-r-000002.parquet")
"""


def test_a_rank_killed_while_writing_a_part_leaves_no_part(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    with subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(root)],
        env=rank_env(0, 0, 1, None),
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    directory = Path(partition_dir(root, Identity(host="h", rank=0, job="j")))
    names = sorted(p.name for p in directory.iterdir())
    temps = [n for n in names if n.startswith(".")]
    assert len(temps) == 1 and temps[0].endswith(".tmp")  # the partial write, under a dot-name
    assert "part-r-000002.parquet" not in names
    # Every reader sees the complete part only.
    table = open_dataset(root).to_table()
    assert table.column("mono_ns").to_pylist() == list(range(10))
    rows = duckdb.execute(f"SELECT count(*) FROM read_parquet('{root}/{SAMPLES_GLOB}')").fetchall()
    assert rows == [(10,)]


def test_an_unwritable_root_is_refused_at_construction(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    root = tmp_path / "file" / "ds"  # cannot be made even by root
    with pytest.raises(ValueError) as info:
        Sampler(0.01, sources=["memory"], dataset=root, identity=Identity(host="h", job="j"))
    text = str(info.value)
    assert str(root) in text and "cannot be written" in text and "job 'j'" in text
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="not a stroboscope dataset"):
        Sampler(0.01, sources=["memory"], dataset=tmp_path / "busy")


def test_conflicting_rank_variables_are_refused_before_anything_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="RANK"):
        Sampler(0.01, sources=["memory"], dataset=tmp_path / "ds")
    assert not (tmp_path / "ds").exists()


def test_a_failing_partition_keeps_rows_in_the_ring_counts_and_writes_them_later(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ds"
    who = Identity(host="h", rank=0, job="j")
    s = Sampler(
        0.01, sources=["memory", "process"], dataset=root, identity=who, segment_seconds=300
    )
    directory = partition_dir(root, who)
    owner = Path(directory, "_owner.json").read_bytes()
    try:
        s.start()
        wait_for("rows", lambda: s.stats().rows_written >= 5)
        # The partition's directory replaced by a file: every write of a part fails (as root too).
        shutil.rmtree(directory)
        Path(directory).write_text("in the way")
        s.stop()  # the last part is tried, fails, and its rows stay in the ring
        status = s.dataset_status
        assert status is not None and status.segments_written == 0 and status.errors >= 1
        assert status.rows_unwritten == s.stats().rows_written and status.last_error is not None
        assert "not a directory" in status.last_error
        # The directory back: the next part holds every row, none twice.
        os.unlink(directory)
        os.mkdir(directory, 0o700)
        Path(directory, "_owner.json").write_bytes(owner)
        s.start()
        wait_for("more rows", lambda: s.stats().rows_written >= status.rows_unwritten + 3)
    finally:
        s.close()
    final = s.dataset_status
    assert final is not None and final.rows_unwritten == 0 and final.segments_written == 1
    table = open_dataset(root).to_table()
    ring = s.snapshot().to_arrow()
    assert table.column("mono_ns").to_pylist() == ring.column("mono_ns").to_pylist()
    assert len(ring) == s.stats().rows_written  # the ring held the whole run: nothing was lost


def test_scope_intervals_of_a_sampler_go_to_scopes_at_close(tmp_path: Path) -> None:
    who = Identity(host="h", rank=0, job="j")
    with Sampler(
        0.01, sources=["process"], dataset=tmp_path, identity=who, segment_seconds=0.1
    ) as s:
        for step in range(4):
            with stroboscope.annotate("step", step=step):
                pass
    files = list((tmp_path / "_scopes").rglob("scopes-*.parquet"))
    assert len(files) == 1
    prov = json.loads(pq.read_schema(files[0]).metadata[b"stroboscope.provenance"])
    assert prov["identity"]["job"] == "j" and prov["rows"] == 4
    got = open_dataset(tmp_path, kind="scopes").to_table()
    want = s.scope_intervals()
    assert got.column("begin_ns").to_pylist() == want.column("begin_ns").to_pylist()
    assert got.column("name").to_pylist() == ["step"] * 4


def test_write_part_refuses_a_partition_level_that_is_a_link(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_part(
        pq.read_table(_one_row(tmp_path)), root, identity=Identity(host="a"), name="part-1.parquet"
    )
    os.symlink(elsewhere, root / "job=none" / "host=b")
    with pytest.raises(ValueError, match="is not a directory"):
        write_part(
            pq.read_table(_one_row(tmp_path)),
            root,
            identity=Identity(host="b"),
            name="part-1.parquet",
        )
    assert list(elsewhere.iterdir()) == []


def _one_row(tmp_path: Path) -> Path:
    import pyarrow as pa

    path = tmp_path / "one.parquet"
    pq.write_table(pa.table({"mono_ns": pa.array([1], pa.int64())}), path)
    return path


KILLED_RANK = r"""
import sys, time
from stroboscope.recording.sampler import Sampler

s = Sampler(0.001, sources=["process"], dataset=sys.argv[1], segment_seconds=0.02)
s.start()
while s.dataset_status.segments_written < 3:
    time.sleep(0.005)
print("parts", flush=True)
while True:  # parts keep being written until the SIGKILL, wherever it lands
    time.sleep(1)
"""


def test_a_rank_killed_while_recording_leaves_whole_parts_only(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    with subprocess.Popen(
        [sys.executable, "-c", KILLED_RANK, str(root)],
        env=rank_env(1, 0, 2, "killed"),
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "parts"
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
    files = open_dataset(root).files
    assert len(files) >= 3
    for f in files:
        pq.read_table(f)  # each part complete: a partial one would not parse
    table = open_dataset(root).to_table()
    mono = table.column("mono_ns").to_pylist()
    assert len(mono) == len(set(mono)) > 0  # no row twice
    assert set(table.column("rank").to_pylist()) == {1}


def test_record_dataset_alone_keeps_the_spool_when_rows_reached_no_part(tmp_path: Path) -> None:
    # Without -o, rows that no part took are only in the spool: it is kept (not removed with
    # the private directory), the summary says how to recover it, and the exit code is 1.
    root = tmp_path / "ds"
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "stroboscope", "record", "--quiet", "--dataset", str(root),
         "--job", "j", "--interval", "0.01", "--duration", "8", "--sources", "memory"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        wait_for("the claim", lambda: any(root.glob("job=j/host=*/rank=*/_owner.json")))
        part_dir = next(root.glob("job=j/host=*/rank=*/_owner.json")).parent
        moved = tmp_path / "moved"
        part_dir.rename(moved)
        part_dir.write_text("not a directory")  # every part write fails from now on
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, (out, err)
    kept = next(line for line in out.splitlines() if "kept in the spool" in line)
    spool = kept.split("kept in the spool ", 1)[1].split(":", 1)[0]
    assert Path(spool).exists()
    recovered = stroboscope.recover(spool).to_arrow()
    assert recovered.num_rows > 0
    shutil.rmtree(Path(spool).parent)


def test_a_run_that_recorded_nothing_gives_its_partition_back(tmp_path: Path) -> None:
    # A set-up that fails after the claim (record's exporter port in use, say) closes the
    # sampler unstarted: a retry of the same job and rank must not be refused.
    who = Identity(host="h", rank=0, world_size=2, job="j")
    Sampler(0.01, sources=["memory"], dataset=tmp_path, identity=who).close()
    assert read_owner(partition_dir(tmp_path, who)) == {}
    s = Sampler(0.01, sources=["memory"], dataset=tmp_path, identity=who, segment_seconds=0.1)
    with s:
        wait_for("a row", lambda: s.stats().rows_written > 0)
    assert read_owner(partition_dir(tmp_path, who))["pid"] == os.getpid()  # it recorded: kept
    with pytest.raises(ValueError, match="already holds job 'j'"):
        Sampler(0.01, sources=["memory"], dataset=tmp_path, identity=who)


def test_a_restarted_rank_takes_over_its_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torchrun elastic / a Slurm requeue restarts a rank with the same job, host and rank and a
    # higher restart count; the first incarnation's process is gone.
    who = Identity(host="h", rank=1, world_size=2, job="j")
    code = (
        "import sys\nfrom stroboscope._base.identity import Identity\n"
        "from stroboscope.recording.sampler import Sampler\n"
        "s = Sampler(0.01, sources=['memory'], dataset=sys.argv[1], segment_seconds=0.1,\n"
        "            identity=Identity(host='h', rank=1, world_size=2, job='j'))\n"
        "s.start(); import time; deadline = time.monotonic() + 60\n"
        "while s.stats().rows_written == 0 and time.monotonic() < deadline: time.sleep(0.005)\n"
        "assert s.stats().rows_written > 0, 'no row after 60 s'; s.close()\n"
    )
    env = {**os.environ, "TORCHELASTIC_RESTART_COUNT": "0"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, check=True, timeout=120)
    first = read_owner(partition_dir(tmp_path, who))
    assert first["restart"] == 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    with pytest.raises(ValueError, match="another run"):  # not a restart: refused
        Sampler(0.01, sources=["memory"], dataset=tmp_path, identity=who)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    s = Sampler(0.01, sources=["memory"], dataset=tmp_path, identity=who, segment_seconds=0.1)
    with s:
        wait_for("a row", lambda: s.stats().rows_written > 0)
    owner = read_owner(partition_dir(tmp_path, who))
    assert owner["restart"] == 1 and owner["pid"] == os.getpid()
    runs = {p.name.split("-")[1] for p in Path(partition_dir(tmp_path, who)).glob("part-*")}
    assert len(runs) == 2  # both incarnations' parts, neither replaced


def test_a_part_renamed_into_place_before_a_failure_is_neither_rewritten_nor_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rename went through, then fsync of the directory failed: the retry must not try the
    # same name again (refused for ever: a part is never replaced) nor write those rows twice.
    import stroboscope.formats.dataset as dataset_module

    real = dataset_module.fsync_dir
    failures = iter([True])

    def flaky(directory: str) -> None:
        if next(failures, False):
            raise OSError(5, "fsync failed once")
        real(directory)

    who = Identity(host="h", rank=0, job="j")
    s = Sampler(0.01, sources=["memory"], dataset=tmp_path, identity=who, segment_seconds=300)
    try:
        s.tick_now(3)
        monkeypatch.setattr(dataset_module, "fsync_dir", flaky)
        writer = s._dataset  # the recording's dataset writer
        assert writer is not None
        with pytest.raises(OSError, match="fsync failed once"):
            writer.flush()
        s.tick_now(2)
        writer.flush()
    finally:
        s.close()
    table = open_dataset(tmp_path).to_table()
    assert table.num_rows == 5
    assert len(set(table.column("mono_ns").to_pylist())) == 5
