"""Output files: written whole (a failure leaves the old file), 0600, never through a symlink."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope._base.files import open_private, replace_private
from stroboscope.export import write_csv, write_parquet
from stroboscope.senders._files import open_private_text


def _table() -> pa.Table:
    return pa.table({"mono_ns": pa.array([1, 2, 3], pa.int64()), "x": [0.5, 1.5, 2.5]})


def test_a_bad_compression_leaves_the_existing_output_intact(tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    write_parquet(_table(), out)
    before = out.read_bytes()
    with pytest.raises((ValueError, pa.ArrowException)):
        write_parquet(_table(), out, compression="bogus")
    assert out.read_bytes() == before
    assert pq.read_table(out).num_rows == 3
    assert os.listdir(tmp_path) == ["run.parquet"]  # no temporary file left behind


def test_a_failure_while_writing_csv_leaves_the_existing_output_intact(tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    write_csv(_table(), out)
    before = out.read_bytes()
    with pytest.raises(TypeError):
        write_csv("not a table", out)
    assert out.read_bytes() == before
    assert os.listdir(tmp_path) == ["run.csv"]


@pytest.mark.parametrize("writer", [write_parquet, write_csv])
def test_outputs_refuse_a_symlink_instead_of_writing_through_or_replacing_it(
    tmp_path: Path, writer: object
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"someone else's file")
    os.chmod(victim, 0o644)
    out = tmp_path / "out.file"
    out.symlink_to(victim)
    with pytest.raises(OSError, match="is a symbolic link: refusing to replace it") as info:
        writer(_table(), out)  # type: ignore[operator]
    assert info.value.filename == str(out)
    assert victim.read_bytes() == b"someone else's file"
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o644
    assert out.is_symlink() and os.readlink(out) == str(victim)


def test_replace_private_uses_an_unpredictable_temporary_name(tmp_path: Path) -> None:
    names = []
    for _ in range(2):
        with replace_private(tmp_path / "out.bin") as f:
            (temporary,) = [n for n in os.listdir(tmp_path) if n != "out.bin"]
            names.append(temporary)
            f.write(b"x")
    assert names[0] != names[1]
    assert all(n.startswith(".out.bin.") and n.endswith(".tmp") for n in names)
    assert os.listdir(tmp_path) == ["out.bin"]


@pytest.mark.parametrize("opener", [open_private, open_private_text])
def test_open_private_refuses_a_symlink(tmp_path: Path, opener: object) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me")
    os.chmod(victim, 0o644)
    link = tmp_path / "metrics.csv"
    link.symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link") as info:
        opener(link)  # type: ignore[operator]
    assert info.value.filename == str(link)
    assert victim.read_bytes() == b"keep me"
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o644


def test_open_private_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        open_private(fifo)


def test_open_private_narrows_an_existing_file_and_truncates_it(tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    path.write_bytes(b"old contents")
    os.chmod(path, 0o644)
    with open_private(path) as f:
        f.write(b"new")
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
