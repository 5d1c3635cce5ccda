"""Bad arguments of the built-in senders and their dispatcher: each refused when the sender is
made (not at the first event, in a worker thread that only logs), through the checks module,
with an exception whose message names the argument, the value and what is accepted; a file
sender refused this way creates no file.

A row is ``(id, call, exception type, pattern)``; ``call`` gets the test's directory.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import pytest
from stroboscope.senders._base import as_sender
from stroboscope.senders._dispatch import Fanout, SenderWorker
from stroboscope.senders._rank import RankLabel
from stroboscope.senders.csv_file import CSVSender
from stroboscope.senders.jsonl_file import JSONLinesSender
from stroboscope.senders.log import LoggingSender
from stroboscope.senders.mlflow import MlflowSender
from stroboscope.senders.parquet_file import ParquetSender
from stroboscope.senders.tensorboard import TensorBoardSender

Call = Callable[[Path], object]


def csv(**kwargs: Any) -> Call:
    return lambda tmp: CSVSender(tmp / "m.csv", **kwargs)


def jsonl(**kwargs: Any) -> Call:
    return lambda tmp: JSONLinesSender(tmp / "m.jsonl", **kwargs)


def parquet(**kwargs: Any) -> Call:
    return lambda tmp: ParquetSender(tmp / "m.parquet", **kwargs)


def tensorboard(**kwargs: Any) -> Call:
    return lambda tmp: TensorBoardSender(tmp / "tb", **kwargs)


def mlflow(**kwargs: Any) -> Call:
    # No run is made: the arguments are refused before MLflow is touched.
    return lambda tmp: MlflowSender(tracking_uri=(tmp / "mlruns").as_uri(), **kwargs)


def log(**kwargs: Any) -> Call:
    return lambda tmp: LoggingSender(**kwargs)


def fanout_close(timeout: object) -> Call:
    def call(tmp: Path) -> object:
        fan = Fanout([print])
        try:
            return fan.close(timeout)  # type: ignore[arg-type]
        finally:
            fan.close()

    return call


def fanout_wait(timeout: object) -> Call:
    def call(tmp: Path) -> object:
        fan = Fanout([print])
        try:
            return fan.wait([0], timeout)  # type: ignore[arg-type]
        finally:
            fan.close()

    return call


BOOL = r"must be True or False, got "
CODECS = r"\('none', 'snappy', 'gzip', 'brotli', 'lz4', 'zstd'\) that this pyarrow has"

ROWS: list[tuple[str, Call, type[Exception], str]] = [
    ("log-precision-negative", log(precision=-1), ValueError,
     r"^precision must be an int \[1, 17\] \(significant digits\), got int -1"),
    ("log-precision-nan", log(precision=math.nan), TypeError,
     r"^precision must be an int \[1, 17\] \(significant digits\), got float nan"),
    ("log-precision-str", log(precision="6"), TypeError, r"^precision must be an int .* str '6'"),
    ("log-level-float", log(level=1.5), TypeError,
     r"^level must be an int >= 0 \(a logging level\) or a level name such as 'INFO', got "
     r"float 1.5"),
    ("log-level-negative", log(level=-5), ValueError, r"^level must be an int >= 0 .* int -5"),
    ("log-logger-int", log(logger=5), TypeError,
     r"^logger must be a logger name \(str\) or a logging.Logger, got int 5"),
    ("csv-flush-no", csv(flush="no"), TypeError, r"^flush " + BOOL + "str 'no'"),
    ("csv-flush-int", csv(flush=1), TypeError, r"^flush " + BOOL + "int 1"),
    ("csv-columns-str", csv(columns="cpu"), TypeError,
     r"^columns must be a sequence of metric names \(str\), not one str; did you mean "
     r"\['cpu'\]\?"),
    ("csv-columns-entry", csv(columns=["cpu", 5]), TypeError,
     r"^columns\[1\] must be a str, got int 5"),
    ("csv-path-bytes", lambda tmp: CSVSender(bytes(tmp / "m.csv")), TypeError,  # type: ignore[arg-type]
     r"^path must be a str path or os.PathLike, got bytes"),
    ("csv-path-no-directory", lambda tmp: CSVSender(tmp / "absent" / "m.csv"), ValueError,
     r"^path '.*m\.csv': directory '.*absent' does not exist"),
    ("csv-path-a-directory", lambda tmp: CSVSender(tmp), ValueError,
     r"^path '.*' is a directory; give a file path"),
    ("jsonl-path-no-directory", lambda tmp: JSONLinesSender(tmp / "absent" / "m.jsonl"),
     ValueError, r"^path '.*m\.jsonl': directory '.*absent' does not exist"),
    ("parquet-path-no-directory", lambda tmp: ParquetSender(tmp / "absent" / "m.parquet"),
     ValueError, r"^path '.*m\.parquet': directory '.*absent' does not exist"),
    ("jsonl-flatten-no", jsonl(flatten="no"), TypeError, r"^flatten " + BOOL + "str 'no'"),
    ("jsonl-flush-none", jsonl(flush=None), TypeError, r"^flush " + BOOL + "NoneType None"),
    ("jsonl-path-empty", lambda tmp: JSONLinesSender(""), ValueError, r"^path is an empty path"),
    ("parquet-rows_per_group-nan", parquet(rows_per_group=math.nan), TypeError,
     r"^rows_per_group must be an int >= 1 \(rows\), got float nan"),
    ("parquet-rows_per_file-0", parquet(rows_per_file=0), ValueError,
     r"^rows_per_file must be an int >= 1 \(rows\), got int 0"),
    ("parquet-rows_per_file-str", parquet(rows_per_file="10"), TypeError,
     r"^rows_per_file must be an int >= 1 \(rows\), got str '10'"),
    ("parquet-compression-unknown", parquet(compression="nope"), ValueError,
     r"^compression must be a Parquet codec " + CODECS + ", got str 'nope'"),
    ("parquet-compression-none", parquet(compression=None), TypeError,
     r"^compression must be a Parquet codec " + CODECS + ", got NoneType None"),
    ("tensorboard-flush_secs-nan", tensorboard(flush_secs=math.nan), ValueError,
     r"^flush_secs must be a positive finite number of seconds, got float nan"),
    ("tensorboard-flush_secs-0", tensorboard(flush_secs=0), ValueError,
     r"^flush_secs must be a positive finite number of seconds, got int 0"),
    ("tensorboard-flush_secs-str", tensorboard(flush_secs="10"), TypeError,
     r"^flush_secs must be a number of seconds \(int or float\), got str '10'"),
    ("tensorboard-prefix-int", tensorboard(prefix=1), TypeError,
     r"^prefix must be a str, got int 1"),
    ("mlflow-prefix-none", mlflow(prefix=None), TypeError, r"^prefix must be a str, got NoneType"),
    ("mlflow-run_name-int", mlflow(run_name=3), TypeError,
     r"^run_name must be a non-empty str or None, got int 3"),
    ("mlflow-run_id-empty", mlflow(run_id=""), ValueError,
     r"^run_id must be a non-empty str or None, got an empty str"),
    ("rank-float", lambda tmp: RankLabel(1.0, None, "CSVSender"), TypeError,  # type: ignore[arg-type]
     r"^CSVSender: rank must be an int >= 0 or None, got float 1.0"),
    ("worker-max_pending-nan", lambda tmp: SenderWorker(as_sender(print), math.nan),  # type: ignore[arg-type]
     TypeError, r"^max_pending must be an int >= 1 \(events\), got float nan"),
    ("fanout-max_pending-0", lambda tmp: Fanout([print], 0), ValueError,
     r"^max_pending must be an int >= 1 \(events\), got int 0"),
    ("fanout-close-nan", fanout_close(math.nan), ValueError,
     r"^timeout must be a finite number of seconds >= 0, or None, got float nan"),
    ("fanout-wait-negative", fanout_wait(-1), ValueError,
     r"^timeout must be a finite number of seconds >= 0, or None, got int -1"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "exc", "pattern"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_bad_sender_argument_is_refused_when_made(
    tmp_path: Path, call: Call, exc: type[Exception], pattern: str
) -> None:
    with pytest.raises(exc, match=pattern):
        call(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no file, no run directory


def test_good_arguments_still_make_senders(tmp_path: Path) -> None:
    # The bounds are inclusive: the values at the edges are accepted.
    for sender in (
        LoggingSender("x", level="debug", precision=1),
        LoggingSender(level=0, precision=17),
        CSVSender(tmp_path / "a.csv", columns=("cpu",), flush=False),
        JSONLinesSender(tmp_path / "a.jsonl", flatten=True, flush=False),
        ParquetSender(
            tmp_path / "a.parquet", rows_per_file=1, rows_per_group=1, compression="none"
        ),
    ):
        sender.publish({"cpu": 1.0}, timestamp=1.0)
        sender.close()
    fan = Fanout([print], max_pending=1)
    assert fan.close(5.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a-00000.parquet",
        "a.csv",
        "a.jsonl",
    ]
