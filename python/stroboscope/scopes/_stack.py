"""Where a scope stands: the stack of open scopes and the ambient labels, per thread and per
asyncio task (contextvars), and the interned ids the events log stores instead of strings.

A new thread starts with an empty context, so its stack is empty. An asyncio task starts with a
copy of its creator's context, so it sees the scopes open where it was created; but it runs
beside its creator, so its own scopes form a stack of their own: each frame records the stack
(thread or task) that opened it, and a scope opened on another stack starts again at depth 0.
"""

from __future__ import annotations

import contextvars
import functools
import json
import math
import sys
import threading
from typing import Any, Callable, NamedTuple, Union

from stroboscope._base.checks import check_text
from stroboscope.analysis.scope_columns import RESERVED_LABELS
from stroboscope.sampling import _scope_log

LabelValue = Union[str, int, float, bool]


class OpenScope(NamedTuple):
    """One open scope on a stack."""

    owner: object  # the scope object that opened it (its exit pops this frame)
    scope_id: int
    labels_id: int
    stack_id: int
    depth: int


# An OpenScope from a tuple of its five fields, made in C: the class's own constructor is a
# Python function, which cost a scope more than its call into the events log.
new_frame: Callable[[tuple[object, int, int, int, int]], OpenScope] = functools.partial(
    tuple.__new__, OpenScope
)


_STACK: contextvars.ContextVar[tuple[OpenScope, ...]] = contextvars.ContextVar(
    "stroboscope_scopes", default=()
)
# The ambient labels and their interned id (0: no labels).
_LABELS: contextvars.ContextVar[tuple[dict[str, str], int]] = contextvars.ContextVar(
    "stroboscope_labels", default=({}, 0)
)

_get_ident = threading.get_ident
_modules = sys.modules
# asyncio's (_get_running_loop, current_task) once asyncio is imported. Not imported here: that
# would cost tens of ms, and a process that never imported asyncio runs no event loop.
_asyncio: tuple[Callable[[], Any], Callable[[], Any]] | None = None

_interned: dict[str, int] = {}
_intern_lock = threading.Lock()


def intern(text: str) -> int:
    """The events log's id for ``text`` (scope names, label sets), cached on the Python side."""
    found = _interned.get(text)
    if found is not None:
        return found
    with _intern_lock:
        found = _interned.get(text)
        if found is None:
            found = _interned[text] = int(_scope_log.intern(text))
    return found


def stack_id() -> int:
    """The stack a scope opened here belongs to: the running asyncio task, else the thread."""
    aio = _asyncio
    if aio is None:
        # No event loop runs before asyncio is imported: one dict lookup per scope until then
        # (binding its functions each time cost more than the rest of the stack's work).
        if "asyncio" not in _modules:
            return _get_ident()
        aio = _bind_asyncio()
    if aio is not None and aio[0]() is not None:
        task = aio[1]()
        if task is not None:
            return id(task)
    return _get_ident()


def _bind_asyncio() -> tuple[Callable[[], Any], Callable[[], Any]] | None:
    """asyncio's two functions once the process has imported it (None before: no loop runs)."""
    global _asyncio
    module = _modules.get("asyncio")
    get_loop = getattr(module, "_get_running_loop", None)  # C function: None outside a loop
    current = getattr(module, "current_task", None)
    if get_loop is None or current is None:  # not imported, or not finished importing
        return None
    _asyncio = (get_loop, current)
    return _asyncio


# The C edges of a scope (``_scope_log.ScopeEdges``) push and pop the same frames on the same
# stack, and take the stack id as stack_id() does.
_scope_log.edges_setup(_STACK, _LABELS, OpenScope, _bind_asyncio)


def current_stack() -> tuple[OpenScope, ...]:
    """The open scopes of this context, outermost first (a task's inherited ones included)."""
    return _STACK.get()


def check_labels(where: str, labels: dict[str, Any]) -> dict[str, str]:
    """Labels as strings; a reserved key, a value that is not a plain scalar and a float that is
    not finite are refused (when the scope or labels are made: entering them never raises)."""
    reserved = RESERVED_LABELS  # names only: no table library is loaded for them
    out: dict[str, str] = {}
    for key, value in labels.items():
        if key in reserved:
            raise ValueError(
                f"{where}: label {key!r} is a column of the scope tables; reserved names are "
                f"{sorted(reserved)}"
            )
        if not isinstance(value, (str, int, float)):  # bool is an int
            raise TypeError(
                f"{where}: label {key}={value!r} must be a str, int, float or bool, "
                f"not {type(value).__name__}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(
                f"{where}: label {key}={value!r} must be a str, a bool, an int or a finite float"
            )
        out[check_text(f"{where}: label name", key)] = check_text(
            f"{where}: label {key}", str(value)
        )
    return out


def labels_id(labels: dict[str, str]) -> int:
    """The interned id of a label set (0 for none)."""
    if not labels:
        return 0
    return intern(json.dumps(labels, sort_keys=True, separators=(",", ":")))


def ambient() -> tuple[dict[str, str], int]:
    """The ambient labels of this context and their id."""
    return _LABELS.get()


class labels:
    """Labels that every scope opened inside carries (nested ``labels`` add to the outer ones).

    >>> with stroboscope.labels(module="resnet", backend="tensorrt"):
    ...     with stroboscope.annotate("build"):
    ...         ...
    """

    __slots__ = ("_labels", "_tokens")

    def __init__(self, **labels: LabelValue) -> None:
        self._labels = check_labels("labels()", labels)
        self._tokens: list[contextvars.Token[tuple[dict[str, str], int]]] = []

    def __enter__(self) -> dict[str, str]:
        outer, _ = _LABELS.get()
        merged = {**outer, **self._labels}
        self._tokens.append(_LABELS.set((merged, labels_id(merged))))
        return merged

    def __exit__(self, *exc: object) -> None:
        _LABELS.reset(self._tokens.pop())


def current_labels() -> dict[str, str]:
    """A copy of the ambient labels of this context."""
    return dict(_LABELS.get()[0])
