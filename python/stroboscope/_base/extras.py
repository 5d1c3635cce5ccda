"""The one home of the optional libraries' message: what needs a library that is not installed,
and the ``pip install 'stroboscope[EXTRA]'`` that installs it (the extras of ``pyproject.toml``)."""

from __future__ import annotations

import importlib
from types import ModuleType


def missing_extra(what: str, extra: str, exc: ImportError) -> ImportError:
    """An ImportError that says that ``what`` needs a library and which extra installs it:
    one that is not installed (``exc`` a ModuleNotFoundError naming it), or one that failed to
    import (a name it lacks: too old; its own import failed), with ``exc``'s words. Said once
    when ``exc`` is already this message (a face that needs a module of ours that needs it)."""
    problem = getattr(exc, "_stroboscope_problem", None)
    if problem is None:
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            problem = (
                f"{exc.name}, a library that is not installed; "
                f"install it with: pip install 'stroboscope[{extra}]'"
            )
        else:
            problem = (
                f"a library that failed to import ({exc}); "
                f"install or upgrade it with: pip install -U 'stroboscope[{extra}]'"
            )
    err = ImportError(f"{what} needs {problem}")
    err.name = exc.name
    err._stroboscope_problem = problem  # type: ignore[attr-defined]
    return err


def require(module: str, what: str, extra: str) -> ModuleType:
    """``module`` imported; when it is not installed, :func:`missing_extra`'s ImportError."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_extra(what, extra, exc) from exc
