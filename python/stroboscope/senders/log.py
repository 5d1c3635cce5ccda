"""Python logging sender: one log record per published event."""

from __future__ import annotations

import logging
from typing import Any

from stroboscope._base.checks import check_int, describe
from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event


class LoggingSender(BuiltinSender):
    """Log each event as one line ``metrics cpu=12.5 memory=40.1 network.sent=1024 …``.

    Parameters
    ----------
    logger : str or logging.Logger
        Logger (or its name) to log to (default ``"stroboscope.metrics"``).
    level : int or str
        Level of the records (default INFO).
    precision : int
        Significant digits of each value, 1 to 17 (default 6).

    The record also carries the flattened event as ``record.metrics`` (a dict) for handlers that
    format it themselves.
    """

    def __init__(
        self,
        logger: str | logging.Logger = "stroboscope.metrics",
        *,
        level: int | str = logging.INFO,
        precision: int = 6,
    ) -> None:
        super().__init__()
        if not isinstance(logger, (str, logging.Logger)):
            raise TypeError(
                f"logger must be a logger name (str) or a logging.Logger, got {describe(logger)}"
            )
        if isinstance(level, str):
            resolved = logging.getLevelName(level.upper())
            if not isinstance(resolved, int):
                raise ValueError(f"level {level!r} is not a logging level name (e.g. INFO)")
            level = resolved
        self.level = check_int(
            "level", level, 0, unit="a logging level", also="a level name such as 'INFO'"
        )
        self.precision = check_int("precision", precision, 1, 17, unit="significant digits")
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Log ``event`` at the configured level."""
        if not self.logger.isEnabledFor(self.level):
            return
        flat = flatten_event(event)
        if not flat:
            return
        text = " ".join(f"{k}={v:.{self.precision}g}" for k, v in flat.items())
        self.logger.log(self.level, "metrics %s", text, extra={"metrics": flat})

    def __repr__(self) -> str:
        return f"LoggingSender({self.logger.name!r})"
