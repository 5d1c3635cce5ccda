"""``stroboscope record`` on a disk that fills up mid-run (simulated with RLIMIT_FSIZE in the
recording process: its files stop growing, EFBIG as ENOSPC would): the segment writes fail,
the ring overwrites rows no segment took, and the output cannot be written. What it says
counts every row: those safe in the spool and those lost, and ``recover`` writes the same
count into the output's metadata."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main
from stroboscope.formats.spool_header import FIELDS

LIMIT = 80_000
"""Bytes a file of the recording may grow to: above the spool (256 rows, ~60 kB), below
what a few seconds of rows at 1 kHz take in pieces."""


LIMITED = (
    "import os, resource, signal, sys\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # kept across exec: a write past the limit "
    "fails with EFBIG\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
)
"""Run ``python ARGS`` with files limited to ``LIMIT`` bytes (``-c LIMITED LIMIT ARGS``)."""


def test_a_full_disk_says_the_rows_lost_beside_the_rows_safe(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    argv = ["-m", "stroboscope", "record", "-q", "--interval", "0.001", "--capacity", "256"]
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, str(LIMIT), *argv, "--duration", "4", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    said = re.search(
        r"the (\d+) rows are safe in the spool .*; (\d+) rows were lost \((\d+) overwritten in "
        r"the ring before a segment took them\)",
        done.stderr,
    )
    assert said is not None, done.stderr
    safe, lost, overwritten = map(int, said.groups())
    assert lost == overwritten > 0 and safe > 0
    spool = tmp_path / "out.parquet.spool"
    with open(spool, "rb") as f:  # every row the sampler wrote: the spool's head counter
        f.seek(FIELDS["head"][0])
        head = int.from_bytes(f.read(8), "little")
    assert safe + lost == head
    recovered = tmp_path / "recovered.parquet"
    again = subprocess.run(
        [sys.executable, "-m", "stroboscope", "recover", str(spool), "-o", str(recovered)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert f"recovered {safe} rows" in again.stdout and f"{lost} rows were lost" in again.stdout
    meta = pq.read_schema(recovered).metadata
    assert int(meta[b"stroboscope.rows_lost"]) == lost
    assert pq.read_metadata(recovered).num_rows == safe


def test_failed_segment_writes_that_lost_rows_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every segment write fails (a full disk) but the output can be written: the summary
    says how many rows the ring overwrote meanwhile, as the output's metadata counts them,
    instead of "the spool held those rows"."""
    from _segment_faults import failing_writes

    failing_writes(monkeypatch, 10**6)
    out = tmp_path / "m.parquet"
    args = ["--interval", "0.001", "--capacity", "64", "--duration", "0.6", "-q", "-o", str(out)]
    assert main(["record", *args]) == 0
    printed = capsys.readouterr().out
    lost = int(pq.read_schema(out).metadata[b"stroboscope.rows_lost"])
    assert lost > 0, printed  # 600 ticks through a ring of 64 rows
    assert f"the ring overwrote {lost} rows meanwhile: they are lost" in printed, printed
    assert "which held those rows" not in printed
    recorded = re.search(r"recorded (\d+) rows", printed)
    assert recorded is not None and int(recorded.group(1)) == pq.read_metadata(out).num_rows
