"""``stroboscope record`` under a launcher (torchrun's variables): rank 0 prints the summary,
every other rank one line, so 8 ranks print one summary and 7 lines, not 8 interleaved ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from stroboscope.cli import main


def _record_as(
    rank: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    out = tmp_path / "m-{rank}.parquet"
    argv = ["record", "--interval", "0.01", "--duration", "0.3", "-o", str(out)]
    assert main(argv) == 0
    assert (tmp_path / f"m-{rank}.parquet").exists()
    return capsys.readouterr().out


def test_a_rank_other_than_0_prints_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _record_as(3, tmp_path, monkeypatch, capsys)
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert lines[0].startswith("rank 3 of 8: recorded ")
    assert f"to {tmp_path / 'm-3.parquet'} (parquet)" in lines[0]
    assert "ticks missed " in lines[0]


def test_rank_0_prints_the_summary_and_says_the_others_print_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _record_as(0, tmp_path, monkeypatch, capsys)
    assert text.startswith("recorded ")
    assert "rank 0 of 8; the other ranks print a line each" in text
    assert "mem.util_pct" in text and "mean" in text  # the column statistics
    assert len(text.splitlines()) > 10
