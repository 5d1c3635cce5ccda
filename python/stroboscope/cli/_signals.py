"""Signals and waits of ``stroboscope record``: SIGTERM and SIGINT caught as a flag, short waits
that notice a signal or the command's exit, and the end of a wrapped command (each signal passed
on to it, and a line saying that the recorder waits for it)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from stroboscope.cli._command import Command
from stroboscope.cli._status import StatusLine

WAIT_PERIOD_S = 0.25
"""How often the recording loop drains, publishes and checks for the end (seconds)."""

_POLL_S = 0.005
"""How often a wait looks at the command, the signals and the clock (seconds)."""

_SIGNAL_POLL_S = 0.05
"""How often a wait without a command looks at the signals (seconds)."""

WAITING_NOTICE_S = 1.0
"""How long a signalled command may take to exit before the recorder says it waits (seconds)."""


def say(line: str) -> None:
    """A line for the user on standard error, named after the command."""
    print(f"stroboscope record: {line}", file=sys.stderr, flush=True)


class Signals:
    """SIGTERM and SIGINT, caught while recording: they only set a flag (no exception thrown
    into whatever code runs), which the loop reads to end the recording cleanly."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        self.count += 1

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():  # only it may set handlers
            for s in (signal.SIGTERM, signal.SIGINT):
                if signal.getsignal(s) is signal.SIG_IGN:
                    continue  # ignored (nohup, a background job): so it stays, for the command too
                self._previous[s] = signal.signal(s, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)


def pause(seconds: float, stop: Signals, command: Command | None) -> None:
    """Wait ``seconds``, or less when a signal came or the command exited (noticed within
    ``_POLL_S``; a signal alone within ``_SIGNAL_POLL_S``)."""
    deadline = time.monotonic() + seconds
    count = stop.count
    step = _POLL_S if command is not None else _SIGNAL_POLL_S
    while stop.count == count and (command is None or command.poll() is None):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(step, left))


def keyboard_reaches_the_command() -> bool:
    """Whether a terminal's Ctrl-C reaches the command by itself: our process group (which the
    command shares) is the foreground group of our terminal, so the kernel sent SIGINT to both."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def end_command(command: Command, stop: Signals, status: StatusLine) -> int:
    """Forward the signal that ended the recording (and each later one) to the command, wait
    for it, and return its exit code (128 + the signal when one killed it).

    A SIGINT is not forwarded when it came from our terminal's Ctrl-C, which the command got
    too: a second one would interrupt the command's own handling of the first. A command still
    running ``WAITING_NOTICE_S`` after a signal (one that ignores or handles it slowly) is
    told of on standard error: the recorder waits for it, recording, until it exits.
    """
    forwarded = 0
    told = False
    since = time.monotonic()
    while command.poll() is None:
        if stop.count > forwarded:
            forwarded = stop.count
            assert stop.signum is not None
            if stop.signum != signal.SIGINT or not keyboard_reaches_the_command():
                command.send_signal(stop.signum)  # the command ends as it would without us
        pause(WAIT_PERIOD_S, stop, command)
        if stop.signum is not None and not told and time.monotonic() - since >= WAITING_NOTICE_S:
            told = True
            status.clear()
            say(
                f"the command (pid {command.pid}) is still running after "
                f"{signal.Signals(stop.signum).name}: recording until it exits; each further "
                f"Ctrl-C or SIGTERM is passed on to it (kill -KILL {command.pid} ends it)"
            )
    return command.exit_code()
