"""Peak memory of the recorder: ``stroboscope record -o OUT --interval I -- python -c 'sleep'``,
its own peak RSS (``VmHWM`` of the recorder process) apart from its children's (the command,
the watchdog), and the recorder's RSS over time, to see whether it steps up at each segment.

A segment holds a quarter of the ring (``--capacity`` rows at ``--interval``): the default ring
at 1 kHz writes a segment every 16.4 s, so an hour is about 220 segments. ``--capacity 4096``
writes one every ~1 s, so ``--seconds 240 --capacity 4096`` writes as many segments as an hour
at the default ring does, in 4 minutes (the rows per segment are 16x fewer: say which was run).

Usage::

    python bench/bench_recorder_rss.py [--seconds 20] [--interval 0.001] [--capacity N]
        [--hour] [--repeat 1]

``--stats-hour``: no recording; the end's column statistics alone (``column_stats_of``, as the
clean end calls it over a joined output) over a synthetic hour at 1 kHz (3.6 M rows in row
groups of 16,384, 26 metric columns, a third of them filled every 100th row), in a fresh child
of the package in ``--tree`` (or this one): its peak RSS, the RSS before, the seconds, and
whether pandas got loaded. ``--hours H`` scales that file.

``--hour``: record 3600 s at the default ring (slow: an hour of wall time). ``--no-pandas``:
the recorder with pandas unimportable, to see what loading it (pyarrow does, on its first
``pa.array``/``pa.table`` of a non-Arrow object) costs the recorder. ``--tree DIR``: run the
package in DIR (a copy of ``python/`` from before a change, the built extension beside its
stub), for a before/after on one machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time


def _status_kib(pid: int, field: str) -> int | None:
    """``field`` (``VmHWM``, ``VmRSS``) of /proc/PID/status in KiB, None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    """The descendants of ``pid`` alive now (from /proc/*/stat's ppid)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        parent[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


# The recorder started from a tree (a copy of ``python/`` from before a change, the built
# extension copied beside its stub) and/or with pandas unimportable (pyarrow then never loads
# it: what pandas costs the recorder).
_WRAPPER = (
    "import runpy, sys\n"
    "tree, no_pandas = sys.argv.pop(1), sys.argv.pop(1) == '1'\n"
    "if tree:\n"
    "    sys.path.insert(0, tree)\n"
    "    sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__]\n"
    "if no_pandas:\n"
    "    sys.modules['pandas'] = None\n"
    "sys.argv[0] = 'stroboscope'\n"
    "runpy.run_module('stroboscope', run_name='__main__')\n"
)


def run(
    seconds: float,
    interval: float,
    capacity: int | None,
    no_pandas: bool = False,
    tree: str = "",
) -> dict[str, object]:
    """One recording; the recorder's peak and timeline and its children's peaks (KiB)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.parquet")
        head = ["-c", _WRAPPER, tree, "1" if no_pandas else "0"]
        cmd = [sys.executable, *head, "record", "-o", out, "-q"]
        cmd += ["--interval", str(interval)]
        if capacity is not None:
            cmd += ["--capacity", str(capacity)]
        cmd += ["--", sys.executable, "-c", f"import time; time.sleep({seconds})"]
        t0 = time.monotonic()
        log = open(os.path.join(d, "record.log"), "w+")  # noqa: SIM115 (closed below)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        # (s, VmRSS KiB, segment files: one pieces file and its index where segments are pieces)
        timeline: list[tuple[float, int, int]] = []
        child_peak: dict[int, tuple[str, int]] = {}
        hwm = 0
        while proc.poll() is None:
            rss = _status_kib(proc.pid, "VmRSS")
            hwm = max(hwm, _status_kib(proc.pid, "VmHWM") or 0)
            segs = sum(1 for n in os.listdir(d) if ".seg" in n or "pieces" in n)
            if rss is not None:
                timeline.append((time.monotonic() - t0, rss, segs))
            for c in _children(proc.pid):
                peak = _status_kib(c, "VmHWM")
                if peak is not None:
                    try:
                        with open(f"/proc/{c}/cmdline", "rb") as f:
                            name = f.read().replace(b"\0", b" ").decode()[:60]
                    except OSError:
                        name = "?"
                    child_peak[c] = (name, max(peak, child_peak.get(c, ("", 0))[1]))
            time.sleep(0.1)
        log.seek(0)
        text = log.read()
        log.close()
        if proc.returncode != 0:
            raise SystemExit(f"record exited {proc.returncode}:\n{text}")
        recorded = next((ln for ln in text.splitlines() if ln.startswith("recorded ")), "?")
        return {
            "wall_s": time.monotonic() - t0,
            "peak_kib": hwm,
            "timeline": timeline,
            "children": sorted(child_peak.values(), key=lambda t: -t[1]),
            "recorded": recorded,
        }


def make_hour(path: str, hours: float) -> tuple[int, int]:
    """A synthetic recording of ``hours`` at 1 kHz written a row group at a time: its rows and
    metric columns."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, group, metrics = int(3_600_000 * hours), 16_384, 26
    kinds = ["rate", "gauge", "counter"]
    fields = [pa.field("time", pa.timestamp("ns", tz="UTC")), pa.field("mono_ns", pa.int64())]
    fields += [
        pa.field(f"m{k}", pa.float64(), metadata={b"unit": b"%", b"kind": kinds[k % 3].encode()})
        for k in range(metrics)
    ]
    schema = pa.schema(fields)
    rng = np.random.default_rng(1)
    level = rng.random(metrics) * 50
    with pq.ParquetWriter(path, schema) as writer:
        for first in range(0, rows, group):
            n = min(group, rows - first)
            at = np.arange(first, first + n)
            mono = 10**12 + at * 1_000_000 + rng.integers(0, 30_000, n)
            cols: list[pa.Array] = [
                pa.Array.from_buffers(
                    pa.int64(), n, [None, pa.py_buffer(mono + 1_790 * 10**15)]
                ).view(pa.timestamp("ns", tz="UTC")),
                pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(mono)]),
            ]
            for k in range(metrics):
                values = level[k] + np.cumsum(rng.normal(0, 0.1, n))
                level[k] = values[-1]
                mask = None
                if k % 3 == 2:  # a third of them every 100th row
                    mask = pa.py_buffer(np.packbits(at % 100 == 0, bitorder="little"))
                cols.append(pa.Array.from_buffers(pa.float64(), n, [mask, pa.py_buffer(values)]))
            writer.write_batch(pa.RecordBatch.from_arrays(cols, schema=schema))
    return rows, metrics


# The end's column statistics over the file in argv[2], as ``record``'s clean end computes
# them over a joined output: a tree whose ``Clean.read`` gives parts (row groups) streams them;
# one whose ``read`` gives a table reads a few whole columns at a time.
_STATS = (
    "import sys, time\n"
    "tree, path = sys.argv[1], sys.argv[2]\n"
    "if tree:\n"
    "    sys.path.insert(0, tree)\n"
    "    sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__]\n"
    "import pyarrow.parquet as pq\n"
    "from stroboscope.analysis import column_stats as cs\n"
    "from stroboscope.recording._output import column_stats_of\n"
    "def rss(field):\n"
    "    return next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith(field))\n"
    "names = [n for n in pq.read_schema(path).names if n not in ('time', 'mono_ns')]\n"
    "def read_table(columns):\n"
    "    return pq.read_table(path, columns=['time', 'mono_ns', *columns])\n"
    "def read_parts(columns):\n"
    "    keep = None if columns is None else ['time', 'mono_ns', *columns]\n"
    "    with pq.ParquetFile(path) as f:\n"
    "        for g in range(f.num_row_groups):\n"
    "            yield f.read_row_group(g, columns=keep)\n"
    "streamed = hasattr(cs, 'column_stats_streamed')\n"
    "before, t0 = rss('VmRSS'), time.monotonic()\n"
    "text, span = column_stats_of(read_parts if streamed else read_table, names, {})\n"
    "print(streamed, before, rss('VmHWM'), time.monotonic() - t0, 'pandas' in sys.modules)\n"
    "print(text.splitlines()[0])\n"
)


def stats_hour(hours: float, tree: str) -> None:
    """Print the end's column statistics' peak over a synthetic recording of ``hours``."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hour.parquet")
        t0 = time.monotonic()
        rows, metrics = make_hour(path, hours)
        size = os.path.getsize(path) / 2**20
        print(f"file: {rows} rows x {metrics} metric columns, {size:.1f} MiB, made in "
              f"{time.monotonic() - t0:.1f} s")  # fmt: skip
        got = subprocess.run(
            [sys.executable, "-c", _STATS, tree, path], capture_output=True, text=True, check=True
        )
        head, first = got.stdout.splitlines()[:2]
        streamed, before, peak, seconds, pandas = head.split()
        print(
            f"column statistics ({'a row group at a time' if streamed == 'True' else 'whole'}"
            f" columns): peak RSS {int(peak) / 1024:.1f} MiB (before {int(before) / 1024:.1f}"
            f" MiB), {float(seconds):.2f} s, pandas loaded: {pandas}"
        )
        print(f"  {first}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.001)
    parser.add_argument("--capacity", type=int, default=None)
    parser.add_argument("--hour", action="store_true", help="3600 s at the default ring")
    parser.add_argument(
        "--no-pandas", action="store_true", help="the recorder with pandas unimportable"
    )
    parser.add_argument("--tree", default="", help="run the package found in this directory")
    parser.add_argument(
        "--stats-hour", action="store_true", help="the end's column statistics alone (see above)"
    )
    parser.add_argument("--hours", type=float, default=1.0, help="with --stats-hour")
    args = parser.parse_args()
    seconds = 3600.0 if args.hour else args.seconds
    with open("/proc/cpuinfo") as info:
        cpu = next((ln.split(":", 1)[1].strip() for ln in info if "model name" in ln), "?")
    tree = os.path.abspath(args.tree) if args.tree else ""
    if args.stats_hour:
        print(f"CPU: {cpu}; {os.cpu_count()} CPUs; tree {tree!r}")
        stats_hour(args.hours, tree)
        return
    print(f"CPU: {cpu}; {os.cpu_count()} CPUs; {seconds:g} s at {args.interval:g} s; tree {tree!r}")
    got = run(seconds, args.interval, args.capacity, args.no_pandas, tree)
    tl = got["timeline"]
    assert isinstance(tl, list)
    print(f"recorder peak RSS (VmHWM): {int(got['peak_kib']) / 1024:.1f} MiB")  # type: ignore[call-overload]
    print(got["recorded"])
    step = max(1, len(tl) // 12)
    for t, rss, segs in tl[::step] + tl[-1:]:
        print(f"  t={t:6.1f} s  RSS {rss / 1024:6.1f} MiB  segment files {segs}")
    for name, peak in got["children"]:  # type: ignore[attr-defined]
        print(f"child peak {peak / 1024:6.1f} MiB  {name}")


if __name__ == "__main__":
    main()
