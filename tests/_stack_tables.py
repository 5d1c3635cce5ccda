"""Hand-made stack tables for the tests of the stack weights in the summary and the report: two
threads sampled at every row of a 200-row recording (1 ms apart), with known stacks, CPU times
and a GPU's power, and the weights worked out by hand from the rules in words."""

from __future__ import annotations

import pyarrow as pa

MS = 1_000_000
ROWS = 200
STACK_FRAMES = {  # stack id: its functions, root first
    1: ["main", "alpha"],
    2: ["main", "beta"],
    3: ["worker", "gamma"],
    4: ["main", "beta", "beta"],  # recursion: beta counted once in its total
}
LINES = {"main": 1, "alpha": 10, "beta": 20, "worker": 30, "gamma": 40}


def main_stack(i: int) -> int:
    """Thread 11's stack at row ``i``: alpha, then beta (recursing at rows 120..129)."""
    return 1 if i < 100 else 4 if 120 <= i < 130 else 2


def worker_cpu(i: int) -> int | None:
    """Thread 12's CPU time (ns) since its previous sample: 0.1 ms every 10th row."""
    return None if i == 0 else (MS // 10 if i % 10 == 0 else 0)


def stacks(mono0: int = 0) -> tuple[pa.Table, pa.Table]:
    """Two threads (tid 11 busy, tid 12 mostly idle) sampled at every row (1 ms apart from
    ``mono0``), in pid 7."""
    rows = []
    for i in range(ROWS):
        rows.append((mono0 + i * MS, 7, 11, main_stack(i), None if i == 0 else MS))
        rows.append((mono0 + i * MS, 7, 12, 3, worker_cpu(i)))
    names = ["mono_ns", "pid", "tid", "stack_id", "cpu_ns"]
    samples = pa.table({k: [r[j] for r in rows] for j, k in enumerate(names)})
    samples = samples.append_column("thread", pa.nulls(len(rows), pa.string()))
    fr = [(sid, d, fn) for sid, fns in STACK_FRAMES.items() for d, fn in enumerate(fns)]
    frames = pa.table(
        {
            "stack_id": pa.array([f[0] for f in fr], pa.int32()),
            "depth": pa.array([f[1] for f in fr], pa.int32()),
            "function": [f[2] for f in fr],
            "file": ["prog.py"] * len(fr),
            "line": pa.array([LINES[f[2]] for f in fr], pa.int32()),
        }
    )
    return samples, frames


POWER = [100.0 if i < 100 else 300.0 for i in range(ROWS)]
CPU_PCT = 50.0


def weight_of(tid: int, i: int, weight: str) -> float:
    """The weight of thread ``tid``'s sample at row ``i`` by the rule in words
    (docs/stacks.md): ``cpu`` its CPU time since the thread's previous sample (ns), ``wall``
    the time since it (ns), ``power`` the energy (J) of the 1 ms up to the row (the power
    linear between its readings) shared between the row's two samples by their CPU time since
    their previous sample, ``cpu_pct`` the same of a constant :data:`CPU_PCT` (%·s); a thread's
    first sample and the first row carry nothing."""
    main_cpu = 0 if i == 0 else MS
    cpu = main_cpu if tid == 11 else worker_cpu(i) or 0
    if weight == "cpu":
        return float(cpu)
    if weight == "wall":
        return 0.0 if i == 0 else float(MS)
    level = POWER if weight == "power" else [CPU_PCT] * ROWS  # "cpu_pct": a constant %
    ran = main_cpu + (worker_cpu(i) or 0)
    area = (level[i - 1] + level[i]) / 2 * 0.001  # linear between readings, over 1 ms
    return 0.0 if i == 0 else area * (cpu / ran if ran else 0.5)


def functions_of(tid: int, i: int) -> list[str]:
    """The functions of thread ``tid``'s stack at row ``i``, root first."""
    return STACK_FRAMES[main_stack(i) if tid == 11 else 3]


def hand(tid: int, lo: int, hi: int, weight: str = "cpu") -> dict[str, tuple[float, float, int]]:
    """Per function: (self, total, samples) of thread ``tid``'s samples at rows [lo, hi)
    (:func:`weight_of`); a function on a stack twice counts once in its total."""
    out: dict[str, list[float]] = {}
    for i in range(lo, hi):
        w = weight_of(tid, i, weight)
        fns = functions_of(tid, i)
        for fn in dict.fromkeys(fns):
            got = out.setdefault(fn, [0.0, 0.0, 0])
            got[1] += w
            got[2] += 1
        out[fns[-1]][0] += w
    return {k: (v[0], v[1], int(v[2])) for k, v in out.items()}


def hand_paths(
    tids: tuple[int, ...], lo: int, hi: int, weight: str = "cpu"
) -> dict[str, tuple[float, int]]:
    """Per path of functions from the root (``main;beta``): (weight, samples) of the samples
    of threads ``tids`` at rows [lo, hi) whose stack starts with it (a flame graph's boxes)."""
    out: dict[str, list[float]] = {}
    for tid in tids:
        for i in range(lo, hi):
            fns = functions_of(tid, i)
            for d in range(1, len(fns) + 1):
                got = out.setdefault(";".join(fns[:d]), [0.0, 0])
                got[0] += weight_of(tid, i, weight)
                got[1] += 1
    return {k: (v[0], int(v[1])) for k, v in out.items()}
