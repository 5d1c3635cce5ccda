"""The cross-rank report's edges: the HTML page, the command's options and errors, a dataset
without scopes, a rank without rows or clock, two jobs in one root, and what is not a dataset."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pytest
from _cluster_dataset import JOB, make_dataset, step_ms
from stroboscope._base.identity import Identity
from stroboscope.cli import main
from stroboscope.export._ranks import Rank
from stroboscope.export._ranks_figures import GpuChoice, gpu_choice
from stroboscope.export._ranks_report import rank_table
from stroboscope.export.cluster_report import build_cluster_report, write_cluster_report
from stroboscope.formats.dataset import ensure_root, write_scopes


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("edges") / "ds")


def test_the_html_page(dataset: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "c.html"
    assert write_cluster_report(build_cluster_report(dataset), out) == "html"
    page = out.read_text()
    assert out.stat().st_mode & 0o777 == 0o600
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert '<figure id="plot-steps"' in page and "data:image/png;base64," in page
    rows = re.findall(r"<tr>(.*?)</tr>", page)
    straggling = [r for r in rows if "STRAGGLER" in r]
    assert len(straggling) == 1 and straggling[0].startswith("<td>3</td><td>beta</td>")
    assert "UNSYNCHRONISED" not in page and "synchronised" in page


def test_the_command_options_and_errors(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(dataset), "--straggler", "0,1"]) == 0
    out = capsys.readouterr().out
    assert "stragglers: rank 3 on beta (median 130 ms, +27.5 %); rank 1 on alpha" in out
    assert "by more than 0 x 1.4826 x MAD" in out and "more than 1 %" in out
    assert main(["report", str(dataset), "-o", str(tmp_path / "c.json")]) == 0
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["straggler_rule"]["k"] == 3 and data["jobs"][0]["stragglers"] == [3]
    for args, text in (
        (["--png", str(tmp_path / "p")], "--png: not used by the report of a dataset"),
        (
            ["--columns", "cpu.*", "--to", "5"],
            "--columns, --to: not used by the report of a dataset "
            "(it takes -o, --step, --straggler)",
        ),
        (["--static"], "--static: not used by the report of a dataset"),
        # given but false: refused all the same, not taken for absent
        (["--png", ""], "--png: not used by the report of a dataset"),
        (["--from", "0", "--to", "0"], "--from, --to: not used by the report of a dataset"),
        (["--straggler", "x"], "--straggler 'x': give K,PCT such as 3,5"),
        (["--straggler", "3,-1"], "pct must be a number >= 0, got -1.0"),
        (["--step", "nope"], "step 'nope': no rank called a scope of that name or path"),
    ):
        assert main(["report", str(dataset), *args]) == 2
        assert text in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_a_dataset_without_scopes(tmp_path: Path) -> None:
    report = build_cluster_report(make_dataset(tmp_path / "ds", with_scopes=False))
    assert report.step is None and all(r.step is None for r in report.rows)
    assert report.stragglers == [] and report.jobs[0].alignment.steps == 0
    assert report.notes == ["no rank recorded scopes: no step times (annotate the training step)"]
    assert all(r.figures["proc_cpu_pct"].value is not None for r in report.rows)
    text = report.text()
    assert "step: none (no rank recorded scopes)" in text and "stragglers: no step times" in text


def _two_steps() -> pa.Table:
    """Two 100 ms calls of train_step, 300 ms apart: a rank's scopes without rows."""
    return pa.table(
        {
            "name": ["train_step"] * 2,
            "path": ["train_step"] * 2,
            "depth": pa.array([0, 0], pa.int32()),
            "begin_ns": [10, 300_000_010],
            "end_ns": [100_000_010, 400_000_010],
        }
    )


def test_a_rank_with_scopes_only_and_two_jobs(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "ds")
    make_dataset(root, job="j2")
    # rank 4 of j1 wrote its scope calls but no rows, and no provenance with a clock
    lone = Identity(host="gamma", rank=4, local_rank=0, world_size=5, job=JOB)
    calls = _two_steps()
    write_scopes(calls, root, identity=lone, name="scopes-000001-000000.parquet")
    report = build_cluster_report(root)
    assert [j.job for j in report.jobs] == ["j1", "j2"]
    assert [(r.job, r.rank) for r in report.stragglers] == [("j1", 3), ("j2", 3)]
    gamma = next(r for r in report.rows if r.host == "gamma")
    assert gamma.step is not None and gamma.step.median_s == pytest.approx(0.1)
    assert gamma.lag_ns is None and gamma.anchor_ns is None
    assert all(f.value is None for f in gamma.figures.values())
    assert "job j1 rank 4: no clock anchor, its steps are not aligned" in report.notes
    # j1 now has 5 medians (100, 104, 98, 130, 100 ms): M = 100, MAD = 2; rank 3 still alone
    j1 = report.jobs[0]
    assert j1.verdict.center_s == pytest.approx(0.100) and j1.verdict.mad_s == pytest.approx(0.002)
    assert sorted(step_ms(3))[4] == 130.0
    text = report.text()
    assert "\njob j1:" in text and "\njob j2:" in text and "—" in text


def test_what_is_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a stroboscope dataset"):
        build_cluster_report(tmp_path)
    ensure_root(tmp_path / "empty")
    with pytest.raises(ValueError, match="holds no part yet: no rank has written rows"):
        build_cluster_report(tmp_path / "empty")


def test_step_figures_agree_with_duckdb(dataset: Path) -> None:
    """An independent reader of the same files: DuckDB's median and continuous 90th percentile
    of the closed step calls, and its mean of each node's GPU 1 utilisation."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    steps = con.execute(
        "SELECT rank, median(end_ns - begin_ns), quantile_cont(end_ns - begin_ns, 0.9), count(*) "
        "FROM read_parquet(?, hive_partitioning = true) "
        "WHERE name = 'train_step' AND end_ns IS NOT NULL GROUP BY rank ORDER BY rank",
        [str(dataset / "_scopes" / "**" / "*.parquet")],
    ).fetchall()
    gpu1 = dict(
        con.execute(
            'SELECT host, avg("gpu.1.util_pct") FROM read_parquet(?, hive_partitioning = true, '
            "union_by_name = true) GROUP BY host",
            [str(dataset / "job=*" / "**" / "*.parquet")],
        ).fetchall()
    )
    report = build_cluster_report(dataset)
    rows = {r.rank: r for r in report.rows}
    assert [s[0] for s in steps] == sorted(rows)
    for rank, median, p90, count in steps:
        step = rows[rank].step
        assert step is not None and step.count == count
        assert step.median_s == pytest.approx(median / 1e9, abs=1e-12)
        assert step.p90_s == pytest.approx(p90 / 1e9, abs=1e-12)
    for rank in (1, 3):  # local rank 1: GPU 1 of its node, recorded by local rank 0
        value = rows[rank].figures["gpu_util_pct"].value
        assert value == pytest.approx(gpu1[rows[rank].host])


def _gpu_rank(rank: int, local: int, labels: list[int], owned: list[str] | None) -> Rank:
    """A rank on host "h" whose rows hold the GPU columns ``labels`` (devices ``GPU-L`` labelled
    L), with ``owned`` GPU UUIDs in its provenance (None: no such key, as older parts)."""
    cols = {f"gpu.{g}.util_pct": pa.array([float(10 * g + local)]) for g in labels}
    samples = pa.table({"mono_ns": pa.array([1], pa.int64()), **cols})
    devices = [{"label": g, "index": g, "uuid": f"GPU-{g}"} for g in labels]
    prov: dict[str, object] = {"identity": {"local_rank": local}, "gpus": {"devices": devices}}
    if owned is not None:
        prov["owned_gpus"] = owned
    return Rank("j", "h", rank, samples, None, prov)


def test_a_ranks_gpu_is_chosen_by_the_uuid_it_owns() -> None:
    """CUDA_VISIBLE_DEVICES=4,5,6,7: local rank 1 drives NVML GPU 5, not GPU 1; its node's
    leader records all eight. Without the UUIDs (older parts) the local rank still decides."""
    leader = _gpu_rank(0, 0, list(range(8)), ["GPU-4"])
    follower = _gpu_rank(1, 1, [], ["GPU-5"])
    node = [leader, follower]
    assert gpu_choice(follower, node) == GpuChoice([5], leader, "gpu.5 of rank 0 (by UUID)")
    assert gpu_choice(leader, node) == GpuChoice([4], leader, "gpu.4 (by UUID)")
    both = _gpu_rank(2, 0, list(range(8)), ["GPU-6", "GPU-7"])
    assert gpu_choice(both, [both]).labels == [6, 7]
    old = _gpu_rank(1, 1, [], None)
    assert gpu_choice(old, [leader, old]).labels == [1]
    # An owned UUID no rank of the node recorded (a MIG instance, or GPUs left out): as before.
    mig = _gpu_rank(1, 1, [], ["MIG-abc"])
    assert gpu_choice(mig, [leader, mig]).labels == [1]


HOSTILE_HOST = "<script>alert(1)</script> a|b\\|c *e* _f_ $x$ [l](u) &amp; ~~s~~ #"
HOSTILE_JOB = "j<b>|\n# h\t`c`"
HOSTILE_SCOPE = "load $\\x$ | <i>done</i>\n"


class _Cells(HTMLParser):
    """Text of each cell, heading and paragraph of an HTML page, and the tags seen."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[str, str]] = []
        self.tags: set[str] = set()
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag in ("td", "th", "h1", "h2", "p"):
            self.blocks.append((tag, ""))
            self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1] == tag:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._open:
            tag, text = self.blocks[-1]
            self.blocks[-1] = (tag, text + data)


def _shown(text: str) -> str:
    """How the report shows a name: control characters as their escapes."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def test_markdown_shows_hostile_names_as_text(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "ds", job=HOSTILE_JOB)
    lone = Identity(host=HOSTILE_HOST, rank=4, local_rank=0, world_size=5, job=HOSTILE_JOB)
    calls = pa.table(
        {
            "name": [HOSTILE_SCOPE] * 2,
            "path": [HOSTILE_SCOPE] * 2,
            "depth": pa.array([0, 0], pa.int32()),
            "begin_ns": [10, 300_000_010],
            "end_ns": [100_000_010, 400_000_010],
        }
    )
    write_scopes(calls, root, identity=lone, name="scopes-000001-000000.parquet")
    report = build_cluster_report(root, step=HOSTILE_SCOPE)
    md = report.markdown()
    # By hand: one line per table row, every special character escaped.
    row = next(line for line in md.splitlines() if line.startswith("| 4 |"))
    assert row.startswith(
        "| 4 | &lt;script&gt;alert(1)&lt;/script&gt; a\\|b\\\\\\|c \\*e\\* \\_f\\_ &#36;x&#36; "
        "\\[l\\](u) &amp;amp; &#126;&#126;s&#126;&#126; \\# | 0 | 2 |"
    )
    assert "\n## job j&lt;b&gt;\\|\\\\n\\# h\\\\t\\`c\\`\n" in md
    assert "<script" not in md and "<i>" not in md and "\n# h" not in md
    # Rendered by a Markdown implementation with tables: each name is one cell's exact text.
    markdown = pytest.importorskip("markdown")
    parser = _Cells()
    parser.feed(markdown.markdown(md, extensions=["tables"]))
    assert parser.tags <= {"h1", "h2", "p", "table", "thead", "tbody", "tr", "th", "td"}
    cells = [text for tag, text in parser.blocks if tag == "td"]
    assert cells.count(HOSTILE_HOST) == 2  # its rank row and its clock row
    width = len(rank_table(report, report.jobs[0])[0])
    rank_rows = [cells[i : i + width] for i, c in enumerate(cells) if c == "4"]
    assert rank_rows and rank_rows[0][1] == HOSTILE_HOST and rank_rows[0][3] == "2"
    texts = [text for _, text in parser.blocks]
    assert f"job {_shown(HOSTILE_JOB)}" in texts
    assert f"step: {HOSTILE_SCOPE!r} (given)" in texts
    assert f"job {_shown(HOSTILE_JOB)} rank 4: no clock anchor, its steps are not aligned" in texts


def _md_tables(md: str) -> list[list[list[str]]]:
    """Each pipe table of ``md`` as rows of cells (the alignment row left out)."""
    tables: list[list[list[str]]] = []
    previous = False
    for line in md.splitlines():
        is_row = line.startswith("|")
        if is_row and not re.fullmatch(r"\|(-+:?\|)+", line):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            if not previous:
                tables.append([])
            tables[-1].append(cells)
        previous = is_row
    return tables


@pytest.mark.parametrize("straggler", ["3,5", "100,100"])  # rank 3 straggles; nobody does
def test_every_markdown_column_has_a_name_and_a_value(
    dataset: Path, tmp_path: Path, straggler: str
) -> None:
    out = tmp_path / "r.md"
    assert main(["report", str(dataset), "--straggler", straggler, "-o", str(out)]) == 0
    tables = _md_tables(out.read_text())
    assert len(tables) >= 2  # ranks and clocks
    for header, *rows in tables:
        assert all(header), header  # no anonymous column
        for i, name in enumerate(header):
            assert any(r[i] for r in rows), f"column {name!r} is empty in every row"
        assert all(len(r) == len(header) for r in rows)
    [ranks] = [t for t in tables if t[0][:2] == ["rank", "host"] and "median" in t[0]]
    flagged = [r[0] for r in ranks[1:] if "STRAGGLER" in r]
    assert flagged == (["3"] if straggler == "3,5" else [])


def test_two_ranks_are_too_few_for_a_straggler(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    calls = _two_steps()
    for rank in (0, 1):
        who = Identity(host="gamma", rank=rank, local_rank=rank, world_size=2, job=JOB)
        write_scopes(calls, root, identity=who, name="scopes-000001-000000.parquet")
    report = build_cluster_report(root)
    assert report.stragglers == []
    assert report.notes[-1] == (
        f"job {JOB}: 2 rank(s) with step times: a straggler needs 3 or more ranks to stand out "
        "from the others"
    )
