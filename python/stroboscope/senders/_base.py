"""The sender interface shared by the compatible monitor and the built-in senders.

``AbstractBackendSender`` and the type aliases keep the exact surface of the pure-Python
WandB-style monitors, so ``from stroboscope.senders import AbstractBackendSender`` (with
``from stroboscope.compat import SystemMonitor``) is a drop-in replacement. Everything else
here is for the built-in senders.
"""

from __future__ import annotations

import abc
import math
import time
from collections.abc import Mapping
from typing import Any, Callable, Dict, List, Union  # noqa: UP035 - the aliases' own types

GPUHandle = object
"""Opaque handle of one GPU (kept for source compatibility; stroboscope never hands one out)."""

SamplerDict = Dict[str, List[float]]  # noqa: UP006 - identical to the originals' alias
"""Metric name → list of samples (kept for source compatibility)."""

StatsDict = Dict[str, float]  # noqa: UP006 - identical to the originals' alias
"""Metric name → value, the event a sender receives (``network`` holds a ``{sent, recv}`` dict)."""


class AbstractBackendSender(metaclass=abc.ABCMeta):
    """Where the system metrics of a :class:`~stroboscope.compat.SystemMonitor` are sent.

    Subclasses implement :meth:`publish`; they may also override :meth:`close`, which the monitor
    calls exactly once when it shuts down.
    """

    @abc.abstractmethod
    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Send ``event`` (metric name → value) to the backend."""

    def close(self) -> None:  # noqa: B027 - a hook with a do-nothing default, not abstract
        """Release what the sender holds (files, servers, runs). Default: nothing."""


SenderLike = Union[AbstractBackendSender, Callable[[StatsDict], Any]]
"""A sender, or a plain callable taking the event dict."""


class BuiltinSender(AbstractBackendSender):
    """Base of the senders that ship with stroboscope.

    The dispatcher passes them ``timestamp`` (UTC seconds, the end of the published window) in
    ``publish``'s keyword arguments; a caller may also pass ``step``. Each keeps its own step
    counter for backends that need one.
    """

    def __init__(self) -> None:
        self._step = 0

    def _next_step(self, kwargs: Mapping[str, Any]) -> int:
        step = kwargs.get("step")
        if step is None:
            step = self._step
        self._step = int(step) + 1
        return int(step)

    @staticmethod
    def _timestamp(kwargs: Mapping[str, Any]) -> float:
        ts = kwargs.get("timestamp")
        return time.time() if ts is None else float(ts)

    def label_rank(self, rank: int) -> bool:
        """Hook for ``SystemMonitor(..., rank=rank)``, called once before the first event.

        A sender that puts the rank in its backend's own label (a W&B ``x_label``, an MLflow run
        tag, a TensorBoard run directory) takes ``rank`` as its own and returns True; the monitor
        then hands it keys without the ``rank{rank}.`` prefix, so the rank is not said twice.
        The default returns False: the sender gets the prefixed keys, as every user sender does.
        """
        return False


class CallableSender(AbstractBackendSender):
    """Adapts a plain callable taking the event dict to the sender interface."""

    def __init__(self, func: Callable[[StatsDict], Any]) -> None:
        self.func = func

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Call the wrapped callable with ``event``."""
        self.func(event)

    def __repr__(self) -> str:
        return f"CallableSender({self.func!r})"


def as_sender(obj: object) -> AbstractBackendSender:
    """Return ``obj`` as a sender: a sender as it is, a callable wrapped in CallableSender.

    Anything with a callable ``publish`` attribute is accepted too (duck typing, as the pure-Python
    monitors accepted it).
    """
    if isinstance(obj, AbstractBackendSender):
        return obj
    publish = getattr(obj, "publish", None)
    if callable(publish):
        return _DuckSender(obj)
    if callable(obj):
        return CallableSender(obj)
    raise TypeError(
        f"backend_sender must be an AbstractBackendSender, an object with a publish(event) "
        f"method or a callable taking the event dict, got {type(obj).__name__}"
    )


class _DuckSender(AbstractBackendSender):
    """An object with ``publish`` (and maybe ``close``) that does not subclass the ABC."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        self.obj.publish(event)

    def close(self) -> None:
        close = getattr(self.obj, "close", None)
        if callable(close):
            close()

    def __repr__(self) -> str:
        return repr(self.obj)


def flatten_event(event: Mapping[str, Any], sep: str = ".") -> dict[str, float]:
    """Flatten nested dicts for flat backends (``{"network": {"sent": 1}}`` → ``network.sent``).

    Values that are not real numbers (None, strings) are left out; bools become 0/1 and integers
    keep their value as float.
    """
    out: dict[str, float] = {}
    _flatten_into(out, "", event, sep)
    return out


def _flatten_into(out: dict[str, float], prefix: str, event: Mapping[str, Any], sep: str) -> None:
    for key, value in event.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _flatten_into(out, name + sep, value, sep)
        elif isinstance(value, (int, float)):
            out[name] = float(value)
        elif hasattr(value, "__float__") and not isinstance(value, (str, bytes)):
            try:
                out[name] = float(value)
            except (TypeError, ValueError):
                continue


def finite(value: float) -> bool:
    """Whether ``value`` is neither NaN nor infinite."""
    return math.isfinite(value)
