"""Which launcher started this process, and what its variables say: the reading half of
:func:`stroboscope._base.identity.detect_identity` (whose module docstring gives the precedence
and the conflicts refused).

:func:`process_fields` reads the rank fields of the innermost launcher that set any of its
variables (:data:`LAUNCHERS`), :func:`job` the job id and :func:`kubernetes` the pod's names.
Each returns ``(value, variable)`` pairs, so the caller can say where every value came from.
Standard library only, and pure: it reads the mapping it is given and, in Kubernetes, the
namespace file named to it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from stroboscope._base.files import read_regular

__all__ = [
    "JOB_VARIABLES",
    "LAUNCHERS",
    "PROCESS_FIELDS",
    "job",
    "kubernetes",
    "process_fields",
    "variables_of",
    "why_unset",
]

PROCESS_FIELDS = ("rank", "world_size", "local_rank", "local_world_size", "node_rank")
"""The fields a launcher's variables give (the int fields of an ``Identity``)."""

# Launchers, innermost first; same-level launchers share a group. Each one's variable for
# each of _KEYS ("-" where it has none); ``num_nodes`` only checks ``node_rank``, it is not kept.
_KEYS = (*PROCESS_FIELDS, "num_nodes")
_TABLE = (
    (
        "torchrun",
        "torchrun",
        "RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE",
    ),
    (
        "openmpi",
        "mpi",
        "OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK "
        "OMPI_COMM_WORLD_LOCAL_SIZE - -",
    ),
    ("mpich", "mpi", "PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS - -"),
    ("slurm", "slurm", "SLURM_PROCID SLURM_NTASKS SLURM_LOCALID - SLURM_NODEID SLURM_NNODES"),
)
LAUNCHERS = tuple(
    (name, group, {k: v for k, v in zip(_KEYS, names.split()) if v != "-"})
    for name, group, names in _TABLE
)
"""Each launcher, innermost first: (name, group, field -> its variable)."""
_ALIASES = {"SLURM_NTASKS": "SLURM_NPROCS", "SLURM_JOB_ID": "SLURM_JOBID"}
_TASKS_PER_NODE = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")


def _text(environ: Mapping[str, str], name: str) -> str | None:
    """A variable's value, stripped; None when unset or empty."""
    value = environ.get(name, "").strip()
    return value or None


def _whole(name: str, text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise ValueError(
            f"{name}={text!r} is not a whole number >= 0 (a rank, size or index is expected)"
        )
    return int(text)


def _tasks_on_node(spec_name: str, spec: str, node: int, node_var: str) -> int:
    """The count of tasks on node ``node`` from Slurm's compressed list (``"4(x2),3"``)."""
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:\(x(\d+)\))?\s*", part)
        if m is None:
            raise ValueError(f"{spec_name}={spec!r} is not Slurm's tasks-per-node list")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    if node >= len(counts):
        raise ValueError(
            f"conflicting Slurm variables: {node_var}={node} but {spec_name}={spec!r} "
            f"lists {len(counts)} node(s)"
        )
    return counts[node]


def _read_launcher(
    environ: Mapping[str, str], fields: Mapping[str, str], skip: frozenset[str]
) -> dict[str, tuple[int, str]]:
    """The fields one launcher sets: field -> (value, variable). Fields in ``skip`` (given as
    arguments) are not read at all."""
    out: dict[str, tuple[int, str]] = {}
    for key, var in fields.items():
        if key in skip:
            continue
        text = _text(environ, var)
        alias = _ALIASES.get(var)
        alias_text = _text(environ, alias) if alias else None
        if alias and alias_text is not None:
            if text is not None and _whole(alias, alias_text) != _whole(var, text):
                raise ValueError(
                    f"conflicting Slurm variables: {var}={text!r} but {alias}={alias_text!r}"
                )
            if text is None:
                text, var = alias_text, alias
        if text is not None:
            out[key] = (_whole(var, text), var)
    return out


def process_fields(
    environ: Mapping[str, str], skip: frozenset[str]
) -> tuple[str | None, dict[str, tuple[int, str]]]:
    """(launcher, fields) of the innermost launcher that set any of its variables."""
    for i, (name, group, fields) in enumerate(LAUNCHERS):
        if not any(_text(environ, var) is not None for var in fields.values()):
            continue
        found = _read_launcher(environ, fields, skip)
        # Same-level launchers (Open MPI and MPICH) must agree where both speak.
        for other, other_group, other_fields in LAUNCHERS[i + 1 :]:
            if other_group != group:
                continue
            theirs = _read_launcher(environ, other_fields, skip)
            for key, (value, var) in theirs.items():
                if key in found and found[key][0] != value:
                    raise ValueError(
                        f"conflicting {name} and {other} variables: "
                        f"{found[key][1]}={found[key][0]} but {var}={value}"
                    )
                found.setdefault(key, (value, var))
        if name == "slurm" and "local_world_size" not in skip:
            node = found.get("node_rank")
            for spec_var in _TASKS_PER_NODE:
                spec = _text(environ, spec_var)
                if spec is not None and node is not None:
                    count = _tasks_on_node(spec_var, spec, node[0], node[1])
                    found["local_world_size"] = (count, spec_var)
                    break
        return name, found
    return None, {}


JOB_VARIABLES = ("STROBOSCOPE_JOB", "SLURM_JOB_ID", "SLURM_JOBID", "TORCHELASTIC_RUN_ID")
"""The variables :func:`job` reads, in its order."""

TORCHRUN_NO_RUN_ID = "none"
"""``TORCHELASTIC_RUN_ID`` as torchrun sets it without ``--rdzv-id``: it names no job."""


def variables_of(field: str) -> tuple[str, ...]:
    """The variables that give ``field`` (``"job"`` or one of :data:`PROCESS_FIELDS`), innermost
    launcher first: what to name when none is set."""
    if field == "job":
        return JOB_VARIABLES
    if field not in PROCESS_FIELDS:
        raise ValueError(
            f"field must be 'job' or one of {', '.join(PROCESS_FIELDS)}, got {field!r}"
        )
    return tuple(fields[field] for _, _, fields in LAUNCHERS if field in fields)


def why_unset(field: str, environ: Mapping[str, str]) -> str:
    """Why ``field`` has no value in ``environ``: the variables that would give it, and one that
    is set but names nothing (torchrun's default run id)."""
    names = ", ".join(variables_of(field))
    if field == "job" and environ.get("TORCHELASTIC_RUN_ID") == TORCHRUN_NO_RUN_ID:
        return (
            f"none of {names} gives it: TORCHELASTIC_RUN_ID is torchrun's default "
            f"{TORCHRUN_NO_RUN_ID!r}, which names no job (give torchrun --rdzv-id, "
            f"or set STROBOSCOPE_JOB)"
        )
    return f"none of the variables that give it is set: {names}"


def job(environ: Mapping[str, str]) -> tuple[str, str] | None:
    text = _text(environ, "STROBOSCOPE_JOB")
    if text is not None:
        return text, "STROBOSCOPE_JOB"
    job, alias = _text(environ, "SLURM_JOB_ID"), _text(environ, "SLURM_JOBID")
    if job is not None and alias is not None and job != alias:
        raise ValueError(
            f"conflicting Slurm variables: SLURM_JOB_ID={job!r} but SLURM_JOBID={alias!r}"
        )
    if job is not None:
        return job, "SLURM_JOB_ID"
    if alias is not None:
        return alias, "SLURM_JOBID"
    run_id = _text(environ, "TORCHELASTIC_RUN_ID")
    if run_id is not None and run_id != TORCHRUN_NO_RUN_ID:
        return run_id, "TORCHELASTIC_RUN_ID"
    return None


def kubernetes(environ: Mapping[str, str], namespace_file: str) -> dict[str, tuple[str, str]]:
    """pod, namespace and container when running in a Kubernetes pod (else empty)."""
    if _text(environ, "KUBERNETES_SERVICE_HOST") is None:
        return {}
    out: dict[str, tuple[str, str]] = {}
    for key, names in (
        ("pod", ("POD_NAME", "HOSTNAME")),
        ("namespace", ("POD_NAMESPACE",)),
        ("container", ("CONTAINER_NAME",)),
    ):
        for name in names:
            text = _text(environ, name)
            if text is not None:
                out[key] = (text, name)
                break
    if "namespace" not in out:
        try:  # a FIFO there is refused, never waited on
            text = read_regular(namespace_file, "namespace file", limit=4096).decode().strip()
        except ValueError:  # absent, not a regular file, too large, not UTF-8
            text = ""
        if text:
            out["namespace"] = (text, namespace_file)
    return out
