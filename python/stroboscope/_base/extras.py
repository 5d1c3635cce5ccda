"""The one home of the optional libraries' message: what needs a library that is not installed,
and the ``pip install 'stroboscope[EXTRA]'`` that installs it (the extras of ``pyproject.toml``)."""

from __future__ import annotations

import importlib
from types import ModuleType


def missing_extra(what: str, extra: str, exc: ImportError) -> ImportError:
    """An ImportError that says that ``what`` needs a library that is not installed (the one
    ``exc``, the failed import, names) and which extra installs it. Said once when ``exc`` is
    already this message (a face that needs a module of ours that needs the library)."""
    missing = f"{exc.name}, a library" if exc.name else f"a library ({exc})"
    err = ImportError(
        f"{what} needs {missing} that is not installed; "
        f"install it with: pip install 'stroboscope[{extra}]'"
    )
    err.name = exc.name
    return err


def require(module: str, what: str, extra: str) -> ModuleType:
    """``module`` imported; when it is not installed, :func:`missing_extra`'s ImportError."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_extra(what, extra, exc) from exc
