"""A plain PyTorch training loop on the CPU, recorded with a ``Sampler`` and scopes.

Each epoch, training step (forward, backward, optimizer) and validation is a scope; the sampler
records CPU, memory and the process's own figures at 500 Hz on its C++ thread. At the end it
prints the per-scope summary (calls, durations, the metrics sampled while each ran), writes the
recording with its provenance to ``run.parquet`` and, when the report command is installed,
``report.html``::

    python examples/torch_training_loop.py --out /tmp/run
    stroboscope info /tmp/run/run.parquet      # where the recording comes from

Needs ``torch`` (the CPU wheel is enough) and ``pandas`` for the summary.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import stroboscope
import torch


def make_data(n: int = 512, features: int = 32) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    y = x @ torch.randn(features, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="directory for run.parquet (and report.html)")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    train = torch.utils.data.DataLoader(make_data(8192), batch_size=32, shuffle=True)
    val = torch.utils.data.DataLoader(make_data(128), batch_size=64)

    with stroboscope.Sampler(interval=0.002) as sampler:
        for epoch in range(args.epochs):
            with stroboscope.labels(epoch=epoch), stroboscope.annotate("epoch"):
                model.train()
                for x, y in train:
                    with stroboscope.annotate("train_step"):
                        with stroboscope.annotate("forward"):
                            loss = torch.nn.functional.mse_loss(model(x), y)
                        with stroboscope.annotate("backward"):
                            optimizer.zero_grad()
                            loss.backward()
                        with stroboscope.annotate("optimizer"):
                            optimizer.step()
                with stroboscope.annotate("validation"), torch.no_grad():
                    model.eval()
                    val_loss = sum(float(torch.nn.functional.mse_loss(model(x), y)) for x, y in val)
            print(f"epoch {epoch}: train loss {loss.item():.4f}, validation loss {val_loss:.4f}")

    print(sampler.summary().to_string())
    parquet = out / "run.parquet"
    sampler.snapshot().write_parquet(parquet)  # the rows and their provenance
    print(f"wrote {parquet}")
    if importlib.util.find_spec("stroboscope.cli.report") is not None:
        from stroboscope.cli import main as stroboscope_cli

        stroboscope_cli(["report", str(parquet), "-o", str(out / "report.html")])
    else:
        print(f"see it with: stroboscope report {parquet} -o report.html")


if __name__ == "__main__":
    main()
