"""The transformers callback (compat/transformers.py) driven by a real ``transformers.Trainer``:
a tiny BERT built from its config (no download), 2 epochs of 4 steps on the CPU, an evaluation
after each epoch. The hooks' order on stand-in trainers, and the hooks' signatures against the
recorded fixture: tests/compat/test_callbacks.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pyarrow.parquet as pq
import pytest
from _binaries import python_module
from stroboscope.sampling._provenance import from_schema

INSTALL = "pip install torch==2.13.0 transformers accelerate"


def test_a_real_trainer_records_scopes_logs_and_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing is fetched: the model is made here
    torch = python_module("torch", install=INSTALL)
    transformers = python_module("transformers", install=INSTALL)
    python_module("accelerate", install=INSTALL)  # the Trainer needs it
    from stroboscope.compat.transformers import StroboscopeTrainerCallback, add_to

    config = transformers.BertConfig(
        vocab_size=32,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=16,
        num_labels=2,
    )
    model = transformers.BertForSequenceClassification(config)
    g = torch.Generator().manual_seed(0)

    def rows(n: int) -> list[dict[str, Any]]:
        ids = torch.randint(0, 32, (n, 8), generator=g)
        return [{"input_ids": i, "labels": int(i.sum()) % 2} for i in ids]

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "trainer"),
        num_train_epochs=2,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        logging_steps=2,
        eval_strategy="epoch",
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=rows(16), eval_dataset=rows(8)
    )
    out = tmp_path / "run.parquet"
    callback = StroboscopeTrainerCallback(out, interval=0.002, sources=["process"])
    add_to(trainer, callback)
    trainer.train()
    assert callback.recorder.written == str(out) and not Path(f"{out}.spool").exists()
    table = pq.read_table(out)
    prov = from_schema(table.schema)
    assert prov is not None and prov["rows"] == table.num_rows > 0
    intervals = cast(Any, callback.recorder.sampler).scope_intervals()
    names = intervals.column("name").to_pylist()
    assert {n: names.count(n) for n in set(names)} == {
        "train_step": 8,
        "train_epoch": 2,
        "validation": 2,
    }
    steps = [r["step"] for r in intervals.to_pylist() if r["name"] == "train_step"]
    assert steps == [str(k) for k in range(8)]
    # Every training log (steps 2, 4, 6, 8) is in log_history; those after which the sampler
    # took rows carry a window of system metrics beside the trainer's own loss.
    history = trainer.state.log_history
    losses = [h for h in history if "loss" in h]
    assert [h["step"] for h in losses] == [2, 4, 6, 8]
    carried = [h for h in history if "system/proc.rss_bytes" in h]
    assert carried and all(h["system/proc.rss_bytes"] > 1 << 20 for h in carried)
