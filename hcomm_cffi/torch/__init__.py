"""``import hcomm_cffi.torch`` registers the ``torch.distributed`` backend ``hcomm``.

Three lines change a gloo script into an hcomm one::

    import hcomm_cffi.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(backend="hcomm")   # was backend="gloo"

Works under ``hcomm run``, torchrun, mpirun and srun (env://, the store torch passes in carries the
root info; the local rank, for the device, comes from the package's bootstrap).  The default group
becomes this package's world communicator (``hcomm_cffi.get_world()``); every ``new_group``, also one
over all ranks, a sub-communicator of its own (torch's groups are independent: see
docs/guide/torch-parallelism.md).  Devices: cpu, and npu when torch_npu is importable (the name ``hccl``
stays torch_npu's).  :func:`get_comm` returns a group's :class:`~hcomm_cffi.Comm` (its
``comm_name`` and ``handle`` are what torch_npu's ``get_hccl_comm_name`` gives).
"""
from __future__ import annotations

import importlib.util
from typing import Any, List, Optional

import torch.distributed as dist

from ..api.comm import current_world
from ..api import world as world_api
from ..api.comm import Comm
from ..binding import get_binding
from ..bootstrap import TorchStore, detect
from ..bootstrap.rendezvous import exchange_root_info
from .process_group import ProcessGroupHcomm
from .progress import caller, serialised
from .work import HcommWork, seconds_of

__all__ = ["BACKEND", "ProcessGroupHcomm", "HcommWork", "get_comm", "devices", "create_backend"]

BACKEND = "hcomm"


def devices() -> List[str]:
    """The device types the backend serves: cpu, plus npu when torch_npu is installed."""
    return ["cpu", "npu"] if importlib.util.find_spec("torch_npu") is not None else ["cpu"]


def _world(store: Any, rank: int, size: int, timeout: Optional[float]) -> Comm:
    """This package's world over the default group: device first, root info through torch's store."""
    found = current_world()
    if found is not None:
        if found.size != size or found.rank != rank:
            raise RuntimeError(f"hcomm backend: hcomm is already initialised as rank {found.rank} of {found.size}, "
                               f"but the default process group is rank {rank} of {size}; call "
                               "hcomm_cffi.finalize() first or use the same world")
        return found
    b = get_binding()
    launch = detect()
    local = launch.local_rank if launch is not None and launch.rank == rank else rank
    world_api.set_device(local % max(1, b.get_device_count()))
    root = exchange_root_info(TorchStore(store, "torch.distributed store"), rank, size, b.get_root_info,
                              timeout or 1800.0, "hcomm/world")
    return world_api.init(rank=rank, world_size=size, root_info=root, exec_timeout=timeout)


@serialised
def _create(opts: Any, backend_options: Any) -> ProcessGroupHcomm:
    """The creator torch calls for every group of backend ``hcomm`` (extended API: we need the global ranks)."""
    caller()   # the thread that makes the groups uses them: it counts from now (progress.alone)
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    timeout = seconds_of(opts.timeout)
    ranks = list(opts.global_ranks_in_group or [])
    if not ranks:   # the default group: torch passes it no ranks (torch/distributed/distributed_c10d.py:2004,2032)
        return ProcessGroupHcomm(store, rank, size, _world(store, rank, size, timeout), timeout, devices())
    world = current_world()
    if world is None:
        if ranks != list(range(len(ranks))):
            raise RuntimeError("hcomm backend: the default process group must use hcomm before new_group(backend="
                               "'hcomm') over a subset of ranks")
        world = _world(store, rank, size, timeout)   # a group over every rank of a non-hcomm default group
    # every other group gets a communicator of its own, also over all ranks: torch's groups are independent
    # (two threads may use two of them at once, destroying one leaves the others)
    comm = Comm(f"pg{opts.group_id}"[:127], ranks=ranks, parent=world, timeout=timeout)
    return ProcessGroupHcomm(store, rank, size, comm, timeout, devices())


def get_comm(group: Any = None) -> Comm:
    """The hcomm communicator behind ``group`` (default: the default group)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupHcomm):
        raise TypeError(f"group {pg!r} does not use the hcomm backend")
    return pg.comm


#: the creator of this backend's groups, public for the emulated npu device's backend name "hccl" (hcomm_cffi/npu)
create_backend = _create

dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=devices())
