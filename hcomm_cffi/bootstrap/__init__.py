"""Bootstrap: where this process sits in the job, and the root info every rank needs.

``discover(binding)`` returns a :class:`WorldSpec`.  The caller then builds the world communicator:
``binding.comm_init_cluster_info(spec.ranktable, spec.rank)`` when ``spec.ranktable`` is set, else
``binding.comm_init_root_info(spec.size, spec.root_info, spec.rank)``.

Where the numbers come from (first match wins):

1. explicit arguments (``rank``, ``world_size``, ``root_info``); missing ones are taken from the
   environment;
2. ``hcomm run`` (``HCOMM_RUN_ID``, ``HCOMM_RUN_JOB_DIR``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
   ``LOCAL_WORLD_SIZE``);
3. torchrun (``TORCHELASTIC_RUN_ID`` or ``RANK``+``WORLD_SIZE``+``MASTER_ADDR``+``MASTER_PORT``);
4. mpirun (Open MPI ``OMPI_COMM_WORLD_*``, MPICH/Hydra ``PMI_RANK``/``PMI_SIZE``/``MPI_LOCALRANKID``);
5. Slurm's srun (``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``);
6. ``RANK_TABLE_FILE`` with ``RANK_ID`` (or ``RANK``); the size comes from the ranktable;
7. nothing: a one-rank world (``source="explicit"``, as if ``discover(binding, 0, 1)`` was called).

How the root info travels (rank 0 calls ``binding.get_root_info()``; the protocol is in ``rendezvous.py``,
the stores in ``file_store.py``, ``tcp_store.py``, ``torch_store.py``, MPI in ``mpi.py``):

=============== ==================================================================================
source          channel
=============== ==================================================================================
hcomm-run       files in ``$HCOMM_RUN_JOB_DIR`` (the launcher's private directory)
torchrun        ``torch.distributed``'s default store if ``torch.distributed`` is initialised in
                this process; otherwise this package's TCP store, served by rank 0 on
                ``MASTER_ADDR:MASTER_PORT+1`` (``HCOMM_MASTER_ADDR``/``HCOMM_MASTER_PORT`` override).
                torch is never imported for this.  All ranks must be in the same state (all
                before or all after ``init_process_group``).
mpirun          ``mpi4py`` on ``COMM_WORLD`` if importable; otherwise files keyed by the job id
                (``HCOMM_JOB_ID``, else the MPI job id) under ``$HCOMM_RENDEZVOUS_DIR`` or the temp dir
slurm           ``HCOMM_MASTER_ADDR`` set: the TCP store; else files keyed by ``SLURM_JOB_ID.SLURM_STEP_ID``
                (``HCOMM_RENDEZVOUS_DIR`` must be shared when the job spans nodes)
explicit        ``HCOMM_MASTER_ADDR`` set: the TCP store; else files in ``HCOMM_RUN_JOB_DIR`` or keyed
                by ``HCOMM_JOB_ID``; else an error asking for one of them
=============== ==================================================================================

``HCOMM_RENDEZVOUS=file|tcp|torch|mpi`` forces a channel.  Every rank also registers its arrival,
and every rank waits until all have arrived, so a rank that never calls ``discover`` is named in the
:class:`RendezvousTimeout` raised on every other rank after ``timeout`` seconds (default
``HCCL_CONNECT_TIMEOUT``, 120 s).  A ranktable needs no root info (``root_info`` is then None); on the
emulator, ranks of a ranktable job without ``HCOMM_JOB_SECRET`` (torchrun, mpirun, srun; ``hcomm run``
exports one) exchange a random job secret over the same channel instead — rank 0 draws it — and export
it, so two jobs with the same ranktable and job id never join each other's communicators.

Every rank claims its slot of the rendezvous atomically (``rendezvous.py``): two jobs that reach the
same rendezvous at once (same job id or ranktable, same job directory, same master address) both
stop with :class:`JobClash` naming the other's process instead of mixing; a ``HCOMM_JOB_SECRET``
keys the namespace, so jobs with different secrets never meet.  The claims also carry the settings
every rank must share (``agreement.py``): a difference raises :class:`SettingsDisagree` on every rank.
An explicit ``rank``/``world_size`` that contradicts the launcher (without ``root_info``) is refused.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import secrets
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Tuple

from .. import settings
from ..enums import HCCL_ROOT_INFO_BYTES
from .env import (
    ENV_JOB_ID, ENV_JOB_SECRET, ENV_MASTER_ADDR, ENV_MASTER_PORT, ENV_RENDEZVOUS, ENV_RENDEZVOUS_DIR, ENV_RUN_JOB_DIR, SOURCES,
    EnvError, LaunchEnv, detect, int_var, safe_job_id,
)
from .agreement import SettingsDisagree, local_settings
from .errors import BootstrapError, JobClash, RendezvousTimeout, StoreUnavailable, format_ranks
from .file_store import FileStore, held_by_launcher, private_dir, rendezvous_dir, user_dir
from .kvstore import KeyValueStore
from .mpi import mpi_exchange
from .rendezvous import exchange_root_info, next_generation, release_claims
from .tcp_store import TcpStore, TcpStoreServer, serve_tcp_store
from .torch_store import TorchStore

__all__ = ["WorldSpec", "discover", "detect", "BootstrapError", "JobClash", "SettingsDisagree", "RendezvousTimeout", "EnvError", "CHANNELS",
           "StoreUnavailable", "format_ranks", "KeyValueStore", "FileStore", "TcpStore", "TcpStoreServer",
           "TorchStore", "serve_tcp_store", "exchange_root_info", "mpi_exchange", "next_generation", "private_dir",
           "release_claims",
           "user_dir", "rendezvous_dir"]

CHANNELS = settings.RENDEZVOUS_CHANNELS


@dataclass(frozen=True)
class WorldSpec:
    """This process's place in the job and what it needs to create the world communicator.

    ``rank`` in ``[0, size)``; ``local_rank`` in ``[0, local_size)`` (its index among the ranks of its
    host); exactly one of ``root_info`` (4108 bytes, identical on every rank) and ``ranktable`` (a path
    for HcclCommInitClusterInfo) is set; ``source`` is one of ``SOURCES``; ``job_id`` names the job
    (``[A-Za-z0-9_.-]``), identical on every rank.
    """

    rank: int
    size: int
    local_rank: int
    local_size: int
    root_info: Optional[bytes] = field(repr=False)
    ranktable: Optional[str]
    source: str
    job_id: str

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"WorldSpec rank={self.rank} size={self.size}; expected size >= 1 and 0 <= rank < size")
        if self.local_size < 1 or not 0 <= self.local_rank < self.local_size:
            raise ValueError(f"WorldSpec local_rank={self.local_rank} local_size={self.local_size}; "
                             "expected local_size >= 1 and 0 <= local_rank < local_size")
        if (self.root_info is None) == (self.ranktable is None):
            raise ValueError("WorldSpec needs exactly one of root_info and ranktable")
        if self.root_info is not None and len(self.root_info) != HCCL_ROOT_INFO_BYTES:
            raise ValueError(f"WorldSpec root_info is {len(self.root_info)} bytes; expected {HCCL_ROOT_INFO_BYTES}")
        if self.source not in SOURCES:
            raise ValueError(f"WorldSpec source={self.source!r}; expected one of {SOURCES}")


def _check_int(name: str, value: Any, low: int) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}={value!r}; expected an int >= {low}")
    return value


def _timeout(timeout: Optional[float]) -> Tuple[float, str]:
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout={timeout!r}; expected a number of seconds > 0")
        return float(timeout), "the timeout argument"
    current = settings.current()
    return current.connect_timeout_s, current.source("HCCL_CONNECT_TIMEOUT")


def _torch_initialised() -> bool:
    dist = sys.modules.get("torch.distributed")  # never import torch just to find out
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:
        return False


def _choose_channel(source: str) -> str:
    forced = settings.value(ENV_RENDEZVOUS)
    if forced:
        return str(forced)
    if source == "hcomm-run":
        return "file"
    if source == "torchrun":
        return "torch" if _torch_initialised() else "tcp"
    if source == "mpirun":
        return "mpi" if importlib.util.find_spec("mpi4py") is not None else "file"
    if settings.value(ENV_MASTER_ADDR):
        return "tcp"
    return "file"


def _file_store(job_id: str, size: int, local_size: int) -> FileStore:
    job_dir = settings.value(ENV_RUN_JOB_DIR)
    if job_dir:
        return FileStore(job_dir)
    if not job_id:
        raise BootstrapError(
            "no rendezvous for the root info: no job id for a file rendezvous; install mpi4py (under mpirun), "
            f"or export the same unique {ENV_JOB_ID} to every rank, or set {ENV_MASTER_ADDR}/{ENV_MASTER_PORT} "
            "for a TCP store, or pass root_info=")
    parent = settings.value(ENV_RENDEZVOUS_DIR)
    if not parent and local_size < size:
        raise BootstrapError(
            f"the ranks span several hosts (local size {local_size} < world size {size}), so a file rendezvous in "
            f"the local temp dir cannot work; set {ENV_RENDEZVOUS_DIR} to a shared directory, install mpi4py, or "
            f"set {ENV_MASTER_ADDR}/{ENV_MASTER_PORT}")
    return FileStore(rendezvous_dir(job_id, parent, keyed=local_size == size), remove_root=True)


def _tcp_store(rank: int, launch: Optional[LaunchEnv]) -> KeyValueStore:
    addr = (settings.value(ENV_MASTER_ADDR) or (launch.master_addr if launch else None)
            or os.environ.get("MASTER_ADDR", "").strip())
    port = settings.value(ENV_MASTER_PORT)
    if port is None:
        base = launch.master_port if launch and launch.master_port else int_var(os.environ, "MASTER_PORT", 1)
        port = base + 1 if base else None
    if not addr or port is None:
        raise BootstrapError(f"the TCP store needs an address: set {ENV_MASTER_ADDR} and {ENV_MASTER_PORT} "
                             "(or MASTER_ADDR and MASTER_PORT; the store then uses MASTER_PORT+1)")
    if port > 65535:
        raise EnvError(f"TCP store port {port} (from {ENV_MASTER_PORT} or MASTER_PORT+1); expected 1..65535")
    if rank == 0:
        serve_tcp_store(addr, port)
    return TcpStore(addr, port)


def _exchange(make_blob: Callable[[], bytes], rank: int, size: int, local_size: int, source: str, job_id: str,
              launch: Optional[LaunchEnv], timeout: float, timeout_src: str) -> bytes:
    """Rank 0 makes a root-info-sized blob (``make_blob``), the channel of ``source`` carries it to everyone."""
    channel = _choose_channel(source)
    generation = next_generation(f"{channel}:{job_id}")
    if channel == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        if comm.Get_size() != size or comm.Get_rank() != rank:
            raise BootstrapError(f"MPI.COMM_WORLD has rank {comm.Get_rank()} of {comm.Get_size()}, the job rank "
                                 f"{rank} of {size}; the MPI channel needs them equal (set {ENV_RENDEZVOUS}=file)")
        return mpi_exchange(comm, make_blob, timeout, generation, timeout_src)
    store: KeyValueStore
    if channel == "torch":
        if not _torch_initialised():
            raise BootstrapError(f"{ENV_RENDEZVOUS}=torch but torch.distributed is not initialised in this process; "
                                 "call torch.distributed.init_process_group() first")
        from torch.distributed import distributed_c10d

        store = TorchStore(distributed_c10d._get_default_store(), "torch.distributed default store")
    elif channel == "tcp":
        store = _tcp_store(rank, launch)
    else:
        store = _file_store(job_id, size, local_size)
    # a job secret (hcomm run exports one per launch) keys the namespace: jobs with different secrets never
    # meet.  Claims tell concurrent jobs apart, are held and watched after the exchange; unless this is the
    # private directory of a live hcomm run launcher, rank 0 also lets a complete cohort settle before anyone
    # proceeds, so the ranks of a second job sharing the rendezvous stop both jobs first (rendezvous.py)
    secret = settings.value(ENV_JOB_SECRET)
    tag = hashlib.sha256(str(secret).encode()).hexdigest()[:12] + "-" if secret else ""
    namespace = f"{tag}{generation}" if isinstance(store, FileStore) else f"hcomm/{job_id or 'job'}/{tag}{generation}"
    watch = 0.0 if isinstance(store, TorchStore) else timeout     # torch's store is the job's own
    private = bool(secret) and source == "hcomm-run" and held_by_launcher(str(settings.value(ENV_RUN_JOB_DIR)))
    try:
        return exchange_root_info(store, rank, size, make_blob, timeout, namespace, timeout_src, watch=watch,
                                  settle=watch > 0 and not private, agree=local_settings())
    finally:
        if not watch:
            store.close()


def _needs_job_secret(binding: Any) -> bool:
    """The emulator keys ranktable communicators by the job secret; CANN's HCCL never reads it.

    Asked of the library behind ``binding`` (its ``lib.capabilities``, lib/contract.py); a binding without
    one only makes root infos and creates no communicator, so nothing of it reads a secret.
    """
    lib = getattr(binding, "lib", None)
    return lib is not None and bool(lib.capabilities.emulator)


def _random_blob() -> bytes:
    """Rank 0's draw for the job secret (root-info sized, so every channel carries it unchanged)."""
    return secrets.token_bytes(HCCL_ROOT_INFO_BYTES)


def _job_secret(blob: bytes) -> str:
    """The job secret every rank derives from rank 0's draw."""
    return hashlib.sha256(blob).hexdigest()[:32]


def discover(binding: Any, rank: Optional[int] = None, world_size: Optional[int] = None,
             root_info: Optional[bytes] = None, timeout: Optional[float] = None,
             select_device: Optional[Callable[[int], None]] = None) -> WorldSpec:
    """This process's :class:`WorldSpec`, with the root info exchanged among all ranks (see module doc).

    ``binding`` needs ``get_root_info()`` (called on rank 0 only, and only when an exchange is needed); on a
    ranktable job of several ranks its ``lib.capabilities`` (when it has a lib) say whether a job secret is exchanged.
    ``select_device(local_rank)``, when given, is called once this rank's local rank is known and before
    any root info is asked for: CANN's HcclGetRootInfo fails (HCCL_E_RUNTIME) without a device.
    Collective: every rank of the job calls it, the same number of times.  Raises ValueError/EnvError for
    unusable arguments or variables, RendezvousTimeout naming the ranks that never arrived, BootstrapError
    for other rendezvous failures.
    """
    rank = _check_int("rank", rank, 0)
    world_size = _check_int("world_size", world_size, 1)
    if root_info is not None:
        root_info = bytes(root_info)
        if len(root_info) != HCCL_ROOT_INFO_BYTES:
            raise ValueError(f"root_info is {len(root_info)} bytes; expected {HCCL_ROOT_INFO_BYTES} "
                             "(from binding.get_root_info() on rank 0)")
    wait, timeout_src = _timeout(timeout)
    launch = detect()
    explicit = rank is not None or world_size is not None or root_info is not None
    if explicit:
        size = world_size if world_size is not None else (launch.size if launch else None)
        me = rank if rank is not None else (launch.rank if launch else None)
        if size is None or me is None:
            raise ValueError(f"rank={rank!r} world_size={world_size!r}: no launcher in the environment supplies the "
                             "missing one; pass both rank and world_size")
        if me >= size:
            raise ValueError(f"rank={me} is not below world_size={size}; expected 0 <= rank < world_size")
        if launch is not None and root_info is None and (launch.size, launch.rank) != (size, me):
            # the ranks would rendezvous for a world the launcher did not start: say so instead of timing out
            raise ValueError(f"rank={me} world_size={size} contradicts the launcher ({launch.source}), which started "
                             f"this process as rank {launch.rank} of {launch.size}; pass the launcher's numbers (or "
                             "none), or pass root_info= as well to build a world of your own")
        source = "explicit"
        same_world = launch is not None and launch.size == size and launch.rank == me
        local_rank, local_size = (launch.local_rank, launch.local_size) if same_world and launch else (me, size)
        env_job = settings.value(ENV_JOB_ID)
        job_id = launch.job_id if launch else (safe_job_id(env_job) if env_job else "")
        ranktable = None
    elif launch is not None:
        me, size, source = launch.rank, launch.size, launch.source
        local_rank, local_size, job_id, ranktable = launch.local_rank, launch.local_size, launch.job_id, launch.ranktable
    else:
        me, size, local_rank, local_size, source, ranktable = 0, 1, 0, 1, "explicit", None
        job_id = safe_job_id(settings.value(ENV_JOB_ID) or f"single-{os.getpid()}")
    if select_device is not None:
        select_device(local_rank)
    if ranktable is not None:
        if not job_id:
            job_id = safe_job_id(f"ranktable-{os.path.basename(ranktable)}")
        os.environ.setdefault(ENV_JOB_ID, job_id)  # the emulator mixes it into ranktable comm ids
        if size > 1 and not settings.value(ENV_JOB_SECRET) and _needs_job_secret(binding):
            os.environ[ENV_JOB_SECRET] = _job_secret(_exchange(_random_blob, me, size, local_size, source, job_id,
                                                               launch, wait, timeout_src))
        return WorldSpec(me, size, local_rank, local_size, None, ranktable, source, job_id)
    if root_info is None:
        if size == 1:
            root_info = binding.get_root_info()
        else:
            root_info = _exchange(binding.get_root_info, me, size, local_size, source, job_id, launch, wait, timeout_src)
    if not job_id:
        job_id = "rootinfo-" + hashlib.sha1(root_info).hexdigest()[:16]
    return WorldSpec(me, size, local_rank, local_size, root_info, None, source, job_id)
