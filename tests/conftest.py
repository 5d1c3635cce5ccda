"""Shared fixtures: one per fake (``nvml``, ``amd``, ``fake_proc``, and the fake libraries they
load), and a check that fails any test that starts or ends with something of the package left
behind: a running sampler, a watchdog, an exporter, an open scope, or the scope events' state."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import stroboscope.scopes as scopes
from _fake_nvml import ScriptFn
from _fake_proc import FakeProc
from _paths import DATA, TESTS
from stroboscope._base import lifecycle
from stroboscope.recording.sampler import Sampler
from stroboscope.sampling import _child_events  # the private events directory of recorders
from stroboscope.scopes import _stack
from stroboscope.scopes import _switchboard as switchboard  # the scope events' switchboard

pytest_plugins = ["pytester"]  # tests/test_leaks.py runs the leak check on tiny test files

FAKE_NVML_SOURCE = TESTS / "fake_nvml" / "fake_nvml.c"
FAKE_AMDSMI_SOURCE = TESTS / "fake_amdsmi" / "fake_amdsmi.c"


# --- what a test may not leave behind -------------------------------------------------------

# Objects of the lifecycle registry, by the name of their class (or a base class, so that a
# subclass or a class moved to another module is still found): when one counts as left behind,
# what to call it, and how to end it. Ended in this order (a receiver stops its own watchdog).
Check = tuple[Callable[[Any], bool], str, Callable[[Any], None]]
REGISTERED: dict[str, Check] = {
    "Receiver": (lambda r: bool(r.running), "a running receiver", lambda r: r.stop()),
    "PrometheusExporter": (
        lambda e: not e.closed,
        "an open PrometheusExporter",
        lambda e: e.close(),
    ),
    "OTelExporter": (
        lambda e: not e.closed,
        "an open OTelExporter",
        lambda e: e.close(timeout=1.0),
    ),
    "CoreSampler": (lambda s: bool(s.running), "a running sampler", lambda s: s.close()),
    # Registered from start() to stop(): a watchdog in the registry was never stopped.
    "Watchdog": (lambda w: True, "a watchdog not stopped", lambda w: w.stop()),
}


def _registered_left() -> list[tuple[str, Any]]:
    found = []
    for kind in REGISTERED:
        for obj in lifecycle.live(object):
            if kind in {c.__name__ for c in type(obj).__mro__} and REGISTERED[kind][0](obj):
                found.append((kind, obj))
    return found


def _scope_state_left() -> list[str]:
    """The open scopes and ambient labels of this context, and the switchboard's state."""
    found = []
    stack = scopes.current_stack()
    if stack:
        names = [str(getattr(f.owner, "name", f.owner)) for f in stack]
        found.append(f"{len(stack)} scope(s) open: {names}")
    if scopes.current_labels():
        found.append(f"ambient labels set: {scopes.current_labels()}")
    state = switchboard.state
    if state.enabled or state.starter is not None:
        found.append("the default scope session enabled (stroboscope.scopes.enable)")
    if state.open_hooks:
        found.append(f"{len(state.open_hooks)} scope open hook(s) added and not removed")
    if state.recorders or state.edge_targets:
        found.append(f"{len(state.recorders)} recorder(s) attached to the scope events")
    if _child_events.owned_dir() is not None:
        found.append(
            f"a private events directory still in the environment: {_child_events.owned_dir()}"
        )
    return found


def left_behind() -> list[str]:
    """What of the package outlives a test, in words (empty: nothing)."""
    if _registered_left() or _scope_state_left():
        gc.collect()  # what nobody holds any more is not left behind
    return [f"{REGISTERED[k][1]}: {o!r}" for k, o in _registered_left()] + _scope_state_left()


def clean_up() -> None:
    """End what :func:`left_behind` found, so the next test starts clean."""
    for kind, obj in _registered_left():
        try:
            REGISTERED[kind][2](obj)
        except Exception as exc:  # clean up the rest; the test fails anyway
            print(f"could not end {obj!r}: {exc!r}")
    _stack.STACK_VAR.set(())
    _stack.LABELS_VAR.set(({}, 0))
    scopes.disable()  # also stops the default session's sampler
    if _child_events.owned_dir() is not None:  # a sampler stopped without its detach
        _child_events._at_exit()
    with switchboard._lock:
        switchboard.state.open_hooks = ()
        switchboard.state.recorders = ()
        switchboard.state.edge_targets = ()
        switchboard.state.starter = None
        switchboard.state.refresh()


@pytest.fixture(autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """Fails a test that starts with something left (by an earlier test or a wider fixture) or
    ends with something left (the test, or its own fixtures); either way it is ended."""
    before = left_behind()
    if before:
        clean_up()
        pytest.fail("left before this test started (by an earlier one): " + "; ".join(before))
    yield
    gc.collect()
    after = left_behind()
    if after:
        clean_up()
        pytest.fail("test left behind: " + "; ".join(after))


# --- the fakes --------------------------------------------------------------------------------


@pytest.fixture
def data_dir() -> Path:
    return DATA


def _compile(out: Path, source: Path, *defines: str) -> Path:
    cc = shutil.which(os.environ.get("CC", "")) or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", *defines, "-o", str(out), str(source)],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def fake_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fake NVML library (tests/fake_nvml), built with the system C compiler: a current
    driver ("new") and an old one without the _v2/_v3 symbols ("old")."""
    d = tmp_path_factory.mktemp("fake_nvml")
    return {
        "new": _compile(d / "libfake_nvml.so", FAKE_NVML_SOURCE),
        "old": _compile(d / "libfake_nvml_old.so", FAKE_NVML_SOURCE, "-DFAKE_NVML_OLD"),
    }


@pytest.fixture(scope="session")
def fake_amdsmi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libamd_smi (tests/fake_amdsmi), built with the system C compiler."""
    d = tmp_path_factory.mktemp("fake_amdsmi")
    return _compile(d / "libfake_amdsmi.so", FAKE_AMDSMI_SOURCE)


@pytest.fixture
def nvml(
    fake_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ScriptFn]:
    """The fake NVML library for this test: call ``nvml(script)`` (and optionally
    ``library="old"``) before building samplers; returns the script's path. The environment
    (``STROBOSCOPE_NVML_LIBRARY``, ``FAKE_NVML_SCRIPT``) is set for this test and its children."""

    def use(script: str, library: str = "new") -> Path:
        gc.collect()  # the library re-reads its script once every holder is gone
        path = tmp_path / f"nvml_script{len(list(tmp_path.glob('nvml_script*')))}.txt"
        path.write_text(script)
        monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(fake_libs[library]))
        monkeypatch.setenv("FAKE_NVML_SCRIPT", str(path))
        return path

    yield use
    gc.collect()


@pytest.fixture
def amd(fake_amdsmi: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptFn]:
    """The fake amdsmi library for this test: call ``amd(script)`` before building samplers;
    returns the script's path. NVML is absent unless the test sets it afterwards."""

    def use(script: str) -> Path:
        gc.collect()  # the library re-reads its script at amdsmi_init, once every holder is gone
        path = tmp_path / f"amd_script{len(list(tmp_path.glob('amd_script*')))}.txt"
        path.write_text(script)
        monkeypatch.setenv("STROBOSCOPE_AMDSMI_LIBRARY", str(fake_amdsmi))
        monkeypatch.setenv("FAKE_AMDSMI_SCRIPT", str(path))
        monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(tmp_path / "no-nvml-here.so"))
        return path

    yield use
    gc.collect()


@pytest.fixture
def fake_proc(tmp_path: Path) -> FakeProc:
    """A writable copy of the recorded ``/proc`` tree (``tests/_fake_proc.py``) in this test's
    directory; pass ``proc_root=str(fake_proc.root)`` and ``pid=PID``."""
    return FakeProc(tmp_path / "proc")


@pytest.fixture
def scope_sampler() -> Iterator[Sampler]:
    """A running Sampler (5 ms, memory only) for the scopes tests: its scope tables are what
    they read."""
    s = Sampler(0.005, sources=["memory"])
    s.start()
    try:
        yield s
    finally:
        s.close()
