"""An in-process recording gets the scopes of the processes its process starts: forked workers,
multiprocessing's fork and spawn workers, subprocesses, a torch DataLoader's fork workers
(:mod:`stroboscope.sampling._child_events`). Each case runs in a process of its own (the private
directory goes into that process's environment, and multiprocessing's spawn needs a main module
it can import)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from stroboscope.formats.shared_events import EVENTS_DIR_ENV

COMMON = """
import json, os, subprocess, sys
import multiprocessing as mp
import stroboscope
from stroboscope.formats.shared_events import EVENTS_DIR_ENV


def scoped(name):
    with stroboscope.annotate(name):
        with stroboscope.annotate("leaf"):
            pass


def report(sampler, **more):
    t = sampler.scope_intervals()
    rows = t.select([c for c in ("name", "pid", "end_ns") if c in t.column_names]).to_pylist()
    out = {"me": os.getpid(), "rows": rows, "env": os.environ.get(EVENTS_DIR_ENV)}
    out.update(more)
    print(json.dumps(out), flush=True)
"""

WORKERS = """
if __name__ == "__main__":
    s = stroboscope.Sampler(0.01, sources=["memory"])
    with s:
        private = os.environ[EVENTS_DIR_ENV]
        mode = oct(os.stat(private).st_mode & 0o777)
        scoped("parent")
        own_file = stroboscope._core.events_shared_path()
        child = os.fork()
        if child == 0:
            scoped("forked")
            os._exit(0)
        os.waitpid(child, 0)
        pids = {"forked": child}
        for method in ("fork", "forkserver", "spawn"):
            p = mp.get_context(method).Process(target=scoped, args=("mp-" + method,))
            p.start()
            p.join()
            pids["mp-" + method] = p.pid
        code = (
            "import stroboscope\\n"
            "with stroboscope.annotate('sub'):\\n"
            "    with stroboscope.annotate('leaf'): pass"
        )
        sub = subprocess.Popen([sys.executable, "-c", code])
        sub.wait()
        pids["sub"] = sub.pid
        scoped("parent")
        live = len(s.scope_intervals())
    report(s, pids=pids, live=live, mode=mode, gone=not os.path.exists(private), own=own_file)
    again = stroboscope.Sampler(0.01, sources=["memory"])
    with again:
        scoped("second")
    report(again)
    runs = stroboscope.Sampler(0.01, sources=["memory"])
    for run in ("run1", "run2"):
        runs.start()
        child = os.fork()
        if child == 0:
            scoped(run)
            os._exit(0)
        os.waitpid(child, 0)
        runs.stop()
    t = runs.scope_intervals().select(["name", "pid", "stack_id"])
    print(json.dumps({"runs": t.to_pylist()}), flush=True)
    runs.close()
    # The forkserver started during the first recording still has that directory's name.
    late = stroboscope.Sampler(0.01, sources=["memory"])
    with late:
        p = mp.get_context("forkserver").Process(target=scoped, args=("late",))
        p.start()
        p.join()
    t = late.scope_intervals().select(["name", "pid"])
    print(json.dumps({"late": t.to_pylist(), "pid": p.pid}), flush=True)
"""

LOADER = """
import torch


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        with stroboscope.annotate("getitem", i=i):
            return torch.tensor([i, os.getpid()])


if __name__ == "__main__":
    s = stroboscope.Sampler(0.01, sources=["memory"])
    with s:
        loader = torch.utils.data.DataLoader(
            Data(), batch_size=2, num_workers=2, multiprocessing_context="fork"
        )
        with stroboscope.annotate("epoch"):
            workers = sorted({int(p) for batch in loader for p in batch[:, 1].tolist()})
    report(s, workers=workers)
"""


def _run(code: str, tmp_path: Path, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent(COMMON + code))
    base = {k: v for k, v in os.environ.items() if k != EVENTS_DIR_ENV}
    base["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, str(script)],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_the_scopes_of_forked_spawned_and_subprocess_workers_come_with_their_pids(
    tmp_path: Path,
) -> None:
    first, second, runs, late = _run(WORKERS, tmp_path)
    me, pids = first["me"], first["pids"]
    by_name: dict[str, list[int]] = {}
    for row in first["rows"]:
        by_name.setdefault(row["name"], []).append(row["pid"])
    # Each worker's scope, with the worker's pid, once; the parent's own twice (two calls), once
    # each: its pid file is never read beside its memory.
    for name, pid in pids.items():
        assert by_name[name] == [pid], name
    assert by_name["parent"] == [me, me]
    assert first["own"] is None  # the parent's own events stay in memory: no file of its own
    assert Counter(by_name["leaf"]) == Counter([me, me, *pids.values()])
    assert all(row["end_ns"] is not None for row in first["rows"])
    assert first["live"] == len(first["rows"])  # read while running: the same calls
    # The private directory: 0700 while recording, gone with the variable once it stopped.
    assert first["mode"] == "0o700"
    assert first["gone"] and first["env"] is None
    # A second sampler makes a directory of its own and gets only its own run's scopes.
    assert [row["name"] for row in second["rows"]] == ["second", "leaf"]
    assert "pid" not in second["rows"][0]  # no child scopes: the table keeps its columns
    assert second["env"] is None
    # A sampler's runs each read their children (before the directory went), stacks apart.
    rows = runs["runs"]
    assert sorted(r["name"] for r in rows) == ["leaf", "leaf", "run1", "run2"]
    stacks = {r["name"]: r["stack_id"] for r in rows if r["name"].startswith("run")}
    assert stacks["run1"] != stacks["run2"]
    # The directory's name is made again when free: a forkserver started earlier still has it.
    assert [r["pid"] for r in late["late"] if r["name"] == "late"] == [late["pid"]]


def test_a_data_loaders_fork_workers_annotate_their_items(tmp_path: Path) -> None:
    if importlib.util.find_spec("torch") is None:  # looked up, not imported (it runs in a child)
        pytest.skip("torch is not installed")
    (got,) = _run(LOADER, tmp_path)
    workers = got["workers"]
    assert len(workers) == 2 and got["me"] not in workers
    items = [row for row in got["rows"] if row["name"] == "getitem"]
    assert len(items) == 8
    assert sorted({row["pid"] for row in items}) == workers
    assert [row["pid"] for row in got["rows"] if row["name"] == "epoch"] == [got["me"]]


def test_an_events_directory_set_by_someone_else_is_left_alone(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    code = """
    if __name__ == "__main__":
        s = stroboscope.Sampler(0.01, sources=["memory"])
        with s:
            during = os.environ[EVENTS_DIR_ENV]
            scoped("parent")
            child = os.fork()
            if child == 0:
                scoped("forked")
                os._exit(0)
            os.waitpid(child, 0)
        report(s, during=during, child=child)
    """
    (got,) = _run(textwrap.dedent(code), tmp_path, {EVENTS_DIR_ENV: str(theirs)})
    assert got["during"] == got["env"] == str(theirs)  # never replaced, never removed
    assert theirs.is_dir()
    # The child's scopes went to the directory's own recorder, not to this sampler.
    assert {row["name"] for row in got["rows"]} == {"parent", "leaf"}
    names = sorted(p.name for p in theirs.iterdir())
    assert f"{got['child']}.py.sev" in names


def test_a_sampler_with_edge_rows_takes_a_row_when_a_child_opens_a_scope(tmp_path: Path) -> None:
    code = """
    import time
    if __name__ == "__main__":
        s = stroboscope.Sampler(5.0, sources=["memory"], edge_rows=True)  # one tick in 5 s
        with s:
            while s.stats().rows_written < 1:
                time.sleep(0.001)
            child = os.fork()
            if child == 0:
                with stroboscope.annotate("kid"):
                    time.sleep(0.05)
                os._exit(0)
            os.waitpid(child, 0)
            rows = s.stats().rows_written
            span = time.monotonic_ns()
        report(s, taken=rows, first=s.snapshot().to_arrow().column("mono_ns")[0].as_py(), at=span)
    """
    (got,) = _run(textwrap.dedent(code), tmp_path)
    assert [row["name"] for row in got["rows"]] == ["kid"]
    if got["at"] - got["first"] < 5e9:  # no tick was due: the second row is the kid's edge row
        assert got["taken"] == 2
