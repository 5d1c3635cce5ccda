"""Runs side by side: ``report a.parquet b.parquet --align start`` overlays the runs and puts
one column per run in a table of the page (and of the terminal text); ``--align`` refuses what
it does not accept, naming it."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
from _report_series import series
from stroboscope.cli import main
from stroboscope.export._compare import compare_table
from stroboscope.export.report import Report
from stroboscope.formats.writers import write_parquet

ROWS = 40


def _write(tmp_path: Path) -> list[str]:
    paths = []
    for label, level, start in (("a", 10.0, 0), ("b", 30.0, 8 * 60 * 10**9)):
        columns = {
            "cpu.util_pct": ("%", "rate", [level] * (ROWS - 1) + [level * 2]),
            "threads.top0.tid": ("id", "gauge", [77.0] * ROWS),
        }
        calls = [("step", 1, 0, 1_000_000_000 + 50_000_000, 1_000_000_000 + 90_000_000)]
        s = series(label, columns, ROWS, calls, start_ns=start)
        write_parquet(s.table, tmp_path / f"{label}.parquet")
        assert s.scopes is not None
        write_parquet(s.scopes, tmp_path / f"{label}.scopes.parquet")
        paths.append(str(tmp_path / f"{label}.parquet"))
    return paths


def test_two_runs_side_by_side_in_the_page_and_the_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _write(tmp_path)
    out = tmp_path / "r.html"
    assert main(["report", *paths, "--align", "start", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "== side by side" in text
    page = out.read_text()
    table = page.split("<h2>Runs side by side</h2>")[1].split("</table>")[0]
    assert "<th>figure</th><th>a</th><th>b</th>" in table  # one column per run
    row = table.split("<td>cpu.util_pct mean / max (%)</td>")[1].split("</tr>")[0]
    cells = [html.unescape(c.split(">", 1)[1]) for c in row.split("</td>")[:-1]]
    assert cells == ["10.25 / 20.00", "30.75 / 60.00"]
    assert "threads.top0.tid" not in table  # an identifier is no quantity to compare
    assert "seconds after each run&#x27;s first row" in page


def test_compare_table_marks_a_column_a_run_lacks() -> None:
    a = series("a", {"load.running": ("count", "gauge", [1.0] * 5)}, 5)
    b = series("b", {"mem.used_bytes": ("bytes", "gauge", [2.0**30] * 5)}, 5)
    report = Report([a, b])
    header, rows = compare_table(report.series, report.describe)
    assert header == ("figure", "a", "b")
    by = {r[0]: r[1:] for r in rows}
    assert by["load.running mean / max (count)"] == ("1.00 / 1.00", "-")
    assert by["mem.used_bytes mean / max (bytes)"] == ("-", "1.00 Gi / 1.00 Gi")
    assert by["rows"] == ("5", "5")


@pytest.mark.parametrize(
    ("align", "message"),
    [
        ("end", "--align 'end': give 'start' (each run from its first row) or 'scope:NAME'"),
        ("scope:", "--align 'scope:': give 'start'"),
        ("scope:nope", "--align 'scope:nope': a ("),
    ],
)
def test_a_bad_align_is_refused_naming_it(
    align: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _write(tmp_path)
    assert main(["report", *paths, "--align", align]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""  # said before any output
