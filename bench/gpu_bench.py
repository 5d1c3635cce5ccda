"""Benchmark: the cost of one reading of the ``gpu`` source, beside a C floor and pynvml.

One run, per device count, on the fake NVML library (``tests/fake_nvml/fake_nvml.c``, compiled
here with ``cc -shared -fPIC -O2``) and, with ``--real``, on the real ``libnvidia-ml.so.1``:

- stroboscope, polled on its own thread (``Sampler(..., sources={"gpu": ...})``):
  * readings/s achieved when asked for 1 kHz and for 10 kHz (rows whose ``gpu.read_mono_ns`` is
    set; on the fake, the fake's own count of ``nvmlDeviceGetFieldValues`` calls, which is exact);
  * poll-thread CPU per reading: the poll thread's run time (``/proc/self/task/TID/schedstat``)
    over the readings it took. It includes the NVML calls, our per-read work, publishing the
    reading, and one timed sleep/wake-up per reading (the floor has no sleep);
  * tick copy cost: ``stats().sources`` ``read_ns_total / reads`` of the gpu source, i.e. what
    the sampler tick spends copying the latest reading into the row (not the NVML cost);
  * wake-up estimate: the sampler thread's CPU per tick minus its measured cost per tick, the
    price of one timed sleep and wake-up on this machine, to read the intercept against.
- the floor: a small C program, ``bench/gpu_floor.c``, compiled with ``cc -O2 ... -ldl``, that
  dlopens the same library and makes exactly the raw NVML calls the source makes per device per
  read (nvml_device.cpp: the field batch, memory, utilisation, temperature, three clocks, fan,
  clock-event reasons, compute and graphics process lists, process utilisation; the older single
  queries only where a field fails), disabling a call the same way when the device says it is
  unsupported. Timed back to back ("tight", median over batches) and paced at 1 kHz with the
  poll thread's kind of sleep ("paced": the read timed on its own, and the thread's CPU per read
  including the sleep and wake-up).
- the inner read: ``NvmlSource::read`` itself, compiled from the repository's C++ sources into a
  small harness (``bench/gpu_inner.cpp``, ``-O3 -DNDEBUG`` like the Release build) and timed
  exactly like the floor, so "inner ÷ floor" is our per-read overhead beyond the NVML calls,
  with none of the sleep noise the poll-thread numbers carry.
- pynvml (``nvidia-ml-py``, if importable): the same values through pynvml calls, pointed at the
  same library by assigning ``pynvml.nvmlLib = ctypes.CDLL(path)`` before ``nvmlInit()``
  (pynvml's loader only opens ``libnvidia-ml.so.1`` when ``nvmlLib`` is still None). The fake
  has no ``nvmlInitWithFlags``, which ``pynvml.nvmlInit()`` calls; then the library's own
  ``nvmlInit_v2`` is called through the same handle.

On the fake an NVML call costs almost nothing, so the numbers measure our overhead (and
pynvml's); on a real GPU the driver calls dominate. Each measurement runs in a fresh child
process (the fake reads its script at the first ``nvmlInit``).

Usage::

    python bench/gpu_bench.py                 # fake library, 1, 2 and 8 devices
    python bench/gpu_bench.py --real          # also the real libnvidia-ml (1 and all GPUs)
    python bench/gpu_bench.py --real --no-fake
    python bench/gpu_bench.py --devices 1,4 --seconds 3 --json out.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpu_bench_worker import worker

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FAKE_SOURCE = REPO / "tests" / "fake_nvml" / "fake_nvml.c"
REAL_LIBRARY = "libnvidia-ml.so.1"


# The source files the inner harness needs (the gpu source and the NVML loader).
# Every NVML source file, and the /proc helpers they call (the library loader refuses a FIFO through
# proc_file.cpp; the process tree parses /proc/PID/stat): a glob, so a new nvml_*.cpp is not missed.
INNER_SOURCES = (
    *sorted(p.name for p in (REPO / "cpp" / "src").glob("nvml_*.cpp")),
    "proc_file.cpp",
    "shared_library.cpp",  # the dlopen loader NVML and amdsmi share
    "proc_pid_parse.cpp",
)


def log(msg: str) -> None:
    """Progress to stderr, so stdout stays the result."""
    print(msg, file=sys.stderr, flush=True)


# ---- building ----------------------------------------------------------------------------------


def compile_fake(workdir: Path) -> Path:
    """Build the fake NVML library into ``workdir``; returns its path."""
    out = workdir / "libfake_nvml.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(FAKE_SOURCE)], check=True)
    return out


def compile_floor(workdir: Path) -> Path:
    """Build the floor program (``gpu_floor.c`` beside this file) into ``workdir``; returns
    the executable."""
    src = HERE / "gpu_floor.c"
    out = workdir / "gpu_floor"
    subprocess.run(["cc", "-O2", "-o", str(out), str(src), "-ldl"], check=True)
    return out


def compile_inner(workdir: Path) -> Path | None:
    """Build the inner harness against the repository's C++ sources; None if that fails.

    Flags as the package's Release build (-O3 -DNDEBUG). It measures the source tree, which is
    what ``pip install .`` built from if the installed package is current.
    """
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        log("no C++ compiler: the inner-read columns are skipped")
        return None
    src = HERE / "gpu_inner.cpp"
    out = workdir / "gpu_inner"
    cmd = [cxx, "-std=c++20", "-O3", "-DNDEBUG", "-I", str(REPO / "cpp" / "include"), str(src)]
    cmd += [str(REPO / "cpp" / "src" / name) for name in INNER_SOURCES]
    cmd += ["-o", str(out), "-ldl", "-lpthread"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log(f"the inner harness did not build (its columns are skipped):\n{done.stderr[-2000:]}")
        return None
    return out


def fake_script(devices: int) -> str:
    """A scenario for ``devices`` GPUs, each shared by us (with SM samples) and two others."""
    lines = [f"devices {devices}", "driver 550.00.fake-bench"]
    for d in range(devices):
        lines += [
            f"set {d} util 42 43 44",
            f"set {d} power 250000 260000",
            f"set {d} energy 1000 2000 3000 4000",
            f"process {d} self 1073741824 40 55",
            f"process {d} 4242 2147483648",
            f"graphics_process {d} 4343 1048576",
        ]
    return "\n".join(lines) + "\n"


# ---- driving ----------------------------------------------------------------------------------


def _run_json(cmd: list[str], env: dict[str, str], what: str) -> dict[str, Any]:
    """Run ``cmd`` and parse the JSON object on the last line of its stdout."""
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stderr.strip()[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_case(
    label: str,
    library: str,
    devices: int,
    exes: dict[str, Path | None],
    script: Path | None,
    seconds: float,
) -> dict[str, Any]:
    """Floor, inner harness and worker for one (library, device count); the merged results."""
    env = dict(os.environ)
    env.pop("STROBOSCOPE_NVML_LIBRARY", None)
    env.pop("FAKE_NVML_SCRIPT", None)
    if script is not None:
        env["STROBOSCOPE_NVML_LIBRARY"] = library
        env["FAKE_NVML_SCRIPT"] = str(script)
    short = str(min(seconds, 1.0))
    log(f"[{label}] {devices} GPU(s): floor ...")
    floor_exe = exes["floor"]
    assert floor_exe is not None
    res: dict[str, Any] = {"label": label, "devices": devices}
    res["floor"] = _run_json([str(floor_exe), library, str(devices), short], env, "gpu_floor")
    inner_exe = exes["inner"]
    if inner_exe is not None:
        log(f"[{label}] {devices} GPU(s): inner read ...")
        res["inner"] = _run_json([str(inner_exe), str(devices), short], env, "gpu_inner")
    log(f"[{label}] {devices} GPU(s): stroboscope sampler and pynvml ...")
    opts = {
        "library": library,
        "fake": script is not None,
        "devices": devices,
        "seconds": seconds,
        "pynvml_seconds": min(seconds, 1.0),
    }
    me = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(opts)]
    res.update(_run_json(me, env, "the stroboscope/pynvml worker"))
    return res


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least-squares (intercept, slope) of ys over xs; None with fewer than 2 distinct xs."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def _fmt(v: float | None, scale: float = 1.0, digits: int = 0) -> str:
    return "—" if v is None else f"{v / scale:,.{digits}f}"


def _ratio(a: float | None, b: float | None, digits: int = 1) -> str:
    return "—" if a is None or b is None or b == 0 else f"{a / b:,.{digits}f}"


def print_table(results: list[dict[str, Any]]) -> None:
    """The side-by-side table, then per-GPU fits and what the numbers mean."""
    head = (
        "| library | GPUs | readings/s @1 kHz | readings/s @10 kHz asked | tick copy ns "
        "| poll CPU/reading ns @1 kHz | floor paced CPU/read ns | inner read ns tight "
        "| floor ns tight | inner ÷ floor tight | inner read ns paced | floor ns paced "
        "| inner ÷ floor paced | pynvml µs/read | pynvml ÷ floor tight | pynvml ÷ inner tight |"
    )
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    for r in results:
        a, b, fl, py = r["strobo_1k"], r["strobo_10k"], r["floor"], r["pynvml"]
        inner = r.get("inner", {})
        py_ns = py.get("ns_per_read")
        cells = [
            r["label"],
            str(r["devices"]),
            _fmt(a["readings_per_s"]),
            _fmt(b["readings_per_s"]),
            _fmt(a["tick_copy_ns"]),
            _fmt(a["poll_cpu_ns_per_reading"]),
            _fmt(fl["paced_cpu_ns_per_read"]),
            _fmt(inner.get("ns_per_read")),
            _fmt(fl["ns_per_read"]),
            _ratio(inner.get("ns_per_read"), fl["ns_per_read"], 2),
            _fmt(inner.get("paced_read_ns")),
            _fmt(fl["paced_read_ns"]),
            _ratio(inner.get("paced_read_ns"), fl["paced_read_ns"], 2),
            _fmt(py_ns, 1e3, 1),
            _ratio(py_ns, fl["ns_per_read"], 0),
            _ratio(py_ns, inner.get("ns_per_read"), 0),
        ]
        print("| " + " | ".join(cells) + " |")
    skipped = [r["pynvml"]["skipped"] for r in results if "skipped" in r["pynvml"]]
    if skipped:
        print(f"\npynvml: {skipped[0]}")
    print()
    for label in dict.fromkeys(r["label"] for r in results):
        rows = [r for r in results if r["label"] == label]
        xs = [float(r["devices"]) for r in rows]
        series: list[tuple[str, list[Any]]] = [
            ("inner read tight", [r.get("inner", {}).get("ns_per_read") for r in rows]),
            ("floor tight", [r["floor"]["ns_per_read"] for r in rows]),
            ("inner read paced", [r.get("inner", {}).get("paced_read_ns") for r in rows]),
            ("floor paced", [r["floor"]["paced_read_ns"] for r in rows]),
            ("poll CPU/reading @1 kHz", [r["strobo_1k"]["poll_cpu_ns_per_reading"] for r in rows]),
            ("floor paced CPU/read", [r["floor"]["paced_cpu_ns_per_read"] for r in rows]),
            ("pynvml", [r["pynvml"].get("ns_per_read") for r in rows]),
        ]
        for name, ys in series:
            if any(y is None for y in ys):
                continue
            fit = _fit(xs, [float(y) for y in ys])
            if fit:
                print(f"{label}: {name:24s} ~ {fit[0]:8,.0f} ns + {fit[1]:8,.0f} ns per GPU")
        wake = [r["strobo_1k"]["wake_ns_estimate"] for r in rows]
        first = rows[0]
        print(
            f"{label}: one timed sleep + wake-up here ~ {statistics.median(wake):,.0f} ns "
            f"(sampler thread CPU per tick minus its cost per tick)\n"
            f"{label}: the floor makes {first['floor']['calls_per_read'] / first['devices']:.1f} "
            f"NVML calls per GPU per read; unsupported here: "
            f"{', '.join(first['floor']['disabled']) or 'none'}\n"
            f"{label}: readings counted by {first['strobo_1k']['readings_counted_by']}; poll "
            f"thread identified: {all(r['strobo_1k']['poll_thread_identified'] for r in rows)}\n"
            f"{label}: median age of a reading when a 1 kHz row copies it: "
            + ", ".join(_fmt(r["strobo_1k"]["reading_lag_median_ns"], 1e3) + " us" for r in rows)
        )
    print(
        "\ninner read: stroboscope's NvmlSource::read on one thread (tight: back to back; paced: "
        "one per 1 ms,\n  timed around the read), against the floor making the same NVML calls "
        "the same way.\n"
        "poll CPU/reading: the sampler's poll thread's CPU time over the readings it took: the "
        "read, publishing\n  it, and one timed sleep + wake-up; compare 'floor paced CPU/read' "
        "(the floor's calls paced the same way).\n"
        "tick copy: the sampler tick's mean time in the gpu source (copying the latest reading "
        "into the row),\n  not the NVML cost.\n"
        "On the fake library an NVML call costs ~nothing, so these rows measure our overhead "
        "and pynvml's;\non a real GPU the driver's calls dominate every column."
    )


def main(argv: list[str] | None = None) -> int:
    """Build the fake and the floor, run every case, print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default="1,2,8", help="fake device counts (default 1,2,8)")
    p.add_argument("--seconds", type=float, default=2.0, help="per stroboscope run (default 2)")
    p.add_argument("--real", action="store_true", help=f"also measure the real {REAL_LIBRARY}")
    p.add_argument("--no-fake", action="store_true", help="skip the fake library")
    p.add_argument("--json", type=Path, help="also write every number to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if shutil.which("cc") is None:
        print("gpu_bench: needs a C compiler (cc) for the floor and the fake library")
        return 1
    try:
        import pynvml  # noqa: F401
    except ImportError:
        log("pynvml not installed: its column is skipped (pip install nvidia-ml-py)")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gpu_bench-") as tmp:
        work = Path(tmp)
        exes: dict[str, Path | None] = {
            "floor": compile_floor(work),
            "inner": compile_inner(work),
        }
        if not args.no_fake:
            fake = compile_fake(work)
            for n in (int(x) for x in args.devices.split(",")):
                script = work / f"fake_{n}.txt"
                script.write_text(fake_script(n))
                results.append(run_case("fake", str(fake), n, exes, script, args.seconds))
        if args.real:
            try:
                real = ctypes.CDLL(REAL_LIBRARY)
            except OSError as exc:
                log(f"--real: cannot load {REAL_LIBRARY}: {exc}")
            else:
                count = ctypes.c_uint(0)
                init = getattr(real, "nvmlInit_v2", None) or real.nvmlInit
                get_count = getattr(real, "nvmlDeviceGetCount_v2", None) or real.nvmlDeviceGetCount
                if init() == 0 and get_count(ctypes.byref(count)) == 0 and count.value > 0:
                    real.nvmlShutdown()
                    for n in sorted({1, count.value}):
                        results.append(run_case("real", REAL_LIBRARY, n, exes, None, args.seconds))
                else:
                    log(f"--real: {REAL_LIBRARY} loads but reports no usable GPU")
    if not results:
        return 1
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
