"""The tests' helpers for optional programs (tests/_binaries.py, _chromium.py, _off_path.py,
_prometheus_server.py): without the program a test skips with its reason and leaves nothing
behind, on a machine that lacks it as on one where it is only off the PATH."""

from __future__ import annotations

import gc
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from _binaries import REQUIRE_VARIABLE
from _chromium import Browser
from _off_path import OPTIONAL, optional_program_tests, path_without
from _prometheus_server import prometheus


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _ours() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("strobo-chromium-")}


@pytest.fixture
def leaves_nothing() -> Iterator[None]:
    """Fail where the test leaves an fd, a browser profile or a ResourceWarning behind."""
    fds, dirs = _fds(), _ours()
    yield
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()  # a TemporaryDirectory left to the collector warns here
    assert [str(w.message) for w in caught] == []
    assert _fds() - fds == set()
    assert _ours() - dirs == set()


@pytest.fixture
def no_programs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH with no program on it, and no program required."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(REQUIRE_VARIABLE, raising=False)


@pytest.mark.usefixtures("no_programs", "leaves_nothing")
def test_browser_without_chromium_skips_and_leaves_nothing() -> None:
    with pytest.raises(pytest.skip.Exception, match=r"chromium is not installed \(apt-get"):
        Browser()


@pytest.mark.usefixtures("no_programs", "leaves_nothing")
def test_browser_without_chromium_fails_where_it_is_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(REQUIRE_VARIABLE, "prometheus chromium")
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE_VARIABLE} says this run needs it"):
        Browser()


@pytest.mark.usefixtures("leaves_nothing")
def test_browser_that_does_not_come_up_leaves_nothing(tmp_path: Path) -> None:
    # A "browser" that exits at once: the first protocol call finds its pipe closed.
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o700)
    with pytest.raises(RuntimeError, match="chromium closed its pipe"):
        Browser(path=str(fake))


@pytest.mark.usefixtures("no_programs", "leaves_nothing")
def test_prometheus_without_the_server_skips_before_making_anything(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with (
        pytest.raises(pytest.skip.Exception, match="prometheus is not installed"),
        prometheus(work, ["127.0.0.1:1"]),
    ):
        pass
    assert list(work.iterdir()) == []


def test_off_path_finds_every_test_file_that_uses_an_optional_program() -> None:
    names = {p.name for p in optional_program_tests()}
    # the three that use them today: Chromium directly, through _chromium, Prometheus through
    # _prometheus_server (a test of another helper's users would be found the same way)
    assert {"test_report_html.py", "test_page.py", "test_prometheus.py"} <= names
    assert "test_optional_binaries.py" in names  # this file: it imports _chromium too
    assert "test_rooms.py" not in names


def test_off_path_keeps_every_program_but_the_optional_ones(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
    for d, name in ((a, "chromium"), (a, "tool"), (b, "tool"), (b, "prometheus"), (b, "other")):
        (d / name).write_text("#!/bin/sh\n")
        (d / name).chmod(0o700)
    (b / "data.txt").write_text("not a program\n")
    monkeypatch.setenv("PATH", f"{a}{os.pathsep}{b}")
    into = tmp_path / "bin"
    into.mkdir()
    assert path_without(OPTIONAL, into) == str(into)
    assert sorted(p.name for p in into.iterdir()) == ["other", "tool"]
    assert (into / "tool").resolve() == a / "tool"  # the first on the PATH, as the shell finds
