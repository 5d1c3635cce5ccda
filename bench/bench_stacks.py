"""Python stacks from outside: stroboscope's reader in the core against py-spy, side by side.

    python bench/bench_stacks.py [--rounds 5] [--seconds 3]
    python bench/bench_stacks.py --scale [--rows FILE] [--rows-seconds 60]

On the same programs, in one run: py-spy (``py-spy record --rate 1000 --nonblocking --format
raw``, the version installed) and a recorder process holding ``stroboscope.Sampler(0.001,
pid=TARGET, sources=["process"], stacks=True)``:

- samples taken per second per spinning thread, for 1 and 8 spinning threads (ours reads the
  idle main thread too; its samples are not counted here);
- each sampler's own CPU (share of one core while sampling): py-spy's whole process (wait4's
  rusage), ours the recorder process's CPU between start and stop (the C++ reader thread, the
  Python drain thread and the main thread; the reader thread alone is given too);
- the slowdown of a CPU-bound pure-Python loop (alternating runs, median of ``--rounds``);
- agreement with the truth program (alpha spins, beta at a 50 % duty cycle, gamma sleeps, each
  timing its own thread CPU clock): ours weighs each stack by the thread's CPU time, py-spy
  counts samples.

Prints a Markdown table for bench/RESULTS.md, with the CPU model. A few minutes on 2 cores.

``--scale`` measures the stored size instead (issue 31's target: 1 hour of 1 kHz stacks for 8
threads ≤ 10 % of the rows' size): 28.8 M synthetic samples (8 threads read together each
round at 1 ms steps with jitter; each thread's stack drawn from a Zipf-like spread over 2,000
stacks and changed every few ms; 6 busy threads at ~1 ms of CPU per sample, 2 idle) written by
``write_stacks_parts`` as a recording writes them, and once more as plain zstd Parquet (the
stored form before the encodings of ``formats.stacks``), against a real 1 kHz recording's
rows (``stroboscope record --interval 0.001``, default sources) scaled to an hour.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

SPIN = r"""
import sys, threading, time
n, seconds = int(sys.argv[1]), float(sys.argv[2])
sys.stdin.readline()
def spin():
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
ts = [threading.Thread(target=spin) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
"""

LOOP = r"""
import sys, time
work = int(sys.argv[1])
sys.stdin.readline()
def step(i):
    return (i * 7) % 13
t0 = time.perf_counter()
acc = 0
for i in range(work):
    acc += step(i)
print(time.perf_counter() - t0, flush=True)
"""

TRUTH = r"""
import json, sys, threading, time
SECONDS = float(sys.argv[1])
clocks = {}
def alpha():
    t0 = time.thread_time_ns(); end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        pass
    clocks["alpha"] = time.thread_time_ns() - t0
def beta():
    t0 = time.thread_time_ns(); end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        busy = time.monotonic() + 0.01
        while time.monotonic() < busy:
            pass
        time.sleep(0.01)
    clocks["beta"] = time.thread_time_ns() - t0
def gamma():
    t0 = time.thread_time_ns(); time.sleep(SECONDS)
    clocks["gamma"] = time.thread_time_ns() - t0
sys.stdin.readline()
ts = [threading.Thread(target=f) for f in (alpha, beta, gamma)]
for t in ts: t.start()
for t in ts: t.join()
print(json.dumps(clocks), flush=True)
"""

# The recorder of our side: samples TARGET's stacks until it exits, then writes the tables and
# what it measured of itself as JSON on stdout.
OURS = r"""
import json, os, sys, time
import stroboscope
from stroboscope.formats.stacks import write_stacks
pid, out = int(sys.argv[1]), sys.argv[2]
s = stroboscope.Sampler(0.001, pid=pid, sources=["process"], stacks=True)
cpu0, t0 = time.process_time_ns(), time.monotonic_ns()
s.start()
print("ready", flush=True)
while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split(") ")[1][0] != "Z":
    time.sleep(0.01)
s.stop()
cpu1, t1 = time.process_time_ns(), time.monotonic_ns()
samples, frames = s.stacks()
st = s.stats().stacks
write_stacks(samples, frames, out)
s.close()
print(json.dumps({"cpu_ns": cpu1 - cpu0, "wall_ns": t1 - t0, "reader_cpu_ns": st.thread_cpu_ns,
                  "samples": st.samples, "torn": st.torn, "failed": st.reads_failed,
                  "busy_ns": st.busy_ns, "ticks": st.ticks, "missed": st.missed_ticks}),
      flush=True)
"""


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def start_target(program: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", program, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def go(target: subprocess.Popen[str]) -> None:
    assert target.stdin is not None
    target.stdin.write("\n")
    target.stdin.flush()


def with_pyspy(target: subprocess.Popen[str], out: str) -> dict[str, Any]:
    spy = subprocess.Popen(
        [
            shutil.which("py-spy") or "py-spy",
            "record",
            "--rate",
            "1000",
            "--nonblocking",
            "--format",
            "raw",
            "-o",
            out,
            "--pid",
            str(target.pid),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # attached
    t0 = time.monotonic_ns()
    go(target)
    stdout, _ = target.communicate()
    t1 = time.monotonic_ns()
    _, status, usage = os.wait4(spy.pid, 0)
    spy.returncode = os.waitstatus_to_exitcode(status)
    counts: dict[str, int] = {}
    total = 0
    if os.path.exists(out):
        with open(out) as f:
            for line in f:
                stack, _, n = line.rstrip("\n").rpartition(" ")
                if not n.isdigit():
                    continue
                total += int(n)
                for frame in stack.split(";"):
                    name = frame.split(" (", 1)[0]
                    counts[name] = counts.get(name, 0) + int(n)
    cpu = (usage.ru_utime + usage.ru_stime) * 1e9
    return {"stdout": stdout, "wall_ns": t1 - t0, "cpu_ns": cpu, "samples": total, "counts": counts}


def with_ours(target: subprocess.Popen[str], out: str) -> dict[str, Any]:
    rec = subprocess.Popen(
        [sys.executable, "-c", OURS, str(target.pid), out], stdout=subprocess.PIPE, text=True
    )
    assert rec.stdout is not None
    assert rec.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # as long as py-spy is given
    t0 = time.monotonic_ns()
    go(target)
    stdout, _ = target.communicate()
    t1 = time.monotonic_ns()
    facts = json.loads(rec.stdout.readline())
    rec.wait()
    from stroboscope.formats.stacks import read_stacks

    samples, frames = read_stacks(out)
    holds: dict[int, set[str]] = {}
    for sid, fn in zip(frames["stack_id"].to_pylist(), frames["function"].to_pylist()):
        holds.setdefault(sid, set()).add(fn)
    cpu: dict[str, int] = {}
    counts: dict[str, int] = {}
    for sid, ns in zip(samples["stack_id"].to_pylist(), samples["cpu_ns"].to_pylist()):
        for fn in holds[sid]:
            cpu[fn] = cpu.get(fn, 0) + (ns or 0)
            counts[fn] = counts.get(fn, 0) + 1
    return {**facts, "stdout": stdout, "target_wall_ns": t1 - t0, "weights": cpu, "counts": counts}


def share(values: dict[str, float], names: list[str]) -> dict[str, float]:
    total = sum(values.get(n, 0) for n in names) or 1
    return {n: 100.0 * values.get(n, 0) / total for n in names}


SCALE_THREADS = 8
SCALE_STACKS = 2000
SCALE_ROUNDS_PER_PART = 125_000  # 1 M samples per part


def synthetic_frames(rng: Any) -> Any:
    """2,000 stacks 5-40 frames deep over 600 functions in 60 files (FRAMES_SCHEMA)."""
    import numpy as np
    import pyarrow as pa

    depths = rng.integers(5, 41, SCALE_STACKS)
    sid = np.repeat(np.arange(SCALE_STACKS, dtype=np.int32), depths)
    depth = np.concatenate([np.arange(d, dtype=np.int32) for d in depths])
    fn = rng.integers(0, 600, len(sid))
    return pa.table(
        {
            "stack_id": sid,
            "depth": depth,
            "function": [f"module_{f % 60}.Class{f % 7}.function_{f}" for f in fn],
            "file": [f"/opt/project/src/package/module_{f % 60}.py" for f in fn],
            "line": (fn * 13 % 900 + 1).astype(np.int32),
        }
    )


def synthetic_samples(rng: Any, seconds: float) -> Any:
    """Parts (tables of SAMPLES_SCHEMA) of ``seconds`` of 1 kHz stacks of 8 threads."""
    import numpy as np
    import pyarrow as pa

    weights = 1.0 / np.arange(1, SCALE_STACKS + 1) ** 1.1
    weights /= weights.sum()
    tids = np.arange(4242, 4242 + SCALE_THREADS, dtype=np.int32)
    names = ["python"] + [f"worker-{i}" for i in range(1, SCALE_THREADS)]
    busy = np.arange(SCALE_THREADS) < 6
    rounds = int(seconds * 1000)
    for start in range(0, rounds, SCALE_ROUNDS_PER_PART):
        n = min(SCALE_ROUNDS_PER_PART, rounds - start)
        jitter = np.clip(rng.normal(0, 30_000, n), -200_000, 200_000)
        mono = (10**12 + (start + np.arange(n)) * 1_000_000 + jitter).astype(np.int64)
        stack = np.empty((n, SCALE_THREADS), np.int32)
        for t in range(SCALE_THREADS):  # a new stack every ~5 ms (geometric), Zipf-like pick
            segment = np.cumsum(rng.random(n) < 0.2)
            picks = rng.choice(SCALE_STACKS, segment[-1] + 1, p=weights).astype(np.int32)
            stack[:, t] = picks[segment]
        cpu = np.where(
            busy,
            rng.normal(1_000_000, 20_000, (n, SCALE_THREADS)),
            np.abs(rng.normal(0, 3_000, (n, SCALE_THREADS))),
        ).astype(np.int64)
        yield pa.table(
            {
                "mono_ns": np.repeat(mono, SCALE_THREADS),
                "pid": np.full(n * SCALE_THREADS, 4242, np.int32),
                "tid": np.tile(tids, n),
                "stack_id": stack.reshape(-1),
                "cpu_ns": np.clip(cpu, 0, None).reshape(-1),
                "thread": pa.array(names * n, pa.string()),
            }
        )


def scale(rows_file: str | None, rows_seconds: float) -> None:
    """Print the stored size of an hour of 1 kHz stacks for 8 threads against the rows'."""
    import numpy as np
    import pyarrow.parquet as pq
    from stroboscope.formats.stacks import SAMPLES_SCHEMA, stacks_path, write_stacks_parts

    tmp = tempfile.mkdtemp(prefix="bench-stacks-scale-")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; {time.strftime('%m-%d %H:%M')}")
    if rows_file is None:
        rows_file = f"{tmp}/rows.parquet"
        subprocess.run(
            [
                *(sys.executable, "-m", "stroboscope", "record", "-q", "--interval", "0.001"),
                *("--duration", str(rows_seconds), "-o", rows_file),
            ],
            check=True,
        )
    meta = pq.ParquetFile(rows_file).metadata
    rows_hour = os.path.getsize(rows_file) * 3600 / rows_seconds
    raw_hour = pq.read_table(rows_file).nbytes * 3600 / rows_seconds  # as Arrow in memory
    print(
        f"rows: {meta.num_rows} rows x {meta.num_columns} columns in {rows_seconds:g} s, "
        f"{os.path.getsize(rows_file) / 1e6:.1f} MB -> {rows_hour / 1e6:.1f} MB an hour stored "
        f"({raw_hour / 1e6:.0f} MB an hour as Arrow in memory)"
    )
    frames = synthetic_frames(np.random.default_rng(1))
    out = f"{tmp}/run.parquet"
    t0 = time.perf_counter()
    n = 28_800_000
    write_stacks_parts(synthetic_samples(np.random.default_rng(2), 3600), frames, out, rows=n)
    took = time.perf_counter() - t0
    stored = os.path.getsize(stacks_path(out)) + os.path.getsize(f"{tmp}/run.stack_frames.parquet")
    t0 = time.perf_counter()
    with pq.ParquetWriter(f"{tmp}/plain.parquet", SAMPLES_SCHEMA, compression="zstd") as w:
        raw = 0
        for part in synthetic_samples(np.random.default_rng(2), 3600):
            raw += part.nbytes
            w.write_table(part.cast(SAMPLES_SCHEMA))
    plain_took = time.perf_counter() - t0
    plain = os.path.getsize(f"{tmp}/plain.parquet")
    got = pq.ParquetFile(stacks_path(out)).metadata.num_rows
    print(
        f"stacks: {got} samples; stored form {stored / 1e6:.1f} MB "
        f"({stored / got:.2f} B/sample, {100 * stored / rows_hour:.1f} % of the rows' hour; "
        f"written in {took:.1f} s); plain zstd {plain / 1e6:.1f} MB "
        f"({plain / got:.2f} B/sample, {100 * plain / rows_hour:.1f} %; {plain_took:.1f} s)"
    )
    print(
        f"against the rows' hour as Arrow in memory: stored form {100 * stored / raw_hour:.1f} %"
        f" (the samples as Arrow in memory: {raw / 1e6:.0f} MB, {raw / got:.1f} B/sample)"
    )
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--work", type=int, default=10_000_000, help="loop steps of the slowdown run")
    p.add_argument("--parts", default="rate,slowdown,truth", help="parts to run")
    p.add_argument("--scale", action="store_true", help="measure the stored size only")
    p.add_argument("--rows", help="--scale: a 1 kHz recording's rows (default: record one)")
    p.add_argument("--rows-seconds", type=float, default=60.0, help="--scale: its length (s)")
    a = p.parse_args()
    if a.scale:
        scale(a.rows, a.rows_seconds)
        return
    parts = set(a.parts.split(","))
    tmp = tempfile.mkdtemp(prefix="bench-stacks-")
    rows: list[tuple[str, str, str]] = []
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; {time.strftime('%m-%d %H:%M')}")

    # 1. samples per second per thread, and each sampler's own CPU, for 1 and 8 threads.
    for n in (1, 8) if "rate" in parts else ():
        spy = with_pyspy(start_target(SPIN, str(n), str(a.seconds)), f"{tmp}/spy{n}.txt")
        ours = with_ours(start_target(SPIN, str(n), str(a.seconds)), f"{tmp}/ours{n}.parquet")
        # Samples of the spinning threads (a stack holding `spin`): py-spy leaves idle threads
        # out (the main thread waiting in join), ours reads them too.
        spy_rate = spy["counts"].get("spin", 0) / n / (spy["wall_ns"] / 1e9)
        our_rate = ours["counts"].get("spin", 0) / n / (ours["target_wall_ns"] / 1e9)
        rows.append(
            (
                f"samples/s per thread, {n} spinning thread(s), 1 kHz asked",
                f"{our_rate:.0f}",
                f"{spy_rate:.0f}",
            )
        )
        rows.append(
            (
                f"sampler's own CPU, {n} thread(s) (share of one core)",
                f"{100 * ours['cpu_ns'] / ours['wall_ns']:.1f} % (reader thread "
                f"{100 * ours['reader_cpu_ns'] / ours['wall_ns']:.1f} %)",
                f"{100 * spy['cpu_ns'] / spy['wall_ns']:.1f} %",
            )
        )
        rows.append(
            (
                f"our reader's wall time per round, {n} thread(s); rounds taken / missed",
                f"{ours['busy_ns'] / max(ours['ticks'], 1) / 1e3:.1f} µs; "
                f"{ours['ticks']} / {ours['missed']}",
                "—",
            )
        )
        print(rows[-3], rows[-2], rows[-1], flush=True)

    # 2. slowdown of a CPU-bound loop: none / ours / py-spy, alternating, median of rounds.
    times: dict[str, list[float]] = {"none": [], "ours": [], "py-spy": []}
    for r in range(a.rounds if "slowdown" in parts else 0):
        t = start_target(LOOP, str(a.work))
        time.sleep(0.5)
        go(t)
        times["none"].append(float(t.communicate()[0]))
        times["ours"].append(
            float(with_ours(start_target(LOOP, str(a.work)), f"{tmp}/loop{r}.parquet")["stdout"])
        )
        times["py-spy"].append(
            float(with_pyspy(start_target(LOOP, str(a.work)), f"{tmp}/loop{r}.txt")["stdout"])
        )
    if "slowdown" in parts:
        base = statistics.median(times["none"])
        rows.append(
            (
                f"slowdown of a CPU-bound loop ({base:.2f} s alone; median of {a.rounds})",
                f"{100 * (statistics.median(times['ours']) / base - 1):+.1f} %",
                f"{100 * (statistics.median(times['py-spy']) / base - 1):+.1f} %",
            )
        )
        print(rows[-1], {k: [round(x, 3) for x in v] for k, v in times.items()}, flush=True)

    # 3. the truth program.
    if "truth" in parts:
        names = ["alpha", "beta", "gamma"]
        spy = with_pyspy(start_target(TRUTH, str(a.seconds)), f"{tmp}/truth.txt")
        ours = with_ours(start_target(TRUTH, str(a.seconds)), f"{tmp}/truth.parquet")
        want_spy = share(json.loads(spy["stdout"]), names)
        want_ours = share(json.loads(ours["stdout"]), names)
        got_spy = share(spy["counts"], names)
        got_ours = share(ours["weights"], names)

        def fmt(d: dict[str, float]) -> str:
            return "/".join(f"{d[n]:.1f}" for n in names)

        rows.append(
            (
                "truth: alpha/beta/gamma CPU share %, measured (their own clocks)",
                f"{fmt(got_ours)} ({fmt(want_ours)})",
                f"{fmt(got_spy)} ({fmt(want_spy)}; counts samples)",
            )
        )
        rows.append(
            (
                "truth: largest error, points",
                f"{max(abs(got_ours[n] - want_ours[n]) for n in names):.1f}",
                f"{max(abs(got_spy[n] - want_spy[n]) for n in names):.1f}",
            )
        )
        print(rows[-2], rows[-1], flush=True)
    shutil.rmtree(tmp, ignore_errors=True)

    print("\n| figure | stroboscope (reader in the core) | py-spy 0.4.3 --nonblocking |")
    print("| --- | --- | --- |")
    for row in rows:
        print(f"| {row[0]} | {row[1]} | {row[2]} |")


if __name__ == "__main__":
    main()
