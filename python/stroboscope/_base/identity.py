"""Who this process is in a distributed job: host, ranks, node, job id, launcher, pod.

:func:`detect_identity` reads the variables that launchers set for the processes they start and
returns an :class:`Identity`. Standard library only, and pure: it reads the mapping it is given
(default ``os.environ``), the host name and, in Kubernetes, the service-account namespace file.

Precedence
----------
1. **Explicit arguments** win over every variable, field by field.
2. **Process fields** (``rank``, ``world_size``, ``local_rank``, ``local_world_size``,
   ``node_rank``) come from *one* launcher: the innermost one that set any of its variables,
   tried in this order:

   ========== ============================================================================
   torchrun   ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``
              (torchrun, ``torch.distributed`` env://, and launchers that copy it)
   openmpi    ``OMPI_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK``, ``_LOCAL_SIZE``
   mpich      ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS`` (Hydra,
              Intel MPI)
   slurm      ``SLURM_PROCID``, ``SLURM_NTASKS`` (``SLURM_NPROCS``), ``SLURM_LOCALID``,
              ``SLURM_NODEID``; local world size from ``SLURM_STEP_TASKS_PER_NODE`` (else
              ``SLURM_TASKS_PER_NODE``) at this node's index
   ========== ============================================================================

   Outer launchers are not read for these fields, not even for one the inner launcher leaves
   unset: their world is another one. ``srun torchrun`` starts one torchrun per node, so
   ``SLURM_PROCID`` is the node's task index and ``SLURM_LOCALID`` is 0 in every process
   torchrun starts, while ``RANK`` and ``LOCAL_RANK`` are the process's own; ``mpirun`` inside
   an ``sbatch`` script leaves the batch step's ``SLURM_*`` in every rank's environment.
   Open MPI's ``OMPI_COMM_WORLD_NODE_RANK`` is *not* a node index (it is a local rank counted
   across all jobs on the node), so Open MPI and MPICH give no ``node_rank``.
3. **Job** (``job``): ``STROBOSCOPE_JOB``, then ``SLURM_JOB_ID`` (``SLURM_JOBID``), then
   ``TORCHELASTIC_RUN_ID`` unless it is torchrun's default ``"none"``. Here the outermost name
   wins: the scheduler's job id is what ``sacct`` and the cluster's other exporters know.
4. **Host**: ``host=``, else :func:`socket.gethostname` (a pod's name in Kubernetes).
5. **Kubernetes** (``KUBERNETES_SERVICE_HOST`` set): ``pod`` from ``POD_NAME``, else
   ``HOSTNAME``; ``namespace`` from ``POD_NAMESPACE``, else the service-account namespace file;
   ``container`` from ``CONTAINER_NAME`` (set these through the downward API). ``launcher`` is
   ``"kubernetes"`` only when no launcher above set ranks.

Conflicts (:class:`ValueError` naming the variables and values)
---------------------------------------------------------------
- a variable of the chosen launcher that is not a whole number ``>= 0`` (empty values count as
  unset; job ids are names and taken as they are);
- two launchers of the same level that disagree (Open MPI's and MPICH's rank variables both
  set, with different values), or a variable and its alias (``SLURM_NTASKS`` and
  ``SLURM_NPROCS``, ``SLURM_JOB_ID`` and ``SLURM_JOBID``);
- ``RANK`` without ``WORLD_SIZE`` or the reverse (``torch.distributed``'s env:// needs both),
  unless the missing one is given as an argument;
- ``world_size`` or ``local_world_size`` of 0; ``rank >= world_size``;
  ``local_rank >= local_world_size``; ``local_world_size > world_size``; a node index at or
  beyond the launcher's node count (``GROUP_WORLD_SIZE``, ``SLURM_NNODES``).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stroboscope._base import identity_launchers as _launchers
from stroboscope._base.checks import check_int, check_str

NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
"""Where Kubernetes mounts the pod's namespace (its service-account token volume)."""

_INT_FIELDS = _launchers.PROCESS_FIELDS
_STR_FIELDS = ("job", "launcher", "pod", "namespace", "container")
ARGUMENT = "argument"
"""The source recorded for a field given as an argument of :func:`detect_identity`."""


@dataclass(frozen=True)
class Identity:
    """Who a process is: host, ranks, node, job, launcher and Kubernetes pod (None: unknown).

    ``sources`` says where each known field came from: a variable name (``"RANK"``),
    ``"argument"``, ``"socket.gethostname()"`` or the namespace file's path.
    """

    host: str
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    node_rank: int | None = None
    job: str | None = None
    launcher: str | None = None
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The rules detect_identity applies to arguments, for an Identity made by hand: a
        # rank -3 would be written as a partition every reader refuses.
        check_str("host", self.host, empty=False)
        for name in (*_INT_FIELDS, *_STR_FIELDS):
            if getattr(self, name) is not None:
                _check_argument(name, getattr(self, name), int if name in _INT_FIELDS else str)
        _check_ranges(
            {k: (getattr(self, k), ARGUMENT) for k in _INT_FIELDS if getattr(self, k) is not None}
        )
        # Read-only, so a frozen Identity cannot be changed through its sources either.
        object.__setattr__(self, "sources", types.MappingProxyType(dict(self.sources)))

    def labels(self) -> dict[str, str]:
        """Metric labels, the known ones only, as strings: ``job``, ``hostname``, ``rank``,
        ``local_rank``, ``pod``, ``namespace``, ``container``. (dcgm-exporter names the host
        ``Hostname`` and node_exporter has no host label: see docs/prometheus.md for the
        joins.)"""
        pairs = (
            ("job", self.job),
            ("hostname", self.host),
            ("rank", self.rank),
            ("local_rank", self.local_rank),
            ("pod", self.pod),
            ("namespace", self.namespace),
            ("container", self.container),
        )
        return {k: str(v) for k, v in pairs if v is not None}

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-able values (``sources`` as a plain dict)."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["sources"] = dict(self.sources)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Identity:
        """The :class:`Identity` that :meth:`to_dict` gave (unknown keys ignored; ``host`` is
        required)."""
        if not isinstance(data.get("host"), str):
            raise ValueError(f"identity dict needs a 'host' string, got {data.get('host')!r}")
        names = {f.name for f in dataclasses.fields(cls)} - {"sources"}
        known = {k: data[k] for k in names if k in data}
        return cls(**known, sources=dict(data.get("sources") or {}))


def _check_argument(name: str, value: object, kind: type) -> None:
    """A field given by the caller (not None): an int >= 0, or a non-empty str."""
    if kind is int:
        check_int(name, value, 0, also="None")
    else:
        check_str(name, value, empty=False, also="None")


def _say(key: str, values: Mapping[str, tuple[int, str]]) -> str:
    value, var = values[key]
    return f"{key}={value} (argument)" if var == ARGUMENT else f"{var}={value}"


def _check_ranges(values: Mapping[str, tuple[int, str]]) -> None:
    """The cross-field rules of the module docstring's conflicts."""
    for key in ("world_size", "local_world_size", "num_nodes"):
        if key in values and values[key][0] == 0:
            raise ValueError(f"invalid rank variables: {_say(key, values)} (must be >= 1)")
    pairs = (
        ("rank", "world_size", ">="),
        ("local_rank", "local_world_size", ">="),
        ("node_rank", "num_nodes", ">="),
        ("local_world_size", "world_size", ">"),
    )
    for low, high, op in pairs:
        if low in values and high in values:
            a, b = values[low][0], values[high][0]
            if (a >= b) if op == ">=" else (a > b):
                raise ValueError(
                    f"conflicting rank variables: {_say(low, values)} {op} {_say(high, values)}"
                )


def detect_identity(
    environ: Mapping[str, str] | None = None,
    *,
    rank: int | None = None,
    local_rank: int | None = None,
    world_size: int | None = None,
    local_world_size: int | None = None,
    node_rank: int | None = None,
    job: str | None = None,
    host: str | None = None,
    namespace_file: str | None = None,
) -> Identity:
    """This process's :class:`Identity`, from ``environ`` (default ``os.environ``).

    Parameters
    ----------
    environ : mapping of str to str, optional
        The environment to read (another process's, a test's). Default: ``os.environ``.
    rank, local_rank, world_size, local_world_size, node_rank : int, optional
        Given values win over every variable (each ``>= 0``).
    job, host : str, optional
        The job id and host name to use instead of the variables and the host's name.
    namespace_file : str, optional
        Where to read the Kubernetes namespace when ``POD_NAMESPACE`` is unset (default
        :data:`NAMESPACE_FILE`).

    Raises
    ------
    ValueError
        On a conflict (see the module docstring), naming the variables and their values.
    TypeError
        On an argument of the wrong type.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    given: dict[str, tuple[int, str]] = {}
    for key, value in zip(_INT_FIELDS, (rank, world_size, local_rank, local_world_size, node_rank)):
        if value is not None:
            _check_argument(key, value, int)
            given[key] = (value, ARGUMENT)
    for key, text in (("job", job), ("host", host)):
        if text is not None:
            _check_argument(key, text, str)
    launcher, found = _launchers.process_fields(env, frozenset(given))
    if launcher == "torchrun":
        for have, need in (("rank", "world_size"), ("world_size", "rank")):
            if have in found and need not in found and need not in given:
                raise ValueError(
                    f"incomplete torch.distributed variables: {_say(have, found)} is set but "
                    f"{_launchers.LAUNCHERS[0][2][need]} is not (env:// needs both; set it or pass "
                    f"{need}=)"
                )
    values = {**found, **given}
    _check_ranges(values)
    kube = _launchers.kubernetes(env, NAMESPACE_FILE if namespace_file is None else namespace_file)
    if launcher is None and kube:
        launcher = "kubernetes"
    job_found = (job, ARGUMENT) if job is not None else _launchers.job(env)
    sources = {k: var for k, (_, var) in values.items() if k in _INT_FIELDS}
    sources["host"] = ARGUMENT if host is not None else "socket.gethostname()"
    sources.update({k: var for k, (_, var) in kube.items()})
    if job_found is not None:
        sources["job"] = job_found[1]
    ints = {k: v for k, (v, _) in values.items() if k in _INT_FIELDS}
    return Identity(
        host=host if host is not None else socket.gethostname(),
        job=None if job_found is None else job_found[0],
        launcher=launcher,
        pod=kube["pod"][0] if "pod" in kube else None,
        namespace=kube["namespace"][0] if "namespace" in kube else None,
        container=kube["container"][0] if "container" in kube else None,
        sources=sources,
        **ints,
    )
