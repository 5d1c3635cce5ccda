"""The house: the figures of "one house, one answer", measured in one run.

Run before and after the regrouping of the Python layer, on the same machine, and compare::

    python bench/house.py                   # 60 s record run, about 1.5 min in all
    python bench/house.py --quick           # 10 s record run, fewer repeats (about 30 s)
    python bench/house.py --json out.json   # also every raw number
    python bench/house.py --only d          # one figure (or several: --only bd)

It measures whatever ``stroboscope`` is importable (``PYTHONPATH=CHECKOUT/python`` picks one),
and every subprocess it starts inherits that. The figures:

a. **Imports against the room table**: ``len(violations())`` of ``tests/test_rooms.py`` (loaded by
   path; ``--rooms`` names another copy), i.e. run-time imports of one room from a room the table
   of DESIGN.md does not let it import, plus modules outside every room.
b. **``Sampler.snapshot().to_arrow()`` of 1,000 rows** (``stroboscope.Sampler``, default sources,
   rows made with ``tick_now``) against the core's own path on the same sampler: the ``_core``
   sampler's ``snapshot()`` read into a :class:`pyarrow.Table` through its Arrow C stream, with
   nothing else. Interleaved, median of many repeats, and the ratio of the medians.
c. **The first scope's cost** in a fresh process: a ``stroboscope.Sampler`` is started, then the
   first ``with stroboscope.annotate("x"): pass`` is timed, as the user's code pays it: the first
   lookup of ``stroboscope.annotate`` (the face loads the scopes on first use) plus the scope's
   enter and exit (both reported apart too), against the median of the next 100 statements.
   Median over a few processes. It passes when the statement imports no module (the imports are
   paid when the sampler starts or scopes are enabled).
d. **A clean ``stroboscope record``** at 1 kHz of ``sleep D`` (D = 60 s, 10 with ``--quick``),
   without ``--duration``: the recording ends when the command exits, so "after the command
   exits" is well defined. The command's exit is seen through a pidfd; the record process is
   then read in ``/proc`` at that instant and again as a zombie before it is reaped. Reported:
   bytes the record process (and the children it reaped: the watchdog, the command) caused to
   be written (``/proc/PID/io``: ``write_bytes``, ``cancelled_write_bytes`` for files removed
   before writeback, such as the spool and its segments, and ``wchar``), the output file's size,
   and CPU (user + sys, clock ticks) of the record process's own threads over the whole run and
   after the command exited (the tail: recovering, writing the output, removing the spool,
   exiting), beside the tail's wall time.
e. **Start-up**: wall time of ``python -c "import stroboscope"`` and of ``stroboscope --version``
   (run as the console script does: its entry point, read from ``pyproject.toml``), median of 10
   fresh interpreters each, interleaved with an empty interpreter (``python -c pass``).
f. **Public names**: ``len(stroboscope.__all__)``, and the sum of ``len(__all__)`` over every
   public package (no component starting with ``_``) that defines one: the faces of the rooms.

Each figure runs on its own: one that cannot be measured prints why and the others go on.
Results: ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import importlib
import importlib.util
import json
import os
import platform
import select
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_common import OtherLoad, cpu_model, git_revision

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
HZ = os.sysconf("SC_CLK_TCK")
ROWS = 1000
SCOPES_AFTER = 100
TARGET_SNAPSHOT_RATIO = 1.5
FACE_NAMES_MAX = 20


def console_script(pyproject: Path = REPO_DIR / "pyproject.toml") -> str:
    """Python code that does what the ``stroboscope`` console script does, from the entry point
    in ``[project.scripts]`` of ``pyproject`` (``stroboscope.cli:main`` if it cannot be read), so
    the package measured need not be installed."""
    target = "stroboscope.cli:main"
    try:
        section = ""
        for line in pyproject.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[project.scripts]" and line.split("=")[0].strip() == "stroboscope":
                target = line.split("=", 1)[1].strip().strip("\"'")
    except OSError:
        pass
    module, _, func = target.partition(":")
    return f"import sys; from {module} import {func}; sys.exit({func}())"


# What `stroboscope ...` runs.
CLI = console_script()

Figure = dict[str, Any]


def log(msg: str) -> None:
    """Progress to stderr, so stdout stays the table."""
    print(f"[house] {msg}", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    """Median of a non-empty list."""
    return float(statistics.median(values))


def fmt_s(s: float) -> str:
    """Seconds in the unit that keeps 3-4 significant digits."""
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1.0:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def fmt_bytes(n: float) -> str:
    """A byte count in KiB/MiB/GiB."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{sign}{n / scale:.2f} {unit}"
    return f"{sign}{n:.0f} B"


# -- the machine --------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """CPU model, cores, kernel, Python, the package measured and the checkout."""
    info: dict[str, Any] = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }
    try:
        import stroboscope

        info["stroboscope"] = getattr(stroboscope, "__version__", "?")
        info["package_dir"] = os.path.dirname(stroboscope.__file__ or "")
    except Exception as exc:  # the table says why
        info["stroboscope"] = f"not importable: {exc}"
    info["checkout"] = git_revision()
    return info


# -- a. imports against the room table ----------------------------------------------------------


def rooms(test_file: Path) -> Figure:
    """``violations()`` of the room test, loaded by path."""
    spec = importlib.util.spec_from_file_location("_house_test_rooms", test_file)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {test_file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: list[str] = list(module.violations())
    outside = [v for v in found if v.endswith("outside every room")]
    return {
        "count": len(found),
        "imports": len(found) - len(outside),
        "modules_outside_rooms": len(outside),
        "violations": found,
        "rows": [
            (
                "a. imports against the room table",
                str(len(found)),
                f"{len(found) - len(outside)} imports + {len(outside)} modules outside every "
                f"room (violations() of {test_file.name})",
                "0",
                "PASS" if not found else "MISS",
            )
        ],
    }


# -- b. snapshot().to_arrow() of 1,000 rows against the core's path -----------------------------


class _Stream:
    """An Arrow C stream capsule handed to pyarrow through the PyCapsule protocol."""

    def __init__(self, capsule: object) -> None:
        self._capsule = capsule

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._capsule


def _core_sampler(sampler: object) -> Any:
    """The ``_core.Sampler`` a facade sampler holds (found by type, whatever its attribute)."""
    from stroboscope import _core

    names = list(getattr(sampler, "__dict__", {}))
    for cls in type(sampler).__mro__:
        names += list(getattr(cls, "__slots__", ()))
    for name in names:
        value = getattr(sampler, name, None)
        if isinstance(value, _core.Sampler):
            return value
    raise RuntimeError(f"no _core.Sampler among the sampler's attributes {sorted(set(names))}")


def snapshot(repeats: int) -> Figure:
    import pyarrow as pa
    import stroboscope

    s = stroboscope.Sampler(0.001)
    try:
        core = _core_sampler(s)
        s.tick_now(ROWS)

        def facade() -> Any:
            return s.snapshot().to_arrow()

        def core_path() -> Any:
            frame = core.snapshot()
            source = (
                frame if hasattr(frame, "__arrow_c_stream__") else _Stream(frame.export_stream())
            )
            return pa.RecordBatchReader.from_stream(source).read_all()

        a, b = facade(), core_path()
        if a.num_rows != ROWS or b.num_rows != ROWS:
            raise RuntimeError(f"expected {ROWS} rows, got {a.num_rows} and {b.num_rows}")
        if a.column_names != b.column_names:
            raise RuntimeError("the two paths give different columns")
        columns = a.num_columns
        del a, b
        for _ in range(20):  # warm-up
            facade()
            core_path()
        load = OtherLoad()
        facade_ns: list[float] = []
        core_ns: list[float] = []
        for i in range(repeats):
            first, second = (facade, core_path) if i % 2 == 0 else (core_path, facade)
            for fn in (first, second):
                t0 = time.perf_counter_ns()
                fn()
                t1 = time.perf_counter_ns()
                (facade_ns if fn is facade else core_ns).append(t1 - t0)
    finally:
        s.close()
    f, c = median(facade_ns), median(core_ns)
    ratio = f / c
    return {
        "n_rows": ROWS,
        "columns": columns,
        "repeats": repeats,
        "facade_ns_median": f,
        "core_ns_median": c,
        "ratio": ratio,
        "facade_ns_p10_p90": _p10_p90(facade_ns),
        "core_ns_p10_p90": _p10_p90(core_ns),
        "other_cores": round(load.cores(), 2),
        "rows": [
            (
                "b. `Sampler.snapshot().to_arrow()`, 1,000 rows",
                f"{f / 1e3:.1f} µs vs {c / 1e3:.1f} µs: {ratio:.2f}x",
                f"{columns} columns; core's path = `_core` snapshot read through its Arrow C "
                f"stream; median of {repeats} interleaved",
                f"≤ {TARGET_SNAPSHOT_RATIO}x the core's path",
                "PASS" if ratio <= TARGET_SNAPSHOT_RATIO else "MISS",
            )
        ],
    }


def _p10_p90(values: list[float]) -> list[float]:
    q = statistics.quantiles(values, n=10)
    return [q[0], q[-1]]


# -- c. the first scope's cost in a fresh process -----------------------------------------------

_FIRST_SCOPE = f"""
import json, sys, time
import stroboscope
s = stroboscope.Sampler(0.001)
s.start()
before = set(sys.modules)
t0 = time.perf_counter_ns()
annotate = stroboscope.annotate
t1 = time.perf_counter_ns()
after_lookup = set(sys.modules)
t2 = time.perf_counter_ns()
with annotate("x"):
    pass
t3 = time.perf_counter_ns()
after_first = set(sys.modules)
rest = []
for _ in range({SCOPES_AFTER}):
    a = time.perf_counter_ns()
    with stroboscope.annotate("x"):
        pass
    rest.append(time.perf_counter_ns() - a)
s.close()
top = lambda names: sorted({{n.split(".")[0] for n in names}})
print(json.dumps({{
    "lookup_ns": t1 - t0,
    "first_ns": t3 - t2,
    "rest_ns": rest,
    "lookup_imports": len(after_lookup - before),
    "lookup_imported_top": top(after_lookup - before),
    "first_imports": len(after_first - after_lookup),
    "first_imported_top": top(after_first - after_lookup),
}}))
"""


def first_scope(processes: int) -> Figure:
    runs: list[dict[str, Any]] = []
    load = OtherLoad()
    for _ in range(processes):
        out = subprocess.run(
            [sys.executable, "-c", _FIRST_SCOPE], capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            raise RuntimeError(f"the scope process failed: {out.stderr.strip()[-500:]}")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first = median([r["first_ns"] for r in runs])
    rest = median([median(r["rest_ns"]) for r in runs])
    lookup = median([r["lookup_ns"] for r in runs])
    imports = int(median([r["first_imports"] for r in runs]))
    lookup_imports = int(median([r["lookup_imports"] for r in runs]))

    def names(key: str) -> str:
        tops: list[str] = runs[0][key]
        return ", ".join(tops[:6]) + (", ..." if len(tops) > 6 else "") or "none"

    statement = median([r["lookup_ns"] + r["first_ns"] for r in runs])
    return {
        "processes": processes,
        "first_statement_ns_median": statement,
        "first_ns_median": first,
        "next_ns_median": rest,
        "excess_ns": statement - rest,
        "ratio": statement / rest if rest else None,
        "lookup_ns_median": lookup,
        "modules_imported_in_first_scope": imports,
        "modules_imported_by_first_lookup": lookup_imports,
        "runs": runs,
        "other_cores": round(load.cores(), 2),
        "rows": [
            (
                "c. the first scope in a fresh process (Sampler running)",
                f"{fmt_s(statement / 1e9)} vs {fmt_s(rest / 1e9)} for each of the next "
                f"{SCOPES_AFTER}: {statement / rest:,.0f}x",
                f"the first `with stroboscope.annotate('x'): pass` = the name's first lookup "
                f"{fmt_s(lookup / 1e9)} ({lookup_imports} modules imported: "
                f"{names('lookup_imported_top')}) + enter/exit {fmt_s(first / 1e9)} ({imports} "
                f"imported: {names('first_imported_top')}); median of {processes} processes",
                "costs what any other does: no import inside it",
                "PASS" if imports + lookup_imports == 0 else "MISS",
            )
        ],
    }


# -- d. a clean record run ----------------------------------------------------------------------


def _stat(pid: int) -> dict[str, int]:
    """utime, stime, cutime, cstime (clock ticks) of ``pid`` from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        rest = f.read().rpartition(b")")[2].split()
    return {
        "utime": int(rest[11]),
        "stime": int(rest[12]),
        "cutime": int(rest[13]),
        "cstime": int(rest[14]),
    }


def _io(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/io") as f:
        return {k: int(v) for k, v in (line.split(":") for line in f if ":" in line)}


def _find_child(proc: subprocess.Popen[bytes], argv_tail: list[str], deadline: float) -> int:
    """The pid of ``proc``'s child whose command line ends with ``argv_tail``."""
    parent = proc.pid
    want = [a.encode() for a in argv_tail]
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"record exited ({proc.returncode}) before its command started")
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    ppid = int(f.read().rpartition(b")")[2].split()[1])
                if ppid != parent:
                    continue
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")[:-1]
            except (OSError, ValueError, IndexError):
                continue
            if argv[-len(want) :] == want:
                return int(entry.name)
        time.sleep(0.005)
    raise RuntimeError(f"no child process running {' '.join(argv_tail)!r} appeared")


def record(duration: float, where: str | None) -> Figure:
    import pyarrow.parquet as pq

    house = tempfile.TemporaryDirectory(
        prefix="stroboscope-house-", dir=where, ignore_cleanup_errors=True
    )
    with house as d:
        out = os.path.join(d, "out.parquet")
        dur = f"{duration:g}"
        argv = ["record", "--interval", "0.001", "-q", "-o", out, "--", "sleep", dur]
        shown = "stroboscope " + shlex.join(argv).replace(out, "out.parquet")
        log(f"d: {shown} ({dur} s)")
        with (
            open(os.path.join(d, "stdout"), "w+") as so,
            open(os.path.join(d, "stderr"), "w+") as se,
        ):
            load = OtherLoad()
            t_start = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-c", CLI, *argv], stdout=so, stderr=se)
            fds: list[int] = []
            try:
                cmd = _find_child(proc, ["sleep", dur], time.monotonic() + 60)
                fds = [os.pidfd_open(cmd), os.pidfd_open(proc.pid)]
                poll = select.poll()
                for fd in fds:
                    poll.register(fd, select.POLLIN)
                ready = {fd for fd, _ in poll.poll((duration + 120) * 1000)}
                t_cmd = time.monotonic()
                if not ready:
                    raise RuntimeError(f"the command was still running after {duration + 120:g} s")
                if fds[0] not in ready:
                    raise RuntimeError("the record process ended before its command")
                at_cmd_exit = _stat(proc.pid)
                io_cmd_exit = _io(proc.pid)
                os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
                t_end = time.monotonic()
                at_end = _stat(proc.pid)  # the zombie: its threads' times, its reaped children's
                io_end = _io(proc.pid)
            except BaseException:
                if proc.poll() is None:
                    proc.kill()  # its command and watchdog get their parent-death signal
                    proc.wait()
                raise
            finally:
                for fd in fds:
                    os.close(fd)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cores = round(load.cores(), 2)
            so.seek(0)
            se.seek(0)
            stdout, stderr = so.read(), se.read()
        if proc.returncode != 0:
            raise RuntimeError(f"record exited {proc.returncode}: {(stderr or stdout)[-500:]}")
        meta = pq.read_metadata(out)
        out_bytes = os.path.getsize(out)
        leftovers = sorted(set(os.listdir(d)) - {"out.parquet", "stdout", "stderr"})

    def own(s: dict[str, int]) -> float:
        return (s["utime"] + s["stime"]) / HZ

    cpu_total = own(at_end)
    cpu_tail = own(at_end) - own(at_cmd_exit)
    children = usage.ru_utime + usage.ru_stime - cpu_total
    wall = t_end - t_start
    tail = t_end - t_cmd
    written = io_end["write_bytes"]
    cancelled = io_end.get("cancelled_write_bytes", 0)
    tail_written = written - io_cmd_exit["write_bytes"]
    wchar = io_end["wchar"]
    return {
        "command": shown,
        "duration_s": duration,
        "wall_s": wall,
        "tail_wall_s": tail,
        "start_s": wall - tail - duration,
        "cpu_s_own_total": cpu_total,
        "cpu_s_own_tail": cpu_tail,
        "cpu_s_children_total": children,
        "io_at_command_exit": io_cmd_exit,
        "io_at_end": io_end,
        "output_bytes": out_bytes,
        "output_rows": meta.num_rows,
        "output_columns": meta.num_columns,
        "leftover_files": leftovers,
        "maxrss_kib": usage.ru_maxrss,
        "other_cores": cores,
        "summary": stdout.strip().splitlines()[:3],
        "rows": [
            (
                f"d. `{shown}`: bytes written",
                f"{fmt_bytes(written)}, {fmt_bytes(written - cancelled)} net of "
                f"{fmt_bytes(cancelled)} removed before writeback",
                f"/proc/PID/io write_bytes of the record process and its reaped children (the "
                f"spool's mapped pages, segments, output); {fmt_bytes(tail_written)} of it after "
                f"the command exited; {meta.num_rows:,} rows x {meta.num_columns} columns",
                "each row written once",
                "info",
            ),
            (
                "d. … bytes passed to write() (Parquet: segments and output) / the output",
                f"{fmt_bytes(wchar)} / {fmt_bytes(out_bytes)}: {wchar / out_bytes:.2f}x",
                "wchar of /proc/PID/io (the spool, a mapped file, is not in it; a few KiB of "
                "pipes and terminal are)",
                "≈ 1x (each row written once)",
                "PASS" if wchar / out_bytes < 1.5 else "MISS",
            ),
            (
                "d. … CPU after the command exited (the tail)",
                f"{cpu_tail:.2f} s CPU in {tail:.2f} s wall",
                f"user+sys of the record process's own threads from the command's exit to its "
                f"own (clock ticks, 1/{HZ} s); whole run: {cpu_total:.2f} s CPU in {wall:.1f} s "
                f"wall ({wall - tail - duration:.2f} s before the command ran, measured as the "
                f"rest); children (watchdog, command): {children:.2f} s",
                "—",
                "info",
            ),
        ],
    }


# -- e. start-up time ---------------------------------------------------------------------------


def startup(repeats: int) -> Figure:
    codes = {
        "empty": ["-c", "pass"],
        "import": ["-c", "import stroboscope"],
        "version": ["-c", CLI, "--version"],
    }
    times: dict[str, list[float]] = {k: [] for k in codes}
    load = OtherLoad()
    for _ in range(repeats):
        for key, args in codes.items():
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, *args], check=True, stdout=subprocess.DEVNULL, env=os.environ
            )
            times[key].append(time.perf_counter() - t0)
    m = {k: median(v) for k, v in times.items()}
    return {
        "repeats": repeats,
        "median_s": m,
        "all_s": times,
        "other_cores": round(load.cores(), 2),
        "rows": [
            (
                'e. `python -c "import stroboscope"`',
                fmt_s(m["import"]),
                f"wall, median of {repeats} fresh interpreters (empty interpreter "
                f"{fmt_s(m['empty'])})",
                "—",
                "info",
            ),
            (
                "e. `stroboscope --version`",
                fmt_s(m["version"]),
                f"wall, median of {repeats}, run as the console script: `{CLI}`",
                "—",
                "info",
            ),
        ],
    }


# -- f. public names ----------------------------------------------------------------------------


def public_names() -> Figure:
    import pkgutil

    import stroboscope

    faces: dict[str, int] = {"stroboscope": len(stroboscope.__all__)}
    failed: dict[str, str] = {}
    names: set[str] = set(stroboscope.__all__)
    for info in pkgutil.walk_packages(stroboscope.__path__, "stroboscope.", onerror=lambda _: None):
        if not info.ispkg or any(p.startswith("_") for p in info.name.split(".")):
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception as exc:  # an optional library missing: said below
            failed[info.name] = f"{type(exc).__name__}: {exc}"
            continue
        exported = getattr(module, "__all__", None)
        if exported is not None:
            faces[info.name] = len(exported)
            names.update(exported)
    total = sum(faces.values())
    face = faces["stroboscope"]
    detail = ", ".join(f"{k.removeprefix('stroboscope.')} {v}" for k, v in faces.items())
    if failed:
        detail += f"; not importable here: {', '.join(failed)}"
    return {
        "face": face,
        "faces": faces,
        "total": total,
        "distinct": len(names),
        "not_importable": failed,
        "rows": [
            (
                "f. public names: the face / all faces",
                f"{face} / {total} across {len(faces)} faces ({len(names)} distinct)",
                detail.replace("stroboscope ", "face ", 1),
                f"face about 15-{FACE_NAMES_MAX}",
                "PASS" if face <= FACE_NAMES_MAX else "MISS",
            )
        ],
    }


# -- the run ------------------------------------------------------------------------------------


def measure(name: str, fn: Callable[[], Figure]) -> Figure:
    """Run one figure; one that fails is reported with the reason instead of its numbers."""
    log(f"{name} ...")
    gc.collect()
    t0 = time.monotonic()
    try:
        result = fn()
    except Exception as exc:  # reported, the other figures go on
        reason = f"not measured: {type(exc).__name__}: {exc}"
        log(f"{name}: {reason}")
        return {"error": reason, "rows": [(name, "—", reason, "—", "—")]}
    result["seconds"] = round(time.monotonic() - t0, 1)
    return result


def table(info: dict[str, Any], figures: dict[str, Figure]) -> str:
    lines = [
        f"machine: {info['cpu']}, {info['cores']} CPUs, kernel {info['kernel']}, Python "
        f"{info['python']}; stroboscope {info.get('stroboscope')} at {info.get('checkout')}; "
        f"{info['date_utc']}",
        "",
        "| figure | measured | how | target | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for fig in figures.values():
        for row in fig["rows"]:
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    lines.append("")
    loads = [f"{k} {f['other_cores']:.2f}" for k, f in figures.items() if "other_cores" in f]
    lines.append("other processes' CPU during each figure, in cores: " + ", ".join(loads))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 s record run, fewer repeats")
    parser.add_argument("--json", metavar="PATH", help="also write every raw number as JSON")
    parser.add_argument("--duration", type=float, help="record run in seconds (default 60; 10)")
    parser.add_argument("--dir", help="where the record run writes (default: the temp dir)")
    parser.add_argument(
        "--only", default="abcdef", help="the figures to measure, by letter (default: all)"
    )
    parser.add_argument(
        "--rooms",
        type=Path,
        default=REPO_DIR / "tests" / "test_rooms.py",
        help="the room test whose violations() counts (default: this checkout's)",
    )
    args = parser.parse_args(argv)
    duration = args.duration or (10.0 if args.quick else 60.0)
    if duration <= 0:
        parser.error(f"--duration must be > 0 seconds, got {duration:g}")
    quick = args.quick
    info = machine()
    runs: dict[str, tuple[str, Callable[[], Figure]]] = {
        "a": ("a. imports against the room table", lambda: rooms(args.rooms)),
        "b": (
            "b. snapshot().to_arrow() of 1,000 rows",
            lambda: snapshot(200 if quick else 1000),
        ),
        "c": ("c. the first scope", lambda: first_scope(3 if quick else 7)),
        "d": ("d. a clean record run", lambda: record(duration, args.dir)),
        "e": ("e. start-up time", lambda: startup(10)),
        "f": ("f. public names", public_names),
    }
    unknown = sorted(set(args.only) - set(runs))
    if unknown:
        parser.error(f"--only takes letters of {''.join(runs)}, got {''.join(unknown)!r}")
    figures: dict[str, Figure] = {
        key: measure(name, fn) for key, (name, fn) in runs.items() if key in args.only
    }
    text = table(info, figures)
    print(text)
    if args.json:
        raw = {"machine": info, "figures": figures, "table": text, "argv": sys.argv[1:]}
        Path(args.json).write_text(json.dumps(raw, indent=2, default=str) + "\n")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
