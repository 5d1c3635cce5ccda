"""The package's weight: import time, the watchdog's start time and its idle child's memory.

Measured side by side in one run, each as the median of ``--repeat`` fresh interpreters:

- ``import numpy, pyarrow`` (the floor: what the face may cost at most) and ``import stroboscope``,
  and ``import stroboscope; stroboscope.Sampler`` (the facade, which loads the extension);
- ``Watchdog.start()`` with one journal job (the child's start-up is waited for);
- the idle watchdog child: VmRSS from ``/proc/PID/status`` and whether its mappings hold
  libarrow, numpy or the ``_core`` extension.

It uses whatever ``stroboscope`` is importable, so the same script measures an older checkout
(``PYTHONPATH=OLD/python python bench/layout_bench.py``). Results: ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import cpu_model


def _import_s(code: str, repeat: int) -> float:
    """Median wall time of a fresh interpreter running ``code``, minus an empty interpreter."""

    def once(c: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", c], check=True, env=os.environ.copy())
        return time.perf_counter() - t0

    empty = statistics.median(once("pass") for _ in range(repeat))
    return statistics.median(once(code) for _ in range(repeat)) - empty


def _watchdog(repeat: int) -> dict[str, object]:
    from stroboscope.recording import DumpJob, Watchdog

    starts = []
    rss_kib = []
    maps_hold: set[str] = set()
    with tempfile.TemporaryDirectory() as d:
        journal = Path(d) / "j.jsonl"
        journal.write_text("")
        for _ in range(repeat):
            job = DumpJob("journal", journal, dump=Path(d) / "dump.csv")
            w = Watchdog([job])
            t0 = time.perf_counter()
            w.start()
            starts.append(time.perf_counter() - t0)
            assert w.pid is not None
            time.sleep(0.2)  # idle
            status = Path(f"/proc/{w.pid}/status").read_text()
            rss_kib.append(
                int(next(ln for ln in status.splitlines() if ln.startswith("VmRSS")).split()[1])
            )
            maps = Path(f"/proc/{w.pid}/maps").read_text()
            for name in ("libarrow", "numpy", "_core"):
                if name in maps:
                    maps_hold.add(name)
            w.stop()
    return {
        "watchdog_start_s": statistics.median(starts),
        "child_rss_mib": statistics.median(rss_kib) / 1024,
        "child_maps": sorted(maps_hold) or ["none of libarrow, numpy, _core"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="fresh interpreters per figure")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    floor = _import_s("import numpy, pyarrow", args.repeat)
    face = _import_s("import stroboscope", args.repeat)
    facade = _import_s("import stroboscope; stroboscope.Sampler", args.repeat)
    result: dict[str, object] = {
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "import_numpy_pyarrow_s": floor,
        "import_stroboscope_s": face,
        "import_stroboscope_sampler_s": facade,
        **_watchdog(args.repeat),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for key, value in result.items():
        shown = (
            f"{value * 1e3:.1f} ms" if key.endswith("_s") and isinstance(value, float) else value
        )
        print(f"{key:32} {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
