"""Benchmark: a job of 8 ranks on this machine recording into one dataset (issue 13, "Scale").

Each rank is a process started with the variables torchrun sets (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``TORCHELASTIC_RUN_ID``: one job id for
all) that runs a :func:`stroboscope.cluster.rank_sampler` at ``--interval`` (100 Hz) writing Parquet
parts every ``--part-seconds`` into one dataset root; local rank 0 also samples the host and the
GPUs (by default 8 GPUs of the fake NVML library, ``tests/fake_nvml``, so the leader's columns
are those of an 8-GPU node; ``--real-gpus`` uses the machine's NVML instead). When the
Prometheus exporter is there, each rank serves one and scrapes itself once at the end.

Measured:

- CPU of every rank over the sampling window: the sampler thread's own clock
  (``stats().thread_cpu_ns``), the whole process (``getrusage``: the sampler, the part writer,
  the exporter, an idle main thread) and the whole run including start-up and the last part;
- bytes and files written per rank, as bytes per rank-hour;
- ``open_dataset`` + a DuckDB aggregate over all ranks (rows, mean CPU %, max RSS per rank),
  checked against the rows each rank says it recorded;
- Prometheus: series and bytes of each rank's ``/metrics`` (plain and gzip, as Prometheus asks).

Usage::

    python bench/cluster_bench.py [--seconds 60] [--ranks 8] [--interval 0.01]
        [--part-seconds 10] [--root DIR] [--real-gpus] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench_common import OtherLoad, cpu_model, log
from cluster_report import FAKE_GPUS, markdown

REPO = Path(__file__).resolve().parent.parent
FAKE_SOURCE = REPO / "tests" / "fake_nvml" / "fake_nvml.c"


def _fake_script(devices: int) -> str:
    lines = [f"devices {devices}", "driver 550.00.fake-bench"]
    for d in range(devices):
        lines += [f"set {d} util 42 43 44", f"set {d} power 250000 260000"]
    return "\n".join(lines) + "\n"


def _cpu_s(usage: resource.struct_rusage) -> float:
    return float(usage.ru_utime + usage.ru_stime)


# -- one rank ------------------------------------------------------------------------------------


def _scrape(port: int) -> dict[str, int]:
    """One scrape of this rank's exporter, as a Prometheus server would take it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        body: bytes = resp.read()
    lines = body.decode().splitlines()
    series = sum(1 for line in lines if line and not line.startswith("#"))
    families = sum(1 for line in lines if line.startswith("# TYPE "))
    return {
        "series": series,
        "families": families,
        "bytes": len(body),
        "gzip_bytes": len(gzip.compress(body)),
    }


def run_rank(args: argparse.Namespace) -> dict[str, Any]:
    """The child: one rank's sampler for ``args.seconds``; returns what it measured."""
    from stroboscope import cluster

    cpu0 = _cpu_s(resource.getrusage(resource.RUSAGE_SELF))
    ident = cluster.identity()
    sampler = cluster.rank_sampler(
        args.interval, identity=ident, dataset=args.root, segment_seconds=args.part_seconds
    )
    exporter: Any = None
    try:
        from stroboscope.cluster.prometheus import PrometheusExporter

        exporter = PrometheusExporter(sampler, port=0, identity=ident)
    except ImportError:
        pass
    sampler.start()
    window0 = time.monotonic()
    win_cpu0 = _cpu_s(resource.getrusage(resource.RUSAGE_SELF))
    thread0 = sampler.stats().thread_cpu_ns
    scrape: dict[str, int] | None = None
    while (left := window0 + args.seconds - time.monotonic()) > 0:
        time.sleep(min(left, 1.0))
    if exporter is not None:
        # One scrape covers the whole window here; Prometheus's 15 s scrapes see the same series.
        scrape = _scrape(exporter.port)
    stats = sampler.stats()
    window_s = time.monotonic() - window0
    win_cpu = _cpu_s(resource.getrusage(resource.RUSAGE_SELF)) - win_cpu0
    sampler.stop()  # writes the last part
    recorded_s = time.monotonic() - window0  # the time the parts cover, start to stop
    status = sampler.dataset_status
    rows = int(sampler.stats().rows_written)  # every row, the last part's included
    if exporter is not None:
        exporter.close()
    sampler.close()
    total_cpu = _cpu_s(resource.getrusage(resource.RUSAGE_SELF)) - cpu0
    children = _cpu_s(resource.getrusage(resource.RUSAGE_CHILDREN))
    return {
        "rank": ident.rank,
        "local_rank": ident.local_rank,
        "leader": cluster.is_node_leader(ident),
        "columns": int(stats.num_columns),
        "rows": rows,
        "ticks_missed": int(stats.ticks_missed),
        "window_s": window_s,
        "recorded_s": recorded_s,
        "thread_cpu_s": (stats.thread_cpu_ns - thread0) / 1e9,
        "process_cpu_s": win_cpu,
        "run_cpu_s": total_cpu,
        "children_cpu_s": children,
        "parts_written": None if status is None else int(status.segments_written),
        "scrape": scrape,
    }


# -- the job -------------------------------------------------------------------------------------


def _launch(args: argparse.Namespace, job: str, extra_env: dict[str, str]) -> list[Any]:
    procs = []
    for rank in range(args.ranks):
        env = dict(os.environ, **extra_env)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(args.ranks),
            LOCAL_WORLD_SIZE=str(args.ranks),
            GROUP_RANK="0",
            ROLE_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT="29500",
            TORCHELASTIC_RUN_ID=job,
        )
        opts = ["--seconds", args.seconds, "--interval", args.interval, "--root", args.root]
        opts += ["--part-seconds", args.part_seconds]
        cmd = [sys.executable, __file__, "--child", *map(str, opts)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    return procs


def _partition_sizes(root: Path) -> dict[int, dict[str, int]]:
    """Per rank: files and bytes under the dataset's sample and scope partitions, and the bytes
    of their Parquet footers (schema, provenance, statistics: a cost per file, not per row)."""
    import pyarrow.parquet as pq

    out: dict[int, dict[str, int]] = {}
    for path in root.rglob("*.parquet"):
        rank_dir = next((p for p in path.parents if p.name.startswith("rank=")), None)
        if rank_dir is None:
            continue
        entry = out.setdefault(int(rank_dir.name[5:]), {"files": 0, "bytes": 0, "footer": 0})
        entry["files"] += 1
        entry["bytes"] += path.stat().st_size
        entry["footer"] += pq.read_metadata(path).serialized_size + 8  # + length and magic
    return out


def _query(root: Path, repeats: int = 3) -> dict[str, Any]:
    """``open_dataset`` + one DuckDB aggregate over every rank, timed ``repeats`` times."""
    import duckdb
    from stroboscope.formats.dataset import open_dataset

    times: list[tuple[float, float]] = []
    result: list[Any] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dataset = open_dataset(root)
        t1 = time.perf_counter()
        con = duckdb.connect()
        con.register("samples", dataset)
        result = con.execute(
            'SELECT rank, count(*), avg("proc.cpu_pct"), max("proc.rss_bytes") '
            "FROM samples GROUP BY rank ORDER BY rank"
        ).fetchall()
        con.close()
        times.append((t1 - t0, time.perf_counter() - t1))
    return {
        "open_s": [t[0] for t in times],
        "query_s": [t[1] for t in times],
        "rows_per_rank": {int(r[0]): int(r[1]) for r in result},
        "cpu_pct_per_rank": {int(r[0]): float(r[2] or 0.0) for r in result},
    }


def run_job(args: argparse.Namespace) -> dict[str, Any]:
    """Start the ranks, wait for them, then measure the dataset they wrote."""
    extra_env: dict[str, str] = {}
    work = Path(tempfile.mkdtemp(prefix="stroboscope-cluster-bench-"))
    if not args.real_gpus:
        cc = shutil.which("cc") or shutil.which("gcc") or "cc"
        lib = work / "libfake_nvml.so"
        subprocess.run(
            [cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(FAKE_SOURCE)], check=True
        )
        script = work / "fake.txt"
        script.write_text(_fake_script(FAKE_GPUS))
        extra_env = {"STROBOSCOPE_NVML_LIBRARY": str(lib), "FAKE_NVML_SCRIPT": str(script)}
    if args.root is None:
        args.root = work / "dataset"
    root = Path(args.root)
    job = f"bench-{os.getpid()}"
    log(f"{args.ranks} ranks x {args.seconds:g} s at {1 / args.interval:g} Hz into {root}")
    other = OtherLoad()
    procs = _launch(args, job, extra_env)
    ranks: list[dict[str, Any]] = []
    rusage_cpu: dict[int, float] = {}
    for proc in procs:
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"rank process {proc.pid} exited with {proc.returncode}")
        report = json.loads(out.strip().splitlines()[-1])
        rusage_cpu[report["rank"]] = _cpu_s(usage)  # the whole process and what it reaped
        ranks.append(report)
    others = other.cores()
    sizes = _partition_sizes(root)
    query = _query(root)
    query["scaled"] = _query_at_scale(root, [1, *args.scale], args.ranks)
    shutil.rmtree(work, ignore_errors=True)
    return {
        "machine": cpu_model(),
        "cpus": os.cpu_count(),
        "other_cores": others,
        "args": {k: str(v) for k, v in vars(args).items()},
        "ranks": sorted(ranks, key=lambda r: r["rank"]),
        "rusage_cpu_s": rusage_cpu,
        "sizes": sizes,
        "query": query,
    }


# -- the dataset at scale -----------------------------------------------------------------------


def _replicate(root: Path, factor: int, ranks: int) -> Path:
    """A copy of the dataset as if ``factor`` times as many nodes had written it: each rank
    directory again under ``host=H-k/rank=R+k*ranks``, its parts hard-linked (no data copied)."""
    out = root.parent / f"{root.name}-x{factor}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for marker in root.glob("_*.json"):
        shutil.copy(marker, out / marker.name)
    for rank_dir in root.glob("job=*/host=*/rank=*"):
        job, host, rank = rank_dir.parent.parent.name, rank_dir.parent.name, int(rank_dir.name[5:])
        for k in range(factor):
            dest = out / job / (host if k == 0 else f"{host}-{k}") / f"rank={rank + k * ranks}"
            dest.mkdir(parents=True)
            for part in rank_dir.iterdir():
                os.link(part, dest / part.name)
    return out


def _query_at_scale(root: Path, factors: list[int], ranks: int) -> list[dict[str, Any]]:
    out = []
    for factor in factors:
        scaled = root if factor == 1 else _replicate(root, factor, ranks)
        q = _query(scaled, repeats=1)
        files = sum(1 for _ in scaled.glob("job=*/host=*/rank=*/*.parquet"))
        rows = sum(q["rows_per_rank"].values())
        out.append(
            {"factor": factor, "files": files, "rows": rows}
            | {"open_s": q["open_s"][0], "query_s": q["query_s"][0]}
        )
        if scaled != root:
            shutil.rmtree(scaled, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="sampling window (s)")
    parser.add_argument("--ranks", type=int, default=8, help="ranks on this machine")
    parser.add_argument("--interval", type=float, default=0.01, help="sampling interval (s)")
    parser.add_argument("--part-seconds", type=float, default=10.0, help="seconds per part")
    parser.add_argument("--root", type=Path, default=None, help="dataset root (default: temp)")
    parser.add_argument("--real-gpus", action="store_true", help="the machine's NVML, not fake")
    parser.add_argument(
        "--scale",
        type=lambda t: [int(x) for x in t.split(",")],
        default=[16, 125],
        help="also query the dataset replicated this many times (hard links), e.g. 16,125",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ranks < 1 or args.seconds <= 0 or args.interval <= 0 or args.part_seconds <= 0:
        parser.error("--ranks, --seconds, --interval and --part-seconds must be positive")
    if args.child:
        print(json.dumps(run_rank(args)), flush=True)
        return 0
    result = run_job(args)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
