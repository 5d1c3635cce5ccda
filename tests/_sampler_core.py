"""A bare ``_core.Sampler`` built as :class:`stroboscope.sampling.CoreSampler` builds its ring,
for the tests of the sampler's parts on their own (each part takes the core, not the sampler).

Over the recorded ``/proc`` of :mod:`_fake_proc` (``pid=PID``), so every value the ``memory``
and ``process`` sources read is known."""

from __future__ import annotations

import stroboscope._core as _core
from _fake_proc import PID, FakeProc
from stroboscope.sampling._plan import SourcePlan, plan_sources, source_options


def bare_core(
    fake_proc: FakeProc | None,
    sources: dict[str, int | None],
    interval: float = 0.01,
    capacity: int = 64,
) -> tuple[_core.Sampler, SourcePlan]:
    """A stopped ``_core.Sampler`` of ``sources`` (name -> read every n ticks, None: its
    natural rate) over ``fake_proc`` (None: this machine's /proc and this process), and the
    plan that built it (its ``details`` and ``fill_within_ns``)."""
    root = "/proc" if fake_proc is None else str(fake_proc.root)
    pid = None if fake_proc is None else PID
    options = source_options(pid, root, "/sys", "/sys/fs/cgroup", ("/",))
    plan = plan_sources(list(sources.items()), options, round(interval * 1e9))
    return _core.Sampler(plan.built, round(interval * 1e9), capacity), plan
