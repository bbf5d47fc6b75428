"""ProcessGroupHcomm: a pure-Python ``torch.distributed.ProcessGroup`` over a :class:`hcomm_cffi.Comm`.

Every operation validates its tensors first (device cpu/npu, contiguous, sizes) and raises a
ValueError naming the operation, the argument and what was expected; then it starts the
collective nonblocking (so ``async_op=True`` overlaps) and returns an :class:`HcommWork`.
Tags of send/recv travel in a header message and are checked at the receiver (messages between
two ranks are matched in order, as in this package's point-to-point; a tag mismatch is an error,
not a reordering).  ``gather`` is an allgather kept on the root; uneven ``all_to_all_single`` and
``scatter`` use point-to-point.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

from ..api.comm import current_world
from ..api import world as world_api
from ..api.comm import Comm
from ..api.errors import CommError, CommTimeoutError
from ..api.requests import Request
from ..enums import dtype_from_torch
from ..types import ReduceOpName
from .profiling import operation
from .progress import alone, serialised
from .work import HcommWork, seconds_of

__all__ = ["ProcessGroupHcomm", "DEVICES"]

DEVICES = ("cpu", "npu")
#: operation labels a process group keeps (_label) before it starts over
LABELS_MAX = 256
_KIND = dist.ReduceOp   # ReduceOp.SUM & co are the RedOpType members themselves (the stub types them there)
#: RedOpType value (as int: hashing and comparing the pybind enum costs twice the conversion) -> the Comm op
_OP_NAMES: Tuple[Tuple[Any, ReduceOpName], ...] = ((_KIND.SUM, "sum"), (_KIND.PRODUCT, "prod"), (_KIND.MIN, "min"),
                                                   (_KIND.MAX, "max"), (_KIND.AVG, "sum"))
_OPS: Dict[int, ReduceOpName] = {int(kind): name for kind, name in _OP_NAMES}
_AVG = int(_KIND.AVG)  # type: ignore[call-overload]   # torch's stub gives RedOpType no __int__; pybind does


def _op_kind(op: Any) -> Any:
    """The RedOpType of a ReduceOp (or RedOpType) value."""
    return getattr(op, "op", op)


def _op_name(op: Any) -> str:
    """The RedOpType name of a ReduceOp (or RedOpType) value, for messages."""
    kind = _op_kind(op)
    return str(getattr(kind, "name", kind)).split(".")[-1]


class ProcessGroupHcomm(dist.ProcessGroup):
    """The ``hcomm`` backend of one process group (world or new_group)."""

    #: what a Backend of torch answers about itself (this group is its own backend, see :meth:`_get_backend`)
    supports_splitting = False
    supports_coalescing = False
    supports_time_estimate = False

    def __init__(self, store: Any, rank: int, size: int, comm: Comm, timeout: Optional[float] = None,
                 devices: Sequence[str] = ("cpu",)) -> None:
        # the 3-argument (store, ...) form is not subclassable in torch 2.13; torch's stub lists only that
        # one, the binding also has this (rank, size) overload
        super().__init__(rank, size)  # type: ignore[call-arg]
        self.comm = comm
        self.timeout = timeout   # the group's timeout (s): a work still pending after it fails
        self._store = store
        self._barriers = 0
        self._group_name = ""
        self._group_desc = ""
        self._labels: Dict[str, str] = {}
        self._devices = [torch.device(d) for d in devices]

    # ------------------------------------------------------------------ identity
    # torch registers no backend with a ProcessGroup subclass: it takes the object its creator returns as the
    # group itself (torch/distributed/distributed_c10d.py:2277-2282), so the C++ properties below would answer
    # [] and "no backend".  gloo's group answers its devices, which DCP (_state_dict_utils.py:548,
    # state_dict_saver.py:302) and _get_pg_default_device (distributed_c10d.py:986) read.
    @property
    def _device_types(self) -> List[torch.device]:
        """The devices this group serves (those the backend was registered for)."""
        return list(self._devices)

    def _get_backend(self, device: Any) -> "ProcessGroupHcomm":  # type: ignore[override]
        """The backend of ``device``: this group itself, for every device it serves.

        Another device raises RuntimeError, as the C++ method does: torch's callers catch that one
        (distributed_c10d.py:2488-2491 asks for cuda and falls back).
        """
        dev = torch.device(device)
        if dev.type not in {d.type for d in self._devices}:
            raise RuntimeError(f"{self._label('_get_backend')}: no backend for device {dev}; this group serves "
                               f"{', '.join(str(d) for d in self._devices)}")
        return self

    def supports_tensor_alloc(self, device: Any) -> bool:
        """False: tensors are torch's own (FSDP2 allocates with torch.empty then, _fsdp_collectives.py:74-78)."""
        return False

    def getBackendName(self) -> str:
        return "hcomm"

    def setGroupName(self, name: str) -> None:
        self._group_name = name
        self._labels.clear()

    def getGroupName(self) -> str:
        return self._group_name

    def setGroupDesc(self, desc: str) -> None:
        self._group_desc = desc

    def getGroupDesc(self) -> str:
        return self._group_desc

    def __repr__(self) -> str:
        return f"<ProcessGroupHcomm rank {self.comm.rank}/{self.comm.size} comm {self.comm.name!r}>"

    # ------------------------------------------------------------------ validation
    def _tensor(self, t: Any, what: str, arg: str) -> torch.Tensor:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{self._label(what)}: {arg} is a {type(t).__name__}; expected a torch.Tensor")
        if t.layout != torch.strided:
            raise ValueError(f"{self._label(what)}: {arg} is a {str(t.layout).replace('torch.', '')} tensor; sparse "
                             "tensors are not supported here (only allreduce SUM of sparse COO tensors is, as on "
                             "gloo; expected a dense, strided tensor: call .to_dense())")
        if not t.is_cpu and t.device.type not in DEVICES:
            raise ValueError(f"{self._label(what)}: {arg} is on device {t.device}; expected a cpu (or npu) tensor")
        if dtype_from_torch(t.dtype) is None:
            raise TypeError(f"{self._label(what)}: {arg} has dtype {t.dtype}; expected one of int8, int16, int32, "
                            "int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32 or float64")
        if not t.is_contiguous():
            raise ValueError(f"{self._label(what)}: {arg} is not contiguous (stride {tuple(t.stride())}, shape "
                             f"{tuple(t.shape)}); expected a contiguous tensor (call .contiguous())")
        return t

    def _one(self, tensors: Sequence[Any], what: str) -> torch.Tensor:
        if len(tensors) != 1:
            raise ValueError(f"{self._label(what)}: got {len(tensors)} tensors; expected exactly one per rank")
        return self._tensor(tensors[0], what, "tensor")

    def _op(self, opts: Any, what: str, t: torch.Tensor) -> Tuple[ReduceOpName, Optional[Callable[[], None]]]:
        """The Comm op of torch's ReduceOp, and for AVG the division of ``t`` to run once the sum arrived."""
        kind = _op_kind(opts.reduceOp)
        code = int(kind)
        op = _OPS.get(code)
        if op is None:
            raise ValueError(f"{self._label(what)}: ReduceOp.{_op_name(kind)} is not supported; expected SUM, AVG, "
                             "PRODUCT, MIN or MAX")
        if code != _AVG:
            return op, None
        if not t.is_floating_point():
            raise ValueError(f"{self._label(what)}: ReduceOp.AVG needs a floating-point tensor, got {t.dtype}")
        size = self.comm.size

        def average() -> None:
            t.div_(size)
        return op, average

    def _size_check(self, what: str, arg: str, got: int, want: int) -> None:
        if got != want:
            raise ValueError(f"{self._label(what)}: {arg} has {got} elements; expected {want}")

    @staticmethod
    def _apart(t: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``t``, or a copy of it when it shares memory with ``out`` (FSDP2 gathers from a slice of the output)."""
        a, b = t.data_ptr(), out.data_ptr()
        if a < b + out.numel() * out.element_size() and b < a + t.numel() * t.element_size():
            return t.clone()
        return t

    def _label(self, what: str) -> str:
        """'rank R of process group G: hcomm <what>' (made once per operation name: every call names its work)."""
        label = self._labels.get(what)
        if label is None:
            if len(self._labels) >= LABELS_MAX:     # p2p and barrier names carry peers, tags and counts
                self._labels.clear()
            label = self._labels[what] = (f"rank {self.comm.rank} of process group "
                                          f"{self._group_name or self.comm.name!r}: hcomm {what}")
        return label

    def _work(self, what: str, reqs: List[Request], result: List[Any], then: Optional[Callable[[], None]] = None,
              on_timeout: Optional[Callable[[float], str]] = None, limit: Optional[float] = None) -> HcommWork:
        return HcommWork(self._label(what), reqs, result, then, on_timeout,
                         limit if limit is not None else self.timeout)

    def _collective(self, what: str, opts: Any, run: Callable[[bool], Any], result: List[Any],
                    then: Optional[Callable[[], None]] = None) -> HcommWork:
        """Run one collective ``run(async_op)``: started, or at once when torch waits right away.

        torch sets ``opts.asyncOp`` False when the caller waits on the work immediately
        (``dist.all_reduce(t)``): the blocking path is then cheaper than a started collective
        plus a wait, but it holds the library lock until the peers took part, so it is taken only
        while no other thread could need the lock meanwhile (:func:`~.progress.alone`).  Its failure
        is raised from the work's ``wait()``, as for a started one.
        """
        if opts is None or getattr(opts, "asyncOp", True) or not alone():
            return self._work(what, [run(True)], result, then)
        try:
            run(False)
            if then is not None:
                then()
        except CommError as exc:
            return HcommWork.finished(self._label(what), result, exc)
        return HcommWork.finished(self._label(what), result)

    def _combine(self, what: str, works: List[HcommWork], result: List[Any]) -> HcommWork:
        """One work for several (the coalesced operations): done when all are, failed when one failed."""
        failed = next((w.exception() for w in works if w.exception() is not None), None)
        if failed is not None:
            return HcommWork.finished(self._label(what), result, failed)
        then = [w.then for w in works if w.then is not None]

        def run_all() -> None:
            for f in then:
                f()
        return self._work(what, [r for w in works for r in w.requests], result, run_all if then else None)

    # ------------------------------------------------------------------ collectives
    # torch's stub overloads allreduce, broadcast, reduce, allgather, reduce_scatter, gather and scatter with
    # (tensor, op/root, timeout) forms that the C++ ProcessGroup's binding accepts for direct calls; torch's
    # dispatch into a Python backend uses only the (tensors, opts) form, the one these overrides take.
    @operation("all_reduce")
    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> HcommWork:  # type: ignore[override]
        opts = opts if opts is not None else dist.AllreduceOptions()
        if len(tensors) == 1 and isinstance(tensors[0], torch.Tensor) and tensors[0].layout == torch.sparse_coo:
            return self._sparse_allreduce(tensors[0], opts)
        t = self._one(tensors, "allreduce")
        op, avg = self._op(opts, "allreduce", t)
        return self._collective("allreduce", opts, lambda a: self.comm.allreduce(t, op, async_op=a), tensors, avg)

    def _sparse_allreduce(self, t: torch.Tensor, opts: Any) -> HcommWork:
        """SUM of sparse COO tensors, as gloo does it: every rank's indices and values gathered, then summed
        (coalesced) locally; ``t`` receives the result.  Three blocking allgathers (sizes, indices, values)."""
        what = "allreduce"
        if _op_kind(opts.reduceOp) != _KIND.SUM:
            raise ValueError(f"{self._label(what)}: sparse tensors support ReduceOp.SUM only, got "
                             f"ReduceOp.{_op_name(opts.reduceOp)}")
        local = t.coalesce()
        idx, vals = local.indices(), local.values().contiguous()
        self._tensor(vals, what, "tensor.values()")
        n = self.comm.size
        meta = torch.tensor([idx.shape[1], local.sparse_dim()] + list(t.shape), dtype=torch.int64)
        metas = torch.empty((n, meta.numel()), dtype=torch.int64)
        try:
            self.comm.allgather(meta, out=metas)
            if not bool((metas[:, 1:] == meta[1:]).all()):
                raise ValueError(f"{self._label(what)}: the ranks' sparse tensors differ in shape or sparse "
                                 f"dimensions: {metas[:, 1:].tolist()}; expected the same on every rank")
            counts = metas[:, 0].tolist()
            most = max(counts)
            pad_idx = torch.zeros((idx.shape[0], most), dtype=torch.int64)
            pad_idx[:, :idx.shape[1]] = idx
            pad_vals = torch.zeros((most,) + tuple(vals.shape[1:]), dtype=vals.dtype)
            pad_vals[:vals.shape[0]] = vals
            all_idx = torch.empty((n,) + tuple(pad_idx.shape), dtype=torch.int64)
            all_vals = torch.empty((n,) + tuple(pad_vals.shape), dtype=vals.dtype)
            self.comm.allgather(pad_idx, out=all_idx)
            self.comm.allgather(pad_vals, out=all_vals)
        except CommError as exc:
            return HcommWork.finished(self._label(what), [t], exc)
        summed = torch.sparse_coo_tensor(torch.cat([all_idx[r][:, :c] for r, c in enumerate(counts)], 1),
                                         torch.cat([all_vals[r][:c] for r, c in enumerate(counts)]),
                                         t.shape).coalesce()
        t.copy_(summed)
        return HcommWork.finished(self._label(what), [t])

    @operation("all_reduce_coalesced")
    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> HcommWork:
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        ts = [self._tensor(t, "allreduce_coalesced", f"tensors[{i}]") for i, t in enumerate(tensors)]
        if len({t.dtype for t in ts}) > 1:
            raise ValueError(f"{self._label('allreduce_coalesced')}: tensors have different dtypes; expected one dtype")
        flat = torch.cat([t.reshape(-1) for t in ts])
        op, avg = self._op(opts, "allreduce_coalesced", flat)

        def unpack() -> None:
            if avg is not None:
                avg()
            offset = 0
            for t in ts:
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()
        return self._collective("allreduce_coalesced", opts, lambda a: self.comm.allreduce(flat, op, async_op=a),
                                tensors, unpack)

    @operation("broadcast")
    def broadcast(self, tensors: List[torch.Tensor], opts: Any = None) -> HcommWork:  # type: ignore[override]
        opts = opts if opts is not None else dist.BroadcastOptions()
        t = self._one(tensors, "broadcast")
        return self._collective("broadcast", opts, lambda a: self.comm.broadcast(t, opts.rootRank, async_op=a), tensors)

    @operation("reduce")
    def reduce(self, tensors: List[torch.Tensor], opts: Any = None) -> HcommWork:  # type: ignore[override]
        opts = opts if opts is not None else dist.ReduceOptions()
        t = self._one(tensors, "reduce")
        op, avg = self._op(opts, "reduce", t)
        avg = avg if self.comm.rank == opts.rootRank else None
        return self._collective("reduce", opts, lambda a: self.comm.reduce(t, opts.rootRank, op, async_op=a), tensors,
                                avg)

    @operation("all_gather", inputs=1)
    def allgather(self, output_lists: List[List[torch.Tensor]], input_list: List[torch.Tensor],  # type: ignore[override]
                  opts: Any = None) -> HcommWork:
        t = self._one(input_list, "allgather")
        outs = output_lists[0] if len(output_lists) == 1 else None
        if outs is None or len(outs) != self.comm.size:
            raise ValueError(f"{self._label('allgather')}: expected one output list of {self.comm.size} tensors")
        for i, o in enumerate(outs):
            self._size_check("allgather", f"output_tensors[{i}]", o.numel(), t.numel())
        stacked = torch.empty((self.comm.size,) + tuple(t.shape), dtype=t.dtype, device=t.device)

        def unpack() -> None:
            for i, o in enumerate(outs):
                o.copy_(stacked[i].view_as(o))
        return self._collective("allgather", opts, lambda a: self.comm.allgather(t, out=stacked, async_op=a),
                                output_lists, unpack)

    @operation("all_gather_coalesced", inputs=1)
    def allgather_coalesced(self, output_lists: List[List[torch.Tensor]], input_list: List[torch.Tensor],
                            opts: Any = None) -> HcommWork:
        """Every rank's ``input_list`` into ``output_lists[rank]``: one allgather of the concatenated inputs."""
        what = "all_gather_coalesced"
        ins = [self._tensor(t, what, f"input_tensor_list[{i}]") for i, t in enumerate(input_list)]
        n = self.comm.size
        if len(output_lists) != n:
            raise ValueError(f"{self._label(what)}: output_tensor_lists has {len(output_lists)} lists; expected {n}, "
                             "one per rank")
        if len({t.dtype for t in ins}) > 1:
            raise ValueError(f"{self._label(what)}: input tensors have different dtypes; expected one dtype")
        for r, outs in enumerate(output_lists):
            if len(outs) != len(ins):
                raise ValueError(f"{self._label(what)}: output_tensor_lists[{r}] has {len(outs)} tensors; expected "
                                 f"{len(ins)}, one per input tensor")
            for i, (o, t) in enumerate(zip(outs, ins)):
                self._tensor(o, what, f"output_tensor_lists[{r}][{i}]")
                self._size_check(what, f"output_tensor_lists[{r}][{i}]", o.numel(), t.numel())
        dtype = ins[0].dtype if ins else torch.float32
        flat = torch.cat([t.reshape(-1) for t in ins]) if ins else torch.empty(0, dtype=dtype)
        stacked = torch.empty((n, flat.numel()), dtype=dtype)

        def unpack() -> None:
            for r, outs in enumerate(output_lists):
                offset = 0
                for o in outs:
                    o.copy_(stacked[r, offset:offset + o.numel()].view_as(o))
                    offset += o.numel()
        return self._collective(what, opts, lambda a: self.comm.allgather(flat, out=stacked, async_op=a), output_lists,
                                unpack)

    @operation("all_gather_into_tensor", inputs=1)
    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> HcommWork:
        what = "all_gather_into_tensor"
        out, t = self._tensor(output, what, "output_tensor"), self._tensor(input, what, "input_tensor")
        self._size_check(what, "output_tensor", out.numel(), self.comm.size * t.numel())
        t = self._apart(t, out)
        return self._collective(what, opts, lambda a: self.comm.allgather(t, out=out, async_op=a), [out])

    _allgather_base = all_gather_single

    @operation("all_gather_into_tensor_coalesced", inputs=1)
    def allgather_into_tensor_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                                        opts: Any = None) -> HcommWork:
        works = [self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return self._combine("all_gather_into_tensor_coalesced", works, outputs)

    # torch's stub names the arguments output_lists/input_list, its binding (like this method) outputs/inputs
    all_gather_single_coalesced = allgather_into_tensor_coalesced  # type: ignore[assignment]

    @operation("reduce_scatter", inputs=1)
    def reduce_scatter(self, output_list: List[torch.Tensor], input_lists: List[List[torch.Tensor]],  # type: ignore[override]
                       opts: Any = None) -> HcommWork:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        out = self._one(output_list, "reduce_scatter")
        ins = input_lists[0] if len(input_lists) == 1 else None
        if ins is None or len(ins) != self.comm.size:
            raise ValueError(f"{self._label('reduce_scatter')}: expected one input list of {self.comm.size} tensors")
        for i, x in enumerate(ins):
            self._tensor(x, "reduce_scatter", f"input_list[{i}]")
            self._size_check("reduce_scatter", f"input_list[{i}]", x.numel(), out.numel())
        flat = torch.cat([x.reshape(-1) for x in ins])
        op, avg = self._op(opts, "reduce_scatter", out)
        return self._collective("reduce_scatter", opts,
                                lambda a: self.comm.reduce_scatter(flat, op, out=out.view(-1), async_op=a), output_list,
                                avg)

    @operation("reduce_scatter_tensor", inputs=1)
    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> HcommWork:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        what = "reduce_scatter_tensor"
        out, t = self._tensor(output, what, "output"), self._tensor(input, what, "input")
        self._size_check(what, "input", t.numel(), self.comm.size * out.numel())
        t = self._apart(t, out)
        op, avg = self._op(opts, what, out)
        return self._collective(what, opts,
                                lambda a: self.comm.reduce_scatter(t.view(-1), op, out=out.view(-1), async_op=a), [out],
                                avg)

    # torch names the arguments outputTensor/inputTensor and passes them by position: this method's names stay
    _reduce_scatter_base = reduce_scatter_single  # type: ignore[assignment]

    @operation("reduce_scatter_tensor_coalesced", inputs=1)
    def reduce_scatter_tensor_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                                        opts: Any = None) -> HcommWork:
        works = [self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return self._combine("reduce_scatter_tensor_coalesced", works, outputs)

    # torch's stub names the arguments outputTensors/inputTensors, its binding (like this method) outputs/inputs
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced  # type: ignore[assignment]

    @operation("all_to_all", inputs=1)
    def alltoall(self, output_list: List[torch.Tensor], input_list: List[torch.Tensor],
                 opts: Any = None) -> HcommWork:
        n = self.comm.size
        if len(output_list) != n or len(input_list) != n:
            raise ValueError(f"{self._label('alltoall')}: expected {n} input and {n} output tensors")
        ins = [self._tensor(x, "alltoall", f"input_tensor_list[{i}]") for i, x in enumerate(input_list)]
        outs = [self._tensor(x, "alltoall", f"output_tensor_list[{i}]") for i, x in enumerate(output_list)]
        flat_in = torch.cat([x.reshape(-1) for x in ins])
        flat_out = torch.empty(sum(o.numel() for o in outs), dtype=flat_in.dtype)
        reqs = self._alltoallv(flat_in, flat_out, [x.numel() for x in ins], [o.numel() for o in outs], "alltoall")

        def unpack() -> None:
            offset = 0
            for o in outs:
                o.copy_(flat_out[offset:offset + o.numel()].view_as(o))
                offset += o.numel()
        return self._work("alltoall", reqs, output_list, unpack)

    @operation("all_to_all", inputs=1)
    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: List[int],
                          input_split_sizes: List[int], opts: Any = None) -> HcommWork:
        what = "all_to_all_single"
        out, t = self._tensor(output, what, "output"), self._tensor(input, what, "input")
        n = self.comm.size
        row_in = t[0].numel() if t.dim() and t.shape[0] else 1
        row_out = out[0].numel() if out.dim() and out.shape[0] else 1
        if not input_split_sizes and not output_split_sizes:
            self._size_check(what, "output", out.numel(), t.numel())
            if t.numel() % n:
                raise ValueError(f"{self._label(what)}: input has {t.numel()} elements, not divisible by {n} ranks")
            return self._collective(what, opts, lambda a: self.comm.alltoall(t.view(-1), out=out.view(-1), async_op=a),
                                    [out])
        sends = [s * row_in for s in input_split_sizes] if input_split_sizes else [t.numel() // n] * n
        recvs = [s * row_out for s in output_split_sizes] if output_split_sizes else [out.numel() // n] * n
        for arg, sizes, total in (("input_split_sizes", sends, t.numel()), ("output_split_sizes", recvs, out.numel())):
            if len(sizes) != n or sum(sizes) != total:
                raise ValueError(f"{self._label(what)}: {arg} covers {sum(sizes)} of {total} elements in {len(sizes)} "
                                 f"parts; expected {n} parts covering the tensor")
        return self._work(what, self._alltoallv(t.view(-1), out.view(-1), sends, recvs, what), [out])

    def _alltoallv(self, flat_in: torch.Tensor, flat_out: torch.Tensor, sends: List[int], recvs: List[int],
                   what: str) -> List[Request]:
        """Uneven alltoall by point-to-point (equal parts: the alltoall collective)."""
        n, me = self.comm.size, self.comm.rank
        if len(set(sends)) == 1 and sends == recvs:
            return [self.comm.ialltoall(flat_in, out=flat_out)]
        so = np.concatenate([[0], np.cumsum(sends)]).tolist()
        ro = np.concatenate([[0], np.cumsum(recvs)]).tolist()
        flat_out[ro[me]:ro[me + 1]].copy_(flat_in[so[me]:so[me + 1]])
        reqs = []
        for k in range(1, n):  # pairwise order: everyone sends right k while receiving from left k
            dst, src = (me + k) % n, (me - k) % n
            if recvs[src]:
                reqs.append(self.comm.irecv(flat_out[ro[src]:ro[src + 1]], src))
            if sends[dst]:
                reqs.append(self.comm.isend(flat_in[so[dst]:so[dst + 1]], dst))
        return reqs

    @operation("gather", inputs=1)
    def gather(self, output_lists: List[List[torch.Tensor]], input_list: List[torch.Tensor],  # type: ignore[override]
               opts: Any = None) -> HcommWork:
        opts = opts if opts is not None else dist.GatherOptions()
        t = self._one(input_list, "gather")
        root = opts.rootRank
        outs = output_lists[0] if self.comm.rank == root else []
        if self.comm.rank == root and len(outs) != self.comm.size:
            raise ValueError(f"{self._label('gather')}: expected {self.comm.size} output tensors on the root")
        stacked = torch.empty((self.comm.size,) + tuple(t.shape), dtype=t.dtype)

        def unpack() -> None:
            for i, o in enumerate(outs):
                o.copy_(stacked[i].view_as(o))
        return self._work("gather", [self.comm.iallgather(t, out=stacked)], output_lists, unpack)

    @operation("scatter", inputs=1)
    def scatter(self, output_list: List[torch.Tensor], input_lists: List[List[torch.Tensor]],  # type: ignore[override]
                opts: Any = None) -> HcommWork:
        opts = opts if opts is not None else dist.ScatterOptions()
        out = self._one(output_list, "scatter")
        root, me = opts.rootRank, self.comm.rank
        if me != root:
            return self._work("scatter", [self.comm.irecv(out, root)], output_list)
        ins = input_lists[0]
        if len(ins) != self.comm.size:
            raise ValueError(f"{self._label('scatter')}: expected {self.comm.size} input tensors on the root")
        for i, x in enumerate(ins):
            self._size_check("scatter", f"scatter_list[{i}]", self._tensor(x, "scatter", f"scatter_list[{i}]").numel(),
                             out.numel())
        out.copy_(ins[me].view_as(out))
        return self._work("scatter", [self.comm.isend(x, r) for r, x in enumerate(ins) if r != me], output_list)

    # ------------------------------------------------------------------ point-to-point
    @operation("send")
    def send(self, tensors: List[torch.Tensor], dst: int, tag: int = 0) -> HcommWork:
        t = self._one(tensors, "send")
        header = torch.tensor([tag, t.numel()], dtype=torch.int64)
        return self._work(f"send to rank {dst} (tag {tag})", [self.comm.isend(header, dst), self.comm.isend(t, dst)],
                          tensors)

    @operation("recv")
    def recv(self, tensors: List[torch.Tensor], src: int, tag: int = 0) -> HcommWork:
        t = self._one(tensors, "recv")
        header = torch.empty(2, dtype=torch.int64)
        what = f"recv from rank {src} (tag {tag})"
        head = self.comm.irecv(header, src)

        def check() -> None:
            if int(header[0]) != tag:
                raise ValueError(f"rank {self.comm.rank}: hcomm {what}: the next message from rank {src} was sent "
                                 f"with tag {int(header[0])}; messages between two ranks are matched in order, "
                                 "so tags must match in order too")
        return self._work(what, [head, self.comm.irecv(t, src)], tensors, check)

    @operation("recvAnySource")
    def recv_anysource(self, tensors: List[torch.Tensor], tag: int = 0) -> HcommWork:
        """Receive from whichever rank's send arrives first; the work's ``_source_rank()`` names it."""
        t = self._one(tensors, "recv")
        header = torch.empty(2, dtype=torch.int64)
        head = self.comm.irecv_any(header)
        body: List[Request] = []

        def step(timeout: Optional[float]) -> bool:   # the header from some rank, then the tensor from that rank
            if not head.poll(timeout):
                return False
            if not body:
                if int(header[0]) != tag:
                    raise ValueError(f"rank {self.comm.rank}: hcomm recv from any source (tag {tag}): the next "
                                     f"message from rank {head.source} was sent with tag {int(header[0])}; tags "
                                     "must match in order")
                body.append(self.comm.irecv(t, head.source))   # type: ignore[arg-type]
            return body[0].poll(timeout)
        work = self._work(f"recv from any source (tag {tag})", [Request("recv from any source", step)], tensors)
        work.source = head
        return work

    # ------------------------------------------------------------------ barrier
    @operation("barrier")
    def barrier(self, opts: Any = None) -> HcommWork:
        seq = self._barriers
        self._barriers += 1
        key = f"hcomm_barrier/{seq}/{{}}".format
        self._store.set(key(self.comm.rank), b"1")
        size = self.comm.size

        def absent() -> List[int]:
            return [r for r in range(size) if not self._store.check([key(r)])]

        def missing(_: float) -> str:
            gone = absent()
            return f"; ranks that never entered it: {gone}" if gone else ""
        limit = seconds_of(opts.timeout) if opts is not None else None   # dist.barrier(timeout=...)
        work = self._work(f"barrier #{seq}", [self.comm.ibarrier()], [], None, missing, limit)
        work.absent = absent
        return work

    @staticmethod
    def _absent(work: HcommWork) -> List[int]:
        """The ranks that had not entered the barrier of ``work``."""
        return work.absent() if work.absent is not None else []

    @serialised
    def shutdown(self) -> None:
        """Release the communicator (the world is finalized with the default group)."""
        if self.comm is current_world():
            world_api.finalize()
        else:
            self.comm.destroy()

    def abort(self) -> None:
        """As shutdown (nothing is in flight that could be cancelled more cleanly)."""
        self.shutdown()

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        """A barrier whose timeout names the ranks that never entered it, as gloo's does.

        ``timeout`` as torch's: None is the process group's timeout, zero expires at once (gloo's reading; a
        Work's ``wait(0)`` instead means no timeout, as c10d's ``kNoTimeout``).
        """
        limit = self.timeout if timeout is None else (timeout.total_seconds() if isinstance(timeout, timedelta)
                                                      else float(timeout))
        work = self.barrier()
        if limit is None:
            work.wait()
            return
        if not work.is_completed() and limit > 0:
            try:
                work.wait(timedelta(seconds=limit))
            except CommTimeoutError:
                pass
        if work.is_success():
            return
        if work.exception() is not None:
            raise work.exception()  # type: ignore[misc]
        gone = self._absent(work)
        shown = gone if wait_all_ranks else gone[:1]
        raise CommTimeoutError(f"{self._label('monitored_barrier')}: " + "; ".join(
            f"Rank {r} failed to pass monitoredBarrier in {limit * 1000:.0f} ms" for r in shown))
