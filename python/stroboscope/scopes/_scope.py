"""A scope: a named region of code whose edges go into the events log, as a context manager and
as a decorator (functions, methods, generators, coroutines, async generators).

What one edge costs, in order: one check of the switchboard's mode when nothing records (the
whole cost of a disabled scope besides the ``with``); otherwise the stack and labels from
contextvars, the push that stamps CLOCK_MONOTONIC and the thread id in C++, and a new stack
tuple. ``with`` takes both edges in C (``ScopeEdges``, the base class) for a named scope with no
NVTX range while nothing in Python waits on an edge; every other case runs
:meth:`annotate._enter_slow` / ``_exit_slow`` here, which are the rules in full. A scope with
labels of its own takes the C path once the id of its labels merged with the ambient ones is
made (``_labels_cache``): when it is made while something records (``annotate("step",
step=step)`` in a loop: a new label set on every call; checked, written and interned in one C
call, ``ScopeEdges._take_labels``, which leaves to :func:`_stack.check_labels` every case it
does not take plainly), else on its first entry, in Python.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Callable, TypeVar, cast

from stroboscope._base.checks import check_text
from stroboscope._base.nvtx import check_color
from stroboscope._base.nvtx import nvtx_module as _nvtx_module
from stroboscope._base.ratelimit import RateLimitedLog
from stroboscope.sampling import (
    ScopeEdges,
    events_begin,
    events_end,
    events_intern,
    scope_edges_pending,
)
from stroboscope.scopes import _stack, _switchboard, nvtx_capture
from stroboscope.scopes._stack import LABELS_VAR, STACK_VAR, LabelValue, OpenScope, encode_labels
from stroboscope.scopes._stack import new_frame as _new_frame

logger = logging.getLogger("stroboscope")

F = TypeVar("F", bound=Callable[..., Any])


def bare_decorator_hint(name: object, caller: str) -> str:
    """What to add to "name must be a str" when ``name`` is a function: ``@caller`` written
    without its parentheses passes the function it decorates as the name."""
    return f" (as a decorator, write @{caller}() with parentheses)" if callable(name) else ""


_state = _switchboard.state
_begin = events_begin  # the core's functions themselves: one C call per edge
_end = events_end
_intern_text = events_intern  # a label set's id: its text's (a hit is ~0.1 us)
_interned = _stack._interned  # a name found here was checked when it was interned
_names_checked = _stack._names_checked  # label names that passed _stack.check_labels
_NO_LABELS: dict[str, str] = {}  # shared by every scope without labels of its own; never changed
_NO_CACHE = (1 << 64) - 1  # _labels_cache: no merged labels id made yet

MAX_DEPTH = 0xFFFF
"""The deepest nesting the events log holds (its depth is 16 bits): a scope opened deeper is
kept on its stack (so the scopes around it close right) but not written, counted
(:func:`too_deep`) and said once a minute at most."""
_too_deep = [0]
_say_too_deep = RateLimitedLog(logger)
_say_elsewhere = RateLimitedLog(logger)

# Frames that a thread other than the one that opened them closed (their end is written there,
# on their own stack): by stack id, (owner, depth) of each, taken off that stack by its next
# scope (whose edges take the Python path meanwhile: scope_edges_pending). At most
# _MAX_ELSEWHERE stacks (the oldest forgotten: its frame stays, as before this was kept).
_elsewhere: dict[int, list[tuple[object, int]]] = {}
_elsewhere_lock = threading.Lock()
_MAX_ELSEWHERE = 64


def too_deep() -> int:
    """How many scopes were opened deeper than :data:`MAX_DEPTH` in this process (not written)."""
    return _too_deep[0]


def _closed_elsewhere(sid: int, owner: object, depth: int) -> None:
    with _elsewhere_lock:
        _elsewhere.setdefault(sid, []).append((owner, depth))
        while len(_elsewhere) > _MAX_ELSEWHERE:
            del _elsewhere[next(iter(_elsewhere))]
        scope_edges_pending(list(_elsewhere))


def _prune(stack: tuple[OpenScope, ...]) -> tuple[OpenScope, ...]:
    """``stack`` without the frames of this stack that another thread closed (and the stack
    forgotten as pending: a copy of it in another context keeps its frame)."""
    sid = _stack.stack_id()
    with _elsewhere_lock:
        closed = _elsewhere.pop(sid, None)
        if closed is None:
            return stack
        scope_edges_pending(list(_elsewhere))
    kept = tuple(
        f
        for f in stack
        if f.stack_id != sid or not any(o is f.owner and d == f.depth for o, d in closed)
    )
    if len(kept) != len(stack):
        STACK_VAR.set(kept)
    return kept


class annotate(ScopeEdges):
    """A named region: its calls, durations and the metrics sampled while it ran.

    Parameters
    ----------
    name : str, optional
        The scope's name; as a decorator, the function's ``__qualname__`` when omitted. A context
        manager needs one (``ValueError`` otherwise).
    color : str or int, optional
        The NVTX range colour (only used with ``nvtx``): an ARGB int, one of nvtx's colour
        names, ``'#rrggbb'`` or ``'#rrggbbaa'`` (:func:`stroboscope._base.nvtx.check_color`);
        any other value is refused here, never when the scope is entered.
    nvtx : bool or str
        Also open an NVTX range (domain ``"stroboscope"``, or the domain given as a string) when
        the ``nvtx`` package can be imported; nothing otherwise.
    **labels : str, int, float or bool
        Labels of this scope, added to the ambient :func:`stroboscope.labels`.
    """

    __slots__ = ("_color", "_domain", "_labels", "_scope_id", "name")

    def __init__(
        self,
        name: str | None = None,
        *,
        color: str | int | None = None,
        nvtx: bool | str = False,
        **labels: LabelValue,
    ) -> None:
        # A name already interned was checked then (a scope made on every call pays a lookup).
        scope_id = _interned.get(name) if type(name) is str else None
        if scope_id is None:
            if name is not None and type(name) is not str:
                hint = bare_decorator_hint(name, type(self).__name__)
                raise TypeError(f"name must be a str or None, not {type(name).__name__}{hint}")
            if name == "":
                raise ValueError("name must not be empty")
            if name is not None:
                check_text("name", name)  # refused here, not when the scope tables are written
                scope_id = _stack.intern(name)
        self.name = name
        self._color = None if color is None else check_color(color)  # refused here, not later
        if nvtx is False:
            self._domain: str | None = None
        elif isinstance(nvtx, (bool, str)):
            self._domain = "stroboscope" if nvtx is True else (nvtx or None)
        else:
            raise TypeError(f"nvtx must be a bool or a domain name (str), not {nvtx!r}")
        if self._domain is not None and nvtx_capture.ranges_recorded_here():
            self._domain = None  # our NVTX capture would record this scope a second time
        self._scope_id = -1 if scope_id is None else scope_id
        if labels:
            # Checked, written and interned in one C call (with the id of them merged with the
            # ambient labels while something records, so that C takes the edges:
            # _labels_cache); None for a name not checked yet or a value the rules below decide.
            own = self._take_labels(labels, _names_checked)
            if own is None:
                own = _stack.check_labels(type(self).__name__ + "()", labels)
                self._has_labels = True
                if _state.recording:
                    self._labels = own
                    self._merged_labels_id(LABELS_VAR.get())
            self._labels = own
        else:
            self._labels = _NO_LABELS
        self._fast_id = self._edges_in_c()

    def _merged_labels_id(self, ambient: tuple[dict[str, str], int]) -> int:
        """The id of this scope's labels over the ``ambient`` ones (labels and their id), kept
        in ``_labels_cache`` for the next edge, C's or Python's. One store replaces both halves
        at once: a scope entered on two threads under other ambient labels never pairs one's
        ambient id with the other's merged id."""
        amb, lid = ambient
        own = _intern_text(encode_labels({**amb, **self._labels} if amb else self._labels))
        if lid < 0xFFFFFFFF and own <= 0xFFFFFFFF:  # the log's ids are 32 bits
            self._labels_cache = lid << 32 | own
        return own

    def _edges_in_c(self) -> int:
        """The name id with which ``with`` takes this scope's edges in C, or -1 (the Python
        path): no name yet, or an NVTX range."""
        plain = self._scope_id >= 0 and self._domain is None
        return self._scope_id if plain else -1

    # -- the edges ---------------------------------------------------------------------------

    def _open(self) -> None:
        st = _state
        if st.recording:
            if st.starter is not None:
                st.starter()  # the default session starts on its first scope
            stack = STACK_VAR.get()
            if _elsewhere:
                stack = _prune(stack)
            sid = _stack.stack_id()
            depth = stack[-1].depth + 1 if stack and stack[-1].stack_id == sid else 0
            ambient = LABELS_VAR.get()
            lid = ambient[1]
            if self._labels:
                cached = self._labels_cache
                lid = (
                    cached & 0xFFFFFFFF if cached >> 32 == lid else self._merged_labels_id(ambient)
                )
            if depth <= MAX_DEPTH:
                _begin(self._scope_id, depth, lid, sid)
            else:
                self._too_deep()
            STACK_VAR.set((*stack, _new_frame((self, self._scope_id, lid, sid, depth))))
            self._open_sid, self._open_depth, self._open_lid = sid, depth, lid
            for target in st.edge_targets:
                target()
            if st.open_hooks:
                self._call_hooks(st.open_hooks)
        if self._domain is not None:
            self._nvtx_push()

    def _close(self) -> None:
        if self._domain is not None:
            self._nvtx_pop()
        stack = STACK_VAR.get()
        if _elsewhere:
            stack = _prune(stack)
        if stack and stack[-1].owner is self:
            top = stack[-1]
            if top.depth <= MAX_DEPTH:
                _end(top.scope_id, top.depth, top.labels_id, top.stack_id)
            STACK_VAR.set(stack[:-1])
            self._open_sid = 0
        elif any(f.owner is self for f in stack):
            self._close_misnested(stack)
        elif self._open_sid:
            self._close_elsewhere()
        # else: opened while nothing recorded, so there is nothing to close

    def _close_misnested(self, stack: tuple[OpenScope, ...]) -> None:
        """Scopes left open above this one (entered by hand, never exited) end with it."""
        last = max(i for i, f in enumerate(stack) if f.owner is self)
        for frame in reversed(stack[last:]):
            if frame.depth <= MAX_DEPTH:
                _end(frame.scope_id, frame.depth, frame.labels_id, frame.stack_id)
            if isinstance(frame.owner, ScopeEdges):
                frame.owner._open_sid = 0
        STACK_VAR.set(stack[:last])

    def _close_elsewhere(self) -> None:
        """Exited in another thread (or task) than the one it was entered in, whose stack holds
        its frame: its end goes on that stack now, and that stack's next scope takes the frame
        off (so it nests nothing more). Said once a minute at most; never raises."""
        sid, depth, lid = self._open_sid, self._open_depth, self._open_lid
        self._open_sid = 0
        if sid == _stack.stack_id():
            return  # its frame is gone from this very stack already (a copied context's)
        if depth <= MAX_DEPTH:
            _end(self._scope_id, depth, lid, sid)
        _closed_elsewhere(sid, self, depth)
        _say_elsewhere(
            logging.WARNING,
            "stroboscope: scope %r was exited in another thread (or task) than the one it was "
            "entered in: it is closed there, and the scopes opened after it where it was "
            "entered are not nested under it",
            self.name,
        )

    def _too_deep(self) -> None:
        _too_deep[0] += 1
        _say_too_deep(
            logging.WARNING,
            "stroboscope: scope %r is nested deeper than %d scopes, the most the events log "
            "holds: it is not recorded (nor any scope deeper; %d so far)",
            self.name,
            MAX_DEPTH,
            _too_deep[0],
        )

    def _call_hooks(self, hooks: tuple[Callable[[str], None], ...]) -> None:
        for hook in hooks:
            try:
                hook(cast(str, self.name))
            except Exception:  # a hook must never break the code it observes
                logger.exception("stroboscope: scope open hook %r failed", hook)

    def _nvtx_push(self) -> None:
        nvtx = _nvtx_module()
        if nvtx:
            nvtx.push_range(message=self.name, color=self._color, domain=self._domain)

    def _nvtx_pop(self) -> None:
        nvtx = _nvtx_module()
        if nvtx:
            nvtx.pop_range(domain=self._domain)

    # -- context manager ---------------------------------------------------------------------

    def _enter_slow(self) -> annotate:
        """``__enter__`` where C does not take it (``ScopeEdges``)."""
        if self._scope_id < 0:
            raise ValueError(
                f"{type(self).__name__}() used as a context manager needs a name: "
                f"with {type(self).__name__}('forward'): ..."
            )
        if _state.recording or self._domain is not None:
            self._open()
        return self

    def _exit_slow(self, exc_type: object, exc: object, tb: object) -> None:
        """``__exit__`` where C does not take it."""
        # A frame is on the stack only if something recorded when a scope opened (or on the
        # stack of another thread: _open_sid); the exception, if any, goes on unchanged.
        if self._domain is not None or STACK_VAR.get() or self._open_sid:
            self._close()

    # -- decorator ---------------------------------------------------------------------------

    def __call__(self, fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"{type(self).__name__}() decorates a callable, not {fn!r}")
        import inspect  # here, at decoration: importing it costs ms, and a scope never needs it

        scope = self._named(fn)
        if inspect.isasyncgenfunction(fn):
            return cast(F, functools.wraps(fn)(scope._wrap_async_gen(fn)))
        if inspect.iscoroutinefunction(fn):
            return cast(F, functools.wraps(fn)(scope._wrap_coroutine(fn)))
        if inspect.isgeneratorfunction(fn):
            return cast(F, functools.wraps(fn)(scope._wrap_gen(fn)))
        return cast(F, functools.wraps(fn)(scope._wrap_call(fn)))

    def _named(self, fn: Callable[..., Any]) -> annotate:
        """This scope, or a copy named after ``fn`` when it has no name yet."""
        if self.name is not None:
            return self
        named = type(self).__new__(type(self))
        named.name = str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn)))
        named._color = self._color
        named._domain = self._domain
        named._labels = self._labels
        named._has_labels = self._has_labels
        named._scope_id = _stack.intern(named.name)
        named._fast_id = named._edges_in_c()
        return named

    def _wrap_call(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        st = _state
        plain = self._domain is None

        def call(*args: Any, **kwargs: Any) -> Any:
            if plain and not st.recording:
                return fn(*args, **kwargs)
            with self:  # the edges in C where they can be
                return fn(*args, **kwargs)

        return call

    def _wrap_coroutine(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            # The task's context holds the scope across its awaits: the region is the
            # coroutine's whole life, suspended time included, on this task's own stack.
            with self:
                return await fn(*args, **kwargs)

        return call

    def _wrap_gen(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            # A generator shares its caller's context, so a scope held across a yield would
            # wrap the caller's code too. The scope covers each resume instead: one call per
            # next()/send()/throw(), the time the generator's body runs.
            gen = fn(*args, **kwargs)
            how, arg = "send", None
            while True:
                with self:
                    try:
                        value = gen.send(arg) if how == "send" else gen.throw(arg)
                    except StopIteration as stop:
                        return stop.value
                try:
                    how, arg = "send", (yield value)
                except GeneratorExit:
                    gen.close()
                    raise
                except BaseException as exc:  # thrown in by the caller: goes to the body
                    how, arg = "throw", exc

        return call

    def _wrap_async_gen(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            # As for generators: one call per resume (an async generator shares its caller's
            # context too).
            agen = fn(*args, **kwargs)
            how, arg = "send", None
            while True:
                with self:
                    try:
                        value = await (agen.asend(arg) if how == "send" else agen.athrow(arg))
                    except StopAsyncIteration:
                        return
                try:
                    how, arg = "send", (yield value)
                except GeneratorExit:
                    await agen.aclose()
                    raise
                except BaseException as exc:
                    how, arg = "throw", exc

        return call

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class collect_hardware_metrics(annotate):
    """A scope without NVTX: ``collect_hardware_metrics(name=None)``, as in aitune."""

    __slots__ = ()

    def __init__(self, name: str | None = None, **labels: LabelValue) -> None:
        own: dict[str, Any] = labels  # labels only: no colour, no NVTX
        super().__init__(name, **own)
