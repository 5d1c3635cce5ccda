"""PyTorch Lightning with stroboscope's callback: steps, epochs and validation scoped, system
metrics logged with the trainer's own metrics, the recording written when ``fit`` ends::

    python examples/lightning_callback.py --out /tmp/run
    # /tmp/run/lightning_logs/version_0/metrics.csv has system/cpu.util_pct, system/proc.rss_bytes…
    # /tmp/run/run.parquet is the whole recording (stroboscope info /tmp/run/run.parquet)

Needs ``pip install 'stroboscope[lightning]'`` (which pulls torch).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from stroboscope.compat.lightning import StroboscopeCallback


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
        )

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="directory for the logs and run.parquet")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    callback = StroboscopeCallback(out / "run.parquet", interval=0.005)
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        callbacks=[callback],
        logger=CSVLogger(out),
        log_every_n_steps=4,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(Regression(), loader, loader)
    print(f"recording: {callback.recorder.written}; metrics: {trainer.logger.log_dir}/metrics.csv")


if __name__ == "__main__":
    main()
