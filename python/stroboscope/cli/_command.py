"""The command ``stroboscope record -- CMD`` runs: spawned gated, released once sampling runs.

The command is spawned first, before the sampler, so the sampler can follow its pid from the
first row; but it waits in a small gate program until :meth:`Command.release` writes to a
pipe, and then ``exec``\\ s the command in its place (same pid). If setup fails,
:meth:`Command.kill` closes the pipe: the gate's ``read`` gets EOF and it exits without running
anything. So the command never runs unrecorded, and never runs at all when the recording could
not start.

The child is asked to be killed when the recorder dies (``PR_SET_PDEATHSIG`` with SIGKILL, kept
across ``exec``), so a recorder killed by SIGKILL or the OOM killer leaves no orphan behind. It
is set before the gate, by util-linux's ``setpriv --pdeathsig KILL`` in front of the gate, so no
Python code runs between fork and exec (which can deadlock a parent that has other threads). A
parent that dies before that closes the gate: the command never runs. Without ``setpriv`` the
command runs without a parent-death signal, and the recorder logs a warning. (The kernel sends the
signal when the *thread* that spawned the command ends: run the command line from a thread that
outlives the recording, as ``stroboscope`` does.)

:class:`Events` is where the scope edges of the command's processes go: a private directory named
in its environment (:func:`stroboscope.scopes._outside.command_environment`), or the one a
``--pid`` process was started with.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING

from stroboscope.scopes import command_environment

if TYPE_CHECKING:
    from stroboscope.formats.shared_events_drain import EventsDrain

log = logging.getLogger("stroboscope.cli")

# The command waits in this small Python program until sampling has started, then becomes the
# command itself (exec keeps the pid, so the pid the sampler follows is the command's). argv[1] is
# the gate's fd (any number: a shell such as dash only redirects fds 0-9). An EOF on the gate
# (setup failed, or the recorder died) ends it with 125 without running anything. Python ignores
# SIGPIPE and SIGXFSZ at start-up: the command gets them back at their defaults, as a shell would
# give them (what subprocess's restore_signals does).
_GATE = """
import os, signal, sys
interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the recorder handles a Ctrl-C here
gate = int(sys.argv[1])
if not os.read(gate, 1):
    os._exit(125)
os.close(gate)
for name in ("SIGPIPE", "SIGXFSZ"):
    signal.signal(getattr(signal, name), signal.SIG_DFL)
signal.signal(signal.SIGINT, signal.SIG_IGN if interrupt is signal.SIG_IGN else signal.SIG_DFL)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write(f"stroboscope record: cannot run {sys.argv[2]!r}: {exc.strerror}\\n")
    os._exit(127)
"""


def _parent_death_prefix() -> list[str]:
    """The argv prefix that makes the spawned process get SIGKILL when we die ([] without
    ``setpriv``). Looked up when a command is spawned, not at import."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        log.warning(
            "setpriv (util-linux) not found: the command is not killed if the recorder is "
            "killed with SIGKILL"
        )
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"]


class Command:
    """The wrapped command, spawned gated (see the module docstring).

    Parameters
    ----------
    argv : list of str
        The command and its arguments; ``argv[0]`` is looked up on ``PATH``.
    env : mapping of str to str, optional
        The command's environment (default: this process's).

    Raises
    ------
    ValueError
        ``argv[0]`` is not a command that can be run.
    """

    def __init__(self, argv: list[str], env: Mapping[str, str] | None = None) -> None:
        path = None if env is None else env.get("PATH")
        if shutil.which(argv[0], path=path) is None:
            why = "no such command"
            if os.sep in argv[0] and os.path.exists(argv[0]):  # a path: it is there, but
                why = (
                    "it is a directory"
                    if os.path.isdir(argv[0])
                    else "it is not executable (chmod +x it, or run it through its interpreter)"
                )
            raise ValueError(f"record: cannot run {argv[0]!r}: {why}")
        gate_r, self._gate_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [
                    *_parent_death_prefix(),
                    sys.executable,
                    "-I",  # isolated: no site, no environment variables, no user paths
                    "-S",
                    "-c",
                    _GATE,
                    str(gate_r),
                    *argv,
                ],
                pass_fds=(gate_r,),  # the gate's read end only; the write end stays ours
                env=env,  # the gate's -I ignores it; the command it execs gets it
            )
        except BaseException:
            os.close(self._gate_w)
            raise
        finally:
            os.close(gate_r)
        self.pid = self._proc.pid
        self.released = False
        """Whether the command was let run (False: it was killed in the gate, or not yet)."""

    def release(self) -> None:
        """Let the command run (it is exec'd in place of the waiting gate)."""
        if self._gate_w < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._gate_w, b"go\n")
        os.close(self._gate_w)
        self._gate_w = -1
        self.released = True

    def poll(self) -> int | None:
        """The exit status (negative: killed by that signal), or None while it runs."""
        return self._proc.poll()

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the command if it still runs."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        """Setup failed: end the command before it ever ran."""
        if self._gate_w >= 0:
            os.close(self._gate_w)  # the gate's read gets EOF: it then runs nothing
            self._gate_w = -1
        self.send_signal(signal.SIGKILL)
        self._proc.wait()

    def exit_code(self) -> int:
        """A shell's convention: the command's status, or 128 + the signal that killed it."""
        code = self._proc.wait()
        return 128 - code if code < 0 else code


class Events:
    """Where the scope edges of the recorded processes go: a private directory (0700) made for
    a command, named in its environment (with the NVTX injection library unless ``--no-nvtx``),
    removed at the end; or, with ``--pid``, the events directory that process was started with
    (read, not removed); or none."""

    def __init__(self, args: argparse.Namespace, command: bool) -> None:
        self.env: dict[str, str] | None = None
        self.dir: str | None = None
        self.owned = command
        self._drain: EventsDrain | None = None  # while the command's files are drained
        if command:
            self.dir = tempfile.mkdtemp(prefix="stroboscope-events-")
            self.env = command_environment(
                self.dir, nvtx=not args.no_nvtx, edge_counters=args.edge_counters
            )
            # The files are drained while the command runs: a ring that laps loses nothing
            # a poll reached first.
            from stroboscope.formats.shared_events_drain import EventsDrain

            self._drain = EventsDrain(self.dir).start()
        elif args.pid is not None:
            self.dir = events_dir_of(args.pid)

    def stop_drain(self) -> None:
        """The last poll of the events files, before the end reads them (once)."""
        if self._drain is not None:
            self._drain.stop()
            self._drain = None

    def remove(self) -> None:
        """Remove the directory if it is this run's (nothing otherwise, or when it is gone)."""
        self.stop_drain()
        if self.owned and self.dir is not None:
            from stroboscope.formats.shared_events import remove_events_dir

            remove_events_dir(self.dir)  # with what the drain kept beside it


def events_dir_of(pid: int) -> str | None:
    """The events directory the process ``pid`` was started with (``STROBOSCOPE_EVENTS_DIR`` in
    its environment, when this user may read it and it names a directory), else None."""
    from stroboscope.formats.shared_events import EVENTS_DIR_ENV

    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return None
    key = EVENTS_DIR_ENV.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(key):
            path = os.fsdecode(entry[len(key) :])
            # resolved: its reader opens the directory itself, never through a link
            return os.path.realpath(path) if os.path.isdir(path) else None
    return None
