"""The one algorithm interface: what an algorithm supports, the resources it needs, the schedule it issues.

Every algorithm — ``ring``, ``mesh``, ``tree``, ``hierarchical``, ``native`` and a user's — is an
:class:`Algorithm`.  ``Comm`` only ever calls :meth:`Algorithm.unsupported`, :meth:`Algorithm.resources`
and :meth:`Algorithm.issue`; it never branches on a name.  An algorithm that does not declare its
resources gets them derived from a dry run of :meth:`~Algorithm.issue` (``algorithms.dryrun``).

Write one with the decorator::

    @hcomm_cffi.algorithm("pairwise", collectives=("alltoall",))
    def pairwise(ctx: IssueContext, call: CollectiveCall) -> None:
        ...   # ctx.put / ctx.record / ctx.wait / ctx.copy / ctx.reduce on ctx.threads

or subclass :class:`Algorithm` and override :meth:`~Algorithm.issue`.
"""
from __future__ import annotations

from typing import Any, Callable, FrozenSet, Iterable, Literal, NamedTuple, NewType, Optional, Tuple, Union

from ..enums import HOST_REDUCE_DTYPES, HOST_REDUCE_OPS, DataType, ReduceOp
from ..plan import RankResources, Topology
from .context import IssueContext, UnsupportedError

__all__ = ["COLLECTIVES", "REDUCING", "ROOTED", "CollectiveCall", "Algorithm", "FunctionAlgorithm",
           "UnsupportedError", "reduce_unsupported", "define", "ResourcesFn", "UnsupportedFn", "AlgorithmLike",
           "AlgorithmName", "AlgorithmRef", "AlgorithmArg"]

#: The collectives the Comm API names; a user algorithm may implement others (``Comm.run_algorithm``).
COLLECTIVES = ("allreduce", "broadcast", "allgather", "reduce_scatter", "reduce", "alltoall", "barrier")
#: Collectives that reduce (they need the data-plane reduce to support the dtype and op).
REDUCING = frozenset({"allreduce", "reduce_scatter", "reduce"})
#: Collectives whose resources depend on the root.
ROOTED = frozenset({"broadcast", "reduce"})

CData = Any
#: ``resources(topology, call, rank)``: declared resources, or None to derive them from a dry run
ResourcesFn = Callable[[Topology, "CollectiveCall", int], Optional[RankResources]]
#: ``unsupported(coll, dtype, op, topology)``: why an algorithm cannot run a call, or None
UnsupportedFn = Callable[[str, DataType, Optional[ReduceOp], Topology], Optional[str]]


class CollectiveCall(NamedTuple):
    """One call of a collective on one rank: pointers (``char *``), element count, type, op, root.

    ``count`` is the vector length for allreduce/broadcast/reduce, the per-rank block for
    allgather/reduce_scatter (output block) and the per-destination block for alltoall; for a user
    collective, the elements of ``send``.  ``recv_count`` is the elements of ``recv`` (user
    collectives whose output differs in size from their input; None for the named collectives).
    """

    coll: str
    send: CData
    recv: CData
    count: int  # type: ignore[assignment]  # named as the C argument; shadows tuple.count on purpose
    dtype: DataType
    op: ReduceOp = ReduceOp.SUM
    root: int = 0
    recv_count: Optional[int] = None

    @property
    def signature(self) -> Tuple[str, int, DataType, ReduceOp, int, Optional[int]]:
        """What must agree across ranks and what a schedule depends on (everything but the pointers)."""
        return (self.coll, self.count, self.dtype, self.op, self.root, self.recv_count)


def reduce_unsupported(name: str, dtype: DataType, op: ReduceOp) -> Optional[str]:
    """Why the data-plane reduce cannot do ``op`` on ``dtype`` (None when it can)."""
    if dtype in HOST_REDUCE_DTYPES and op in HOST_REDUCE_OPS:
        return None
    why = []
    if op not in HOST_REDUCE_OPS:
        why.append(f"op={op.name.lower()}")
    if dtype not in HOST_REDUCE_DTYPES:
        why.append(f"dtype={dtype.name.lower()}")
    return (f"algorithm={name!r} cannot reduce with {' and '.join(why)}: the data-plane reduce supports dtypes "
            "int8/int16/int32/fp16/fp32/bf16 with ops sum/max/min; use algorithm='native' (or 'auto', which "
            "picks it) for prod and for int64/uint*/fp64")


class Algorithm:
    """A communication algorithm: override :meth:`issue` (and optionally :meth:`resources`, :meth:`unsupported`).

    ``collectives`` lists what it implements (None: any collective name, for user patterns run with
    ``Comm.run_algorithm``); ``reduces_on_data_plane`` says its reductions use the data-plane reduce,
    whose dtype/op limits then apply; ``replayable`` lets ``Comm`` replay its recorded schedule.
    """

    name: str = ""
    collectives: Optional[FrozenSet[str]] = frozenset(COLLECTIVES)
    reduces_on_data_plane: bool = True
    #: the schedule depends only on the call's signature and whether it runs in place, so a recorded
    #: task list can be replayed with new buffer addresses (``algorithms/replay.py``)
    replayable: bool = True
    #: the planner profile its declared resources follow (``doc``, ``a2``, ...), None when undeclared
    profile: Optional[str] = None

    # -- what it supports ---------------------------------------------------------------
    def unsupported(self, coll: str, dtype: DataType, op: Optional[ReduceOp], topology: Topology) -> Optional[str]:
        """None when this algorithm can run ``coll`` here, else the reason (a sentence naming alternatives)."""
        if self.collectives is not None and coll not in self.collectives:
            return (f"algorithm={self.name!r} does not implement {coll}; it implements "
                    f"{', '.join(sorted(self.collectives)) or 'nothing'}")
        if self.reduces_on_data_plane and coll in REDUCING and op is not None:
            return reduce_unsupported(self.name, dtype, op)
        return None

    # -- what it needs ------------------------------------------------------------------
    def resources(self, topology: Topology, call: CollectiveCall, rank: int) -> Optional[RankResources]:
        """The threads / notifies / channels ``rank`` acquires, or None to derive them from a dry run."""
        return None

    # -- what it does -------------------------------------------------------------------
    def issue(self, ctx: IssueContext, call: CollectiveCall) -> None:
        """Issue this rank's tasks for ``call`` through ``ctx`` (record-then-launch is the caller's job)."""
        raise NotImplementedError(f"algorithm {self.name!r} does not define issue()")

    def __repr__(self) -> str:
        return f"<Algorithm {self.name!r}>"


#: what ``algorithm=`` takes at run time: a registered name ('ring', ..., 'auto'), a reference
#: 'package.module:attr' or 'path/file.py:attr', or an :class:`Algorithm` (checked by ``registry.check_algorithm``)
AlgorithmLike = Union[str, Algorithm]
#: the names ``auto`` and the built-ins answer to (``registry.BUILTINS``; a test keeps the two equal), so that a
#: misspelt ``algorithm="rnig"`` fails type-checking
AlgorithmName = Literal["auto", "ring", "mesh", "tree", "hierarchical", "native", "nb", "alltoall_pairwise",
                        "double_ring"]
#: a user-registered name or a 'module:attr' reference, marked for type checkers: ``algorithm=AlgorithmRef("mine")``
AlgorithmRef = NewType("AlgorithmRef", str)
#: what the Comm API's ``algorithm=`` is annotated with
AlgorithmArg = Union[AlgorithmName, AlgorithmRef, Algorithm]


class FunctionAlgorithm(Algorithm):
    """An :class:`Algorithm` whose :meth:`issue` is a plain function (what the ``@algorithm`` decorator makes)."""

    def __init__(self, fn: Callable[[IssueContext, CollectiveCall], None], name: str,
                 collectives: Optional[Iterable[str]], reduces_on_data_plane: bool = True,
                 resources: Optional[ResourcesFn] = None, unsupported: Optional[UnsupportedFn] = None) -> None:
        if not callable(fn):
            raise TypeError(f"algorithm {name!r}: {fn!r} is not callable; expected issue(ctx, call)")
        self.fn = fn
        self.name = name
        self.collectives = None if collectives is None else frozenset(collectives)
        self.reduces_on_data_plane = reduces_on_data_plane
        self._resources = resources
        self.profile = getattr(resources, "profile", None)
        self._unsupported = unsupported
        self.__doc__ = fn.__doc__
        self.origin = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', name)}"

    def unsupported(self, coll: str, dtype: DataType, op: Optional[ReduceOp], topology: Topology) -> Optional[str]:
        """The declared collectives and reduce limits, then the function given as ``unsupported=``."""
        reason = super().unsupported(coll, dtype, op, topology)
        if reason is None and self._unsupported is not None:
            reason = self._unsupported(coll, dtype, op, topology)
        return reason

    def resources(self, topology: Topology, call: CollectiveCall, rank: int) -> Optional[RankResources]:
        """The function given as ``resources=`` (None: derive from a dry run)."""
        return None if self._resources is None else self._resources(topology, call, rank)

    def issue(self, ctx: IssueContext, call: CollectiveCall) -> None:
        """Call the wrapped function."""
        self.fn(ctx, call)


def define(name: Optional[str] = None, *, collectives: Optional[Iterable[str]] = COLLECTIVES,
           reduces_on_data_plane: bool = True, resources: Optional[ResourcesFn] = None,
           unsupported: Optional[UnsupportedFn] = None) -> Callable[[Callable[..., None]], Algorithm]:
    """Decorator: ``issue(ctx, call)`` becomes an :class:`Algorithm` named ``name`` (default: its name), unregistered.

    The built-ins are made this way and listed by ``registry.py``; ``registry.algorithm`` is this
    plus :func:`registry.register`.  The keywords are those of :class:`FunctionAlgorithm`.
    """
    def wrap(fn: Callable[..., None]) -> Algorithm:
        fn_name: str = getattr(fn, "__name__", "")
        return FunctionAlgorithm(fn, name or fn_name, collectives, reduces_on_data_plane, resources, unsupported)
    return wrap
