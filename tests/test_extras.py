"""A face that needs an optional library, called where that library is not installed, raises an
ImportError naming what needs it and the ``pip install 'stroboscope[EXTRA]'`` that installs it
(never a bare ModuleNotFoundError from deep inside). The library is hidden from the import system
(a finder first on ``sys.meta_path`` that says it is not installed, and no module of it loaded)."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import stroboscope
from stroboscope._base.extras import missing_extra, require


class _NotInstalled(importlib.abc.MetaPathFinder):
    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def _hide(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    pytest.importorskip(name)
    if name == "pandas":
        # pyarrow finds pandas once per process and keeps what it found: found before it is
        # hidden, so that the tests after this one still have it.
        pa.table({"a": [1]}).to_pandas()
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(sys, "meta_path", [_NotInstalled(name), *sys.meta_path])


def _scoped_sampler_summary(tmp_path: Path) -> Any:
    s = stroboscope.Sampler(0.01, sources=["memory"])
    with s:
        with stroboscope.annotate("step"):
            pass
        return s.summary(by="name")


def _frame_to_pandas(tmp_path: Path) -> Any:
    s = stroboscope.Sampler(0.01, sources=["memory"])
    with s:
        return s.snapshot().to_pandas()


def _attribute_trace(tmp_path: Path) -> Any:
    from stroboscope.analysis.attribution import attribute_trace

    return attribute_trace(pa.table({"mono_ns": pa.array([], pa.int64())}), tmp_path / "t.json")


def _prometheus_exporter(tmp_path: Path) -> Any:
    from stroboscope.cluster import PrometheusExporter

    s = stroboscope.Sampler(0.01, sources=["memory"])
    with s:
        return PrometheusExporter(s, port=0)


@pytest.mark.parametrize(
    ("library", "call", "what", "extra"),
    [
        ("pandas", _scoped_sampler_summary, "summary()", "pandas"),
        ("pandas", _frame_to_pandas, "to_pandas()", "pandas"),
        ("pandas", _attribute_trace, "attribute_trace()", "pandas"),
        ("prometheus_client", _prometheus_exporter, "PrometheusExporter", "prometheus"),
    ],
)
def test_a_missing_library_is_named_with_its_extra(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    library: str,
    call: Callable[[Path], Any],
    what: str,
    extra: str,
) -> None:
    _hide(monkeypatch, library)
    with pytest.raises(ImportError) as got:
        call(tmp_path)
    message = str(got.value)
    assert what in message and library in message, message
    assert message.endswith(f"install it with: pip install 'stroboscope[{extra}]'"), message
    assert got.value.name == library


def test_require_returns_the_module_when_it_is_there() -> None:
    assert require("json", "anything", "none").dumps([1]) == "[1]"


def test_a_library_that_fails_to_import_is_not_called_missing() -> None:
    # An installed library too old for a name we import, or whose own import fails.
    too_old = ImportError("cannot import name 'Thing' from 'lib.sub'", name="lib.sub")
    err = missing_extra("X", "y", too_old)
    assert str(err) == (
        "X needs a library that failed to import (cannot import name 'Thing' from 'lib.sub'); "
        "install or upgrade it with: pip install -U 'stroboscope[y]'"
    )
    assert str(missing_extra("--option", "y", err)) == str(err).replace("X", "--option", 1)


def test_missing_extra_keeps_the_failed_name() -> None:
    err = missing_extra("X", "y", ModuleNotFoundError("No module named 'z'", name="z"))
    assert (err.name, str(err)) == (
        "z",
        "X needs z, a library that is not installed; install it with: pip install 'stroboscope[y]'",
    )
    # Given its own message (a module of ours that needs the library), it says it once.
    again = missing_extra("--option", "y", err)
    assert str(again) == (
        "--option needs z, a library that is not installed; "
        "install it with: pip install 'stroboscope[y]'"
    )
