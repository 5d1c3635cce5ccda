"""The end of a long 1 kHz recording: the footer joiner against the read-back path (issue 33).

A recording prepared for one Parquet output (``recording.finish``) appends its segments as
pieces of one file (:mod:`stroboscope.formats.pieces`); its end appends the ring's rest as the
last piece and one footer joining every piece's (:mod:`stroboscope.formats.parquet_footer`),
so no segmented row is written again. The read-back path, which the package keeps for a CSV
output, a kept spool or another filesystem, reads every segment back and writes one file of
them and the rest (:func:`stroboscope.formats.writers.write_parts`). Without the joiner a
recording writes segment files of its own (``SPOOL.seg-NNNNNN.parquet``), so that path is
measured over segment files.

Both ends are measured in a fresh child each, doing what ``recording._output.Clean`` does (its
steps written out here with the ``formats`` modules it uses, which are public; ``Clean`` is the
recording room's private class):

* ``join``: the index read, every piece's footer read from its tail, checked (first row,
  rows) and its row groups moved into the joined footer right away
  (:class:`~stroboscope.formats.parquet_footer.FooterJoin`), the rest encoded and appended as
  a piece, the joined footer written around the moved row groups and appended (fsync), the
  pieces file hard-linked to the output's name;
* ``readback``: every segment file's footer checked (:func:`segment_extent`), then every
  segment read whole (:func:`read_segment`) and written with the rest into the output
  (:func:`write_parts`, zstd, a temporary file renamed).

The segments hold synthetic rows in the columns, types, field metadata and null pattern of a
real short recording of this machine's default sources at 1 kHz (made first, in a child), with
values that move like the real ones (percentages as random walks at full double precision,
counters rising, byte gauges in pages), ``segment_rows`` rows a segment (16384: the quarter of
``record``'s default 65536-row ring at 1 kHz) and the remainder as the ring's rest. Reported
per end: wall time, CPU (user + system of the child, from ``os.wait4``), bytes written (the
child's ``/proc/self/io`` ``wchar``) and read (``rchar``), the output's size, peak RSS (the
child's ``VmHWM``) and the RSS it had before the end began (imports and the rest).

Run: ``python bench/bench_parquet_end.py --hours 1 24`` (the files, ~2 GB for 24 h per layout,
go to ``--dir`` or a temporary directory, removed at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROWS_PER_HOUR = 3_600_000
"""Rows an hour at 1 kHz."""
INTERVAL_NS = 1_000_000
SEED = 33


def _proc_kb(field: str) -> int:
    """A ``VmXXX`` line of ``/proc/self/status`` in kB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _io() -> dict[str, int]:
    """``/proc/self/io`` (rchar, wchar, read_bytes, write_bytes ...)."""
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(":") for line in f)}


# --- the recording's schema and null pattern, from a real short recording ------------------


def real_sample(seconds: float, path: str) -> None:
    """Record ``seconds`` at 1 kHz with the default sources and write the rows to ``path``
    (run in a child: the extension stays out of the measured children)."""
    import stroboscope
    from stroboscope.formats.segments import stored_schema

    sampler = stroboscope.Sampler(0.001)
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    table = sampler.snapshot().to_arrow()
    table = table.cast(stored_schema(table.schema)).replace_schema_metadata(None)
    pq.write_table(table, path)


class Synth:
    """Rows in a real recording's columns: each column valid every ``period`` rows (its real
    valid share; the first reading of a rate is dropped from the share), values moving like
    the real ones, carried from one segment to the next."""

    def __init__(self, real: pa.Table) -> None:
        self.schema = real.schema
        self.rng = np.random.default_rng(SEED)
        skip = min(real.num_rows // 4, 500)  # a rate's first window has no value
        tail = real.slice(skip)
        self.period: dict[str, int] = {}
        self.level: dict[str, float] = {}
        for f in self.schema:
            if f.name in ("time", "mono_ns"):
                continue
            col = tail.column(f.name)
            valid = len(col) - col.null_count
            self.period[f.name] = 0 if valid == 0 else max(1, round(len(col) / valid))
            first = col.drop_null()
            self.level[f.name] = float(first[0].as_py()) if len(first) else 0.0
        self.t0 = 1_796_000_000 * 10**9  # a realtime anchor (ns)
        self.mono0 = 10**13

    def table(self, first: int, n: int) -> pa.Table:
        """Rows ``first`` .. ``first + n - 1``."""
        rows = np.arange(first, first + n, dtype=np.int64)
        jitter = self.rng.integers(0, 40_000, n)  # lateness of each tick (ns)
        mono = self.mono0 + rows * INTERVAL_NS + jitter
        cols: dict[str, pa.Array] = {
            "time": pa.array(mono - self.mono0 + self.t0, pa.timestamp("ns", "UTC")),
            "mono_ns": pa.array(mono, pa.int64()),
        }
        for f in self.schema:
            if f.name in cols:
                continue
            period = self.period[f.name]
            mask = np.zeros(n, bool) if period == 0 else (rows % period) == 0
            k = int(mask.sum())
            kind = (f.metadata or {}).get(b"kind", b"gauge")
            unit = (f.metadata or {}).get(b"unit", b"")
            level = self.level[f.name]
            if kind == b"counter":
                steps = self.rng.integers(0, 1 << 16, k).astype(np.float64)
                vals = level + np.cumsum(steps)
            elif unit == b"%":
                walk = level + np.cumsum(self.rng.normal(0, 0.5, k))
                vals = np.asarray(np.clip(walk, 0, 100), np.float64)
            elif unit == b"bytes/s":
                vals = np.asarray(np.abs(level + np.cumsum(self.rng.normal(0, 1e4, k))), np.float64)
            elif pa.types.is_integer(f.type) and unit == b"bytes":
                vals = np.asarray(level + 4096 * np.cumsum(self.rng.integers(-3, 4, k)), np.float64)
            else:  # counts and the like: steady
                vals = np.full(k, level)
            if k:
                self.level[f.name] = float(vals[-1])
            full = np.zeros(n, np.float64)
            full[mask] = vals
            if pa.types.is_integer(f.type):
                arr = pa.array(full.astype(np.int64), f.type, mask=~mask)
            else:
                arr = pa.array(full, f.type, mask=~mask)
            cols[f.name] = arr
        return pa.table(cols).cast(self.schema)


def make(real_path: str, root: Path, total: int, segment_rows: int) -> dict[str, Any]:
    """The segments of a recording of ``total`` rows, both layouts (pieces of one file with
    their index; segment files), and the ring's rest (``rest.parquet``)."""
    from stroboscope.formats.pieces import append_piece, encode_piece, pieces_path
    from stroboscope.formats.segments import FIRST_ROW_KEY, segment_path

    synth = Synth(pq.read_table(real_path))
    pieces_spool = str(root / "pieces" / "run.spool")
    files_spool = str(root / "files" / "run.spool")
    for spool in (pieces_spool, files_spool):
        Path(spool).parent.mkdir(parents=True)
        Path(spool).touch()
    segments, rest_rows = divmod(total, segment_rows)
    if rest_rows == 0 and segments:
        segments, rest_rows = segments - 1, segment_rows
    for s in range(segments):
        first = s * segment_rows
        meta = {FIRST_ROW_KEY: str(first).encode()}
        table = synth.table(first, segment_rows).replace_schema_metadata(meta)
        data = encode_piece(table)
        append_piece(data, pieces_path(pieces_spool), first, segment_rows)
        with open(segment_path(files_spool, s + 1), "wb") as f:
            f.write(data)  # the same bytes write_parquet writes for a segment file
    rest = synth.table(segments * segment_rows, rest_rows)
    pq.write_table(rest, root / "rest.parquet")
    size = os.path.getsize(pieces_path(pieces_spool))
    return {
        "rows": total,
        "segments": segments,
        "rest_rows": rest_rows,
        "pieces_spool": pieces_spool,
        "files_spool": files_spool,
        "segment_bytes": size,
    }


# --- the two ends, each run in a child --------------------------------------------------


def _phase(phases: dict[str, float], name: str, t0: float) -> float:
    """Note the seconds since ``t0`` and the RSS now (MiB) under ``name``; return now."""
    now = time.perf_counter()
    phases[name + "_s"] = now - t0
    phases[name + "_rss_mib"] = _proc_kb("VmRSS") / 1024
    return now


def end_join(spool: str, rest: pa.Table, output: str) -> dict[str, float]:
    """The joiner's end, as ``Clean`` does it for a spool whose segments are pieces; the
    seconds and RSS after its two phases (every footer read and checked; the join)."""
    from stroboscope.formats.parquet_footer import (
        FooterJoin,
        footer_bytes,
        footer_bytes_of,
        footer_of_schema,
    )
    from stroboscope.formats.pieces import (
        Piece,
        append_piece,
        append_tail,
        encode_piece,
        pieces_path,
        read_index,
        read_piece_range,
    )
    from stroboscope.formats.segments import FIRST_ROW_KEY, stored_schema

    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    uid = os.geteuid()
    schema = stored_schema(rest.schema)
    pieces, damage = read_index(spool, uid)
    assert damage is None
    join = FooterJoin()  # Clean.footers: each footer walked once, its row groups moved
    for p in pieces:  # Clean.__init__: every piece's footer from its tail, checked

        def read(offset: int, n: int, p: Piece = p) -> bytes:
            return read_piece_range(p, uid, offset, n)

        rows, meta = join.add(footer_bytes_of(read, p.length), p.offset)
        if (int(meta[FIRST_ROW_KEY]), rows) != (p.first_row, p.rows):
            raise RuntimeError(f"{p} changed")
    t0 = _phase(phases, "footers", t0)
    first_rest = pieces[-1].first_row + pieces[-1].rows if pieces else 0
    data = encode_piece(rest.replace_schema_metadata({FIRST_ROW_KEY: str(first_rest).encode()}))
    at = append_piece(data, pieces_path(spool), first_rest, rest.num_rows)
    join.add(footer_bytes(data), at)
    del data
    whole = schema.with_metadata({"stroboscope.rows_lost": "0"})
    append_tail(pieces_path(spool), join.footer(footer_of_schema(whole)))
    os.link(pieces_path(spool), output)  # _publish: a hard link, renamed over the output
    _phase(phases, "join", t0)
    return phases


def end_readback(spool: str, rest: pa.Table, output: str) -> dict[str, float]:
    """The read-back end over segment files, as ``Clean`` does it (``parts()`` into
    ``write_parts``); the seconds and RSS after its two phases (every footer checked; the
    rows read and written)."""
    from stroboscope.formats.segments import (
        FIRST_ROW_KEY,
        read_segment,
        segment_extent,
        segment_paths,
        stored_schema,
    )
    from stroboscope.formats.writers import write_parts

    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    uid = os.geteuid()
    schema = stored_schema(rest.schema)
    want = [(f.name, f.type) for f in schema]
    segs = [str(p) for p in segment_paths(spool)]
    h = {"uid": uid, "head": 1 << 62}
    extents = [segment_extent(s, h, want) for s in segs]  # Clean.__init__
    t0 = _phase(phases, "footers", t0)
    whole = schema.with_metadata({"stroboscope.rows_lost": "0"})

    def parts() -> Any:
        for seg, (first, n) in zip(segs, extents):
            table = read_segment(seg, uid, want)
            raw = (table.schema.metadata or {}).get(FIRST_ROW_KEY, b"")
            if table.num_rows != n or raw != str(first).encode():
                raise RuntimeError(f"{seg} changed")
            yield table.replace_schema_metadata(whole.metadata).cast(whole)
        yield rest.replace_schema_metadata(whole.metadata).cast(whole)

    write_parts(whole, parts(), output)
    _phase(phases, "rows", t0)
    return phases


def child(mode: str, spool: str, rest_path: str, output: str) -> None:
    """One end in this (fresh) process; prints what it measured of itself as JSON."""
    import stroboscope.formats.parquet_footer
    import stroboscope.formats.segments
    import stroboscope.formats.writers  # every import before the baseline

    del stroboscope

    rest = pq.read_table(rest_path)
    rss_before = _proc_kb("VmRSS")
    io0 = _io()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    phases = (end_join if mode == "join" else end_readback)(spool, rest, output)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    io1 = _io()
    print(
        json.dumps(
            {
                "wall_s": wall,
                "end_cpu_s": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
                "rss_before_kb": rss_before,
                "hwm_kb": _proc_kb("VmHWM"),
                "wchar": io1["wchar"] - io0["wchar"],
                "rchar": io1["rchar"] - io0["rchar"],
                **phases,
            }
        )
    )


def run_child(mode: str, spool: str, rest_path: str, output: str) -> dict[str, Any]:
    """Run one end in a fresh child; its own measures plus its CPU and ``ru_maxrss``."""
    argv = [sys.executable, __file__, "--child", mode, spool, rest_path, output]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _pid, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"the {mode} child failed ({proc.returncode})")
    got: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    got["cpu_s"] = ru.ru_utime + ru.ru_stime
    got["maxrss_kb"] = ru.ru_maxrss
    got["output_bytes"] = os.path.getsize(output)
    md = pq.read_metadata(output)
    got["output_rows"] = md.num_rows
    got["row_groups"] = md.num_row_groups
    got["footer_bytes"] = md.serialized_size
    return got


def measure(root: Path, made: dict[str, Any]) -> dict[str, Any]:
    """Both ends once each; the pieces file is put back as it was after the join."""
    from stroboscope.formats.pieces import index_path, pieces_path

    rest = str(root / "rest.parquet")
    out: dict[str, Any] = {}
    out["readback"] = run_child("readback", made["files_spool"], rest, str(root / "rb.parquet"))
    os.unlink(root / "rb.parquet")
    spool = made["pieces_spool"]
    sizes = {p: os.path.getsize(p) for p in (pieces_path(spool), index_path(spool))}
    joined = str(root / "joined.parquet")
    try:
        out["join"] = run_child("join", spool, rest, joined)
        table = pq.read_table(joined, columns=["mono_ns"])  # every row there, in order
        mono = table.column("mono_ns").to_numpy()
        assert len(mono) == made["rows"] and bool(np.all(np.diff(mono) > 0))
    finally:
        if os.path.exists(joined):
            os.unlink(joined)
        for p, n in sizes.items():
            os.truncate(p, n)
    for key in ("join", "readback"):
        assert out[key]["output_rows"] == made["rows"], (key, out[key])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, nargs="+", default=[1.0, 24.0])
    parser.add_argument("--segment-rows", type=int, default=16384)
    parser.add_argument("--dir", help="where the segments go (default: a temporary directory)")
    parser.add_argument("--json", help="write the raw numbers here too")
    parser.add_argument(
        "--sample",
        help="a recording (Parquet) to take the columns and null pattern from (default: "
        "record 3 s at 1 kHz with the default sources)",
    )
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="strobo-parquet-end-", dir=args.dir))
    results: list[dict[str, Any]] = []
    try:
        real = args.sample or str(base / "real.parquet")
        if args.sample is None:
            subprocess.run([sys.executable, __file__, "--real", real], check=True)
        for hours in args.hours:
            root = base / f"{hours:g}h"
            root.mkdir()
            total = round(hours * ROWS_PER_HOUR)
            t0 = time.perf_counter()
            made = make(real, root, total, args.segment_rows)
            made["make_s"] = time.perf_counter() - t0
            got = measure(root, made)
            results.append({"hours": hours, **made, **got})
            shutil.rmtree(root)
            _print(results[-1])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def _print(r: dict[str, Any]) -> None:
    mib = 1 << 20
    print(
        f"\n{r['hours']:g} h: {r['rows']} rows, {r['segments']} segments of "
        f"{r['segment_bytes'] / r['segments'] / mib if r['segments'] else 0:.2f} MiB "
        f"+ rest {r['rest_rows']} rows; segments {r['segment_bytes'] / mib:.0f} MiB "
        f"(made in {r['make_s']:.0f} s)"
    )
    print(
        "| end | wall | CPU (end) | CPU (child) | written | read | output | peak RSS "
        "| RSS before | row groups |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for key in ("join", "readback"):
        g = r[key]
        print(
            f"| {key} | {g['wall_s']:.2f} s | {g['end_cpu_s']:.2f} s | {g['cpu_s']:.2f} s | "
            f"{g['wchar'] / mib:.1f} MiB | "
            f"{g['rchar'] / mib:.1f} MiB | {g['output_bytes'] / mib:.1f} MiB | "
            f"{g['hwm_kb'] / 1024:.0f} MiB | {g['rss_before_kb'] / 1024:.0f} MiB | "
            f"{g['row_groups']} (footer {g['footer_bytes'] / mib:.2f} MiB) |"
        )
    for key in ("join", "readback"):
        g = r[key]
        phases = ", ".join(
            f"{k[:-2]} {g[k]:.2f} s (RSS then {g[k[:-2] + '_rss_mib']:.0f} MiB)"
            for k in g
            if k.endswith("_s") and k[:-2] + "_rss_mib" in g
        )
        print(f"{key} phases: {phases}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:6])
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] == "--real":
        real_sample(3.0, sys.argv[2])
        sys.exit(0)
    sys.exit(main())
