"""``Sampler.snapshot().to_arrow()`` of 1,000 rows against the core's own path.

The core's path is the C++ snapshot read by pyarrow through the Arrow C stream, with nothing
added (no provenance, no Frame). The issue's target: the facade within 1.5x of it. Both are
timed with :mod:`timeit` on the same sampler (default sources, 1,000 rows taken with
``tick_now``), as the best of ``--repeats`` runs of ``--number`` calls each, the two
interleaved so that both see the same load.

Run alone: ``python bench/bench_frame_small.py [--repeats 20] [--number 200]``.
"""

from __future__ import annotations

import argparse
import timeit

import pyarrow as pa
from stroboscope.sampling import Sampler

ROWS = 1000
TARGET_RATIO = 1.5


class _Stream:
    def __init__(self, capsule: object) -> None:
        self._capsule = capsule

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._capsule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--number", type=int, default=200)
    args = parser.parse_args()
    with Sampler(0.001, capacity=ROWS) as s:
        s.stop()
        s.tick_now(ROWS)
        core = s._core

        def facade() -> pa.Table:
            return s.snapshot().to_arrow()

        def core_path() -> pa.Table:
            return pa.RecordBatchReader.from_stream(
                _Stream(core.snapshot().export_stream())
            ).read_all()

        assert facade().num_rows == core_path().num_rows == ROWS
        # Interleaved, so both see the same load; the best run of each.
        runs: dict[str, list[float]] = {"core": [], "facade": []}
        for _ in range(args.repeats):
            for name, fn in (("core", core_path), ("facade", facade)):
                runs[name].append(timeit.timeit(fn, number=args.number) / args.number)
        times = {name: min(values) for name, values in runs.items()}
    ratio = times["facade"] / times["core"]
    print(f"rows {ROWS}, columns {facade().num_columns}")
    print(f"core path          {times['core'] * 1e6:8.1f} us")
    print(f"snapshot().to_arrow {times['facade'] * 1e6:8.1f} us")
    verdict = "ok" if ratio <= TARGET_RATIO else "over"
    print(f"ratio {ratio:.2f}x (target <= {TARGET_RATIO}x): {verdict}")


if __name__ == "__main__":
    main()
