"""The process-wide world communicator: init(), finalize(), set_device(), get_world().

``init(rank=, world_size=, root_info=)`` uses explicit arguments when all three are given;
otherwise it asks :func:`hcomm_cffi.bootstrap.discover` (imported lazily) for the launcher's
rank, size and root info (or ranktable).  ``finalize()`` destroys every communicator still alive,
newest first, then the world.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, List, Optional

from .. import excepthook, settings
from ..binding import get_binding
from ..cpus import npu_cpu_affinity
from ..initializers import make_comm_config
from . import live
from .comm import Comm, TopologyArg, get_world
from .errors import CommError

if TYPE_CHECKING:  # pragma: no cover  (bootstrap is imported when init() discovers the launcher)
    from ..bootstrap import WorldSpec

__all__ = ["init", "finalize", "set_device", "get_world", "is_initialized"]

_device: Optional[int] = None
_spec: Optional[WorldSpec] = None  # how the last init() found its rank (None for explicit arguments)


def set_device(device: int) -> None:
    """Bind this process (its current OS thread) to NPU ``device``; call before init() to choose it."""
    global _device
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise ValueError(f"device={device!r}; expected a device index >= 0")
    get_binding().set_device(device)
    _device = device


def pin_to_device(device: int) -> Optional[List[int]]:
    """Pin this thread (it issues the tasks) to the cores NPU ``device`` is affine to, when that is known.

    Known = ``npu-smi info -t topo`` lists the device's CPU affinity; a binding the launcher made
    (``hcomm run --bind-to core|numa``, reported in HCOMM_RUN_BIND) is left alone.  Returns the cores.
    """
    bound = settings.value("HCOMM_RUN_BIND")
    if bound and bound != "none":
        return None
    cores = npu_cpu_affinity(device)
    if cores:
        os.sched_setaffinity(0, cores)
    return cores


def is_initialized() -> bool:
    """True between init() and finalize()."""
    return live.current_world() is not None


def bootstrap_spec() -> Optional[WorldSpec]:
    """How init() found this rank (the launcher's WorldSpec: source, job_id, ...), None if explicit."""
    return _spec


def init(rank: Optional[int] = None, world_size: Optional[int] = None, root_info: Optional[bytes] = None,
         timeout: Optional[float] = None, *, topology: TopologyArg = None, eager_limit: Optional[int] = None,
         exec_timeout: Optional[float] = None, buffer_size_mb: Optional[int] = None) -> Comm:
    """Create the world communicator and return it (see the module docstring).

    ``buffer_size_mb``: the world's HCCL buffer half size in MiB (HcclCommInitRootInfoConfig /
    HcclCommInitClusterInfoConfig ``hcclBufferSize``; default ``HCCL_BUFFSIZE``).
    """
    global _spec
    excepthook.install()           # an uncaught error of the package is printed at the user's line
    if live.current_world() is not None:
        raise CommError(f"hcomm is already initialised (world of {live.get_world().size} ranks); call hcomm.finalize() "
                        "first")
    parent = live.forked_from()
    if parent is not None and (rank is None or world_size is None or root_info is None):
        raise CommError(f"init(): this process (pid {os.getpid()}) was forked from pid {parent} after that process's "
                        "hcomm.init(), so the launcher's variables it inherited name the parent's rank: joining with "
                        "them would take the parent's place in its job; pass rank=, world_size= and root_info= of a "
                        "job of this process's own, or start it with multiprocessing's 'spawn' context")
    config = None if buffer_size_mb is None else make_comm_config(buffer_size_mb=buffer_size_mb)
    b = get_binding()
    b.acl_init()
    ranktable: Optional[str] = None

    def select_device(local_rank: int) -> None:
        """Bind the local rank's device (unless set_device() chose one) before any root info is asked for."""
        if _device is None:
            device = local_rank % max(1, b.get_device_count())
            b.set_device(device)
            if not b.lib.capabilities.emulator:
                pin_to_device(device)

    if rank is not None and world_size is not None and root_info is not None:
        if isinstance(rank, bool) or not isinstance(rank, int) or isinstance(world_size, bool) \
                or not isinstance(world_size, int) or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank={rank!r}, world_size={world_size!r}; expected ints with 0 <= rank < world_size")
        size = world_size
        select_device(rank)
    else:
        from ..bootstrap import discover  # lazy: the launcher layer is optional for explicit init
        spec = discover(b, rank, world_size, root_info, timeout, select_device=select_device)
        _spec = spec
        rank, size, root_info = spec.rank, spec.size, spec.root_info
        ranktable = spec.ranktable
    if ranktable:
        handle = b.comm_init_cluster_info(ranktable, rank, config)
    else:
        if root_info is None:
            raise CommError("bootstrap returned neither a root info nor a ranktable")
        handle = b.comm_init_root_info(size, root_info, rank, config)
    try:
        world = Comm.from_handle(b, handle, "world", topology=topology, eager_limit=eager_limit, timeout=exec_timeout)
    except BaseException:
        b.comm_destroy(handle)
        raise
    live.set_world(world)
    return world


def finalize() -> None:
    """Destroy every live communicator (newest first) and the world; init() may be called again."""
    global _device, _spec
    _spec = None
    errors: List[BaseException] = []
    for comm in reversed(live.registered()):
        try:
            comm.destroy()
        except BaseException as exc:  # keep tearing down the rest
            errors.append(exc)
        live.unregister(comm)
    world = live.set_world(None)
    if world is not None:
        try:
            world.destroy()
        except BaseException as exc:
            errors.append(exc)
    _device = None
    if errors:
        raise errors[0]
