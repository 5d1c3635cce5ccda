"""The first scope of a process costs what any other does: what it needs is imported when a
sampler starts or scopes are enabled, never inside the user's region. Each case runs in a fresh
interpreter, where nothing was imported before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _run(code: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_first_scope_of_a_running_sampler_imports_nothing() -> None:
    got = _run(
        """
        import json, sys
        from stroboscope import annotate
        from stroboscope.sampling import CoreSampler as Sampler
        s = Sampler(0.01, sources=["memory"]).start()
        before = set(sys.modules)
        with annotate("first", step=1):
            with annotate("inner"):
                pass
        new = sorted(set(sys.modules) - before)
        calls = s.scope_intervals().num_rows
        s.close()
        print(json.dumps({"new": new, "asyncio": "asyncio" in sys.modules, "calls": calls}))
        """
    )
    assert got == {"new": [], "asyncio": False, "calls": 2}


def test_the_first_scope_of_the_default_session_imports_nothing() -> None:
    got = _run(
        """
        import json, sys
        import stroboscope
        from stroboscope import annotate
        from stroboscope.sampling import _run
        reads = []  # the session's provenance reads the command line: at enable(), not later
        read_cmdline = _run.read_cmdline
        _run.read_cmdline = lambda pid: reads.append(pid) or read_cmdline(pid)
        stroboscope.enable(sources=["memory"])  # what the session needs is done here
        before, read_before = set(sys.modules), len(reads)
        with annotate("first"):  # starts the session's sampler
            pass
        new = sorted(set(sys.modules) - before)
        calls = stroboscope.scopes.session().scope_intervals().num_rows
        stroboscope.disable()
        print(json.dumps({"new": new, "calls": calls, "reads": len(reads) - read_before}))
        """
    )
    assert got == {"new": [], "calls": 1, "reads": 0}


def test_asyncio_imported_after_the_scopes_still_gives_tasks_their_own_stacks() -> None:
    """The scopes do not import asyncio (tens of ms): a process that never imported it runs no
    event loop. One that imports it later still has each task's scopes on a stack of its own."""
    got = _run(
        """
        import json, sys, threading
        from stroboscope import annotate
        from stroboscope.sampling import CoreSampler as Sampler
        assert "asyncio" not in sys.modules
        s = Sampler(0.01, sources=["memory"]).start()
        with annotate("thread"):
            pass
        import asyncio

        async def task(i):
            with annotate("task"):
                await asyncio.sleep(0.001)

        async def main():
            await asyncio.gather(task(0), task(1))

        asyncio.run(main())
        rows = s.scope_intervals().to_pylist()
        s.close()
        stacks = {r["name"]: [] for r in rows}
        for r in rows:
            stacks[r["name"]].append(r["stack_id"])
        print(json.dumps({"stacks": stacks, "thread": threading.get_ident()}))
        """
    )
    stacks = got["stacks"]
    assert isinstance(stacks, dict)
    assert stacks["thread"] == [got["thread"]]
    tasks = stacks["task"]
    assert len(tasks) == 2 and len(set(tasks)) == 2 and got["thread"] not in tasks


def test_the_face_loads_the_scopes_with_the_sampler() -> None:
    """Through the face, as a user writes it: ``stroboscope.annotate`` looked up for the first
    time inside the region still imports nothing, as the Sampler brought the scopes."""
    got = _run(
        """
        import json, sys, stroboscope
        s = stroboscope.Sampler(interval=0.01, sources=["memory"]).start()
        before = set(sys.modules)
        with stroboscope.annotate("first"):
            pass
        new = sorted(set(sys.modules) - before)
        s.close()
        print(json.dumps({"new": new, "asyncio": "asyncio" in sys.modules}))
        """
    )
    assert got == {"new": [], "asyncio": False}


def test_tasks_have_their_own_stacks_when_asyncio_comes_after_the_first_scopes() -> None:
    # Until asyncio is imported a scope's stack is its thread (no loop can run): once it is,
    # the tasks of a loop are stacks of their own, each starting at depth 0.
    got = _run(
        """
        import json, sys
        from stroboscope import annotate
        from stroboscope.sampling import CoreSampler as Sampler
        s = Sampler(0.01, sources=["memory"]).start()
        with annotate("before"):
            pass
        before = "asyncio" in sys.modules
        import asyncio

        async def task(i):
            with annotate("task"):
                await asyncio.sleep(0.001)

        async def main():
            with annotate("main"):
                await asyncio.gather(*(task(i) for i in range(2)))

        asyncio.run(main())
        t = s.scope_intervals().to_pylist()
        s.close()
        rows = sorted((r["name"], r["depth"]) for r in t)
        stacks = len({r["stack_id"] for r in t if r["name"] == "task"})
        print(json.dumps({"before": before, "rows": rows, "task_stacks": stacks}))
        """
    )
    assert got == {
        "before": False,
        "rows": [["before", 0], ["main", 0], ["task", 0], ["task", 0]],
        "task_stacks": 2,
    }


def test_a_scope_while_nothing_records_loads_no_table_library() -> None:
    """A process that only annotates (nothing records) never pays for pyarrow, pandas or numpy
    (about 0.2 s together): the scopes load the extension, not the tables. Labels, of a scope
    or ambient, are checked against the names of the scope tables' columns, which need no table
    library either."""
    got = _run(
        """
        import json, sys, stroboscope
        with stroboscope.annotate("first"):
            with stroboscope.annotate("inner"):
                pass
        with stroboscope.labels(phase="train"):
            with stroboscope.annotate("labelled", step=1):
                pass
        try:
            stroboscope.annotate("refused", scope_depth=1)  # still a column of the tables
        except ValueError:
            pass
        else:
            raise AssertionError("a reserved label was taken")
        heavy = sorted(m for m in ("pyarrow", "pandas", "numpy") if m in sys.modules)
        print(json.dumps({"heavy": heavy, "core": "stroboscope._core" in sys.modules}))
        """
    )
    assert got == {"heavy": [], "core": True}
