"""What `record` refuses or cleans up before it records: an output that is also the spool (or one
of its segments), and a setup that fails after the sampler was built."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from stroboscope import Sampler, recover
from stroboscope.cli import main


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_output_and_spool_through_a_symlinked_directory_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to("d")
    out = tmp_path / "d" / "m.parquet"
    spool = tmp_path / "link" / "m.parquet"
    assert main(["record", "--duration", "0.2", "-o", str(out), "--spool", str(spool)]) == 2
    err = capsys.readouterr().err
    assert "is the output file too" in err and str(spool) in err and str(out) in err
    assert _tree(tmp_path) == ["d", "link"]


def test_output_and_spool_as_relative_paths_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    argv = ["record", "--duration", "0.2", "-o", "d/m.csv", "--spool", "./d/../d/m.csv"]
    assert main(argv) == 2
    assert "is the output file too" in capsys.readouterr().err
    assert _tree(tmp_path) == ["d"]


def test_an_output_named_like_a_segment_of_the_spool_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool = tmp_path / "r.spool"
    out = tmp_path / "r.spool.seg-000001.parquet"
    assert main(["record", "--duration", "0.2", "-o", str(out), "--spool", str(spool)]) == 2
    assert "named like a segment of the spool" in capsys.readouterr().err
    assert _tree(tmp_path) == []


@pytest.mark.parametrize(
    "senders",
    [
        ["bogus"],
        ["csv"],
        ["csv:nokey"],
        ["csv:path=a.csv", "bogus"],
        ["jsonl:path=a.jsonl", "csv:path=b.csv,nosuchoption=1"],
    ],
    ids=lambda s: " ".join(s),
)
def test_a_setup_that_fails_after_the_sampler_leaves_nothing_behind(
    senders: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["record", "--duration", "0.2", "-o", "m.parquet"]
    for spec in senders:
        argv += ["--sender", spec]
    assert main(argv) == 2
    assert "--sender" in capsys.readouterr().err
    assert _tree(tmp_path) == []
    assert main(["record", "--interval", "0.005", "--duration", "0.1", "-o", "m.parquet"]) == 0


def test_a_spool_of_another_run_is_never_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.parquet"
    spool = tmp_path / "m.parquet.spool"
    other = Sampler(0.01, sources=["memory"], spool=spool, capacity=1024, segment_seconds=1)
    other.tick_now(5)
    before = os.stat(spool)
    assert main(["record", "--duration", "0.2", "-o", str(out)]) == 2
    assert f"(pid {os.getpid()})" in capsys.readouterr().err  # in use by this live sampler
    assert os.stat(spool).st_ino == before.st_ino and not out.exists()
    assert len(recover(spool)) == 5
    other.close()


@pytest.mark.parametrize("name", ["s.parquet", "s.parquet.seg-000001.parquet"])
def test_recover_refuses_to_write_over_the_spool_or_its_segments(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool = tmp_path / "s.parquet"  # a spool may have any name
    s = Sampler(0.01, sources=["memory"], spool=spool, capacity=1024, segment_seconds=1)
    s.tick_now(5)
    s.close()
    before = _tree(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    assert main(["recover", str(spool), "-o", str(link / name)]) == 2
    err = capsys.readouterr().err
    assert "is the output file too" in err or "named like a segment of the spool" in err, err
    assert _tree(tmp_path) == sorted([*before, "link"]) and len(recover(spool)) == 5


def test_abandoning_senders_removes_only_the_files_they_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from stroboscope.cli import _publish
    from stroboscope.senders import as_sender

    # A sender that creates its file lazily (at its first publish): when setup is abandoned,
    # a file that another run put at its free path meanwhile is not ours to remove.
    monkeypatch.setattr(_publish, "load_sender", lambda name, **kw: as_sender(lambda e: None))
    parser = argparse.ArgumentParser()
    _publish.add_sender_arguments(parser)
    theirs = tmp_path / "m.jsonl"
    args = parser.parse_args(["--sender", f"jsonl:path={theirs}"])
    publisher = _publish.RecordPublisher.from_args(args, [])
    assert publisher is not None
    theirs.write_text("another run's rows\n")
    publisher.abandon()
    assert theirs.read_text() == "another run's rows\n"


RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def _as_rank(monkeypatch: pytest.MonkeyPatch, rank: int | None, local: int | None = None) -> None:
    """torchrun's variables for ``rank`` of 4 (none at all for None)."""
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    if rank is not None:
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "4")
        monkeypatch.setenv("LOCAL_RANK", str(rank if local is None else local))


def test_an_output_named_per_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o with {rank}/{local_rank}/{host}: each rank of a launcher writes its own file."""
    _as_rank(monkeypatch, 3, local=1)
    out = tmp_path / "m-{rank}-{local_rank}-{host}.parquet"
    assert main(["record", "--duration", "0.2", "-q", "-o", str(out)]) == 0
    import socket

    written = tmp_path / f"m-3-1-{socket.gethostname()}.parquet"
    assert _tree(tmp_path) == [written.name]
    assert recover_rows(written) > 0
    assert "every rank given the same -o" not in capsys.readouterr().err


def recover_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)


@pytest.mark.parametrize(
    ("name", "rank", "words"),
    [
        (
            "m-{rank}.parquet",
            None,
            ["-o", "{rank}", "no rank", "RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)"],
        ),
        (
            "m-{job}.parquet",
            0,
            ["{job}", "no job", "STROBOSCOPE_JOB, SLURM_JOB_ID, SLURM_JOBID, TORCHELASTIC_RUN_ID)"],
        ),
        ("m-{gpu}.parquet", 0, ["-o", "{gpu}", "rank, local_rank, host, job"]),
        ("m-{}.parquet", 0, ["-o", "{}", "rank, local_rank, host, job"]),
        ("m-{rank.parquet", 0, ["-o", "expected '}'", "write a brace as {{"]),
        ("m-{rank!r}.parquet", 0, ["-o", "write a placeholder bare, as {rank} (no conversion"]),
        ("m-{rank:>5}.parquet", 0, ["-o", "write a placeholder bare, as {rank}"]),
    ],
)
def test_an_output_placeholder_that_cannot_be_filled_is_refused(
    name: str,
    rank: int | None,
    words: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _as_rank(monkeypatch, rank)
    for job in ("STROBOSCOPE_JOB", "SLURM_JOB_ID", "SLURM_JOBID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(job, raising=False)
    assert main(["record", "--duration", "0.2", "-o", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err, (word, err)
    assert _tree(tmp_path) == []


def test_a_doubled_brace_is_a_brace_with_or_without_a_placeholder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _as_rank(monkeypatch, 1)
    for name, written in (
        ("n-{{rank}}.parquet", "n-{rank}.parquet"),
        ("{{x}}-{rank}.pq", "{x}-1.pq"),
    ):
        assert main(["record", "-q", "--duration", "0.05", "-o", str(tmp_path / name)]) == 0
        assert (tmp_path / written).exists(), _tree(tmp_path)


def test_torchruns_default_run_id_is_named_as_naming_no_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """torchrun without --rdzv-id sets TORCHELASTIC_RUN_ID=none: set, yet no job. The error
    says so rather than calling every variable unset."""
    _as_rank(monkeypatch, 0)
    for job in ("STROBOSCOPE_JOB", "SLURM_JOB_ID", "SLURM_JOBID"):
        monkeypatch.delenv(job, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    assert main(["record", "--duration", "0.2", "-o", str(tmp_path / "m-{job}.parquet")]) == 2
    err = capsys.readouterr().err
    assert "no job (none of STROBOSCOPE_JOB, SLURM_JOB_ID, SLURM_JOBID, TORCHELASTIC_RUN_ID" in err
    assert "TORCHELASTIC_RUN_ID is torchrun's default 'none', which names no job" in err
    assert "--rdzv-id" in err and "is set:" not in err
    assert _tree(tmp_path) == []


def test_one_output_for_several_ranks_is_warned_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under a launcher every rank runs the same command: one -o FILE for all of them is named
    in a warning with the two ways out (a placeholder, or a dataset)."""
    _as_rank(monkeypatch, 0)
    out = tmp_path / "m.parquet"
    assert main(["record", "--duration", "0.2", "-q", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "rank 0 of 4" in err and "every rank given the same -o" in err
    assert "{rank}" in err and "--dataset ROOT" in err
    assert out.exists()


@pytest.mark.parametrize("command", ["record", "recover"])
def test_the_files_written_with_the_output_are_checked_as_the_output_is(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An output's scope intervals (and a CSV's provenance sidecar) are written, or removed as
    stale, with it: an existing one is refused without --force, a directory always, and
    before anything is recorded (``recover`` refuses an existing output as ``record`` does)."""
    spool = tmp_path / "in.spool"
    s = Sampler(0.01, sources=["memory"], spool=spool, capacity=1024, segment_seconds=1)
    s.tick_now(3)
    s.close()

    def run(out: Path, *more: str) -> int:
        if command == "record":
            return main(["record", "-q", "--duration", "0.05", "-o", str(out), *more])
        return main(["recover", str(spool), "-o", str(out), *more])

    old = tmp_path / "y.scopes.parquet"
    old.write_bytes(b"another run's scopes")
    before = _tree(tmp_path)
    assert run(tmp_path / "y.parquet") == 2
    err = capsys.readouterr().err
    assert f"{str(old)!r}, the scope intervals of -o {str(tmp_path / 'y.parquet')!r}," in err
    assert "already exists; give --force" in err
    (tmp_path / "z.csv.meta.json").write_text("{}")
    assert run(tmp_path / "z.csv") == 2
    assert "the provenance sidecar of -o" in capsys.readouterr().err
    (tmp_path / "d.scopes.parquet").mkdir()
    for more in ([], ["--force"]):
        assert run(tmp_path / "d.parquet", *more) == 2
        err = capsys.readouterr().err
        assert "d.scopes.parquet', the scope intervals of -o" in err
        assert "is a directory; give a file path" in err
    assert _tree(tmp_path) == sorted([*before, "z.csv.meta.json", "d.scopes.parquet"])
    assert old.read_bytes() == b"another run's scopes"
    if command == "recover":
        (tmp_path / "w.parquet").write_bytes(b"precious")
        assert run(tmp_path / "w.parquet") == 2
        err = capsys.readouterr().err
        assert f"-o {str(tmp_path / 'w.parquet')!r} already exists; give --force" in err
        assert (tmp_path / "w.parquet").read_bytes() == b"precious"
    assert run(tmp_path / "y.parquet", "--force") == 0
    assert not old.exists() or old.read_bytes() != b"another run's scopes"  # as --force asks


def test_a_spool_named_like_a_file_written_with_the_output_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Removing the spool at the end would delete the scope intervals or the sidecar."""
    for out, spool, what in (
        ("y.parquet", "y.scopes.parquet", "the scope intervals of the output too"),
        ("x.csv", "x.csv.meta.json", "the provenance sidecar of the output too"),
    ):
        args = ["record", "-q", "--duration", "0.05", "-o", str(tmp_path / out)]
        assert main([*args, "--spool", str(tmp_path / spool)]) == 2
        assert f"--spool {str(tmp_path / spool)!r} is {what}" in capsys.readouterr().err
    assert _tree(tmp_path) == []


def test_the_spool_takes_the_placeholders_the_output_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every rank runs the same command: --spool 'q-{rank}.spool' is each rank's own spool,
    checked by the same rules as -o (an unknown name is refused before anything is made)."""
    _as_rank(monkeypatch, 2)
    spool = tmp_path / "q-{rank}.spool"
    out = tmp_path / "m-{rank}.parquet"
    argv = ["record", "-q", "--duration", "0.05", "-o", str(out), "--spool", str(spool)]
    (tmp_path / "q-2.spool").write_bytes(b"STROBSPL: this rank's stale spool")
    assert main(argv) == 2  # the spool the rank would use is the filled name
    assert f"{str(tmp_path / 'q-2.spool')!r} (or its segments or events) already exists" in (
        capsys.readouterr().err
    )
    (tmp_path / "q-2.spool").unlink()
    assert main(argv) == 0
    assert _tree(tmp_path) == ["m-2.parquet"]  # the spool, q-2.spool, removed once written
    assert main([*argv[:-1], str(tmp_path / "q-{gpu}.spool"), "--force"]) == 2
    assert "--spool " in (err := capsys.readouterr().err) and "names {gpu}" in err
    assert _tree(tmp_path) == ["m-2.parquet"]
