"""The partitioned dataset: layout, encoding, whole files, provenance, and one dataset read the same
by pyarrow, DuckDB and polars after real ranks (child processes with torchrun's variables) wrote
it; ``record --dataset``."""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import stroboscope
from _dataset_ranks import figures_arrow, figures_duckdb, figures_polars, rank_env, run_ranks
from stroboscope._base.identity import Identity
from stroboscope.cli import main
from stroboscope.formats.dataset import (
    MARKER,
    ensure_root,
    is_dataset,
    open_dataset,
    write_part,
    write_scopes,
)
from stroboscope.sampling._provenance import from_schema

# DuckDB and polars are test extras: skipped, not failed, where they are missing.
duckdb = pytest.importorskip("duckdb")
pl = pytest.importorskip("polars")

TIME = pa.timestamp("ns", "UTC")


def rows(mono: list[int], **columns: list[float]) -> pa.Table:
    """A sample table as frames have it: ``time``, ``mono_ns`` and metric columns."""
    data: dict[str, pa.Array] = {
        "time": pa.array([m + 1_000_000_000 for m in mono], TIME),
        "mono_ns": pa.array(mono, pa.int64()),
    }
    data.update({k: pa.array(v, pa.float64()) for k, v in columns.items()})
    return pa.table(data)


def test_layout_paths_encoding_modes_and_provenance(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    who = Identity(host="node-1", rank=3, local_rank=1, world_size=8, job="exp 1/a=b%")
    path = write_part(rows([1, 2], x=[1.0, 2.0]), root, identity=who, name="part-s-000001.parquet")
    # Percent-encoded as a URI segment (by hand): space %20, slash %2F, '=' %3D, '%' %25.
    want = root / "job=exp%201%2Fa%3Db%25" / "host=node-1" / "rank=3" / "part-s-000001.parquet"
    assert path == str(want) and want.is_file()
    assert json.loads((root / MARKER).read_text()) == {"format": "stroboscope-dataset", "layout": 1}
    assert is_dataset(root) and not is_dataset(tmp_path)
    assert stat.S_IMODE(os.stat(want).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(want.parent).st_mode) == 0o700
    assert [p.name for p in want.parent.iterdir()] == [want.name]  # no temporary left behind
    prov = from_schema(pq.read_schema(want))
    assert (
        prov is not None
        and prov["identity"]["rank"] == 3
        and prov["identity"]["job"] == "exp 1/a=b%"
    )
    assert prov["partition"] == {"job": "exp 1/a=b%", "host": "node-1", "rank": 3}
    table = open_dataset(root).to_table()
    assert table.column("job").to_pylist() == ["exp 1/a=b%"] * 2  # decoded again
    assert table.column("host").to_pylist() == ["node-1"] * 2
    assert table.schema.field("rank").type == pa.int64()
    assert table.column("x").to_pylist() == [1.0, 2.0]
    # DuckDB and polars decode the segment the same way.
    got = duckdb.execute(
        f"SELECT DISTINCT job FROM read_parquet('{root}/**/*.parquet', hive_partitioning=true)"
    )
    assert got.fetchall() == [("exp 1/a=b%",)]
    lazy = pl.scan_parquet(f"{root}/**/*.parquet", hive_partitioning=True)
    assert lazy.select("job").unique().collect()["job"].to_list() == ["exp 1/a=b%"]


def test_a_process_without_rank_or_job_gets_rank_0_and_job_none(tmp_path: Path) -> None:
    path = write_part(
        rows([5]), tmp_path / "ds", identity=Identity(host="h"), name="part-a.parquet"
    )
    assert Path(path).parent == tmp_path / "ds" / "job=none" / "host=h" / "rank=0"


def test_schema_is_unified_over_ranks_with_and_without_host_columns(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    host0 = Identity(host="a", rank=0, local_rank=0, job="j")
    host1 = Identity(host="a", rank=1, local_rank=1, job="j")
    other = Identity(host="b", rank=2, local_rank=0, job="j")
    write_part(
        rows([1, 2], **{"cpu.util_pct": [10.0, 20.0], "proc.cpu_pct": [1.0, 2.0]}),
        root,
        identity=host0,
        name="part-1.parquet",
    )
    write_part(rows([3], **{"proc.cpu_pct": [4.0]}), root, identity=host1, name="part-1.parquet")
    write_part(
        rows([4], **{"cpu.util_pct": [30.0], "proc.cpu_pct": [8.0]}),
        root,
        identity=other,
        name="part-1.parquet",
    )
    ds = open_dataset(root)
    names = ds.schema.names
    assert set(names) == {"time", "mono_ns", "cpu.util_pct", "proc.cpu_pct", "job", "host", "rank"}
    table = ds.to_table().sort_by("mono_ns")
    assert table.column("rank").to_pylist() == [0, 0, 1, 2]
    assert table.column("host").to_pylist() == ["a", "a", "a", "b"]
    assert table.column("cpu.util_pct").to_pylist() == [10.0, 20.0, None, 30.0]
    assert table.column("proc.cpu_pct").to_pylist() == [1.0, 2.0, 4.0, 8.0]
    # Filters on partition columns prune to the matching parts.
    only = ds.to_table(filter=pc.field("rank") == 1)
    assert only.num_rows == 1 and only.column("mono_ns").to_pylist() == [3]


def test_parts_are_never_replaced_but_a_runs_scopes_file_is(tmp_path: Path) -> None:
    root, who = tmp_path / "ds", Identity(host="h", rank=0, job="j")
    write_part(rows([1]), root, identity=who, name="part-x-000001.parquet")
    with pytest.raises(FileExistsError, match="part-x-000001"):
        write_part(rows([2]), root, identity=who, name="part-x-000001.parquet")
    assert open_dataset(root).to_table().column("mono_ns").to_pylist() == [1]
    scopes = pa.table({"name": ["a"], "begin_ns": [1], "end_ns": [2]})
    write_scopes(scopes, root, identity=who, name="scopes-x.parquet")
    write_scopes(pa.concat_tables([scopes, scopes]), root, identity=who, name="scopes-x.parquet")
    got = open_dataset(root, kind="scopes").to_table()
    assert got.num_rows == 2 and got.column("rank").to_pylist() == [0, 0]
    assert open_dataset(root).to_table().num_rows == 1  # scopes are not samples


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("x.parquet", ValueError),
        ("part-1.csv", ValueError),
        ("part-a/b.parquet", ValueError),
        (3, TypeError),
    ],
)
def test_bad_part_names_are_refused(tmp_path: Path, name: object, error: type) -> None:
    with pytest.raises(error, match="name"):
        write_part(rows([1]), tmp_path / "ds", identity=Identity(host="h"), name=name)  # type: ignore[arg-type]


def test_bad_arguments_and_roots(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="identity must be a stroboscope Identity"):
        write_part(rows([1]), tmp_path / "ds", identity={"host": "h"}, name="part-1.parquet")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"table must be a pyarrow\.Table"):
        write_part({"a": [1]}, tmp_path / "ds", identity=Identity(host="h"), name="part-1.parquet")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"not a stroboscope dataset .* not empty"):
        ensure_root(busy)
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a directory"):
        ensure_root(tmp_path / "file")
    with pytest.raises(ValueError, match="is not a stroboscope dataset"):
        open_dataset(busy)
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / MARKER).write_text('{"format": "stroboscope-dataset", "layout": 99}')
    with pytest.raises(ValueError, match="layout 99"):
        ensure_root(newer)
    ensure_root(tmp_path / "empty")
    with pytest.raises(ValueError, match="kind must be one of"):
        open_dataset(tmp_path / "empty", kind="traces")
    empty = open_dataset(tmp_path / "empty")
    assert empty.to_table().num_rows == 0 and empty.schema.names == ["job", "host", "rank"]
    no_scopes = open_dataset(tmp_path / "empty", kind="scopes")  # no _scopes tree yet
    assert no_scopes.to_table().num_rows == 0 and no_scopes.schema.names == ["job", "host", "rank"]


def test_parts_disagreeing_on_a_type_are_named(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write_part(
        pa.table({"v": pa.array([1.0])}),
        root,
        identity=Identity(host="h", rank=0),
        name="part-1.parquet",
    )
    write_part(
        pa.table({"v": pa.array(["x"])}),
        root,
        identity=Identity(host="h", rank=1),
        name="part-1.parquet",
    )
    with pytest.raises(ValueError, match="disagree on a column's type"):
        open_dataset(root)


def test_real_ranks_write_one_dataset_read_alike_by_pyarrow_duckdb_and_polars(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ds"
    # Rank 1 samples the host: the first part in path order (rank 0's) lacks the host columns,
    # so a reader that takes the first file's schema would drop them.
    reports = run_ranks(tmp_path, root, world=3, job="train-42", host_rank=1)
    ds = stroboscope.open_dataset(root)
    table = ds.to_table()
    host = socket.gethostname()
    for rank, report in enumerate(reports):
        assert report["errors"] == 0 and report["parts"] >= 2
        mine = table.filter(pc.equal(table.column("rank"), rank)).sort_by("mono_ns")
        reference = pq.read_table(report["reference"]).sort_by("mono_ns")  # the rank's own ring
        assert mine.num_rows == report["rows"] == reference.num_rows  # every row, once
        for column in ("mono_ns", "time", "proc.rss_bytes", "proc.cpu_pct"):
            assert mine.column(column).to_pylist() == reference.column(column).to_pylist(), column
        assert set(mine.column("job").to_pylist()) == {"train-42"}
        assert set(mine.column("host").to_pylist()) == {host}
        # Host-wide columns are in rank 1's parts only; null in the others' rows.
        util = mine.column("cpu.util_pct")
        assert (util.null_count < len(util)) if rank == 1 else (util.null_count == len(util))
        files = sorted(
            (root / "job=train-42" / f"host={host}" / f"rank={rank}").glob("part-*.parquet")
        )
        assert len(files) == report["parts"]
        for f in files:
            prov = from_schema(pq.read_schema(f))
            assert prov is not None and prov["identity"]["rank"] == rank
            assert prov["identity"]["world_size"] == 3 and prov["pid"] == report["pid"]
            assert prov["clock"]["anchor_ns"] is not None
    # One dataset, three readers, the same figures per rank.
    arrow = figures_arrow(table)
    assert sorted(arrow) == [0, 1, 2]
    for other in (figures_duckdb(root), figures_polars(root)):
        assert other.keys() == arrow.keys()
        for rank in arrow:  # sums and means computed in another order: equal to rounding
            assert other[rank][0] == arrow[rank][0] and other[rank][3] == arrow[rank][3]
            assert other[rank][1:3] == pytest.approx(arrow[rank][1:3], rel=1e-12)
    scopes = stroboscope.open_dataset(root, kind="scopes").to_table()
    for rank in range(3):
        mine = scopes.filter(pc.equal(scopes.column("rank"), rank))
        assert mine.column("name").to_pylist() == ["step"] * 3
        assert all(
            e > b
            for b, e in zip(mine.column("begin_ns").to_pylist(), mine.column("end_ns").to_pylist())
        )


def test_record_dataset_writes_this_ranks_parts_equal_to_its_output_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for k in list(os.environ):
        monkeypatch.delenv(k)
    for k, v in rank_env(2, 0, 4, None).items():
        monkeypatch.setenv(k, v)
    root, out = tmp_path / "ds", tmp_path / "all.parquet"
    argv = ["record", "--dataset", str(root), "--job", "cli", "--duration", "0.3", "-q"]
    assert main([*argv, "--sources", "memory,process", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"dataset {root}:" in printed and "job 'cli'" in printed and "rank 2" in printed
    table = open_dataset(root).to_table().sort_by("mono_ns")
    whole = pq.read_table(out)
    assert table.num_rows == whole.num_rows > 0
    assert table.column("mono_ns").to_pylist() == whole.column("mono_ns").to_pylist()
    assert set(table.column("rank").to_pylist()) == {2} and set(
        table.column("job").to_pylist()
    ) == {"cli"}
    # --dataset alone: no FILE, a private spool that is gone afterwards; another job id.
    before = set(os.listdir(tmp_path))
    assert main([*argv[:4], "cli-2", "--duration", "0.2", "-q", "--sources", "process"]) == 0
    assert set(os.listdir(tmp_path)) == before
    again = open_dataset(root).to_table()
    assert set(again.column("job").to_pylist()) == {"cli", "cli-2"}


def test_record_job_without_dataset_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert (
        main(["record", "--job", "j", "--duration", "0.1", "-o", str(tmp_path / "x.parquet")]) == 2
    )
    assert "--job names the job of a dataset" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_a_root_another_rank_makes_a_dataset_meanwhile_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another rank's whole sequence (marker, then its partition) falls between this rank's look
    # for the marker and its listing of the root: the listing shows a dataset, not foreign files.
    from stroboscope.formats import dataset

    root = tmp_path / "ds"
    root.mkdir()
    real = dataset._read_marker
    looks: list[str] = []

    def late(path: str) -> dict[str, object] | None:
        looks.append(path)
        if len(looks) == 1:
            write_part(rows([1]), root, identity=Identity(host="h", rank=1), name="part-1.parquet")
            return None  # this rank looked before the other wrote it
        return real(path)

    monkeypatch.setattr(dataset, "_read_marker", late)
    assert ensure_root(root) == str(root)
    monkeypatch.setattr(dataset, "_read_marker", real)
    write_part(rows([2]), root, identity=Identity(host="h", rank=0), name="part-1.parquet")
    assert sorted(open_dataset(root).to_table().column("rank").to_pylist()) == [0, 1]


def test_the_code_in_docs_dataset_md_runs_and_its_readers_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in rank_env(0, 0, 1, "docs").items():
        monkeypatch.setenv(k, v)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k)  # a single process, as the docs' example runs
    root = str(tmp_path / "ds")
    other = Identity(host="node-b", rank=1, local_rank=0, job="docs")
    cpu = {"proc.cpu_pct": [4.0, 6.0]}
    write_part(rows([1, 2], **cpu), root, identity=other, name="part-a-000001.parquet")
    text = (Path(__file__).resolve().parent.parent / "docs" / "dataset.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    assert len(blocks) == 4
    scope: dict[str, object] = {"root": root}

    def train() -> None:  # the docs' workload: until the sampler has written a few rows
        sampler = scope["s"]
        assert isinstance(sampler, stroboscope.Sampler)
        deadline = time.monotonic() + 60
        while sampler.stats().rows_written < 3 and time.monotonic() < deadline:
            time.sleep(0.005)

    scope["train"] = train
    for block in blocks:
        exec(compile(block, "docs/dataset.md", "exec"), scope)  # our own docs
    table = scope["table"]
    assert isinstance(table, pa.Table) and table.column("mono_ns").to_pylist() == [1, 2]
    per_rank = scope["per_rank"]
    assert isinstance(per_rank, list) and [r[2] for r in per_rank] == [0, 1]
    assert per_rank[1][3] == 2 and per_rank[1][4] == pytest.approx(5.0)
    polars = scope["per_rank_pl"]
    assert isinstance(polars, pl.DataFrame)
    assert sorted(polars.rows()) == sorted((r[2], r[3], r[4]) for r in per_rank)


def test_record_dataset_on_a_local_rank_other_than_0_records_its_process_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stroboscope.cluster import PROCESS_SOURCES

    for k, v in rank_env(3, 1, 4, "roles").items():
        monkeypatch.setenv(k, v)
    root = tmp_path / "ds"
    assert main(["record", "--dataset", str(root), "--duration", "0.2", "-q"]) == 0
    table = open_dataset(root).to_table()
    assert table.num_rows > 0 and set(table.column("rank").to_pylist()) == {3}
    metrics = [n for n in table.column_names if n not in ("time", "mono_ns", "job", "host", "rank")]
    prefixes = {n.split(".")[0] for n in metrics}
    assert prefixes and prefixes <= {"proc", "threads", "tree"}, prefixes  # no cpu., mem., gpu.
    prov = from_schema(pq.read_schema(open_dataset(root).files[0]))
    assert prov is not None
    assert {s["name"] for s in prov["sources"]} <= set(PROCESS_SOURCES)
