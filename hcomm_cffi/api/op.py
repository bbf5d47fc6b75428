"""The one normaliser: every public call of a Comm becomes one operation (:class:`Call`) here, validated once.

Collectives in every mode (:func:`collective`; :func:`algorithm_call`), lane send/recv (:func:`lane_call`) and
stream-ordered send/recv (:func:`stream_call`).  Scalars are checked on every call; a repeated blocking
collective gets its fast key (:func:`key_of`, beside the checks of :func:`as_buffer` it mirrors), and only a
call the engine has no bound form of has its buffers validated in full (:func:`validate`).  :class:`CommCache`
is the communicator's one cache of bound calls, each map with a named bound.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, cast

import numpy as np

from .._ffi import ffi
from ..algorithms import registry
from ..algorithms.interface import Algorithm, AlgorithmArg, CollectiveCall
from ..enums import (ARRAY_DTYPE_NAMES, DataType, ReduceOp, dtype_from_torch, dtype_of_array, numpy_dtype,
                     parse_reduce_op, torch_dtype_names)
from ..types import BufferLike, SupportsDLPack
from .buffers import NO_STAGING, Buffer, Staging
from .launch_order import Record
from .state import CommState
from .streams import stream_handle

__all__ = ["Call", "LaunchBatch", "LibraryCall", "BoundCall", "CommCache", "collective", "validate", "held",
           "algorithm_call", "lane_call", "stream_call", "reduce_op", "OPS", "as_buffer", "key_of", "buffer_view",
           "is_torch", "CHOICES_MAX", "RESOURCES_MAX", "SCHEDULES_MAX", "ENTRIES_MAX", "FAST_MAX"]

#: call signatures whose algorithm choice (and description) is kept
CHOICES_MAX = 4096
#: resource sets kept per stream (each names acquired threads and channels)
RESOURCES_MAX = 4096
#: recorded schedules kept per stream (algorithms/replay.py)
SCHEDULES_MAX = 4096
#: calls kept bound to their buffers (emulator: prepared task lists), across every stream
ENTRIES_MAX = 256
#: blocking call keys kept (key_of), each naming one of the bound calls above
FAST_MAX = 1024


class Call:
    """One operation as the caller made it, then as the engine resolved, bound, recorded and launched it; the fields a
    call may leave unset default at class level (no per-call cost for them)."""

    # a collective as :func:`collective` left it: the caller's objects, until :func:`validate` checks them
    x: Any = None
    out: Any = None
    x_written = False                # the call writes its result into ``x``
    method = ""                      # the public method, as its errors name it ("allreduce_init", ...)
    unchecked = False                # its buffers are still ``x``/``out``: the full path validates them first
    send: Optional[Buffer] = None
    recv: Optional[Buffer] = None
    count = 0
    dtype = DataType.INT8
    op: Optional[ReduceOp] = None
    root = 0
    nbytes = 0
    recv_count: Optional[int] = None
    result: Any = None               # what a blocking call returns (and Request.wait())
    fast_key: Optional[Tuple[Any, ...]] = None  # its key in the fast-call map (key_of), when it has one
    # resolved by Engine._prepare (engine.py)
    alg: Algorithm
    what = ""                        # the description errors carry
    in_place = False
    staging: Staging = NO_STAGING
    collective: CollectiveCall       # the call with the pointers the engines use
    # a stream-ordered send/recv: the library's HcclSend/HcclRecv (the binding's function) and the peer
    direct: Optional[Callable[..., Any]] = None
    peer = -1
    announces = True                 # launched collectives are announced (api/launch_order.py); send/recv are not
    # on its way through the engine (Engine._launch): what it launches, what records it, what completes it
    entry: Optional["BoundCall"] = None  # the kept BoundCall it launches (the fast path, a persistent request)
    bound: Optional["LaunchBatch"] = None
    graph: Any = None                # the ACL graph capturing its stream
    record: Record
    fixed: Optional[bytes] = None
    name: Optional[str] = None       # its name in the trace (default: the record's operation)
    seq = 0
    slot = -1                        # its flight-recorder slot (-1: none)
    pending: Any = None              # the Pending that completes a started call
    launched = False                 # its batch was launched: cut short from here on, its work is queued
    # a send/recv on a point-to-point lane: its messages, its operation in the flight record ("send", "recv",
    # "send_multi", "recv_multi") and what binds it (the lane's tasks; it lists the buffers to declare)
    items: Sequence[Buffer] = ()
    message = ""
    post: Optional[Callable[["Call", List[Buffer]], "LaunchBatch"]] = None
    moves = False                    # its binding moved state peers see (a lane's numbers): cut short, it breaks
    persistent = False               # a persistent request's: its ``entry`` was bound at the init, in ``generation``
    generation = -1

    def __init__(self, coll: str, algorithm: AlgorithmArg, async_op: bool = False, stream: Any = None) -> None:
        self.coll = coll
        self.algorithm = algorithm            # as the caller spelled it ("auto", a name, an Algorithm)
        self.async_op = async_op
        self.stream = stream
        self.blocking = not async_op and stream is None   # neither ``async_op`` nor ``stream=``: run and wait

    def data(self, send: Optional[Buffer], recv: Optional[Buffer], count: int, nbytes: int) -> "Call":
        """Set the buffers, the element count the library takes and the bytes that choose the algorithm."""
        self.send, self.recv, self.count, self.nbytes = send, recv, count, nbytes
        self.dtype = send.dtype if send is not None else DataType.INT8
        return self


class LaunchBatch(NamedTuple):
    """One launchable batch of a call: its tasks (the signature handshake first, when it has one) and the handshake."""

    batch: Any                  # launch() runs it: a TaskBatch or the backend's prepared batch
    exchange: Any               # the handshake to compare after completion (backends without host tasks), or None


class LibraryCall(NamedTuple):
    """A launchable direct library call (a stream-ordered HcclSend/HcclRecv): ``launch()`` makes it."""

    launch: Callable[[], Any]


class BoundCall(NamedTuple):
    """A call bound to its buffers: one batch per parity of the signature handshake (one alone without a handshake),
    and what observe records of it.  The full path, the fast path and persistent requests all launch these."""

    algorithm: str              # the chosen algorithm's name
    what: str                   # the description errors carry
    bound: Tuple[LaunchBatch, ...]    # indexed by the handshake's parity; a single batch when the call has no handshake
    record: Record              # its flight record fields
    fixed: bytes                # the same, encoded once for the flight recorder (observe.fixed_of)


class CommCache:
    """The communicator's one cache of bound calls, with named bounds: the algorithm choices, the bound calls by
    (schedule, buffers, scratch), and the blocking calls' keys (key_of) to them; :meth:`invalidate`
    drops whatever may name memory or resources that are gone.

    ``generation`` counts the invalidations: a persistent request (api/persistent.py) holds a BoundCall
    outside these maps and binds again when the generation it was bound in has passed.  (The per-stream
    resources and recorded schedules stay with their stream, api/streams.py: they bind threads to it.)
    """

    __slots__ = ("generation", "choices", "entries", "fast")

    def __init__(self) -> None:
        self.generation = 0
        self.choices: Dict[Tuple[Any, ...], Tuple[Algorithm, str]] = {}   # (spec, coll, bytes, dtype, op, root, device) -> (alg, what)
        self.entries: Dict[Tuple[Any, ...], BoundCall] = {}  # (schedule, send, recv, scratch) -> the call bound there
        self.fast: Dict[Key, BoundCall] = {}             # blocking call keys (key_of) -> their BoundCall

    def invalidate(self) -> None:
        """Bound batches may name memory or resources that are gone: drop them and start a new generation."""
        self.generation += 1
        self.entries.clear()
        self.fast.clear()

    def keep(self, key: Tuple[Any, ...], entry: BoundCall) -> None:
        """Keep a bound call (the map starts over, as a new generation, when full)."""
        if len(self.entries) >= ENTRIES_MAX:
            self.invalidate()
        self.entries[key] = entry

    def keep_fast(self, key: Key, entry: BoundCall) -> None:
        """Keep ``entry`` for the blocking call ``key`` (one the lookup hashed), with plain pointers for its views (they
        hash and compare equal, and keep no array alive); zero-size buffers are not kept (no meaningful address)."""
        if not key[X_AT + 1] or (key[OUT_AT] is not None and not key[OUT_AT + 1]):
            return
        stored = key[:X_AT] + (unowned(key[X_AT]),) + key[X_AT + 1:OUT_AT] + (unowned(key[OUT_AT]),) + key[OUT_AT + 1:]
        if len(self.fast) >= FAST_MAX:
            self.fast.clear()
        self.fast[stored] = entry

    def choose(self, key: Tuple[Any, ...], choice: Tuple[Algorithm, str]) -> None:
        """Keep an algorithm choice (the map starts over when full: choices name no resources)."""
        if len(self.choices) >= CHOICES_MAX:
            self.choices.clear()
        self.choices[key] = choice

    def clear(self) -> None:
        """Forget everything (the communicator is destroyed)."""
        self.invalidate()
        self.choices.clear()


# ------------------------------------------------------------------ the fast key, beside the checks it mirrors
# A repeated blocking call is looked up by its key: the collective, its *validated* op, algorithm and root,
# and each buffer's address, size and dtype, read in a way that makes the checks as_buffer makes of a buffer
# of that kind (a NumPy array through ``ffi.from_buffer``: C-contiguous, and writable when the call writes
# it; a CPU torch tensor through ``is_contiguous``).  An entry is stored only after the full path accepted a
# call of the same key, so a hit is a call the full path accepts; whatever the key cannot describe gets no
# key and takes the full path, which validates it and raises what it raises.
Key = Tuple[Any, ...]
_from_buffer = ffi.from_buffer
_ndarray = np.ndarray
_NOT_A_BUFFER = (ValueError, TypeError, BufferError)
#: positions of the two buffer addresses in a key (see key_of), and the key's tail without ``out``
X_AT, OUT_AT = 2, 5
_NO_OUT = (None, 0, None)


_tensors: Tuple[type, ...] = ()     # torch.Tensor and nn.Parameter, once torch is imported


def _tensor_types() -> Tuple[type, ...]:
    """torch.Tensor and nn.Parameter when torch is imported (never imports it: a user of tensors did)."""
    global _tensors
    if not _tensors:
        torch = sys.modules.get("torch")
        nn = getattr(torch, "nn", None)
        if torch is not None and nn is not None and hasattr(nn, "Parameter"):   # fully imported
            _tensors = (torch.Tensor, nn.Parameter)
    return _tensors


def buffer_view(buf: Any, written: bool) -> Optional[Tuple[Any, int, Any]]:
    """(address, bytes, dtype) of a NumPy array or a CPU torch tensor that as_buffer would accept, else None."""
    kind = type(buf)
    if kind is _ndarray:
        try:
            view = _from_buffer("char[]", buf, written)   # refuses non-C-contiguous and (written) read-only arrays
        except _NOT_A_BUFFER:
            return None
        return view, len(view), buf.dtype
    if kind in _tensor_types():
        try:
            if not buf.is_cpu or not buf.is_contiguous():   # NPU tensors: the full path synchronises their stream
                return None
            return buf.data_ptr(), buf.nbytes, buf.dtype
        except RuntimeError:        # sparse and other layouts without strides: the full path says what is wrong
            return None
    return None


def key_of(coll: str, x: Any, x_written: bool, out: Any, scalars: Tuple[Any, ...]) -> Optional[Key]:
    """The cache key of a call on ``x`` (and ``out``), or None when the full path must serve it.

    ``scalars``: the call's validated op, algorithm and root.  The key holds ``from_buffer`` views
    (they keep the arrays alive only as long as the key lives); :meth:`CommCache.keep_fast` keeps
    plain pointers instead, which hash and compare equal to them.
    """
    if type(x) is _ndarray:          # the common case inline (what buffer_view does for an ndarray)
        try:
            v = _from_buffer("char[]", x, x_written)
        except _NOT_A_BUFFER:
            return None
        xv: Tuple[Any, int, Any] = (v, len(v), x.dtype)
    else:
        view = buffer_view(x, x_written)
        if view is None:
            return None
        xv = view
    if out is None:
        return (coll, scalars) + xv + _NO_OUT
    ov = buffer_view(out, True)
    if ov is None:
        return None
    return (coll, scalars) + xv + ov


def unowned(address: Any) -> Any:
    """A plain pointer (or int address) equal to ``address`` as a key, keeping no array alive."""
    return ffi.cast("char *", address) if isinstance(address, ffi.CData) else address


def is_torch(x: Any) -> bool:
    """True for a torch.Tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "is_contiguous")


def _from_numpy(arr: np.ndarray, obj: Any, name: str, writable: bool) -> Buffer:
    dt = dtype_of_array(arr.dtype)
    if dt is None:
        raise TypeError(f"{name} has dtype {arr.dtype}, which HCCL cannot carry; expected one of {ARRAY_DTYPE_NAMES}")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} is not C-contiguous (strides {arr.strides} for shape {arr.shape}); "
                         "pass np.ascontiguousarray(x) or a contiguous view")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{name} is read-only but this call writes its result into it; pass a writable "
                         "array (or out=...)")
    ptr = ffi.cast("char *", ffi.from_buffer(arr)) if arr.size else ffi.NULL  # 4x cheaper than arr.ctypes
    return Buffer(obj, ptr, int(arr.size), dt, tuple(arr.shape), "host", [arr])


def _from_torch(t: Any, name: str, writable: bool) -> Buffer:
    dt = dtype_from_torch(t.dtype)
    if dt is None:
        raise TypeError(f"{name} has dtype {t.dtype}, which HCCL cannot carry; expected one of {torch_dtype_names()}")
    if not t.is_contiguous():
        raise ValueError(f"{name} is not contiguous (stride {tuple(t.stride())} for shape {tuple(t.shape)}); "
                         "pass x.contiguous()")
    kind = t.device.type
    if kind not in ("cpu", "npu"):
        raise ValueError(f"{name} lives on device {t.device}; expected a CPU tensor (emulator) or an NPU tensor")
    if kind == "npu":  # pragma: no cover - needs Ascend hardware
        import torch
        import torch_npu  # noqa: F401  (registers torch.npu)
        # the user's queued kernels finish before our stream reads
        torch.npu.current_stream().synchronize()  # type: ignore[attr-defined]
    ptr = ffi.cast("char *", t.data_ptr()) if t.numel() else ffi.NULL
    return Buffer(t, ptr, int(t.numel()), dt, tuple(t.shape), "npu" if kind == "npu" else "host", [t])


def as_buffer(x: BufferLike, name: str, writable: bool = False) -> Buffer:
    """Validate ``x`` and view it as a :class:`Buffer` (raises TypeError/ValueError naming ``name``)."""
    if isinstance(x, np.ndarray):
        return _from_numpy(x, x, name, writable)
    if is_torch(x):
        return _from_torch(x, name, writable)
    if hasattr(x, "__dlpack__"):
        try:
            arr = np.from_dlpack(cast(SupportsDLPack, x))   # hasattr does not narrow the union
        except Exception as exc:
            raise TypeError(f"{name}: DLPack export failed ({exc}); pass a NumPy array or a torch tensor") from None
        return _from_numpy(arr, x, name, writable)
    try:
        view = memoryview(x)
    except TypeError:
        raise TypeError(f"{name} is a {type(x).__name__}; expected a NumPy array, a torch tensor, or an object "
                        "with DLPack or the buffer protocol") from None
    arr = np.asarray(view)
    if not view.readonly and not arr.flags.writeable:
        arr.flags.writeable = True
    return _from_numpy(arr, x, name, writable)


def new_like(x: Any, shape: Sequence[int], dtype: DataType) -> Any:
    """A new uninitialised buffer of ``shape`` of the same library (NumPy or torch) as ``x`` (else NumPy)."""
    if is_torch(x):
        import torch
        return torch.empty(tuple(shape), dtype=x.dtype, device=x.device)
    if isinstance(x, np.ndarray):
        return np.empty(tuple(shape), dtype=x.dtype)
    return np.empty(tuple(shape), dtype=numpy_dtype(dtype))


def overlaps(a: Buffer, b: Buffer) -> bool:
    """True when the two buffers share bytes."""
    if a.count == 0 or b.count == 0:
        return False
    return a.addr < b.addr + b.nbytes and b.addr < a.addr + a.nbytes


# ------------------------------------------------------------------ collectives
#: "this collective takes no such argument" for :func:`collective` (None is a value a caller may pass, and is refused)
NONE: Any = object()
#: the common spellings of ``op=``, looked up without a call
OPS = {"sum": ReduceOp.SUM, "prod": ReduceOp.PROD, "max": ReduceOp.MAX, "min": ReduceOp.MIN}
#: collectives whose result may replace ``x`` (``out=None``); the others make ``out`` when it is None
IN_PLACE = frozenset({"allreduce", "broadcast", "reduce"})


def reduce_op(op: Any) -> ReduceOp:
    """``op=`` validated (every call, cached or not: a bool, a float or a misspelt name is refused each time)."""
    try:
        return parse_reduce_op(op)
    except ValueError as exc:
        raise ValueError(f"{exc}, or 'avg' (the sum divided by the number of ranks)") from None


def collective(state: CommState, coll: str, method: str, x: Any, out: Any, algorithm: Any, async_op: bool = False,
               stream: Any = None, op: Any = NONE, root: Any = NONE) -> Call:
    """The Call of collective ``coll`` made by the public ``method``: its scalars validated (an explicit ``op=None``
    or ``root=None`` refused as a fresh call refuses it), its result named, and -- a blocking call whose buffers
    the key can describe, where host buffers are used in place -- its fast key; :func:`validate` checks the
    buffers when the engine has no bound form for that key."""
    state.check_usable(method)
    c = Call(coll, algorithm, async_op, stream)
    if root is not NONE:
        c.root = state.rank_arg("root", root)
    if op is not NONE:
        c.op = OPS.get(op) if op.__class__ is str else None
        if c.op is None:
            c.op = reduce_op(op)
    if algorithm.__class__ is not str or algorithm != "auto":   # (the default needs no look-up)
        registry.check_algorithm(algorithm)
    c.x, c.out, c.method, c.unchecked = x, out, method, True
    if coll == "barrier":
        return c
    in_place = out is None and coll in IN_PLACE
    c.result = x if in_place else out            # (made by validate() for the others' out=None)
    if coll == "broadcast":
        written = state.rank != c.root
    elif coll == "reduce" and state.rank != c.root:
        written, c.result = False, None          # off the root: nothing written, no result
    else:
        written = in_place
    c.x_written = written
    if c.blocking and not state.stages and (in_place or out is not None):
        c.fast_key = key_of(coll, x, written, out, (c.op, algorithm, c.root))
    return c


def validate(state: CommState, c: Call) -> Call:
    """``c`` (from :func:`collective`) with its buffers validated in full: the pointers, the element count the
    library takes and the bytes that choose the algorithm; ``out`` made (of x's kind) where it is None."""
    c.unchecked = False
    coll, x, out, what = c.coll, c.x, c.out, c.method
    if coll == "barrier":
        return c
    xb = as_buffer(x, "x", writable=c.x_written)
    if coll in IN_PLACE:
        ob: Optional[Buffer] = None
        if coll != "reduce" or state.rank == c.root:
            ob = xb if out is None else _out(out, xb.count, xb, what)
        return c.data(xb, ob, xb.count, xb.nbytes)
    size = state.size
    if coll == "allgather":
        shape, count = (size,) + xb.shape, size * xb.count
    else:                                         # reduce_scatter, alltoall: size equal blocks
        if xb.count % size:
            raise ValueError(f"{what}: x has {xb.count} elements, not divisible by the communicator size "
                             f"{size}; expected size equal blocks")
        block = xb.count // size
        shape, count = xb.shape, xb.count
        if coll == "reduce_scatter":
            count = block
            shape = ((xb.shape[0] // size,) + xb.shape[1:]) if xb.shape and xb.shape[0] % size == 0 else (block,)
    if out is None:
        out = new_like(x, shape, xb.dtype)
    ob = _out(out, count, xb, what, exclusive=True)
    c.result = out
    if coll == "allgather":
        return c.data(xb, ob, xb.count, ob.nbytes)
    return c.data(xb, ob, block, xb.nbytes)


def held(c: Call) -> Tuple[Tuple[str, Any, bool], ...]:
    """The buffers a persistent request of the validated ``c`` holds: (argument, buffer, written), ..."""
    out = c.recv.obj if c.recv is not None and c.recv is not c.send else None
    return (("x", c.x, c.x_written),) + ((("out", out, True),) if out is not None else ())


def _out(out: Any, count: Optional[int], xb: Buffer, what: str, exclusive: bool = False) -> Buffer:
    """``out`` validated against ``x``: the same dtype, ``count`` elements (None: any), no overlap (``exclusive``:
    not even as the same buffer)."""
    ob = as_buffer(out, "out", writable=True)
    if ob.dtype != xb.dtype:
        raise ValueError(f"{what}: out has dtype {ob.dtype.name.lower()} but x has {xb.dtype.name.lower()}; "
                         "expected the same dtype")
    if count is not None and ob.count != count:
        raise ValueError(f"{what}: out has {ob.count} elements (shape {ob.shape}); expected {count}")
    if overlaps(ob, xb) and (exclusive or ob.ptr != xb.ptr):
        raise ValueError(f"{what}: out overlaps x; expected separate buffers"
                         + ("" if exclusive else " (or out=None for in place)"))
    return ob


def algorithm_call(state: CommState, algorithm: AlgorithmArg, x: Any, out: Any, op: Any, root: Any,
                   coll: Optional[str]) -> Call:
    """The Call of ``run_algorithm``: ``algorithm`` resolved, ``coll`` (default: the one it declares), ``out`` (None:
    in place) of x's dtype, any size; ``op`` and ``root`` passed through."""
    state.check_usable("run_algorithm")
    alg = registry.resolve(algorithm)
    if coll is None:
        if alg.collectives is None or len(alg.collectives) != 1:
            declared = "any collective" if alg.collectives is None else ", ".join(sorted(alg.collectives))
            raise ValueError(f"run_algorithm: algorithm {alg.name!r} implements {declared}; pass collective= "
                             "to say which to run")
        coll = next(iter(alg.collectives))
    root = state.rank_arg("root", root)
    rop = None if op is None else reduce_op(op)
    xb = as_buffer(x, "x", writable=out is None)
    ob = xb if out is None else _out(out, None, xb, "run_algorithm")    # any size
    c = Call(coll, alg).data(xb, ob, xb.count, xb.nbytes)
    c.op, c.root, c.recv_count, c.result = rop, root, ob.count, x if out is None else out
    return c


# ------------------------------------------------------------------ send/recv
def lane_call(state: CommState, sending: bool, what: str, peer: Any, x: Any = None, items: Any = None) -> Call:
    """The Call of a send/recv on a point-to-point lane: ``x`` (or the messages ``items``) to/from ``peer``, as the
    public ``what`` ("isend", "irecv", "send_multi", "recv_multi") names it; the lane binds it (api/point_to_point.py)."""
    if items is not None:
        if not isinstance(items, (list, tuple)):
            raise TypeError(f"{what}: items is a {type(items).__name__}; expected a list or tuple of buffers")
        if not items:
            raise ValueError(f"{what}: items is empty; expected at least one buffer")
        items = list(items)
    name = "dst" if sending else "src"
    peer = peer if peer.__class__ is int and 0 <= peer < state.size else state.rank_arg(name, peer)
    if peer == state.rank:
        raise ValueError(f"{what}: {name}={peer} is this rank; sending to oneself is not supported "
                         "(copy locally instead)")
    if items is None:
        bufs = [as_buffer(x, "x" if sending else "buf", writable=not sending)]
        count, nbytes = bufs[0].count, bufs[0].nbytes
    else:
        bufs = [as_buffer(b, f"items[{i}]", writable=not sending) for i, b in enumerate(items)]
        count, nbytes = sum(b.count for b in bufs), sum(b.nbytes for b in bufs)
    if not state.member:                   # a null communicator: refused as every call on it, once the arguments were
        state.check_usable(what)           # checked (it has no engine)
    c = Call(what, "native", async_op=True)
    c.announces = False
    c.peer, c.items, c.count, c.nbytes, c.dtype = peer, bufs, count, nbytes, bufs[0].dtype
    c.message = ("send" if sending else "recv") + ("" if items is None else "_multi")
    c.what = f"{what} of {nbytes} bytes {'to' if sending else 'from'} rank {peer}"
    c.result = x if items is None else items
    return c


def stream_call(state: CommState, sending: bool, x: Any, peer: Any, stream: Any) -> Call:
    """The Call of a stream-ordered send/recv: the library's own HcclSend (``x`` to ``peer``) or HcclRecv (into
    ``x``), on ``stream`` after the work there; sizes and dtypes must match the peer's call, as for the library's."""
    direction, name = ("send", "dst") if sending else ("recv", "src")
    peer = state.rank_arg(name, peer)
    if peer == state.rank:
        raise ValueError(f"{name}={peer} is this rank; expected another rank of communicator {state.name!r}")
    buf = as_buffer(x, "x" if sending else "buf", writable=not sending)
    stream_handle(stream)                  # a stream of this process (refused before anything is issued)
    if not state.member:                   # a null communicator (as lane_call)
        state.check_usable(direction)
    c = Call(direction, "native", stream=stream)   # the library's own send/recv
    c.data(buf if sending else None, None if sending else buf, buf.count, buf.nbytes)
    c.dtype = buf.dtype
    c.direct = state.binding.send if sending else state.binding.recv
    c.peer = peer
    c.announces = False
    c.what = f"{direction} of {buf.nbytes} bytes {'to' if sending else 'from'} rank {peer} (stream-ordered)"
    c.record = Record(direction, "p2p", buf.count, buf.nbytes, buf.dtype, None, peer)
    c.result = None if sending else x
    return c

