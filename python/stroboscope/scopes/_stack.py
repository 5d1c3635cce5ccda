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
import math
import sys
import threading
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any, Callable, NamedTuple, Union

from stroboscope._base.checks import check_text
from stroboscope.analysis.scope_columns import RESERVED_LABELS
from stroboscope.sampling import events_intern, scope_edges_setup

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


STACK_VAR: contextvars.ContextVar[tuple[OpenScope, ...]] = contextvars.ContextVar(
    "stroboscope_scopes", default=()
)
# The ambient labels and their interned id (0: no labels).
LABELS_VAR: contextvars.ContextVar[tuple[dict[str, str], int]] = contextvars.ContextVar(
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
            found = _interned[text] = int(events_intern(text))
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


# The C edges of a scope (``stroboscope.sampling.ScopeEdges``) push and pop the same frames on
# the same stack, and take the stack id as stack_id() does.
scope_edges_setup(STACK_VAR, LABELS_VAR, OpenScope, _bind_asyncio)


def current_stack() -> tuple[OpenScope, ...]:
    """The open scopes of this context, outermost first (a task's inherited ones included)."""
    return STACK_VAR.get()


# Label names already checked (not reserved, valid Unicode): a scope made on every call, as
# ``annotate("step", step=step)`` is, checks its names once. Bounded: past it, names are checked
# each time (a program that makes names by the thousand).
_names_checked: set[str] = set()
_MAX_NAMES_CHECKED = 4096


def _check_name(where: str, key: str) -> None:
    if key in RESERVED_LABELS:  # names only: no table library is loaded for them
        raise ValueError(
            f"{where}: label {key!r} is a column of the scope tables; reserved names are "
            f"{sorted(RESERVED_LABELS)}"
        )
    check_text(f"{where}: label name", key)
    if len(_names_checked) < _MAX_NAMES_CHECKED:
        _names_checked.add(key)


def check_labels(where: str, labels: dict[str, Any]) -> dict[str, str]:
    """Labels as strings; a reserved key, a value that is not a plain scalar and a float that is
    not finite are refused (when the scope or labels are made: entering them never raises).

    An ``int`` or ``bool`` is its ``str()``, ASCII by construction; other values are checked in
    full (the messages name ``where``, built only when one is raised)."""
    out: dict[str, str] = {}
    for key, value in labels.items():
        if key not in _names_checked:
            _check_name(where, key)
        kind = type(value)
        if kind is int or kind is bool:
            out[key] = str(value)
            continue
        if kind is str:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                check_text(f"{where}: label {key}", value)  # raises, naming it
            out[key] = value
            continue
        if not isinstance(value, (str, int, float)):  # bool is an int
            raise TypeError(
                f"{where}: label {key}={value!r} must be a str, int, float or bool, "
                f"not {type(value).__name__}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(
                f"{where}: label {key}={value!r} must be a str, a bool, an int or a finite float"
            )
        out[key] = check_text(f"{where}: label {key}", str(value))
    return out


_label_heads: dict[str, str] = {}  # '{"key":' by key, for a label set of one label


def encode_labels(labels: dict[str, str]) -> str:
    """The stored text of a label set, the one the events log interns and a reader decodes
    with ``json.loads``: a JSON object, keys sorted, no spaces, non-ASCII escaped (what
    ``json.dumps(labels, sort_keys=True, separators=(",", ":"))`` writes), made without the
    encoder's set-up (about 2 us a call; this is a few hundred ns)."""
    if len(labels) == 1:
        ((key, value),) = labels.items()
        head = _label_heads.get(key)
        if head is None:
            head = "{" + _json_str(key) + ":"
            if len(_label_heads) < _MAX_NAMES_CHECKED:
                _label_heads[key] = head
        return head + _json_str(value) + "}"
    pairs = [f"{_json_str(k)}:{_json_str(v)}" for k, v in sorted(labels.items())]
    return "{" + ",".join(pairs) + "}"


_intern_text = events_intern


def labels_id(labels: dict[str, str]) -> int:
    """The interned id of a label set (0 for none). Straight from the log's table (a hit there
    is ~0.1 us): a label set that changes on every call, as ``step=step`` does, is not kept a
    second time on the Python side."""
    if not labels:
        return 0
    return int(_intern_text(encode_labels(labels)))


def ambient() -> tuple[dict[str, str], int]:
    """The ambient labels of this context and their id."""
    return LABELS_VAR.get()


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
        outer, _ = LABELS_VAR.get()
        merged = {**outer, **self._labels}
        self._tokens.append(LABELS_VAR.set((merged, labels_id(merged))))
        return merged

    def __exit__(self, *exc: object) -> None:
        LABELS_VAR.reset(self._tokens.pop())


def current_labels() -> dict[str, str]:
    """A copy of the ambient labels of this context."""
    return dict(LABELS_VAR.get()[0])
