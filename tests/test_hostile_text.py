"""Hostile text in scope names, paths, label keys and values (markup, ampersands, quotes, TeX
dollars, newlines, pipes) through every page and file a run's report and exports write: the
HTML page (parsed back: no element or attribute comes from the text, which reads literally), the
terminal report (each row one line), CSV (parsed back cell for cell) and Chrome trace JSON
(parsed back: names and labels literal)."""

from __future__ import annotations

import csv
import json
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _scope_tables import Call, frame, intervals
from stroboscope._base.text import printable
from stroboscope.analysis.scopes import samples_by_scope
from stroboscope.export.report import build_report
from stroboscope.export.traces import write_chrome_trace
from stroboscope.formats.writers import write_csv

MS = 1_000_000
HOSTILE = [
    "<script>alert(1)</script>",
    "a & b",
    "\"quoted\" 'single'",
    "$x$ and $$y$$",
    "line\nbreak",
    "pipe | cell",
    "<img src=x onerror=alert(2)>",
]
KEY = 'k<b>&"|'  # a label key: it becomes a column and an index level name


def calls() -> list[Call]:
    """One call per hostile name (path the same), labelled with the next hostile text."""
    return [
        (text, text, 1, 1, 0, (10 + 20 * k) * MS, (20 + 20 * k) * MS,
         {KEY: HOSTILE[(k + 1) % len(HOSTILE)]})
        for k, text in enumerate(HOSTILE)
    ]  # fmt: skip


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, pa.Table, pa.Table]:
    samples = frame(
        [k * MS for k in range(200)], {"cpu.util_pct": [float(k % 7) for k in range(200)]}
    )
    samples = samples.replace_schema_metadata({b"user.note": HOSTILE[0].encode()})
    scopes = intervals(calls())
    path = tmp_path / "run.parquet"
    pq.write_table(samples, path)
    pq.write_table(scopes, tmp_path / "run.scopes.parquet")
    return path, samples, scopes


class _Page(HTMLParser):
    """The elements and attributes of a page, and the text of each table cell."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.cells: list[str] = []
        self.text: list[str] = []
        self._in_cell = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        if tag in ("td", "th"):
            self._in_cell += 1
            self.cells.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_cell -= tag in ("td", "th")

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_cell:
            self.cells[-1] += data


ALLOWED = {
    "html": {"lang"}, "head": set(), "meta": {"charset"}, "title": set(), "style": set(),
    "body": set(), "h1": set(), "h2": set(), "h3": set(), "p": {"class"}, "table": set(),
    "thead": set(), "tbody": set(), "tr": set(), "th": set(), "td": {"class"},
    "pre": {"class"}, "ul": set(), "li": set(), "figure": {"id", "class"},
    "img": {"alt", "width", "height", "src"}, "details": {"class"}, "summary": set(),
}  # fmt: skip


def test_the_html_page_shows_hostile_text_literally(run: tuple[Path, pa.Table, pa.Table]) -> None:
    pytest.importorskip("matplotlib")
    path, _, _ = run
    page = _Page()
    page.feed(build_report([str(path)]).static_html())  # the zooming page: test_page.py
    page.close()
    for tag, attrs in page.tags:  # nothing the text holds became an element or attribute
        assert tag in ALLOWED, tag
        assert {name for name, _ in attrs} <= ALLOWED[tag], (tag, attrs)
    cells = page.cells
    for text in HOSTILE:  # the scope table (HTML): each name and label as written (escaped \n)
        assert printable(text) in cells, text
    assert printable(KEY) in cells
    assert HOSTILE[0] in "".join(page.text)  # the metadata value, literally


def test_the_terminal_report_keeps_one_line_per_row(
    run: tuple[Path, pa.Table, pa.Table],
) -> None:
    path, _, _ = run
    text = build_report([str(path)]).text()
    section = text[text.index("scopes:") :].splitlines()[1:]
    rows = [line for line in section[2:] if line.strip()]  # after the header and its rule
    assert len(rows) == len(HOSTILE)
    for line, (name, *_, labels) in zip(rows, sorted(calls(), key=lambda c: c[0])):
        assert line.startswith(printable(name))
        assert printable(labels[KEY]) in line


def test_csv_parses_back_to_the_same_text(
    run: tuple[Path, pa.Table, pa.Table], tmp_path: Path
) -> None:
    _, samples, scopes = run
    joined = samples_by_scope(samples, scopes)
    out = tmp_path / "joined.csv"
    write_csv(joined, out)
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    assert len(body) == joined.num_rows  # no row split by a newline or a quote
    got = [r[header.index("scope")] for r in body]
    assert got == [v or "" for v in joined.column("scope").to_pylist()]
    assert set(HOSTILE) <= set(got)


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_trace_json_parses_back_to_the_same_text(
    run: tuple[Path, pa.Table, pa.Table], tmp_path: Path, name: str
) -> None:
    import gzip

    _, samples, scopes = run
    out = tmp_path / name
    write_chrome_trace(out, samples, scopes)
    raw = gzip.decompress(out.read_bytes()) if name.endswith(".gz") else out.read_bytes()
    trace = json.loads(raw)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["name"] for e in slices) == sorted(HOSTILE)
    for e in slices:
        k = HOSTILE.index(e["name"])
        assert e["args"][KEY] == HOSTILE[(k + 1) % len(HOSTILE)]
