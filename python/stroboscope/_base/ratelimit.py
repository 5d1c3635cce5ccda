"""A log call that reports the first occurrence at once, then at most once per period."""

from __future__ import annotations

import logging
import time
from typing import Any

ERROR_LOG_PERIOD_S = 60.0
"""After the first report, at most one log line per this many seconds (with a count of the rest)."""


class RateLimitedLog:
    """Logs to ``logger`` the first occurrence at once, then at most once per ``period_s``."""

    def __init__(self, logger: logging.Logger, period_s: float = ERROR_LOG_PERIOD_S) -> None:
        self.logger = logger
        self.period_s = period_s
        self._last = -float("inf")
        self._suppressed = 0

    def __call__(self, level: int, msg: str, *args: Any, exc_info: bool = False) -> bool:
        """Log ``msg % args`` at ``level`` unless one was logged less than a period ago.

        Returns whether it was logged.
        """
        now = time.monotonic()
        if now - self._last < self.period_s:
            self._suppressed += 1
            return False
        if self._suppressed:
            msg += f" ({self._suppressed} more since the last report)"
        self._suppressed = 0
        self._last = now
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True
