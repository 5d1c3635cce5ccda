"""Check NVML and the ``gpu`` source on a machine with an NVIDIA GPU (read-only, about a minute).

Builds nothing: it imports the installed ``stroboscope`` and talks to the NVML library directly
through ctypes. It only reads (``nvmlDeviceGet*``); it never changes a GPU setting. Per device:

1. the latency of every NVML call the gpu source makes (median and p90 over up to ``--calls``
   calls, timed with ``perf_counter_ns`` around a ctypes call; the ctypes overhead is printed so
   it can be taken off), independent of stroboscope's code (bench/gpu_check_latency.py);
2. the gpu source's achieved rate when asked for 1 kHz (``Sampler(0.001, sources={"gpu":
   0.001})`` for ``--rate-seconds``), and when asked for 10 kHz, where a read slower than 100 µs
   keeps the poll thread busy, so readings/s gives the wall time of one reading;
3. the driver's buffer of each ``nvmlDeviceGetSamples`` kind (asked with lastSeenTimeStamp 0):
   how many samples, over what span, at what spacing, how old the newest is.

Then, with the GPU loaded by a known workload (bench/gpu_load.py: fp16 matrix multiplies from
torch or cupy when installed; otherwise idle, and it says so):

4. how often the energy counter changes (``nvmlDeviceGetTotalEnergyConsumption`` in a tight loop,
   beside field 83 and POWER_INSTANT, field 186, read the same way);
5. every gpu column beside ``nvidia-smi --query-gpu=...`` and pynvml, read at the same moment
   (bench/gpu_check_values.py);
6. the sampler's tick cost and lateness with and without the gpu source (bench/gpu_check_load.py);
7. energy windows of 5 ms to 1 s beside the counter read directly at their edges (Zeus's way).

Without a GPU (or NVML) it prints why, from ``stroboscope.gpu_status()["reason"]``, and exits 0.
``--markdown PATH`` writes the whole output, with the machine and the command, as a Markdown
section for bench/RESULTS.md. ``--library PATH`` loads another NVML library (e.g. the test fake,
built with ``cc -shared -fPIC -o libfake_nvml.so tests/fake_nvml/fake_nvml.c``; its scenario
comes from ``FAKE_NVML_SCRIPT``); the fake is recognised by its ``fake_nvml_calls`` symbol and
every section is labelled FAKE.

Usage::

    python bench/gpu_check.py --markdown gpu_check.md
    python bench/gpu_check.py --json gpu_check.json --no-load
    FAKE_NVML_SCRIPT=script.txt python bench/gpu_check.py --library ./libfake_nvml.so
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from ctypes import byref, c_int, c_uint, c_ulonglong
from functools import partial
from typing import Any, Callable

from bench_common import UNBUDGETED

# bench/ is on sys.path when run as a script
from gpu_bench_worker import _task_runtime_ns
from gpu_check_latency import _ctypes_probe, _ns, check_latency, time_call
from gpu_check_load import check_energy_windows, check_tick
from gpu_check_report import Tee, write_markdown
from gpu_check_values import check_values
from gpu_load import Load
from gpu_nvml import NVML_SUCCESS, SAMPLE_KINDS, FieldValue, Nvml, Sample, value_of

# ---- 2. achieved rate ---------------------------------------------------------------------------


def check_rate(stroboscope: Any, interval: float, seconds: float, samples: bool) -> dict[str, Any]:
    """Run the gpu source polled every ``interval`` s; readings/s, age at copy, poll-thread CPU."""
    s = stroboscope.Sampler(interval, sources={"gpu": interval}, gpu_samples=samples, **UNBUDGETED)
    before = set(_task_runtime_ns())
    s.start()
    t0 = time.perf_counter()
    time.sleep(seconds)
    runtimes = _task_runtime_ns()
    elapsed = time.perf_counter() - t0
    st = s.stats()
    s.stop()
    table = s.snapshot().to_arrow()
    s.close()
    src = next(x for x in st.sources if x.name == "gpu")
    got = table.filter(table.column("gpu.read_mono_ns").is_valid())
    readings = got.num_rows
    ages = sorted(
        m - r
        for m, r in zip(
            got.column("mono_ns").to_pylist(), got.column("gpu.read_mono_ns").to_pylist()
        )
    )
    # Sampler.start() creates the poll thread first, then the sampler thread (then the driver
    # samples recorder); the second must match the sampler's own CPU clock.
    new = sorted(t for t in runtimes if t not in before)
    poll_cpu = None
    if len(new) >= 2 and abs(runtimes[new[1]] - st.thread_cpu_ns) <= (0.2 * st.thread_cpu_ns + 2e6):
        poll_cpu = runtimes[new[0]] / readings if readings else None
    return {
        "asked_hz": 1 / interval,
        "seconds": elapsed,
        "readings_per_s": readings / elapsed,
        "age_median_us": ages[len(ages) // 2] / 1e3 if ages else None,
        "age_p99_us": ages[int(len(ages) * 0.99)] / 1e3 if ages else None,
        "poll_cpu_us_per_reading": poll_cpu / 1e3 if poll_cpu else None,
        "tick_copy_ns": src.read_ns_total / max(src.reads, 1),
        "ticks_missed": st.ticks_missed,
        "failures": src.failures,
        "reason": src.reason,
    }


def print_rate(r: dict[str, Any]) -> None:
    """One line per rate run."""
    age = "—" if r["age_median_us"] is None else f"{r['age_median_us']:,.0f}"
    p99 = "—" if r["age_p99_us"] is None else f"{r['age_p99_us']:,.0f}"
    cpu = "—" if r["poll_cpu_us_per_reading"] is None else f"{r['poll_cpu_us_per_reading']:,.1f}"
    print(
        f"  asked {r['asked_hz']:,.0f}/s for {r['seconds']:.1f} s: {r['readings_per_s']:,.0f} "
        f"readings/s; age when copied median {age} µs, p99 {p99} µs; poll-thread CPU "
        f"{cpu} µs/reading;\n    tick copy {r['tick_copy_ns']:,.0f} ns; sampler ticks missed "
        f"{r['ticks_missed']}; source failures {r['failures']} ({r['reason'] or 'no reason'})"
    )
    if r["asked_hz"] < 10_000:
        print(
            "    (poll thread and sampler tick run at the same rate on separate deadlines: the age"
            " is their phase offset, 0 to 1 interval, fixed for a run)"
        )
    if r["asked_hz"] >= 10_000 and r["readings_per_s"] < 0.9 * r["asked_hz"]:
        print(
            f"    the poll thread never sleeps at this rate: one reading of every GPU takes "
            f"~{1e6 / r['readings_per_s']:,.0f} µs of wall time"
        )


# ---- 3. driver sample buffers -------------------------------------------------------------------


def check_samples(nv: Nvml, index: int) -> list[dict[str, Any]]:
    """Per nvmlDeviceGetSamples kind, what the driver holds (asked with lastSeenTimeStamp 0)."""
    h = nv.device(index)
    rows = []
    print(
        "\n  | kind | rc | buffer (NULL call) | returned | span s | median spacing ms "
        "| min spacing ms | newest age ms | latest value |"
    )
    print("  | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, name in SAMPLE_KINDS.items():
        vt, cap = c_int(), c_uint(0)
        rc0 = nv.samples(h, kind, 0, byref(vt), byref(cap), None)
        n = c_uint(max(cap.value, 1) * 2 + 16)
        buf = (Sample * n.value)()
        now_us = time.time() * 1e6
        rc = nv.samples(h, kind, 0, byref(vt), byref(n), buf)
        got = [buf[i] for i in range(min(n.value, len(buf)))] if rc == NVML_SUCCESS else []
        ts = sorted(s.timeStamp for s in got)
        gaps = [(b - a) / 1e3 for a, b in zip(ts, ts[1:])]
        row = {
            "kind": name,
            "rc": rc,
            "null_call_rc": rc0,
            "buffer": cap.value if rc0 == NVML_SUCCESS else None,
            "returned": len(got),
            "span_s": (ts[-1] - ts[0]) / 1e6 if len(ts) > 1 else None,
            "median_spacing_ms": statistics.median(gaps) if gaps else None,
            "min_spacing_ms": min(gaps) if gaps else None,
            "newest_age_ms": (now_us - ts[-1]) / 1e3 if ts else None,
            "latest": value_of(vt.value, max(got, key=lambda s: s.timeStamp).sampleValue)
            if got
            else None,
        }
        rows.append(row)
        cells = [
            name,
            nv.text(rc),
            "—" if row["buffer"] is None else str(row["buffer"]),
            str(row["returned"]),
        ] + [
            "—" if row[k] is None else f"{row[k]:,.3g}"
            for k in ("span_s", "median_spacing_ms", "min_spacing_ms", "newest_age_ms", "latest")
        ]
        print("  | " + " | ".join(cells) + " |")
    return rows


# ---- 4. energy counter --------------------------------------------------------------------------


def check_energy(nv: Nvml, count: int, seconds: float) -> list[dict[str, Any]]:
    """Poll every GPU's energy counter (and fields 83, 186) in one tight loop for ``seconds``."""
    handles = [nv.device(i) for i in range(count)]
    series: list[dict[str, list[tuple[int, float]]]] = [
        {"energy fn (mJ)": [], "field 83 (mJ)": [], "field 186 (mW)": []} for _ in handles
    ]
    calls = [0] * count
    ull = c_ulonglong()
    arr = (FieldValue * 2)()
    end = _ns() + int(seconds * 1e9)
    while _ns() < end:
        for i, h in enumerate(handles):
            calls[i] += 1
            t = _ns()
            if nv.energy is not None and nv.energy(h, byref(ull)) == NVML_SUCCESS:
                _keep_change(series[i]["energy fn (mJ)"], t, float(ull.value))
            if nv.fields is not None:
                arr[0].fieldId, arr[1].fieldId = 83, 186
                if nv.fields(h, 2, arr) == NVML_SUCCESS:
                    for j, key in ((0, "field 83 (mJ)"), (1, "field 186 (mW)")):
                        if arr[j].nvmlReturn == NVML_SUCCESS:
                            v = value_of(arr[j].valueType, arr[j].value)
                            _keep_change(series[i][key], t, float(v))
    out = []
    print(
        "\n  | GPU | counter | polls | changes | median interval ms | p10-p90 ms "
        "| median step | implied W |"
    )
    print("  | --- | --- | --- | --- | --- | --- | --- | --- |")
    for i in range(count):
        for key, points in series[i].items():
            changes = points[1:]  # the first point is the starting value
            gaps = [(b[0] - a[0]) / 1e6 for a, b in zip(points, points[1:])][1:]
            steps = [b[1] - a[1] for a, b in zip(points, points[1:])]
            med_gap = statistics.median(gaps) if gaps else None
            med_step = statistics.median(steps) if steps else None
            watts = None
            if "mJ" in key and len(points) > 2:
                watts = (points[-1][1] - points[1][1]) / ((points[-1][0] - points[1][0]) / 1e9)
                watts /= 1e3
            spread = "—"
            if len(gaps) >= 2:
                g = sorted(gaps)
                spread = f"{g[len(g) // 10]:,.1f}-{g[len(g) * 9 // 10]:,.1f}"
            out.append(
                {
                    "gpu": i,
                    "counter": key,
                    "polls": calls[i],
                    "changes": len(changes),
                    "median_interval_ms": med_gap,
                    "median_step": med_step,
                    "implied_w": watts,
                }
            )
            print(
                f"  | {i} | {key} | {calls[i]:,} | {len(changes)} "
                f"| {'—' if med_gap is None else f'{med_gap:,.1f}'} | {spread} "
                f"| {'—' if med_step is None else f'{med_step:,.0f}'} "
                f"| {'—' if watts is None else f'{watts:,.1f}'} |"
            )
    return out


def _keep_change(points: list[tuple[int, float]], t: int, v: float) -> None:
    if not points or points[-1][1] != v:
        points.append((t, v))


# ---- main ---------------------------------------------------------------------------------------


def guarded(name: str, fn: Callable[[], Any]) -> Any:
    """Run one section; an error is printed and the next section runs (one short window)."""
    try:
        return fn()
    except Exception as exc:
        print(f"  {name} failed: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def main(argv: list[str] | None = None) -> int:
    """Run every check; exit 0 also when there is no GPU."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--library", help="NVML library to load instead of libnvidia-ml.so.1")
    p.add_argument("--calls", type=int, default=200, help="calls per NVML function (200)")
    p.add_argument(
        "--latency-seconds",
        type=float,
        default=20.0,
        help="cap on the per-call timing, all GPUs together (20)",
    )
    p.add_argument("--rate-seconds", type=float, default=3.0, help="1 kHz run (3)")
    p.add_argument("--energy-seconds", type=float, default=1.0, help="energy polling (1)")
    p.add_argument("--tick-seconds", type=float, default=5.0, help="tick cost runs (5 each)")
    p.add_argument("--no-load", action="store_true", help="do not load the GPU")
    p.add_argument("--json", help="also write every number to this file")
    p.add_argument("--markdown", help="also write the output as Markdown to this file")
    args = p.parse_args(argv)
    if args.markdown:
        tee = Tee(sys.stdout)
        sys.stdout = tee
        try:
            return run(args)
        finally:
            sys.stdout = tee.out
            write_markdown(args.markdown, tee.text(), argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    """The checks of :func:`main`."""
    started = time.perf_counter()
    if args.library:
        os.environ["STROBOSCOPE_NVML_LIBRARY"] = args.library
    import stroboscope

    status = stroboscope.gpu_status()
    if not status["loaded"] or status["device_count"] == 0:
        why = status["reason"] or "NVML loaded but reports no GPU"
        print(f"gpu_check: no GPU to check here: {why}")
        return 0
    nv = Nvml(status["library_path"])
    label = ""
    if nv.fake:
        label = "[FAKE] "
        print("=" * 100)
        print(
            f"FAKE NVML LIBRARY ({status['library_path']}): every number below is the test "
            f"fake's, not a GPU's."
        )
        print("=" * 100)
    elif args.library:
        print(f"NVML library given on the command line: {status['library_path']}")
    count = nv.device_count()
    print(status["text"])
    result: dict[str, Any] = {
        "fake": nv.fake,
        "library": status["library_path"],
        "driver": status["driver_version"],
        "devices": count,
    }

    _, overhead = time_call(_ctypes_probe(nv), 2000, 10**8)
    ctypes_us = statistics.median(overhead) / 1e3 if overhead else 0.0
    print(
        f"\n{label}1. NVML call latency per GPU (µs, ctypes around each call; a ctypes call "
        f"of nvmlErrorString costs {ctypes_us:.2f} µs here)"
    )
    result["ctypes_overhead_us"] = ctypes_us
    budget = args.latency_seconds / count
    result["latency"] = []
    for i in range(count):
        print(f"\n  GPU {i}: {status['devices'][i]['name']}")
        result["latency"].append(
            guarded("latency", partial(check_latency, nv, i, args.calls, budget))
        )

    print(f"\n{label}2. the gpu source's achieved rate (every GPU per reading)")
    for key, interval, seconds, samples in (
        ("rate_1k", 0.001, args.rate_seconds, True),
        ("rate_10k", 0.0001, 1.0, False),
    ):
        r = guarded("rate", partial(check_rate, stroboscope, interval, seconds, samples))
        result[key] = r
        if "error" not in r:
            print_rate(r)

    print(f"\n{label}3. driver sample buffers (nvmlDeviceGetSamples, lastSeenTimeStamp 0)")
    result["samples"] = []
    for i in range(count):
        print(f"\n  GPU {i}")
        if nv.samples is None:
            print("  nvmlDeviceGetSamples: not in this library")
            continue
        result["samples"].append(guarded("samples", partial(check_samples, nv, i)))

    load = Load() if not args.no_load and not nv.fake else None
    what = load.what if load is not None else "none (--no-load, or the fake library)"
    print(f"\n{label}Load for sections 4 to 7: {what}")
    result["load"] = what
    if load is not None:
        load.start()
        time.sleep(2.0 if load.running else 0.0)  # clocks and power settle
    try:
        print(f"\n{label}4. how often the energy counter (and POWER_INSTANT) change")
        result["energy"] = guarded("energy", lambda: check_energy(nv, count, args.energy_seconds))

        print(f"\n{label}5. every column side by side (stroboscope / nvidia-smi / pynvml)")
        result["values"] = guarded("values", lambda: check_values(stroboscope, nv, count))

        print(f"\n{label}6. the sampler's tick at 1 kHz without and with the gpu source")
        result["tick"] = guarded("tick", lambda: check_tick(stroboscope, args.tick_seconds))

        print(f"\n{label}7. energy windows: ours (with bounds) beside the direct counter")
        result["energy_windows"] = guarded(
            "energy windows", lambda: check_energy_windows(stroboscope, nv, count)
        )
    finally:
        if load is not None:
            load.stop()
            result["multiplies"] = load.multiplies
            print(f"\n  load: {load.multiplies:,} matrix multiplies done")

    nv.shutdown()
    print(f"\n{label}gpu_check took {time.perf_counter() - started:.1f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
