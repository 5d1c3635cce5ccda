"""aitune's scopes: ``annotate``, ``collect_hardware_metrics``, ``annotate_with_nvtx`` and
``with_backend_context``, translated onto :mod:`stroboscope.scopes`.

A scope here is a native scope (so every running :class:`stroboscope.Sampler` sees it, with the
ambient labels) that also tells the compat session it opened and closed; ``annotate`` adds an
NVTX range in aitune's domain when the ``nvtx`` package is importable. The behaviours are
aitune 0.6.0's: the decorators name a scope after the function's ``__name__`` and wrap a plain
call; as context managers both need a name (``ValueError``); labels come from the ambient
``stroboscope.scopes.labels(module=..., backend=...)``, which ``with_backend_context`` sets.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from types import TracebackType
from typing import Any, Callable, TypeVar, cast

import stroboscope.scopes as scopes
from stroboscope._base.nvtx import check_color
from stroboscope._base.nvtx import nvtx_module as _nvtx
from stroboscope.compat.aitune import _monitoring
from stroboscope.scopes import bare_decorator_hint

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)

NVTX_ANNOTATION_DOMAIN = "AITune"


def _check_name(name: object, what: str) -> str | None:
    if name is not None and not isinstance(name, str):
        hint = bare_decorator_hint(name, what)
        raise TypeError(f"{what}: name must be a str or None, got {type(name).__name__}{hint}")
    return name


@functools.lru_cache(maxsize=4096)
def _native(name: str) -> contextlib.AbstractContextManager[Any]:
    """The native scope of ``name`` (reentrant, one per name: building one interns the name)."""
    scope: contextlib.AbstractContextManager[Any] = scopes.annotate(name)
    return scope


def _open_scope(name: str) -> tuple[contextlib.AbstractContextManager[Any], bool]:
    """Open the native scope ``name`` and tell the compat session; returns what closes it."""
    session = _monitoring._DEFAULT_SESSION
    if session._sampler is None:
        # The session's sampler must run before the native scope opens, so that its interval
        # table holds this first scope too; the edge row is asked for after the open.
        session.before_open()
    native = _native(name)
    opened_ns = time.monotonic_ns()  # at or before the native scope's begin
    native.__enter__()
    return native, session.after_open(name, opened_ns)


def _close_scope(opened: tuple[contextlib.AbstractContextManager[Any], bool]) -> None:
    native, counted = opened
    if counted:
        _monitoring._DEFAULT_SESSION.after_close()
    native.__exit__(None, None, None)


class collect_hardware_metrics:
    """Decorator and context manager: record hardware metrics while the scope ``name`` is open.

    As a decorator the name defaults to the function's ``__name__``; as a context manager a
    name is required (``ValueError``).
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = _check_name(name, "collect_hardware_metrics")
        self._open: list[tuple[contextlib.AbstractContextManager[Any], bool]] = []

    def __enter__(self) -> collect_hardware_metrics:
        if self.name is None:
            raise ValueError(
                "name must be provided when using collect_hardware_metrics as a context manager"
            )
        self._open.append(_open_scope(self.name))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _close_scope(self._open.pop())

    def __call__(self, func: F) -> F:
        name = self.name if self.name is not None else func.__name__

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            opened = _open_scope(name)
            try:
                return func(*args, **kwargs)
            finally:
                _close_scope(opened)

        return cast(F, wrapper)


def _nvtx_message(name: str) -> str:
    """aitune's NVTX message: the name, then `` module:M`` and `` backend:B`` when labelled."""
    labels = scopes.current_labels()
    if labels.get("module") is not None:
        name += f" module:{labels['module']}"
    if labels.get("backend") is not None:
        name += f" backend:{labels['backend']}"
    return name


class annotate_with_nvtx:
    """An NVTX range in the ``"AITune"`` domain (nothing when ``nvtx`` is not importable)."""

    def __init__(self, name: str | None = None, color: str | int | None = None) -> None:
        self.name = _check_name(name, "annotate_with_nvtx")
        self.color = check_color(color)  # refused here, never when the range opens
        self._open: list[contextlib.AbstractContextManager[Any]] = []

    def _range(self, name: str) -> contextlib.AbstractContextManager[Any]:
        nvtx = _nvtx()
        if nvtx is None:
            return contextlib.nullcontext()
        rng: contextlib.AbstractContextManager[Any] = nvtx.annotate(
            message=_nvtx_message(name), color=self.color, domain=NVTX_ANNOTATION_DOMAIN
        )
        return rng

    def __enter__(self) -> annotate_with_nvtx:
        if self.name is None:
            raise ValueError("Name is required for annotate as context manager")
        rng = self._range(self.name)
        rng.__enter__()
        self._open.append(rng)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open.pop().__exit__(exc_type, exc, tb)

    def __call__(self, func: F) -> F:
        if self.name is None:
            self.name = func.__name__
        name = self.name

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._range(name):  # the message takes the labels of each call
                return func(*args, **kwargs)

        return cast(F, wrapper)


class annotate:
    """aitune's one entry point: an NVTX range (domain ``"AITune"``, when ``nvtx`` is
    importable) and a hardware-metrics scope. Decorator (name defaults to ``__name__``) or
    context manager (name required: ``ValueError``)."""

    def __init__(self, name: str | None = None, color: str | int | None = None) -> None:
        self.name = _check_name(name, "annotate")
        self.color = check_color(color)  # refused here, never when the range opens
        self._open: list[tuple[annotate_with_nvtx, collect_hardware_metrics]] = []

    def __enter__(self) -> annotate:
        if self.name is None:
            raise ValueError("Name is required for annotate as context manager")
        pair = (annotate_with_nvtx(self.name, self.color), collect_hardware_metrics(self.name))
        pair[0].__enter__()
        try:
            pair[1].__enter__()
        except BaseException:
            pair[0].__exit__(None, None, None)
            raise
        self._open.append(pair)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        nvtx_range, metrics = self._open.pop()
        try:
            metrics.__exit__(exc_type, exc, tb)
        finally:
            nvtx_range.__exit__(exc_type, exc, tb)

    def __call__(self, func: F) -> F:
        if self.name is None:
            self.name = func.__name__
        return annotate_with_nvtx(self.name, self.color)(collect_hardware_metrics(self.name)(func))


def with_backend_context(cls: C) -> C:
    """Class decorator: every public method runs with the label ``backend=self.describe()``.

    aitune's rule: methods whose names start with ``_``, and ``key`` and ``describe``, are left
    alone. Scopes opened inside carry the label, which fills the ``backend`` column.
    """
    if not inspect.isclass(cls):
        raise TypeError(f"with_backend_context decorates a class, got {type(cls).__name__}")
    for name, method in inspect.getmembers(cls, predicate=inspect.isfunction):
        if name.startswith("_") or name in ("key", "describe"):
            continue
        setattr(cls, name, _labelled_method(method))
    return cls


def _labelled_method(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with scopes.labels(backend=str(self.describe())):
            return method(self, *args, **kwargs)

    return wrapper
