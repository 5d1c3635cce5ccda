"""The Lightning callback (compat/lightning.py) driven by a real ``lightning.Trainer``: a tiny
model on the CPU, 2 epochs of 4 steps. The hooks' order on stand-in trainers, and the hooks'
signatures against the recorded fixture: tests/compat/test_callbacks.py."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, cast

import pyarrow.parquet as pq
import pytest
from _binaries import python_module
from stroboscope.sampling._provenance import from_schema

INSTALL = "pip install torch==2.13.0 lightning"


# Lightning 2.6 on torch 2.13: its own use of a torch API torch deprecates, and its advice to
# use DataLoader workers for a dataset of 32 rows; neither is ours to change.
@pytest.mark.filterwarnings(
    "ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"
)
@pytest.mark.filterwarnings("ignore:The '\\w+_dataloader' does not have many workers")
def test_a_real_trainer_records_scopes_windows_and_the_run(tmp_path: Path) -> None:
    torch = python_module("torch", install=INSTALL)
    pl = python_module("lightning.pytorch", install=INSTALL)
    from lightning.pytorch.loggers import CSVLogger
    from stroboscope.compat.lightning import StroboscopeCallback

    class Tiny(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=8)  # 4 steps an epoch
    out = tmp_path / "run.parquet"
    callback = StroboscopeCallback(out, interval=0.002, sources=["process"])
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        callbacks=[callback],
        logger=CSVLogger(tmp_path),
        log_every_n_steps=2,
        num_sanity_val_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(Tiny(), loader, loader)
    assert callback.recorder.written == str(out) and not Path(f"{out}.spool").exists()
    table = pq.read_table(out)
    prov = from_schema(table.schema)
    assert prov is not None and prov["rows"] == table.num_rows > 0
    sampler = callback.recorder.sampler
    intervals = cast(Any, sampler).scope_intervals()
    names = intervals.column("name").to_pylist()
    # 8 steps, 2 epochs, and the sanity check's validation before the 2 epochs' own
    assert {n: names.count(n) for n in set(names)} == {
        "train_step": 8,
        "train_epoch": 2,
        "validation": 3,
    }
    steps = [r for r in intervals.to_pylist() if r["name"] == "train_step"]
    assert [r["step"] for r in steps] == [str(k) for k in range(8)]
    sanity = [r["sanity_check"] for r in intervals.to_pylist() if r["name"] == "validation"]
    assert sanity == ["True", "False", "False"]
    with open(Path(trainer.logger.log_dir) / "metrics.csv", newline="") as f:
        logged = [r for r in csv.DictReader(f) if r.get("system/proc.rss_bytes")]
    # a window every 2 steps (the trainer's log_every_n_steps) and the last one, each where the
    # sampler took rows since the previous window
    windows = [int(r["step"]) for r in logged]
    assert windows and set(windows) <= {2, 4, 6, 8} and windows == sorted(windows)
    assert all(float(r["system/proc.rss_bytes"]) > 1 << 20 for r in logged)
