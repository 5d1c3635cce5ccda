"""Hugging Face ``Trainer`` with stroboscope's callback: steps, epochs and evaluations scoped,
system metrics added to every log the trainer makes, the recording written when training ends::

    python examples/transformers_callback.py --out /tmp/run

Needs ``pip install 'stroboscope[transformers]'`` (which pulls torch). The model is a tiny
``torch.nn.Module`` (no download): any model the Trainer takes works the same way.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from stroboscope.compat.transformers import StroboscopeTrainerCallback, add_to
from transformers import Trainer, TrainingArguments


class Regression(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.net(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


class Data(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(n)
        self.x = torch.randn(n, 16, generator=g)
        self.y = self.x.sum(dim=1, keepdim=True)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": self.x[i], "labels": self.y[i]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="directory for the trainer and run.parquet")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    training = TrainingArguments(
        output_dir=str(out / "trainer"),
        num_train_epochs=2,
        per_device_train_batch_size=16,
        logging_steps=4,
        eval_strategy="epoch",
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=Regression(), args=training, train_dataset=Data(128), eval_dataset=Data(32)
    )
    callback = StroboscopeTrainerCallback(out / "run.parquet", interval=0.005)
    add_to(trainer, callback)  # first, so every later callback's logs hold the system metrics
    trainer.train()
    logged = [h for h in trainer.state.log_history if "system/proc.rss_bytes" in h]
    print(f"{len(logged)} logs carry system metrics; recording: {callback.recorder.written}")


if __name__ == "__main__":
    main()
