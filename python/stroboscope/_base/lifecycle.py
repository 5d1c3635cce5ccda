"""One registry for what the package must do at interpreter exit and in a forked child.

Objects that hold a thread, a child process or a file register here once (:func:`register`); the
registry keeps only weak references. At exit it calls ``obj._at_exit()`` on every live object,
newest first (a watchdog started after its sampler stops before it); in the child of a
``fork()`` it calls ``obj._after_fork_in_child()`` on every live object, oldest first (only the
forking thread exists there: threads, pipes and spools belong to the parent). Either method may
be absent. An exception in one is logged and does not stop the others.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from typing import Any, TypeVar

logger = logging.getLogger("stroboscope")

T = TypeVar("T")

_lock = threading.Lock()
_refs: list[weakref.ref[Any]] = []


def register(obj: object) -> None:
    """Keep ``obj`` (weakly) for its ``_at_exit`` / ``_after_fork_in_child`` hooks."""
    with _lock:
        _refs[:] = [r for r in _refs if r() is not None]
        _refs.append(weakref.ref(obj))


def unregister(obj: object) -> None:
    """Forget ``obj`` (harmless when it was never registered)."""
    with _lock:
        _refs[:] = [r for r in _refs if r() is not None and r() is not obj]


def live(kind: type[T]) -> list[T]:
    """The registered objects that are instances of ``kind``, oldest first."""
    with _lock:
        objs = [r() for r in _refs]
    return [o for o in objs if isinstance(o, kind)]


def _call_all(hook: str, objs: list[Any]) -> None:
    for obj in objs:
        method = getattr(obj, hook, None)
        if method is None:
            continue
        try:
            method()
        except Exception:  # one object's failure must not leave the others running
            logger.exception("stroboscope: %s of %r failed", hook, obj)


def _at_exit() -> None:
    with _lock:
        objs = [o for o in (r() for r in reversed(_refs)) if o is not None]
    _call_all("_at_exit", objs)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread of the parent may have held it at the fork
    objs = [o for o in (r() for r in _refs) if o is not None]
    _call_all("_after_fork_in_child", objs)


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
