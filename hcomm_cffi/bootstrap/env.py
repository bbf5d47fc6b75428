"""Which launcher started this process, read from the environment alone (nothing is imported or contacted).

Checked in this order; the first that matches wins:

``hcomm-run``
    ``hcomm run`` (this package's launcher) sets ``HCOMM_RUN_ID`` and ``HCOMM_RUN_JOB_DIR`` (a private
    rendezvous directory) besides ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``.
``torchrun``
    ``TORCHELASTIC_RUN_ID`` set, or ``RANK`` + ``WORLD_SIZE`` + ``MASTER_ADDR`` + ``MASTER_PORT`` set
    (an ``env://`` setup by hand counts too); ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE`` optional.
``mpirun``
    Open MPI (``OMPI_COMM_WORLD_RANK``/``SIZE``/``LOCAL_RANK``/``LOCAL_SIZE``) or MPICH/Hydra and Intel MPI
    (``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``).
``slurm``
    Slurm's ``srun`` (``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``; the local size is this node's
    count in ``SLURM_TASKS_PER_NODE``, e.g. ``2(x3),1``, by ``SLURM_NODEID``; job id ``SLURM_JOB_ID`` and
    ``SLURM_STEP_ID``).  Checked after mpirun: ``srun --mpi=pmi2`` also sets ``PMI_RANK``.
``ranktable``
    ``RANK_TABLE_FILE`` with the rank in ``RANK_ID`` (Ascend convention) or ``RANK``; the world size,
    local rank and local size come from the ranktable itself.

A ``RANK_TABLE_FILE`` set under one of the launchers is reported in ``ranktable`` of that launcher's
result (the communicator is then built from the ranktable, not from a root info).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from .. import enums, settings
from ..settings import SettingsError

__all__ = [
    "LaunchEnv", "EnvError", "detect", "int_var", "connect_timeout", "safe_job_id",
    "ENV_RUN_ID", "ENV_RUN_JOB_DIR", "ENV_JOB_ID", "ENV_RENDEZVOUS", "ENV_RENDEZVOUS_DIR",
    "ENV_MASTER_ADDR", "ENV_MASTER_PORT", "DEFAULT_CONNECT_TIMEOUT_S", "SOURCES",
]

ENV_RUN_ID = "HCOMM_RUN_ID"                  # job id of an ``hcomm run`` job
ENV_RUN_JOB_DIR = "HCOMM_RUN_JOB_DIR"        # its private rendezvous directory
ENV_JOB_ID = "HCOMM_JOB_ID"                  # job id for every launcher (the emulator mixes it into comm ids)
ENV_JOB_SECRET = "HCOMM_JOB_SECRET"          # random secret of one job (hcomm run exports it; discover exchanges one)
ENV_RENDEZVOUS = "HCOMM_RENDEZVOUS"          # force a root-info channel: file | tcp | torch | mpi
ENV_RENDEZVOUS_DIR = "HCOMM_RENDEZVOUS_DIR"  # parent of file rendezvous directories outside hcomm run
ENV_MASTER_ADDR = "HCOMM_MASTER_ADDR"        # host of the TCP store (rank 0's host)
ENV_MASTER_PORT = "HCOMM_MASTER_PORT"        # port of the TCP store

DEFAULT_CONNECT_TIMEOUT_S = float(enums.DEFAULT_CONNECT_TIMEOUT_S)
SOURCES = ("explicit", "hcomm-run", "torchrun", "mpirun", "slurm", "ranktable")

_JOB_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


#: An environment variable that is set but unusable (the settings module's error: one text for every variable).
EnvError = SettingsError


@dataclass(frozen=True)
class LaunchEnv:
    """What the environment says about this process's place in the job.

    ``rank``/``size``/``local_rank``/``local_size`` are the launcher's numbers; ``job_id`` is safe for
    file names (``[A-Za-z0-9_.-]``).  ``master_addr``/``master_port`` are the launcher's rendezvous
    address when it has one (torchrun), ``job_dir`` the ``hcomm run`` rendezvous directory, ``ranktable``
    the ``RANK_TABLE_FILE`` path when set.
    """

    source: str
    rank: int
    size: int
    local_rank: int
    local_size: int
    job_id: str
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    job_dir: Optional[str] = None
    ranktable: Optional[str] = None


def int_var(env: Mapping[str, str], name: str, low: int = 0, default: Optional[int] = None) -> Optional[int]:
    """``env[name]`` as an int >= ``low``; ``default`` when unset or empty; EnvError naming the variable otherwise."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    return settings.parse_int(name, raw.strip(), low)


def connect_timeout(env: Optional[Mapping[str, str]] = None) -> float:
    """HCCL_CONNECT_TIMEOUT in seconds (default 120).  Values under 120 are accepted, as by the emulator."""
    return float(settings.value("HCCL_CONNECT_TIMEOUT", env))


def safe_job_id(raw: str) -> str:
    """``raw`` with every run of characters outside ``[A-Za-z0-9_.-]`` replaced by '-' (at most 96 chars)."""
    return _JOB_ID_UNSAFE.sub("-", raw).strip("-")[:96] or "job"


def _check_rank(source: str, rank_var: str, rank: int, size_var: str, size: int) -> None:
    if size < 1:
        raise EnvError(f"{source}: {size_var}={size}; expected at least 1")
    if rank >= size:
        raise EnvError(f"{source}: {rank_var}={rank} is not below {size_var}={size}; expected 0 <= rank < size")


def _required(env: Mapping[str, str], name: str, source: str, low: int = 0) -> int:
    value = int_var(env, name, low)
    if value is None:
        raise EnvError(f"{source}: environment variable {name} is not set; the launcher should have set it")
    return value


def _job_id(env: Mapping[str, str], fallback: str) -> str:
    return safe_job_id((settings.value(ENV_JOB_ID, env) or "") or fallback)


def _ranktable(env: Mapping[str, str]) -> Optional[str]:
    path = env.get("RANK_TABLE_FILE", "").strip()
    return path or None


def _torch_style_ranks(env: Mapping[str, str], src: str) -> Tuple[int, int, int, int]:
    """RANK and WORLD_SIZE (required), LOCAL_RANK and LOCAL_WORLD_SIZE (default: the global ones), checked."""
    rank = _required(env, "RANK", src)
    size = _required(env, "WORLD_SIZE", src, 1)
    _check_rank(src, "RANK", rank, "WORLD_SIZE", size)
    local_rank = int_var(env, "LOCAL_RANK", 0, rank)
    local_size = int_var(env, "LOCAL_WORLD_SIZE", 1, size)
    assert local_rank is not None and local_size is not None
    return rank, size, local_rank, local_size


def _hcomm_run(env: Mapping[str, str]) -> Optional[LaunchEnv]:
    run_id = settings.value(ENV_RUN_ID, env)
    job_dir = settings.value(ENV_RUN_JOB_DIR, env)
    if not run_id or not job_dir:
        return None
    src = "hcomm-run"
    rank, size, local_rank, local_size = _torch_style_ranks(env, src)
    ranktable = _ranktable(env)
    if ranktable is not None:  # validated as on the plain ranktable path, and it must match the launch
        from ..plan.ranktable import load_ranktable

        topo_size = load_ranktable(ranktable).n_ranks
        if topo_size != size:
            raise EnvError(f"{src}: RANK_TABLE_FILE={ranktable!r} lists {topo_size} ranks but WORLD_SIZE={size}; "
                           "expected the same number")
    return LaunchEnv(src, rank, size, local_rank, local_size, _job_id(env, run_id),
                     job_dir=job_dir, ranktable=ranktable)


def _torchrun(env: Mapping[str, str]) -> Optional[LaunchEnv]:
    run_id = env.get("TORCHELASTIC_RUN_ID", "").strip()
    manual = all(env.get(k, "").strip() for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))
    if not run_id and not manual:
        return None
    src = "torchrun"
    rank, size, local_rank, local_size = _torch_style_ranks(env, src)
    addr = env.get("MASTER_ADDR", "").strip() or None
    port = int_var(env, "MASTER_PORT", 1)
    if port is not None and port > 65535:
        raise EnvError(f"environment variable MASTER_PORT={port}; expected a TCP port 1..65535")
    # torchrun's default run id is the literal "none": then the master address identifies the job
    fallback = f"torchrun-{run_id}" if run_id and run_id != "none" else f"torchrun-{addr}-{port}"
    return LaunchEnv(src, rank, size, local_rank, local_size, _job_id(env, fallback),
                     master_addr=addr, master_port=port, ranktable=_ranktable(env))


def _mpi_job_id(env: Mapping[str, str]) -> str:
    for name in ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMI_KVSNAME",
                 "PMI_ID", "I_MPI_JOB_ID"):
        value = env.get(name, "").strip()
        if value:
            return f"mpi-{value}"
    return ""


def _mpirun(env: Mapping[str, str]) -> Optional[LaunchEnv]:
    if env.get("OMPI_COMM_WORLD_RANK", "").strip():
        src = "mpirun"
        rank = _required(env, "OMPI_COMM_WORLD_RANK", src)
        size = _required(env, "OMPI_COMM_WORLD_SIZE", src, 1)
        _check_rank(src, "OMPI_COMM_WORLD_RANK", rank, "OMPI_COMM_WORLD_SIZE", size)
        local_rank = int_var(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, rank)
        local_size = int_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, size)
    elif env.get("PMI_RANK", "").strip():
        src = "mpirun"
        rank = _required(env, "PMI_RANK", src)
        size = _required(env, "PMI_SIZE", src, 1)
        _check_rank(src, "PMI_RANK", rank, "PMI_SIZE", size)
        local_rank = int_var(env, "MPI_LOCALRANKID", 0, rank)
        local_size = int_var(env, "MPI_LOCALNRANKS", 1, size)
    else:
        return None
    assert local_rank is not None and local_size is not None
    # an empty job id means "unknown": the file rendezvous then needs HCOMM_JOB_ID (see file_store.py)
    job = (settings.value(ENV_JOB_ID, env) or "") or _mpi_job_id(env)
    return LaunchEnv(src, rank, size, local_rank, local_size, safe_job_id(job) if job else "",
                     ranktable=_ranktable(env))


def _slurm_local_size(env: Mapping[str, str], size: int) -> int:
    """Tasks on this node from SLURM_TASKS_PER_NODE (``2(x3),1``: 2 on nodes 0-2, 1 on node 3), else the size."""
    spec = env.get("SLURM_TASKS_PER_NODE", "").strip()
    node = int_var(env, "SLURM_NODEID", 0, 0)
    assert node is not None
    counts = []
    for part in filter(None, spec.split(",")):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None:
            raise EnvError(f"environment variable SLURM_TASKS_PER_NODE={spec!r}; expected Slurm's form such as "
                           "'2(x3),1'")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    if not counts:
        return size
    if node >= len(counts):
        raise EnvError(f"environment variable SLURM_NODEID={node} but SLURM_TASKS_PER_NODE={spec!r} lists "
                       f"{len(counts)} nodes; expected a node index below {len(counts)}")
    return counts[node]


def _slurm(env: Mapping[str, str]) -> Optional[LaunchEnv]:
    if not env.get("SLURM_PROCID", "").strip() or not env.get("SLURM_NTASKS", "").strip():
        return None
    src = "slurm"
    rank = _required(env, "SLURM_PROCID", src)
    size = _required(env, "SLURM_NTASKS", src, 1)
    _check_rank(src, "SLURM_PROCID", rank, "SLURM_NTASKS", size)
    local_rank = int_var(env, "SLURM_LOCALID", 0, rank)
    assert local_rank is not None
    local_size = _slurm_local_size(env, size)
    step = env.get("SLURM_STEP_ID", "").strip()
    job = env.get("SLURM_JOB_ID", "").strip()
    fallback = f"slurm-{job}.{step}" if job else ""
    found = settings.value(ENV_JOB_ID, env) or fallback
    return LaunchEnv(src, rank, size, local_rank, local_size, safe_job_id(found) if found else "",
                     ranktable=_ranktable(env))


def _from_ranktable(env: Mapping[str, str]) -> Optional[LaunchEnv]:
    path = _ranktable(env)
    if path is None:
        return None
    src = "ranktable"
    rank_var = "RANK_ID" if env.get("RANK_ID", "").strip() else "RANK"
    rank = int_var(env, rank_var, 0)
    if rank is None:
        raise EnvError(f"RANK_TABLE_FILE={path!r} is set but neither RANK_ID nor RANK is; "
                       "expected this process's rank_id in one of them")
    from ..plan.ranktable import load_ranktable  # only when a ranktable is actually used

    topo = load_ranktable(path)
    _check_rank(src, rank_var, rank, f"the rank count of {path}", topo.n_ranks)
    server = next(s for s in topo.servers if rank in s)
    fallback = f"ranktable-{os.path.basename(path)}"
    return LaunchEnv(src, rank, topo.n_ranks, server.index(rank), len(server), _job_id(env, fallback),
                     ranktable=path)


def detect(environ: Optional[Mapping[str, str]] = None) -> Optional[LaunchEnv]:
    """The launcher described by ``environ`` (default ``os.environ``), or None for a plain process."""
    env = os.environ if environ is None else environ
    for probe in (_hcomm_run, _torchrun, _mpirun, _slurm, _from_ranktable):
        found = probe(env)
        if found is not None:
            return found
    return None
