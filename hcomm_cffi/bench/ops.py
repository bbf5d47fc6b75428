"""The one place where ``hcomm bench`` executes operations: an adapter over an execution path.

:func:`open_ops` returns an :class:`Ops` for the requested algorithm:

* ``native`` -> :class:`BindingOps`: the vendor collectives (``HcclAllReduce``, ``HcclBatchSendRecv``, ...)
  through :class:`hcomm_cffi.binding.Binding` on device buffers and a stream, exactly what hccl_test does;
  works on CANN and on the emulator;
* ``ring`` / ``mesh`` / ``tree`` / ``hierarchical`` / ``auto`` -> :class:`CommOps`: the package's own
  algorithms through the Comm API (``hcomm_cffi.api``: ``init()`` returns the world ``Comm``, whose
  synchronous ``allreduce(x, op, out=, algorithm=)`` & co. run them).  When that API is not in the
  build, :class:`OpsUnavailable` says so.

The runner only sees :class:`Ops` (``prepare`` / ``barrier`` / ``allgather_int64``) and :class:`Prepared`
(``launch`` / ``wait`` / ``output``), so switching paths touches nothing else.
"""
from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod
from typing import Any, Dict, Optional, Sequence

import numpy as np

from .._ffi import ffi
from ..enums import DataType, MemcpyKind, ReduceOp, SendRecvType, numpy_dtype
from .sizes import Layout

__all__ = ["Ops", "Prepared", "BindingOps", "CommOps", "OpsUnavailable", "open_ops", "ALGORITHMS",
           "comm_api_available", "hccl_environment", "versions"]

#: ``--algo`` values; ``native`` is the vendor collective, the others need the Comm API.
ALGORITHMS = ("native", "auto", "ring", "mesh", "tree", "hierarchical")


class OpsUnavailable(RuntimeError):
    """The requested path cannot run here (e.g. the Comm API is not installed)."""


class Prepared(ABC):
    """One operation bound to its buffers: launch it repeatedly, wait, read the output."""

    @abstractmethod
    def launch(self) -> None:
        """Start (enqueue) one execution."""

    @abstractmethod
    def wait(self) -> None:
        """Block until every launched execution has finished on this rank."""

    @abstractmethod
    def output(self) -> Optional[np.ndarray]:
        """This rank's output as a host array (None when the operation has none here)."""

    @abstractmethod
    def close(self) -> None:
        """Release the buffers."""


class Ops(ABC):
    """An execution path bound to the world communicator of this job."""

    rank: int
    size: int
    #: what executes the operations, e.g. ``binding/native``
    path: str
    algorithm: str

    @abstractmethod
    def prepare(self, lay: Layout, dtype: DataType, op: ReduceOp, root: int, host_input: np.ndarray,
                average: bool = False) -> Prepared:
        """Buffers for ``lay`` with ``host_input`` in the send buffer (zeros in the receive buffer); ``average``:
        the reduction is ``op`` (sum) divided by the number of ranks (``-o avg``)."""

    @abstractmethod
    def barrier(self) -> None:
        """Every rank reaches this point before any leaves it."""

    @abstractmethod
    def allgather_int64(self, values: Sequence[int]) -> np.ndarray:
        """Every rank's ``values`` (same length on all ranks), as a (size, len) int64 array."""

    @abstractmethod
    def describe(self) -> Dict[str, Any]:
        """Backend, library and versions, for the report's environment section."""

    @abstractmethod
    def close(self) -> None:
        """Destroy the communicator and release the device."""


# ---------------------------------------------------------------------------------------------- binding
class _BindingPrepared(Prepared):
    def __init__(self, ops: "BindingOps", lay: Layout, dtype: DataType, op: ReduceOp, root: int,
                 host_input: np.ndarray) -> None:
        self.ops, self.lay, self.dtype, self.op, self.root = ops, lay, dtype, op, root
        b = ops.binding
        esz = lay.itemsize
        self.send = b.malloc(max(1, lay.send_count * esz)) if lay.send_count else None
        self.recv = b.malloc(max(1, lay.recv_count * esz)) if lay.recv_count else None
        if self.recv is not None:
            b.memset(self.recv, lay.recv_count * esz, 0, lay.recv_count * esz)
        if self.send is not None:
            data = np.ascontiguousarray(host_input)
            if data.nbytes != lay.send_count * esz:
                raise ValueError(f"host input is {data.nbytes} bytes; the send buffer is {lay.send_count * esz}")
            b.memcpy(self.send, data.nbytes, ffi.from_buffer(data), data.nbytes, MemcpyKind.HOST_TO_DEVICE)
        self.items = None
        if lay.op == "sendrecv":
            n, r = ops.size, ops.rank
            self.items = ffi.new("HcclSendRecvItem[2]")
            for item, kind, buf, peer in ((self.items[0], SendRecvType.SEND, self.send, (r + 1) % n),
                                          (self.items[1], SendRecvType.RECV, self.recv, (r - 1) % n)):
                item.sendRecvType = int(kind)
                item.buf = buf
                item.count = lay.count
                item.dataType = int(dtype)
                item.remoteRank = peer

    def launch(self) -> None:
        b, lay, s = self.ops.binding, self.lay, self.ops.stream
        comm, dt, op = self.ops.comm, int(self.dtype), int(self.op)
        name = lay.op
        if name == "allreduce":
            b.all_reduce(self.send, self.recv, lay.count, dt, op, comm, s)
        elif name == "reduce":
            b.reduce(self.send, self.recv, lay.count, dt, op, self.root, comm, s)
        elif name == "broadcast":
            b.broadcast(self.send, lay.count, dt, self.root, comm, s)
        elif name == "allgather":
            b.all_gather(self.send, self.recv, lay.block, dt, comm, s)
        elif name == "reduce_scatter":
            b.reduce_scatter(self.send, self.recv, lay.block, dt, op, comm, s)
        elif name == "alltoall":
            b.all_to_all(self.send, lay.block, dt, self.recv, lay.block, dt, comm, s)
        elif name == "sendrecv":
            b.batch_send_recv(self.items, 2, comm, s)
        elif name == "barrier":
            b.barrier(comm, s)
        else:
            raise ValueError(f"op={name!r} is not supported by the binding path")

    def wait(self) -> None:
        self.ops.binding.synchronize_stream(self.ops.stream)

    def output(self) -> Optional[np.ndarray]:
        buf, count = (self.send, self.lay.send_count) if self.lay.op == "broadcast" else (self.recv, self.lay.recv_count)
        if buf is None or not count:
            return None
        out = np.empty(count, numpy_dtype(self.dtype))
        self.ops.binding.memcpy(ffi.from_buffer(out), out.nbytes, buf, out.nbytes, MemcpyKind.DEVICE_TO_HOST)
        return out

    def close(self) -> None:
        for buf in (self.send, self.recv):
            if buf is not None:
                self.ops.binding.free(buf)
        self.send = self.recv = None


class BindingOps(Ops):
    """The vendor collectives through the binding (``--algo native``)."""

    path = "binding/native"
    algorithm = "native"

    def __init__(self) -> None:
        from ..binding import get_binding
        from ..bootstrap import discover

        self.binding = b = get_binding()
        b.acl_init()

        def select_device(local_rank: int) -> None:  # before the root info: CANN needs a device for it
            self.device = local_rank % max(1, b.get_device_count())
            b.set_device(self.device)

        spec = discover(b, select_device=select_device)
        self.spec = spec
        self.rank, self.size = spec.rank, spec.size
        if spec.ranktable is not None:
            self.comm = b.comm_init_cluster_info(spec.ranktable, spec.rank)
        else:
            assert spec.root_info is not None
            self.comm = b.comm_init_root_info(spec.size, spec.root_info, spec.rank)
        self.stream = b.create_stream()
        self._stats: Dict[int, Any] = {}

    def prepare(self, lay: Layout, dtype: DataType, op: ReduceOp, root: int, host_input: np.ndarray,
                average: bool = False) -> Prepared:
        if average:
            raise ValueError("-o avg: HCCL's reduce ops are sum, prod, max and min; expected a Comm API --algo")
        return _BindingPrepared(self, lay, dtype, op, root, host_input)

    def barrier(self) -> None:
        self.binding.barrier(self.comm, self.stream)
        self.binding.synchronize_stream(self.stream)

    def allgather_int64(self, values: Sequence[int]) -> np.ndarray:
        k = len(values)
        mine = np.asarray(values, np.int64)
        out = np.empty(k * self.size, np.int64)
        b = self.binding
        bufs = self._stats.get(k)
        if bufs is None:
            bufs = self._stats[k] = (b.malloc(mine.nbytes), b.malloc(out.nbytes))
        send, recv = bufs
        b.memcpy(send, mine.nbytes, ffi.from_buffer(mine), mine.nbytes, MemcpyKind.HOST_TO_DEVICE)
        b.all_gather(send, recv, k, int(DataType.INT64), self.comm, self.stream)
        b.synchronize_stream(self.stream)
        b.memcpy(ffi.from_buffer(out), out.nbytes, recv, out.nbytes, MemcpyKind.DEVICE_TO_HOST)
        return out.reshape(self.size, k)

    def describe(self) -> Dict[str, Any]:
        lib = type(self.binding.lib).__name__
        return {"path": self.path, "library": lib, "launcher": self.spec.source, "job_id": self.spec.job_id,
                "soc": self.binding.get_soc_name()}

    def close(self) -> None:
        b = self.binding
        for send, recv in self._stats.values():
            b.free(send)
            b.free(recv)
        self._stats.clear()
        b.destroy_stream(self.stream)
        b.comm_destroy(self.comm)
        b.reset_device(self.device)


# ---------------------------------------------------------------------------------------------- Comm API
def comm_api_available() -> bool:
    """Whether the Comm API (``hcomm_cffi.api``) can be imported in this build."""
    try:
        importlib.import_module("hcomm_cffi.api")
    except ImportError:
        return False
    return True


class _CommPrepared(Prepared):
    """NumPy arrays from ``hcomm.empty`` (device memory on the emulator, as the binding path's ``aclrtMalloc``); the
    Comm API's collectives are synchronous, so :meth:`wait` has nothing to do."""

    def __init__(self, ops: "CommOps", lay: Layout, dtype: DataType, op: ReduceOp, root: int,
                 host_input: np.ndarray, average: bool = False) -> None:
        self.ops, self.lay, self.root = ops, lay, root
        self.op = "avg" if average else op.name.lower()
        self.send = self.recv = None
        if lay.send_count:
            self.send = ops.api.empty(lay.send_count, host_input.dtype)
            self.send[:] = host_input
        if lay.recv_count:
            self.recv = ops.api.zeros(lay.recv_count, numpy_dtype(dtype))
        self.algorithm = ops.algorithm

    def launch(self) -> None:
        c, name, algo = self.ops.world, self.lay.op, self.algorithm
        if name == "allreduce":
            c.allreduce(self.send, self.op, out=self.recv, algorithm=algo)
        elif name == "reduce":
            c.reduce(self.send, self.root, self.op, out=self.recv if self.ops.rank == self.root else None,
                     algorithm=algo)
        elif name == "broadcast":
            c.broadcast(self.send, self.root, algorithm=algo)
        elif name == "allgather":
            c.allgather(self.send, out=self.recv, algorithm=algo)
        elif name == "reduce_scatter":
            c.reduce_scatter(self.send, self.op, out=self.recv, algorithm=algo)
        elif name == "alltoall":
            c.alltoall(self.send, out=self.recv, algorithm=algo)
        elif name == "sendrecv":
            n, r = self.ops.size, self.ops.rank
            reqs = [c.isend(self.send, (r + 1) % n), c.irecv(self.recv, (r - 1) % n)]
            for req in reqs:
                req.wait()
        elif name == "barrier":
            c.barrier(algorithm=algo)
        else:
            raise ValueError(f"op={name!r} is not supported by the Comm API path")

    def wait(self) -> None:
        return None

    def output(self) -> Optional[np.ndarray]:
        out = self.send if self.lay.op == "broadcast" else self.recv
        return None if out is None else np.array(out, copy=True)

    def close(self) -> None:
        self.send = self.recv = None


class CommOps(Ops):
    """The package's algorithms through the Comm API (``--algo auto|ring|mesh|tree|hierarchical`` or a user's)."""

    path = "comm-api"

    def __init__(self, algorithm: str) -> None:
        if not comm_api_available():
            raise OpsUnavailable(f"--algo {algorithm} runs this package's own algorithms through the Comm API "
                                 "(hcomm_cffi.api), which is not installed in this build; use --algo native")
        self.api = importlib.import_module("hcomm_cffi.api")
        self.algorithm = algorithm
        self.world = self.api.init()
        self.rank, self.size = int(self.world.get_rank()), int(self.world.get_size())

    def prepare(self, lay: Layout, dtype: DataType, op: ReduceOp, root: int, host_input: np.ndarray,
                average: bool = False) -> Prepared:
        return _CommPrepared(self, lay, dtype, op, root, host_input, average)

    def barrier(self) -> None:
        self.world.barrier()

    def allgather_int64(self, values: Sequence[int]) -> np.ndarray:
        mine = np.asarray(values, np.int64)
        out = np.zeros(mine.size * self.size, np.int64)
        self.world.allgather(mine, out=out)
        return out.reshape(self.size, mine.size)

    def describe(self) -> Dict[str, Any]:
        from ..binding import get_binding

        return {"path": self.path, "library": type(get_binding().lib).__name__}

    def close(self) -> None:
        self.api.finalize()


def open_ops(algorithm: str) -> Ops:
    """The path for ``--algo``: see the module doc.  Collective: every rank calls it."""
    if algorithm not in ALGORITHMS:
        from ..algorithms import registry
        registry.resolve(algorithm)   # a user algorithm: ValueError names the alternatives
    if algorithm == "native":
        return BindingOps()
    return CommOps(algorithm)


def hccl_environment() -> Dict[str, str]:
    """The HCCL_* / HCOMM_* / ASCEND_* variables of this process (for the report)."""
    keep = ("HCCL_", "HCOMM_", "ASCEND_")
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(keep)}


def versions() -> Dict[str, Optional[str]]:
    """Versions of this package, Python, NumPy and cffi."""
    import platform

    import cffi

    try:
        from importlib.metadata import version

        pkg: Optional[str] = version("hcomm_cffi")
    except Exception:
        pkg = None
    return {"hcomm_cffi": pkg, "python": platform.python_version(), "numpy": np.__version__, "cffi": cffi.__version__}


