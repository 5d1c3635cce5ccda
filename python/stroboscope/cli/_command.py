"""The command ``stroboscope record -- CMD`` runs: spawned gated, released once sampling runs.

The command is spawned first, before the sampler, so the sampler can follow its pid from the
first row; but it waits in a small shell until :meth:`Command.release` writes to a pipe, and then
``exec``\\ s the command in place of the shell (same pid). If setup fails, :meth:`Command.kill`
closes the pipe: the shell's ``read`` gets EOF and it exits without running anything. So the
command never runs unrecorded, and never runs at all when the recording could not start.

The child asks the kernel (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, kept across ``exec``) to be
killed when the recorder dies, so a recorder killed by SIGKILL or the OOM killer leaves no
orphan behind. (The kernel sends it when the thread that spawned the command ends: run the
command line from the main thread, as ``stroboscope`` does.)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time

# The command waits in this shell until sampling has started, then becomes the command itself
# (exec keeps the pid, so the pid the sampler follows is the command's). An EOF on the gate
# (setup failed) makes `read` fail: the shell then exits without running anything.
_GATE = 'read -r _ <&3 || exit 125; exec 3<&-; exec "$@"'
_GATE_FD = 3
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(gate_r: int, parent: int, prctl: object) -> None:
    """In the child between fork and exec: the gate as fd 3, and SIGKILL when the parent dies.

    Runs in a forked child: only async-signal-safe work (a few system calls), no allocation
    that could wait on a lock another thread of the parent held at the fork.
    """
    if gate_r == _GATE_FD:
        os.set_inheritable(_GATE_FD, True)
    else:
        os.dup2(gate_r, _GATE_FD)  # inheritable; the pipe's own fds are closed on exec
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)  # type: ignore[operator]
    if os.getppid() != parent:  # the parent died before prctl: it will never signal us
        os.kill(os.getpid(), signal.SIGKILL)


def _load_prctl() -> object:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # not Linux/glibc: no parent-death signal
        return None
    prctl.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return prctl


class Command:
    """The wrapped command, spawned gated (see the module docstring).

    Parameters
    ----------
    argv : list of str
        The command and its arguments; ``argv[0]`` is looked up on ``PATH``.

    Raises
    ------
    ValueError
        ``argv[0]`` is not a command that can be run.
    """

    def __init__(self, argv: list[str]) -> None:
        if shutil.which(argv[0]) is None:
            raise ValueError(f"record: cannot run {argv[0]!r}: no such command")
        gate_r, self._gate_w = os.pipe()
        prctl = _load_prctl()
        parent = os.getpid()
        try:
            self._proc = subprocess.Popen(
                ["/bin/sh", "-c", _GATE, "stroboscope-record", *argv],
                # Not close_fds: fd 3 is made in the child, after Popen would close it. Python's
                # own descriptors are not inheritable (PEP 446), so nothing else is passed on.
                close_fds=False,
                preexec_fn=lambda: _die_with_parent(gate_r, parent, prctl),
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
        """Let the command run (it is exec'd in place of the waiting shell)."""
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

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds (None: until it exits); the status or None."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            time.sleep(0.005 if left is None else min(0.005, left))
        return self._proc.returncode

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the command if it still runs."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        """Setup failed: end the command before it ever ran."""
        if self._gate_w >= 0:
            os.close(self._gate_w)  # the shell's read gets EOF: it then runs nothing
            self._gate_w = -1
        self.send_signal(signal.SIGKILL)
        self._proc.wait()

    def exit_code(self) -> int:
        """The shell's convention: the command's status, or 128 + the signal that killed it."""
        code = self._proc.wait()
        return 128 - code if code < 0 else code
