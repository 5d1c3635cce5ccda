"""``stroboscope info [FILE]``: the sources (and GPUs) that work here, and why the others do not;
with FILE, the provenance of a recording (a Parquet file, a CSV's sidecar, or a spool)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any

from stroboscope._base.files import open_regular_file, regular_source, why_unreachable
from stroboscope.cli import _args

# What a recording's provenance needs (pyarrow, numpy) is imported where a FILE is read: the
# listing of the sources here imports neither (``stroboscope info`` starts in a few ms).


def _sources(args: argparse.Namespace) -> int:
    from stroboscope.sampling import available_sources, gpu_status

    infos = available_sources(pid=args.pid)
    width = max(len(i["name"]) for i in infos)
    print("sources:")
    for info in infos:
        state = "default" if info["default"] else ("opt-in" if info["available"] else "unavailable")
        line = f"  {info['name'].ljust(width)}  {state:<11}  {info['help']}"
        if info.get("interface"):
            line += f" [{info['interface']}]"
        if not info["available"] and info["reason"]:
            line += f" — {info['reason']}"
        print(line)
    print()
    print("gpus:")
    for text_line in gpu_status()["text"].rstrip().splitlines():
        print(f"  {text_line}")
    return 0


def read_provenance(path: str) -> dict[str, Any]:
    """The provenance of the recording at ``path``: a Parquet file's schema metadata, a CSV
    file's sidecar ``FILE.meta.json`` (or the sidecar itself), or a spool's header (through
    :func:`stroboscope.formats.spool_read.recover_parts`: it lists what a spool does not keep).

    Raises
    ------
    ValueError
        The file holds no provenance (written without one, or not a recording), naming it.
    FileNotFoundError
        ``path`` (or a CSV's sidecar) does not exist.
    """
    from stroboscope.formats.provenance import from_schema
    from stroboscope.formats.writers import SIDECAR_SUFFIX, output_format, sidecar_path

    if not os.path.exists(path):
        why = why_unreachable(path)
        if why is not None:  # a symbolic link loop or a dangling link: said, not "no such file"
            raise ValueError(f"{path} {why}")
        raise FileNotFoundError(2, "no such file", path)
    if path.endswith(SIDECAR_SUFFIX):
        return _load_sidecar(path)
    try:
        fmt: str | None = output_format(path)
    except ValueError:
        fmt = None
    if fmt == "csv":
        side = sidecar_path(path)
        if not os.path.exists(side):
            raise ValueError(
                f"{path} has no sidecar {os.path.basename(side)}: it holds no provenance "
                f"(written by an older version, or copied without it)"
            )
        return _load_sidecar(side)
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            with regular_source(path, "recording") as src:  # a FIFO: refused, not awaited
                schema = pq.read_schema(src)
        except (OSError, pa.ArrowException) as exc:
            raise ValueError(f"{path} cannot be read as Parquet: {exc}") from None
        try:
            prov = from_schema(schema)
        except ValueError as exc:  # not UTF-8, not JSON, nested too deeply: name the file
            raise ValueError(f"{path}: {exc}") from None
        if prov is None:
            raise ValueError(f"{path} has no stroboscope.provenance in its schema metadata")
        return prov
    from stroboscope.formats.spool_read import recover_parts

    prov = from_schema(recover_parts(path).schema)  # a spool; SpoolError names what is wrong
    assert prov is not None  # recover_parts always sets it
    return prov


def _load_sidecar(path: str) -> dict[str, Any]:
    from stroboscope.formats.provenance import loads

    with open_regular_file(path, "sidecar") as f:  # a FIFO: refused, not awaited
        return loads(f.read(), path)  # not JSON, nested too deeply, not an object: named


def format_provenance(prov: dict[str, Any]) -> str:
    """The provenance as readable lines (``key: value``; sources and GPUs one per line), each
    value from the file with its control characters escaped (:func:`printable`); a field of the
    wrong type (see :func:`stroboscope.formats.provenance.unreadable`) is shown as unreadable,
    with why."""
    from stroboscope._base.text import printable
    from stroboscope.formats.provenance import unreadable, well_typed

    lines = []
    bad = unreadable(prov)
    prov = well_typed(prov)
    clock = prov.get("clock") or {}
    unknown = "unknown"

    def show(label: str, value: object) -> None:
        lines.append(f"{label + ':':<22}{unknown if value is None else value}")

    show("recorded by", prov.get("recorded_by"))
    show("stroboscope version", prov.get("stroboscope_version"))
    if prov.get("recovered_by_version"):
        show("recovered by version", prov["recovered_by_version"])
    if prov.get("spool_created_time"):
        show("spool created", prov["spool_created_time"])
    show("start", prov.get("start_time"))
    show("end", prov.get("end_time"))
    show("rows", prov.get("rows"))
    show("rows lost", prov.get("rows_lost"))
    if prov.get("ticks_missed") is not None:
        show("ticks missed", f"{prov['ticks_missed']} of {prov.get('ticks_taken')} taken")
    show("host", prov.get("host"))
    show("pid", prov.get("pid"))
    cmd = prov.get("cmdline")
    show("command line", None if cmd is None else shlex.join(map(str, cmd)))
    show("interval", None if prov.get("interval_s") is None else f"{prov['interval_s']:g} s")
    rank = [
        f"{k}={prov[k]}" for k in ("rank", "world_size", "local_rank") if prov.get(k) is not None
    ]
    show(
        "rank", " ".join(rank) or ("not set" if "rank" not in (prov.get("missing") or []) else None)
    )
    show("clock anchor", None if clock.get("anchor_ns") is None else f"{clock['anchor_ns']} ns")
    unc = clock.get("anchor_uncertainty_ns")
    show("anchor uncertainty", None if unc is None else f"{unc} ns")
    sources = prov.get("sources")
    show("sources", None if sources is None else len(sources))
    for s in sources or []:
        via = f", reads {s['interface']}" if s.get("interface") else ""
        lines.append(f"  {s['name']:<20}every {s['every']} tick(s) = {s['interval_s']:g} s{via}")
    gpus = prov.get("gpus")
    if gpus is None:
        show("gpus", "gpu source not in use" if sources is not None else None)
    else:
        show("gpus", f"driver {gpus.get('driver_version') or unknown}")
        for d in gpus.get("devices") or []:
            lines.append(f"  gpu.{d['label']}: {d.get('name')} {d.get('uuid')} (NVML {d['index']})")
        if gpus.get("reason"):
            lines.append(f"  {gpus['reason']}")
    budget = prov.get("budget")
    if isinstance(budget, dict) and budget.get("max_overhead"):
        changes = budget.get("rate_changes_total")
        show("overhead budget", f"{budget['max_overhead']} of a core, {changes} rate change(s)")
    if prov.get("missing"):
        show("not known", ", ".join(prov["missing"]))
    for key, why in bad.items():
        show(f"{key} (unreadable)", why)
    return "\n".join(printable(line) for line in lines)


def run(args: argparse.Namespace) -> int:
    """The ``info`` command; returns the exit code."""
    if args.file is None:
        return _sources(args)
    from stroboscope.formats.provenance import unreadable

    prov = read_provenance(args.file)
    for key, why in unreadable(prov).items():
        print(
            f"stroboscope info: note: {args.file}: provenance key {key!r} is unreadable ({why})",
            file=sys.stderr,
        )
    print(json.dumps(prov, indent=1, sort_keys=True) if args.json else format_provenance(prov))
    return 0


def add_parser(sub: Any) -> None:
    """Add ``info`` to the subcommands."""
    p = sub.add_parser(
        "info",
        help="list the sources (and GPUs) available here; with FILE, a recording's provenance",
    )
    p.add_argument(
        "file",
        nargs="?",
        default=None,
        metavar="FILE",
        help="a recording (.parquet, .csv with its .meta.json sidecar, or a spool): print "
        "where it comes from",
    )
    p.add_argument("--json", action="store_true", help="with FILE: print the provenance as JSON")
    p.add_argument(
        "--pid",
        action=_args.checked(_args.pid),
        default=None,
        help="process the process sources would read (default: this one)",
    )
    p.set_defaults(func=run)
