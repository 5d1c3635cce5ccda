"""Fan an event out to several senders, each on its own worker thread.

Why a thread per sender: a sender that blocks (a slow disk, an HTTP call) must not delay the
monitor's publisher or any other sender beyond its own call, and must never touch sampling, which
runs in C++. Each worker owns a bounded queue; when a sender falls behind so far that its queue is
full, the oldest pending event is dropped and counted (a metrics stream prefers fresh values).
A sender that raises is logged, rate-limited, and keeps receiving later events.
"""

from __future__ import annotations

import collections
import copy
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from stroboscope._base.checks import check_int, check_timeout
from stroboscope._base.ratelimit import RateLimitedLog
from stroboscope.senders._base import AbstractBackendSender, BuiltinSender, as_sender

logger = logging.getLogger("stroboscope.senders")


class SenderWorker:
    """One sender, its queue and the thread that calls it.

    Parameters
    ----------
    sender : AbstractBackendSender
        Called as ``sender.publish(event)`` (built-in senders also get ``timestamp=``).
    max_pending : int
        Events that may wait for a slow sender before the oldest is dropped.
    """

    def __init__(self, sender: AbstractBackendSender, max_pending: int = 64) -> None:
        # SystemMonitor checks the user's value first (saying what it counts); this keeps NaN or
        # a string from unbounding the queue or failing a comparison, for every other caller.
        check_int("max_pending", max_pending, 1, unit="events")
        self.sender = sender
        self.errors = 0
        self.dropped = 0
        self.delivered = 0
        self._pending: collections.deque[tuple[int, dict[str, Any], float]] = collections.deque()
        self._max_pending = max_pending
        self._cond = threading.Condition()
        self._submitted = 0
        self._in_flight = 0  # sequence number of the event being delivered now (0: none)
        self._closing = False
        self._closed = False
        self._error_log = RateLimitedLog(logger)
        self._drop_log = RateLimitedLog(logger)
        self._thread = threading.Thread(
            target=self._run, name=f"stroboscope-sender-{type(sender).__name__}", daemon=True
        )
        self._thread.start()

    def submit(self, event: Mapping[str, Any], timestamp: float) -> int:
        """Queue ``event`` (copied) for the sender; return its sequence number."""
        item = copy.deepcopy(dict(event))
        with self._cond:
            if self._closing:
                raise RuntimeError(f"sender {self.sender!r} is closed")
            self._submitted += 1
            seq = self._submitted
            if len(self._pending) >= self._max_pending:
                self._pending.popleft()
                self.dropped += 1
                self._drop_log(
                    logging.WARNING,
                    "stroboscope: sender %r is too slow; dropped an event (%d dropped so far)",
                    self.sender,
                    self.dropped,
                )
            self._pending.append((seq, item, timestamp))
            self._cond.notify_all()
        return seq

    def wait(self, seq: int, timeout: float | None) -> bool:
        """Wait until the event numbered ``seq`` was handled (delivered, failed or dropped).

        Returns False when ``timeout`` seconds passed first. Called by the sender itself (on
        this worker's thread, where nothing queued is handled until the sender returns), it
        returns True at once: the event is queued behind the call, and waiting would only
        wait out the timeout.
        """
        if threading.current_thread() is self._thread:
            return True
        with self._cond:
            return self._cond.wait_for(lambda: self._handled(seq), timeout)

    def _handled(self, seq: int) -> bool:
        # Called with the condition held. The queue is short (max_pending), so a scan is cheap.
        if seq > self._submitted or seq == self._in_flight:
            return False
        return all(pending_seq != seq for pending_seq, _, _ in self._pending)

    def begin_close(self) -> None:
        """Accept no more events; the worker delivers what is queued, then closes the sender."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    def close(self, timeout: float | None) -> bool:
        """Deliver what is queued, then call the sender's ``close()`` once; join the thread.

        Returns False when the worker did not finish within ``timeout`` seconds (it is left
        running as a daemon thread and logged). Called by the sender itself (on this worker's
        thread, which cannot join itself), it only begins the close: the worker delivers what
        is queued and closes the sender once the sender's call returns.
        """
        self.begin_close()
        if threading.current_thread() is self._thread:
            return True
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning(
                "stroboscope: sender %r did not finish within %.1f s of shutdown; left behind",
                self.sender,
                timeout if timeout is not None else float("inf"),
            )
            return False
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending) or self._closing)
                if not self._pending:
                    break  # closing and nothing left to deliver
                seq, event, timestamp = self._pending.popleft()
                self._in_flight = seq
            self._deliver(event, timestamp)
            with self._cond:
                self._in_flight = 0
                self._cond.notify_all()
        self._close_sender()

    def _deliver(self, event: dict[str, Any], timestamp: float) -> None:
        try:
            if isinstance(self.sender, BuiltinSender):
                self.sender.publish(event, timestamp=timestamp)
            else:
                self.sender.publish(event)
            self.delivered += 1
        except Exception:
            self.errors += 1
            self._error_log(
                logging.ERROR,
                "stroboscope: sender %r failed to publish (%d failures so far)",
                self.sender,
                self.errors,
                exc_info=True,
            )

    def _close_sender(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.sender.close()
        except Exception:
            logger.exception("stroboscope: sender %r failed to close", self.sender)


class Fanout:
    """Several senders behind one ``submit``: each gets every event on its own worker thread.

    Parameters
    ----------
    senders : iterable
        Senders, objects with ``publish``, or plain callables taking the event dict.
    max_pending : int
        Per sender, the events that may wait before the oldest is dropped.
    """

    def __init__(self, senders: Iterable[object], max_pending: int = 64) -> None:
        self.workers = [SenderWorker(as_sender(s), max_pending) for s in senders]
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, event: Mapping[str, Any], timestamp: float | None = None) -> list[int]:
        """Queue ``event`` for every sender; return the sequence number per worker."""
        ts = time.time() if timestamp is None else timestamp
        return [w.submit(event, ts) for w in self.workers]

    def wait(self, tickets: list[int], timeout: float | None) -> bool:
        """Wait until every worker handled its ticket, within ``timeout`` seconds in all."""
        timeout = check_timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        ok = True
        for worker, seq in zip(self.workers, tickets):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ok = worker.wait(seq, left) and ok
        return ok

    def close(self, timeout: float | None = 30.0) -> bool:
        """Deliver queued events, close every sender exactly once and join the workers.

        The workers are closed together, so ``timeout`` (seconds) bounds the whole call.
        Calling it again closes nothing more but joins the workers still running: a close
        begun by a sender (on its own worker's thread, which cannot join itself) is waited
        for by the next call from another thread.
        """
        timeout = check_timeout("timeout", timeout)
        with self._lock:
            first, self._closed = not self._closed, True
        if first:
            for w in self.workers:
                w.begin_close()
        deadline = None if timeout is None else time.monotonic() + timeout
        ok = True
        for w in self.workers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ok = w.close(left) and ok
        return ok

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed
