"""The watchdog child: waits for its parent to stop or die, and writes the dumps if it died.

Started by :class:`stroboscope.recording.watchdog.Watchdog` as a script (not through the
package); the protocol is documented there. It imports only the standard library until a dump
must be written; then it imports the reader of each kind of source and the writer, from
:mod:`stroboscope.formats` (and with them pyarrow), never the extension whose process it
outlives: a dump is written as every output is (:func:`stroboscope.formats.writers.write_stream`,
a CSV with its provenance sidecar).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

CONFIG_VERSION = 1
"""Version of the JSON configuration the parent passes with ``--config``."""
STOP = b"S"
"""Written by the parent to the control pipe on a normal stop."""
READY = b"R"
"""Written by the child to the ready pipe once it waits."""
PPID_POLL_S = 1.0
"""Without a pidfd, how often the child checks that its parent still lives (seconds)."""


def default_dump_name(fmt: str, pid: int, when: float | None = None) -> str:
    """``stroboscope-dump-YYYYmmdd-HHMMSS-<pid>.<csv|parquet>`` (local time ``when``, seconds
    since the epoch; default now)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    return f"stroboscope-dump-{stamp}-{pid}.{'parquet' if fmt == 'parquet' else 'csv'}"


def _log(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr closed or gone with the parent
        print(f"stroboscope watchdog[{os.getpid()}]: {message}", file=sys.stderr, flush=True)


def _stop_pending(control: int) -> bool:
    """Whether the pipe holds the stop message (read without blocking)."""
    os.set_blocking(control, False)
    data = b""
    while True:
        try:
            chunk = os.read(control, 64)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return STOP in data


def _parent_stopped(control: int, pidfd: int | None, parent_pid: int) -> bool:
    """Wait for the parent to stop (True) or die (False)."""
    poller = select.poll()
    poller.register(control, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    timeout_ms = None if pidfd is not None else PPID_POLL_S * 1000
    while True:
        ready = {fd for fd, _ in poller.poll(timeout_ms)}
        if control in ready:
            data = os.read(control, 64)
            if STOP in data:
                return True
            if not data:  # every write end closed without the stop message
                return False
            continue  # stray bytes: not a message of this protocol
        if ready or (pidfd is None and os.getppid() != parent_pid):
            return _stop_pending(control)


def _load(job: dict[str, Any]) -> tuple[pa.Schema, Iterator[pa.Table], int, str]:
    """Read a job's source: its schema, its rows as parts (a spool's one segment at a time), the
    number of rows and a note for the log line."""
    if job["kind"] == "spool":
        from stroboscope.formats.spool_read import recover_parts

        got = recover_parts(job["source"])
        return got.schema, got.parts, got.rows, ""
    from stroboscope.formats.journal_read import read_journal_table

    table, damaged = read_journal_table(job["source"])  # a block at a time: memory stays flat
    note = f" ({damaged} damaged line(s) skipped)" if damaged else ""
    return table.schema, iter([table]), table.num_rows, note


def _publish_unique(tmp: str, path: str) -> str:
    """Give ``tmp`` the name ``path`` (or ``path`` with -1, -2, … before the suffix) without
    replacing an existing file; return the name used."""
    stem, ext = os.path.splitext(path)
    for i in range(10000):
        candidate = path if i == 0 else f"{stem}-{i}{ext}"
        try:
            os.link(tmp, candidate)
        except FileExistsError:
            continue
        except OSError:  # a file system without hard links: reserve the name, then replace it
            try:
                os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                continue
            os.replace(tmp, candidate)
            return candidate
        os.unlink(tmp)
        return candidate
    raise FileExistsError(f"no free dump name next to {path!r}")


def write_dump(table: pa.Table, job: dict[str, Any], parent_pid: int) -> str:
    """Write ``table`` where a resolved job says (a complete file or none); return the path."""
    return write_dump_parts(table.schema, [table], job, parent_pid)


def write_dump_parts(
    schema: pa.Schema, parts: Iterable[pa.Table], job: dict[str, Any], parent_pid: int
) -> str:
    """Write the ``parts`` (tables of ``schema``) one after another where a resolved job says (a
    complete file or none); return the path."""
    fmt = job["format"]
    from stroboscope._base.files import replace_private
    from stroboscope.formats.writers import write_sidecar, write_stream

    if job["dump"]:
        path: str = job["dump"]
        # Only a regular file (or nothing) is replaced, checked before anything is written and
        # again before the rename: a symlink, FIFO or directory there is refused, never used.
        with replace_private(path) as out:
            write_stream(schema, parts, out, fmt)  # fsynced before the rename makes it the dump
    else:
        path = os.path.join(job["dump_dir"], default_dump_name(fmt, parent_pid))
        directory, name = os.path.split(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory or None)
        try:
            with os.fdopen(fd, "wb") as f:
                write_stream(schema, parts, f, fmt)
                f.flush()
                os.fsync(f.fileno())  # on disk before the rename makes it the dump
            path = _publish_unique(tmp, path)  # a new name: never replaces anything
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    if fmt == "csv":
        write_sidecar(schema, path)  # the provenance, as every CSV output has it
    return path


def run_job(job: dict[str, Any], parent_pid: int) -> str:
    """Dump one resolved job (the same code for every kind); return the log line."""
    schema, parts, rows, note = _load(job)
    path = write_dump_parts(schema, parts, job, parent_pid)
    stacks_kept = False
    if job["kind"] == "spool":
        stacks_note, stacks_kept = _stacks_beside(job["source"], path, schema)
        note += stacks_note
    if job.get("remove_source") and not stacks_kept:
        if job["kind"] == "spool":
            from stroboscope.formats.spool_read import remove_spool

            remove_spool(job["source"])  # the spool and its segments
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(job["source"])
        if job.get("remove_source_dir"):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(job["source"]))
    if job.get("events_dir"):
        note += _crash_scopes(job["events_dir"], path)
    return (
        f"parent {parent_pid} died; wrote {rows} rows of {job['kind']} "
        f"{job['source']} to {path} ({job['format']}){note}"
    )


def _stacks_beside(spool: str, dump: str, schema: pa.Schema) -> tuple[str, bool]:
    """Write the stacks a ``--stacks`` recording drained beside ``spool`` (its sidecar) beside
    ``dump``, a batch at a time; return a note for the log line and whether the spool must be
    kept (the stacks could not be written: ``stroboscope recover`` still can)."""
    from stroboscope.formats.provenance import from_schema
    from stroboscope.formats.stacks_sidecar import write_sidecar_stacks

    try:
        prov = from_schema(schema)
    except ValueError:
        prov = None
    try:
        done = write_sidecar_stacks(spool, dump, provenance=prov)
    except Exception as exc:
        return f"; stacks not written ({type(exc).__name__}: {exc}), kept beside {spool}", True
    return ("", False) if done is None else (f"; {done[0]} stack samples to {done[1][0]}", False)


def failure_line(job: dict[str, Any], parent_pid: int, exc: BaseException) -> str:
    """The log line of a dump that failed (``exc``): why, and where the rows still are (a
    failed job never removes its source)."""
    how = f" (stroboscope recover {job['source']} -o FILE writes them)"
    return (
        f"parent {parent_pid} died; could not dump {job['kind']} {job['source']}: "
        f"{type(exc).__name__}: {exc}; the rows are still in {job['source']}"
        f"{how if job['kind'] == 'spool' else ''}"
    )


CRASH_SCOPES_TIMEOUT_S = 300.0
"""The longest the helper that writes a dump's scope intervals may take (seconds)."""


def _crash_scopes(events_dir: str, dump: str) -> str:
    """Have a helper process (``stroboscope.recording._crash_scopes``: the analysis room, never
    the extension; this process keeps to the formats) write the scope intervals of
    ``events_dir`` beside ``dump`` and remove the directory; return a note for the log line."""
    import subprocess

    try:
        done = subprocess.run(
            [sys.executable, "-m", "stroboscope.recording._crash_scopes", events_dir, dump],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CRASH_SCOPES_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"; scope events in {events_dir} not written: {exc}"
    if done.returncode != 0:
        return f"; scope events in {events_dir} not written: {done.stderr.strip()[-500:]}"
    return f"; {done.stdout.strip()}"


def main(argv: Sequence[str] | None = None) -> int:
    """The watchdog child: wait for the parent, dump if it died. Returns the exit status (0, or 1
    when a dump failed)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    parser = argparse.ArgumentParser(prog="stroboscope.watchdog")
    parser.add_argument("--config", required=True, help="JSON configuration from the parent")
    config = json.loads(parser.parse_args(argv).config)
    if config.get("version") != CONFIG_VERSION:
        _log(f"unknown configuration version {config.get('version')!r}; exiting")
        return 2
    parent_pid = int(config["parent_pid"])
    control = int(config["control_fd"])
    pidfd = None if config["pidfd"] is None else int(config["pidfd"])
    ready = int(config["ready_fd"])
    os.write(ready, READY)
    os.close(ready)
    if _parent_stopped(control, pidfd, parent_pid):
        return 0
    failed = 0
    for job in config["jobs"]:
        try:
            _log(run_job(job, parent_pid))
        except Exception as exc:
            failed += 1
            _log(failure_line(job, parent_pid, exc))
    _remove_events_dirs(parent_pid)
    return 1 if failed else 0


def _remove_events_dirs(parent_pid: int) -> None:
    """Remove the dead parent's private events directories (where its children wrote their
    scopes; a recorder reads them at its stop, which never came): named for its pid, this
    user's, 0700 (:func:`stroboscope.formats.shared_events_env.remove_private_dirs`)."""
    from stroboscope.formats.shared_events_env import remove_private_dirs

    for path in remove_private_dirs(lambda pid: pid == parent_pid):
        _log(f"removed the events directory {path} of parent {parent_pid}")


if __name__ == "__main__":
    # Run as a script: the directory of this file is not a place to import from (Python < 3.11
    # puts it first on sys.path; -P keeps it off on newer ones).
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    sys.exit(main())
