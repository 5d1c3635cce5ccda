"""Real ranks for the dataset tests: child processes with torchrun's variables, each recording into
one dataset root, and the three readers (pyarrow, DuckDB, polars) reduced to the same figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# Variables of launchers and jobs that must not leak from the test's own environment into a rank.
_LAUNCH_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "MPI_", "TORCHELASTIC_", "KUBERNETES_", "GROUP_")
SAMPLES_GLOB = "job=*/host=*/rank=*/*.parquet"
"""The sample parts under a root (``**/*.parquet`` would take ``_scopes/`` too)."""
_LAUNCH_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "STROBOSCOPE_JOB")

RANK_SCRIPT = r"""
import json, os, sys, time
import pyarrow.parquet as pq
import stroboscope
from stroboscope.recording.sampler import Sampler

root, reference, scopes, host_rank = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# As stroboscope.cluster does: host-wide sources on one rank of the host, the process everywhere.
sources = ["cpu", "memory", "process"] if os.environ["RANK"] == host_rank else ["process"]
s = Sampler(0.01, sources=sources, dataset=root, segment_seconds=0.1, capacity=8192)
deadline = time.monotonic() + 60  # only for a sampler that cannot write at all
with s:
    for i in range(scopes):
        with stroboscope.annotate("step", index=i):
            time.sleep(0.005)
    while s.dataset_status.segments_written < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
# close() wrote the last part and the scope intervals; the ring still holds every row.
pq.write_table(s.snapshot().to_arrow(), reference)
status = s.dataset_status
print(json.dumps({"rows": s.stats().rows_written, "parts": status.segments_written,
                  "errors": status.errors, "pid": os.getpid()}))
"""


def rank_env(rank: int, local_rank: int, world: int, job: str | None) -> dict[str, str]:
    """The test's environment without any launcher's variables, plus torchrun's for one rank."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_LAUNCH_PREFIXES) and k not in _LAUNCH_NAMES
    }
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    env.update(RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world))
    env["LOCAL_WORLD_SIZE"] = str(world)
    if job is not None:
        env["STROBOSCOPE_JOB"] = job
    return env


def run_ranks(
    tmp: Path, root: Path, world: int, job: str, *, host_rank: int, scopes: int = 3
) -> list[dict[str, Any]]:
    """Start ``world`` ranks at once (they race to make the root), wait for all; each one's
    report (rows, parts, errors, pid) plus ``reference``, the path of its own full snapshot.
    Rank ``host_rank`` records the host-wide sources too."""
    script = tmp / "rank.py"
    script.write_text(RANK_SCRIPT)
    procs = []
    for rank in range(world):
        ref = tmp / f"reference-{rank}.parquet"
        cmd = [sys.executable, str(script), str(root), str(ref), str(scopes), str(host_rank)]
        env = rank_env(rank, rank, world, job)
        procs.append((ref, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)))
    reports = []
    try:
        for ref, proc in procs:
            out, _ = proc.communicate(timeout=180)
            assert proc.returncode == 0, out
            reports.append({**json.loads(out.strip().splitlines()[-1]), "reference": ref})
    finally:
        for _, proc in procs:  # a failed rank: the others are not left running or unread
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    return reports


def figures_arrow(table: pa.Table) -> dict[int, tuple[int, float, float, int]]:
    """Per rank: rows, sum of ``proc.rss_bytes``, mean of ``proc.cpu_pct``, non-null
    ``cpu.util_pct`` cells (0 where the column is absent)."""
    out = {}
    for rank in sorted(set(table.column("rank").to_pylist())):
        part = table.filter(pc.equal(table.column("rank"), rank))
        util = part.column("cpu.util_pct") if "cpu.util_pct" in part.column_names else None
        out[int(rank)] = (
            part.num_rows,
            float(pc.sum(part.column("proc.rss_bytes")).as_py() or 0),
            float(pc.mean(part.column("proc.cpu_pct")).as_py() or 0),
            0 if util is None else len(util) - util.null_count,
        )
    return out


def figures_duckdb(root: Path) -> dict[int, tuple[int, float, float, int]]:
    """The same figures through DuckDB's ``read_parquet`` (hive partitioning, union by name)."""
    import duckdb  # a test extra: imported where used, so files without it collect

    rows = duckdb.execute(
        f"""SELECT rank, count(*), sum("proc.rss_bytes"), avg("proc.cpu_pct"),
                   count("cpu.util_pct")
            FROM read_parquet('{root}/{SAMPLES_GLOB}', hive_partitioning = true,
                              union_by_name = true)
            GROUP BY rank ORDER BY rank"""
    ).fetchall()
    return {int(r): (int(n), float(s or 0), float(m or 0), int(u)) for r, n, s, m, u in rows}


def polars_schema(root: Path) -> dict[str, Any]:
    """The unified columns of the parts (``open_dataset``'s schema) as polars types: polars
    otherwise takes the first file's columns (docs/dataset.md)."""
    import polars as pl  # a test extra, imported where used
    from stroboscope.formats.dataset import PARTITIONING, open_dataset

    empty = pl.from_arrow(open_dataset(root).schema.empty_table())
    assert isinstance(empty, pl.DataFrame)
    return {n: t for n, t in empty.schema.items() if n not in PARTITIONING.names}


def figures_polars(root: Path) -> dict[int, tuple[int, float, float, int]]:
    """The same figures through polars' ``scan_parquet`` (hive partitioning; the columns of all
    parts, each inserted as nulls where a part lacks it)."""
    import polars as pl  # a test extra, imported where used

    frame = (
        pl.scan_parquet(
            f"{root}/{SAMPLES_GLOB}",
            hive_partitioning=True,
            hive_schema={"job": pl.String, "host": pl.String, "rank": pl.Int64},
            schema=polars_schema(root),
            missing_columns="insert",
        )
        .group_by("rank")
        .agg(
            pl.len().alias("n"),
            pl.col("proc.rss_bytes").sum().alias("s"),
            pl.col("proc.cpu_pct").mean().alias("m"),
            pl.col("cpu.util_pct").count().alias("u"),
        )
        .sort("rank")
        .collect()
    )
    return {
        int(r["rank"]): (int(r["n"]), float(r["s"] or 0), float(r["m"] or 0), int(r["u"]))
        for r in frame.iter_rows(named=True)
    }
