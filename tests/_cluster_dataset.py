"""The 4-rank, 2-host dataset of the cross-rank report's tests: one straggler, known step
times and known clock anchors, written through the dataset writer (the numbers the tests compute
by hand come from the tables here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from stroboscope._base.identity import Identity
from stroboscope.formats.dataset import write_part, write_scopes
from stroboscope.sampling._provenance import attach

JOB = "j1"
T0 = 1_790_000_000_000_000_000  # realtime ns of the runs' start
MONO0 = {"alpha": 1_000_000_000_000, "beta": 7_000_000_000_000}  # uptime at T0 (ns)
ANCHOR = {h: T0 - m for h, m in MONO0.items()}  # realtime - monotonic: 6000 s apart
ANCHOR_UNC = {0: 1_000, 1: 1_500, 2: 3_000, 3: 2_000}  # ns, per rank
HOST = {0: "alpha", 1: "alpha", 2: "beta", 3: "beta"}
LOCAL = {0: 0, 1: 1, 2: 0, 3: 1}
BASE_MS = {0: 100.0, 1: 104.0, 2: 98.0, 3: 130.0}  # rank 3 is the straggler
PATTERN_MS = [0.0, 2.0, -2.0, 1.0, -1.0, 0.0, 3.0, -3.0, 0.0, 0.0]  # median 0, p90 2.1
PERIOD = 200_000_000  # ns between step starts
DELAY = {"alpha": 0, "beta": 2_000_000}  # beta starts each step 2 ms after alpha (realtime)
ROWS, SPACING = 50, 40_000_000
SYNC = {
    "alpha": {"synchronized": True, "maxerror_ns": 2_000_000, "esterror_ns": 50_000},
    "beta": {"synchronized": True, "maxerror_ns": 5_000_000, "esterror_ns": 100_000},
}


def _values(rank: int, name: str) -> np.ndarray:
    """The column ``name`` of ``rank``: distinct, varied values (NaN: a null cell)."""
    i = np.arange(ROWS, dtype=np.float64)
    seed = rank * 7 + len(name)
    v = {
        "util_pct": 50 + (seed + 13 * i) % 40,
        "power_w": 200 + (seed + 17 * i) % 90,
        "mem_used_bytes": 1e9 * (10 + (seed + 5 * i) % 7),
        "cpu_pct": 90 + (seed + 11 * i) % 30,
        "rss_bytes": 1e8 * (20 + (seed + 3 * i) % 11),
    }[name.rsplit(".", 1)[1]]
    v[7] = np.nan  # one failed read
    return v


def _columns(rank: int) -> list[str]:
    own = ["proc.cpu_pct", "proc.rss_bytes"]
    if LOCAL[rank] == 0:  # local rank 0 records the host and both GPUs of its node
        own = ["cpu.util_pct", *own]
        own += [f"gpu.{g}.{m}" for g in (0, 1) for m in ("util_pct", "power_w", "mem_used_bytes")]
    return own


def _sync(host: str, **change: Any) -> dict[str, Any]:
    base = {"source": "adjtimex", "state": "TIME_OK", "status": 0, "reason": None}
    return {**base, **SYNC[host], **change}


def _identity(rank: int, job: str = JOB) -> Identity:
    return Identity(host=HOST[rank], rank=rank, local_rank=LOCAL[rank], world_size=4, job=job)


def _samples(rank: int, sync: dict[str, Any]) -> pa.Table:
    host = HOST[rank]
    mono = MONO0[host] + np.arange(ROWS, dtype=np.int64) * SPACING
    cols: dict[str, Any] = {
        "time": pa.array(mono + ANCHOR[host], pa.timestamp("ns", tz="UTC")),
        "mono_ns": pa.array(mono, pa.int64()),
    }
    for name in _columns(rank):
        v = _values(rank, name)
        kind = pa.int64() if name.endswith("_bytes") else pa.float64()
        cols[name] = pa.array(np.where(np.isnan(v), 0, v).astype(float), mask=np.isnan(v)).cast(
            kind
        )
    prov = {
        "host": host,
        "clock": {"anchor_ns": ANCHOR[host], "anchor_uncertainty_ns": ANCHOR_UNC[rank]},
        "clock_sync": sync,
    }
    return attach(pa.table(cols), prov)


def step_ms(rank: int) -> np.ndarray:
    return BASE_MS[rank] + np.array(PATTERN_MS)


def _scopes(rank: int) -> pa.Table:
    """10 closed ``train_step`` calls (depth 0) and one still open; 5 ``data`` calls (depth 0);
    20 ``forward`` calls (depth 1: more calls, but not a step)."""
    host = HOST[rank]
    rows: list[tuple[str, str, int, int, int | None]] = []
    for k, ms in enumerate(step_ms(rank)):
        begin = T0 + 100_000_000 + k * PERIOD + DELAY[host] - ANCHOR[host]
        rows.append(("train_step", "train_step", 0, begin, begin + round(ms * 1e6)))
        for j in range(2):
            rows.append(("forward", "train_step/forward", 1, begin + j, begin + j + 1_000))
        if k % 2 == 0:
            rows.append(("data", "data", 0, begin - 5_000_000, begin - 1_000_000))
    open_begin = T0 + 100_000_000 + 10 * PERIOD + DELAY[host] - ANCHOR[host]
    rows.append(("train_step", "train_step", 0, open_begin, None))
    rows.sort(key=lambda r: r[3])
    return pa.table(
        {
            "name": pa.array([r[0] for r in rows], pa.string()),
            "path": pa.array([r[1] for r in rows], pa.string()),
            "thread_id": pa.array([1] * len(rows), pa.int64()),
            "stack_id": pa.array([1] * len(rows), pa.uint64()),
            "depth": pa.array([r[2] for r in rows], pa.int32()),
            "begin_ns": pa.array([r[3] for r in rows], pa.int64()),
            "end_ns": pa.array([r[4] for r in rows], pa.int64()),
        }
    )


def make_dataset(
    root: Path,
    syncs: dict[str, dict[str, Any]] | None = None,
    *,
    job: str = JOB,
    with_scopes: bool = True,
) -> Path:
    """The 4-rank dataset: each rank's rows in two parts, its scopes in one."""
    for rank in range(4):
        sync = (syncs or {}).get(HOST[rank]) or _sync(HOST[rank])
        table = _samples(rank, sync)
        half = ROWS // 2
        who = _identity(rank, job)
        for i, part in enumerate((table.slice(0, half), table.slice(half))):
            write_part(part, root, identity=who, name=f"part-000001-{i:06d}.parquet")
        if with_scopes:
            scopes = attach(_scopes(rank), {"clock_sync": sync})
            write_scopes(scopes, root, identity=who, name="scopes-000001-000000.parquet")
    return root
