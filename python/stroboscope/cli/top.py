"""``stroboscope top``: a live view of a recording in progress, of every rank of a run, or of a
process sampled here.

``stroboscope top PATH`` follows what a running ``stroboscope record`` writes: PATH is its
output (``FILE``: its spool ``FILE.spool`` is read), its spool, or a folder holding several
ranks' spools or their dataset root. Nothing is asked of the recorder: the spool is read
read-only (:mod:`stroboscope.formats.spool_live`), the command's scope edges from its events
directory (found in the environment of the recorder's children), so watching and leaving never
change the recording; attaching loads no extension (only ``--pid``, which samples, does).
``stroboscope top`` alone lists the recordings in progress this user can watch; ``stroboscope
top --pid PID`` samples that process itself. The view is
:class:`stroboscope.export.live_app.LiveApp` (the ``live`` extra: Textual).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from stroboscope._base.checks import check_path
from stroboscope._base.extras import require
from stroboscope._base.files import file_kind
from stroboscope._base.text import fmt_seconds, printable
from stroboscope.formats.shared_events import EVENTS_DIR_ENV
from stroboscope.formats.spool_header import MAGIC, SpoolError
from stroboscope.formats.spool_live import LiveSpool, holder_of, live_spools

NOT_A_TERMINAL = (
    "stroboscope top: standard output is not a terminal: the live view draws a full screen "
    "and needs one (run it in a terminal; `stroboscope top` with no argument lists the "
    "recordings in progress as text)"
)
MAX_DEPTH = 4
"""How deep a folder is searched for spools (PATH/job=J/host=H/rank=R/...)."""


def _is_spool(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _cmdline_paths(pid: int) -> list[str]:
    """The real paths a recorder's ``-o``/``--output``/``--dataset``/``--spool`` name."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [os.fsdecode(a) for a in f.read().split(b"\0")]
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return []
    if "--" in argv:
        argv = argv[: argv.index("--")]
    out = []
    for i, a in enumerate(argv):
        for opt in ("-o", "--output", "--dataset", "--spool"):
            if a == opt and i + 1 < len(argv):
                out.append(argv[i + 1])
            elif a.startswith(opt + "=") and opt.startswith("--"):
                out.append(a.split("=", 1)[1])
    return [os.path.realpath(os.path.join(cwd, p)) for p in out]


def _environ(pid: int, name: str) -> str | None:
    """The value of ``name`` in the environment process ``pid`` was started with (None when it
    has none, or this user may not read it)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    key = name.encode() + b"="
    for entry in env:
        if entry.startswith(key):
            return os.fsdecode(entry[len(key) :])
    return None


def _rank_of(pid: int | None) -> int | None:
    """``RANK`` in a recorder's environment (a launcher sets it), else None."""
    value = None if pid is None else _environ(pid, "RANK")
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    return out


def events_dir_of(pid: int) -> str | None:
    """The events directory process ``pid`` writes its scope edges into (named in its
    environment, when it is a directory), else None."""
    found = _environ(pid, EVENTS_DIR_ENV)
    return found if found is not None and os.path.isdir(found) else None


def events_dir_of_recorder(pid: int | None) -> str | None:
    """The events directory a recorder made for its command (named in the environment of the
    command it runs), None when there is none."""
    if pid is None:
        return None
    for child in _children(pid):
        found = events_dir_of(child)
        if found is not None:
            return found
    return None


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def resolve(path: str) -> list[str]:
    """The spools ``path`` names: a spool, a recording's output (``FILE.spool``), or a folder
    (its spools up to :data:`MAX_DEPTH` levels down, and those of the running recorders whose
    ``-o``, ``--dataset`` or ``--spool`` lies in it). ValueError naming the path otherwise."""
    p = check_path("PATH", path)
    if os.path.isdir(p):
        found: set[str] = set()
        base = p.rstrip("/").count("/")
        for root, dirs, files in os.walk(p):
            if root.count("/") - base >= MAX_DEPTH:
                dirs[:] = []
            found |= {os.path.join(root, f) for f in files if f.endswith(".spool")}
        found = {f for f in found if _is_spool(f)}
        real = os.path.realpath(p)
        for spool, pid in live_spools():
            if any(_under(q, real) for q in _cmdline_paths(pid)):
                found.add(spool)
        if not found:
            raise ValueError(
                f"PATH {p!r}: no recording in progress in this folder (no spool in it, and no "
                f"running `stroboscope record` writes under it); `stroboscope top` lists them"
            )
        return sorted(found)
    if os.path.isfile(p) and (_is_spool(p) or not os.path.exists(p + ".spool")):
        return [p]  # a spool, or a file that is not one (refused by its reader, in words)
    if os.path.exists(p + ".spool"):
        return [p + ".spool"]
    if os.path.exists(p) and not os.path.isdir(p):  # a FIFO, a device: named, never opened
        kind = file_kind(os.stat(p).st_mode)
        raise ValueError(f"PATH {p!r}: {kind}, not a regular file (a spool is one)")
    real = os.path.realpath(p)
    named = [s for s, pid in live_spools() if real in _cmdline_paths(pid)]
    if named:
        return named
    raise ValueError(
        f"PATH {p!r}: no such file, and no {p + '.spool'!r} (give a running record's output, "
        f"its spool, or a folder of ranks' recordings; `stroboscope top` lists them)"
    )


def _held_by(spool: str) -> int | None:
    try:
        st = os.stat(spool)
    except OSError:
        return None
    return holder_of(st.st_dev, st.st_ino)


def _feeds_for(spools: list[str]) -> list[Any]:
    from stroboscope.export.live_feed import Feed

    labelled = []
    for spool in spools:
        LiveSpool(spool).close()  # refused in words: not a spool, another user's
        pid = _held_by(spool)
        rank = _rank_of(pid)
        label = f"rank {rank}" if rank is not None else os.path.basename(spool)
        labelled.append((rank if rank is not None else 1 << 62, label, spool, pid))
    labelled.sort()
    return [Feed(label, s, events_dir_of_recorder(pid)) for _, label, s, pid in labelled]


def list_recordings() -> int:
    """Print the recordings in progress this user can watch."""
    found = live_spools()
    if not found:
        print("no recording in progress (a running `stroboscope record` of yours holds its spool)")
        return 0
    print(f"{'pid':>8}  {'rows':>10}  {'running':>9}  spool")
    for spool, pid in found:
        try:
            with LiveSpool(spool) as s:
                _, head = s.counters()
                age = (time.time_ns() - int(s.header["created_ns"])) / 1e9
        except (SpoolError, OSError) as exc:
            print(f"{pid:>8}  {'-':>10}  {'-':>9}  {printable(spool)} ({printable(exc)})")
            continue
        print(f"{pid:>8}  {head:>10}  {fmt_seconds(age):>9}  {printable(spool)}")
    print("watch one with: stroboscope top SPOOL (or the folder of several ranks)")
    return 0


@contextlib.contextmanager
def _sampled(pid: int, interval: float) -> Iterator[Any]:
    """A feed of process ``pid`` sampled here, into a spool in a private folder (removed)."""
    from stroboscope.export.live_feed import Feed
    from stroboscope.formats.spool_read import remove_spool
    from stroboscope.recording.sampler import Sampler

    folder = tempfile.mkdtemp(prefix="stroboscope-top-")
    spool = os.path.join(folder, "top.spool")
    sampler = Sampler(interval, pid=pid, spool=spool)
    try:
        sampler.start()

        def figures() -> str:
            st = sampler.stats()
            return (
                f"ticks missed {st.ticks_missed} of {st.ticks_scheduled} · cost "
                f"{fmt_seconds(st.cost_mean_ns / 1e9)} mean, {fmt_seconds(st.cost_p99_ns / 1e9)}"
                f" p99 per tick · rows lost {st.rows_lost}"
            )

        yield Feed(f"pid {pid}", spool, events_dir_of(pid), figures)
    finally:
        sampler.close()
        remove_spool(spool)
        shutil.rmtree(folder, ignore_errors=True)


def _ctrl_c() -> None:
    """What Ctrl-C does in a terminal that no view holds: SIGINT to the foreground process group
    (the recorder and its command; the view, which is leaving, ignores it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.killpg(os.getpgrp(), signal.SIGINT)


def run(args: argparse.Namespace) -> int:
    """The ``top`` command; returns the exit code."""
    from stroboscope.export.live_draw import WINDOWS_S, ViewState

    if args.window not in WINDOWS_S:
        accepted = ", ".join(str(w) for w in WINDOWS_S)
        raise ValueError(f"--window must be one of {accepted} (seconds), got {args.window!r}")
    if args.path is not None and args.pid is not None:
        raise ValueError("top: give either PATH or --pid PID, not both")
    if args.path is None and args.pid is None:
        return list_recordings()
    if args.pid is not None:
        from stroboscope.cli import _args

        args.pid = _args.pid("--pid", args.pid)
        args.interval = _args.interval("--interval", args.interval)
    # Every spool is opened (and refused in words: not a spool, another user's) first.
    feeds = _feeds_for(resolve(args.path)) if args.path is not None else []
    try:
        if not sys.stdout.isatty():
            print(NOT_A_TERMINAL, file=sys.stderr)
            return 2
        require("textual", "stroboscope top", "live")
        from stroboscope.export.live_app import LiveApp

        view = ViewState(window_s=float(args.window), step=args.step)
        with contextlib.ExitStack() as stack:
            if args.pid is not None:
                feeds = [stack.enter_context(_sampled(args.pid, args.interval))]
            # record --live (this view's parent records the spool it shows): Ctrl-C in the view
            # ends the recording, as it does without the view
            ours = args.path is not None and _held_by(feeds[0].spool.path) == os.getppid()
            app = LiveApp(feeds, view, on_interrupt=_ctrl_c if ours else None)
            # SIGTERM (record --live ending its view) leaves as q does: the terminal restored
            signal.signal(signal.SIGTERM, lambda *_: app.exit())
            app.run()
    finally:
        for feed in feeds:
            feed.close()
    return 0


def add_parser(sub: Any) -> None:
    """Add ``top`` to the subcommands."""
    p = sub.add_parser(
        "top",
        help="watch a recording in progress live (or list them, or sample --pid PID)",
        usage="stroboscope top [PATH | --pid PID] [--window S] [--step NAME]",
        description="A full-screen live view of a running `stroboscope record` (PATH: its "
        "output, its spool, or a folder of several ranks' recordings), read-only; with no "
        "PATH, list the recordings in progress; with --pid, sample that process here.",
    )
    p.add_argument("path", nargs="?", help="a running record's output, spool, or run folder")
    # --pid and --interval are checked as record checks them, when --pid is given (their checks
    # load the sampler, which attaching never does)
    p.add_argument("--pid", metavar="PID", help="sample this process here instead")
    p.add_argument(
        "--interval", default="0.001", metavar="S", help="--pid: seconds between rows (0.001)"
    )
    p.add_argument("--window", type=int, default=10, help="seconds shown at first (10)")
    p.add_argument("--step", help="the scope whose calls are the steps (default: most called)")
    p.set_defaults(func=run)


def check_live() -> None:
    """``record --live``: ValueError when standard output is not a terminal, ImportError when
    the live extra is not installed."""
    if not sys.stdout.isatty():
        raise ValueError(
            "--live: standard output is not a terminal: the live view needs one (without "
            "--live, record draws a status line on a terminal and nothing otherwise)"
        )
    require("textual", "stroboscope record --live", "live")


def start_view(spool: str) -> subprocess.Popen[bytes]:
    """``record --live``: ``stroboscope top SPOOL`` in a process of its own on this terminal
    (it reads the spool read-only, as any watcher: the recording never waits for it)."""
    return subprocess.Popen([sys.executable, "-m", "stroboscope", "top", spool])


def stop_view(view: subprocess.Popen[bytes] | None) -> None:
    """End the view of :func:`start_view` (nothing when there is none or it was left)."""
    if view is None:
        return
    if view.poll() is None:
        view.terminate()
        try:
            view.wait(5)
        except subprocess.TimeoutExpired:
            view.kill()
            view.wait()
