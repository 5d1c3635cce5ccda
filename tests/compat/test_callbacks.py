"""The training-framework callbacks (compat/lightning.py, compat/transformers.py).

Three layers, so that what runs where is plain:

- always: every hook's signature against the framework's base class, recorded in
  ``tests/data/framework_callbacks.json`` (from lightning 2.6.6 and transformers 5.24.0), and the
  hooks driven in the order each framework calls them, on stand-in trainer objects: the windows
  they log are checked against the rows of the recording they write;
- when the scopes room is installed: the scopes the hooks open, counted per name;
- with the framework installed (CI installs torch 2.13.0 (CPU), lightning and transformers):
  the fixture equals the installed base class (here), and tiny CPU models train with the real
  trainers (tests/compat/test_lightning.py, tests/compat/test_transformers.py, and the examples
  in tests/test_examples.py); skipped, with the reason shown, where the framework is absent,
  and failed instead where ``STROBOSCOPE_TEST_REQUIRE`` names it (as .ci/run does).
"""

from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from _binaries import python_module
from _paths import DATA
from stroboscope.compat import _training
from stroboscope.compat.lightning import LightningHooks
from stroboscope.compat.transformers import TrainerHooks
from stroboscope.sampling._provenance import from_schema

FIXTURE = json.loads((DATA / "framework_callbacks.json").read_text())
BASES = {
    LightningHooks: "lightning.pytorch.Callback",
    TrainerHooks: "transformers.TrainerCallback",
}
SCOPES = importlib.util.find_spec("stroboscope.scopes") is not None


def _hooks(cls: type) -> dict[str, list[str]]:
    return {
        name: [p.name for p in inspect.signature(f).parameters.values()]
        for name, f in vars(cls).items()
        if inspect.isfunction(f) and not name.startswith("_")
    }


@pytest.mark.parametrize("cls", list(BASES), ids=lambda c: c.__name__)
def test_every_hook_matches_the_frameworks_signature(cls: type) -> None:
    recorded = FIXTURE[BASES[cls]]
    ours = _hooks(cls)
    assert len(ours) >= 7
    for name, params in ours.items():
        assert name in recorded, f"{cls.__name__}.{name} is no hook of {BASES[cls]}"
        if cls is TrainerHooks:  # called as hook(args, state, control, **kwargs)
            assert params[:4] == recorded[name][:4] and params[-1] == "kwargs", name
        else:  # Lightning passes the arguments by position
            assert params == recorded[name], name


def _stop_thread(recorder: _training.TrainingRecorder) -> None:
    """Rows by :meth:`Sampler.tick_now` from here on: a step's rows do not hang on when the
    sampler thread is scheduled (the recording is written from the spool all the same)."""
    assert recorder.sampler is not None
    recorder.sampler.stop()


def _rows(recorder: _training.TrainingRecorder, n: int) -> None:
    assert recorder.sampler is not None
    recorder.sampler.tick_now(n)


class _Logger:
    """Records each log_metrics call with the recorder's cursor at that moment."""

    def __init__(self, recorder: _training.TrainingRecorder) -> None:
        self.recorder = recorder
        self.calls: list[tuple[int, dict[str, float | int], int]] = []

    def log_metrics(self, metrics: dict[str, float | int], step: int) -> None:
        self.calls.append((step, metrics, self.recorder._cursor))


def _check_windows_against_the_rows(
    calls: list[tuple[int, dict[str, Any], int]], out: Path
) -> None:
    """Each window's mean of mem.used_bytes is the mean of the recorded rows it covered."""
    table = pq.read_table(out)
    start = 0
    for _, metrics, end in calls:
        part = table.slice(start, end - start)
        used = pc.mean(part.column("mem.used_bytes")).as_py()
        assert metrics["system/mem.used_bytes"] == pytest.approx(used, rel=1e-12)
        # proc.threads is a count: its last value, not a mean (record's publisher rule)
        assert metrics["system/proc.threads"] == part.column("proc.threads").drop_null()[-1].as_py()
        start = end
    assert start == table.num_rows  # the windows covered every row, once


def test_lightning_hooks_in_fit_order(tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    every_tick = {"memory": 0.005, "process": 0.005}  # not at their natural resolution: each row
    cb = LightningHooks(out, log_every_n_steps=3, interval=0.005, sources=every_tick)
    logger = _Logger(cb.recorder)
    trainer = SimpleNamespace(
        global_step=0,
        current_epoch=0,
        loggers=[logger],
        log_every_n_steps=50,
        sanity_checking=False,
    )
    module = object()
    cb.on_fit_start(trainer, module)
    _stop_thread(cb.recorder)
    for epoch in range(2):
        trainer.current_epoch = epoch
        cb.on_train_epoch_start(trainer, module)
        for i in range(4):
            cb.on_train_batch_start(trainer, module, None, i)
            _rows(cb.recorder, 2)
            trainer.global_step += 1
            cb.on_train_batch_end(trainer, module, None, None, i)
        cb.on_validation_epoch_start(trainer, module)
        _rows(cb.recorder, 1)
        cb.on_validation_epoch_end(trainer, module)
        cb.on_train_epoch_end(trainer, module)
    cb.on_fit_end(trainer, module)
    cb.teardown(trainer, module, "fit")  # after on_fit_end: nothing more happens
    # 8 steps, a window every 3 (after steps 3 and 6), and the last one at the end of fit.
    assert [step for step, _, _ in logger.calls] == [3, 6, 8]
    assert cb.recorder.written == str(out) and not Path(f"{out}.spool").exists()
    _check_windows_against_the_rows(logger.calls, out)
    prov = from_schema(pq.read_schema(out))
    assert prov is not None and prov["rows"] == pq.read_table(out).num_rows
    assert cb.recorder.scoped == SCOPES


def test_trainer_hooks_in_train_order(tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    cb = TrainerHooks(out, interval=0.005, sources={"memory": 0.005}, prefix="system/")
    state = SimpleNamespace(global_step=0, epoch=0.0, log_history=[])
    args, control = object(), object()
    logged: list[tuple[int, dict[str, Any], int]] = []
    cb.on_train_begin(args, state, control, model=None)
    _stop_thread(cb.recorder)
    for epoch in range(2):
        state.epoch = float(epoch)
        cb.on_epoch_begin(args, state, control)
        for _ in range(4):
            cb.on_step_begin(args, state, control)
            _rows(cb.recorder, 2)
            state.global_step += 1
            cb.on_step_end(args, state, control)
            if (
                state.global_step % 2 == 0
            ):  # logging_steps=2: the trainer appends, then calls on_log
                logs: dict[str, Any] = {"loss": 1.0}
                state.log_history.append({**logs, "step": state.global_step})
                cb.on_log(args, state, control, logs=logs)
                logged.append((state.global_step, logs, cb.recorder._cursor))
        cb.on_epoch_end(args, state, control)
        for _ in range(2):
            _rows(cb.recorder, 1)
            cb.on_prediction_step(args, state, control)
        cb.on_evaluate(args, state, control, metrics={"eval_loss": 1.0})
    cb.on_train_end(args, state, control)
    assert [step for step, _, _ in logged] == [2, 4, 6, 8]
    for entry, (_, logs, _) in zip(state.log_history, logged):
        assert (
            entry["loss"] == 1.0 and entry["system/mem.used_bytes"] == logs["system/mem.used_bytes"]
        )
    # The CSV has every row (those after the last log are in no window) and its sidecar.
    rows = pacsv.read_csv(out)
    start = 0
    for _, logs, end in logged:
        column = rows.slice(start, end - start).column("mem.used_bytes")
        assert logs["system/mem.used_bytes"] == pytest.approx(pc.mean(column).as_py(), rel=1e-12)
        start = end
    assert json.loads(Path(f"{out}.meta.json").read_text())["rows"] == rows.num_rows


def test_bad_arguments_are_refused_before_training(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"must end in \.parquet, \.pq or \.csv"):
        LightningHooks(tmp_path / "run.txt")
    with pytest.raises(
        ValueError, match=r"^log_every_n_steps must be an int >= 1 \(steps\) or None, got int 0$"
    ):
        LightningHooks(tmp_path / "run.parquet", log_every_n_steps=0)
    with pytest.raises(ValueError, match="aggregate must be one of"):
        TrainerHooks(tmp_path / "run.parquet", aggregate="median")


@pytest.mark.skipif(not SCOPES, reason="the scopes room (stroboscope.annotate) is not installed")
def test_the_hooks_scope_steps_epochs_and_validation(tmp_path: Path) -> None:
    cb = LightningHooks(None, interval=0.005, sources=["memory"])
    trainer = SimpleNamespace(
        global_step=0, current_epoch=0, loggers=[], log_every_n_steps=50, sanity_checking=False
    )
    cb.on_fit_start(trainer, None)  # the thread runs: the sampler covers the scopes of its run
    for epoch in range(2):
        trainer.current_epoch = epoch
        cb.on_train_epoch_start(trainer, None)
        for i in range(3):
            cb.on_train_batch_start(trainer, None, None, i)
            trainer.global_step += 1
            cb.on_train_batch_end(trainer, None, None, None, i)
        cb.on_validation_epoch_start(trainer, None)
        cb.on_validation_epoch_end(trainer, None)
        cb.on_train_epoch_end(trainer, None)
    cb.on_fit_end(trainer, None)
    sampler = cb.recorder.sampler
    assert sampler is not None
    intervals = cast(Any, sampler).scope_intervals()  # the scopes room's Sampler method
    names = intervals.column("name").to_pylist()
    assert {n: names.count(n) for n in set(names)} == {
        "train_step": 6,
        "train_epoch": 2,
        "validation": 2,
    }


def _framework(name: str) -> Any:
    return python_module(name, install=f"pip install torch==2.13.0 {name.split('.')[0]}")


def test_the_fixture_is_the_installed_lightning_callback() -> None:
    pl = _framework("lightning.pytorch")
    live = _hooks_of_base(pl.Callback)
    for name in _hooks(LightningHooks):
        assert live[name] == FIXTURE["lightning.pytorch.Callback"][name]


def test_the_fixture_is_the_installed_trainer_callback() -> None:
    transformers = _framework("transformers")
    live = _hooks_of_base(transformers.TrainerCallback)
    for name in _hooks(TrainerHooks):
        assert live[name] == FIXTURE["transformers.TrainerCallback"][name]


def _hooks_of_base(cls: type) -> dict[str, list[str]]:
    return {
        name: [p.name for p in inspect.signature(f).parameters.values()]
        for name, f in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


@pytest.mark.skipif(not SCOPES, reason="the scopes room is not installed")
def test_the_training_recording_leaves_its_scopes_beside_the_file(tmp_path: Path) -> None:
    """The recorder's end is record's (recording.finish): the step scopes the hooks opened go
    beside the recording as run.scopes.parquet, which report reads."""
    out = tmp_path / "run.parquet"
    recorder = _training.TrainingRecorder(out, interval=0.005)
    recorder.start()
    for step in range(3):
        recorder.open_scope("train_step", step=step)
        recorder.close_scope("train_step")
    assert recorder.finish() == str(out)
    scopes = pq.read_table(tmp_path / "run.scopes.parquet")
    assert scopes.column("name").to_pylist() == ["train_step"] * 3
    assert scopes.column("step").to_pylist() == ["0", "1", "2"]
