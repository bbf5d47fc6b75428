"""Hierarchical: intra-server mesh, then the inter-server ring between same-index devices, then intra again.

The topology (servers x devices, ranks of a server contiguous) comes from the planner's
:class:`~hcomm_cffi.plan.Topology`; on one machine the emulator's "servers" are whatever topology
the communicator was given.  AllReduce = intra reduce-scatter (mesh) -> inter allreduce of my
chunk (ring) -> intra allgather (mesh); AllGather = intra then inter allgather of server blocks;
Broadcast = inter chain among the root's local index, then intra star; Reduce = intra star to the
local root, then inter chain; Barrier = intra, inter, intra.  ReduceScatter is the hierarchical
AllReduce into scratch memory keeping one block.  AlltoAll is not offered.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from ..plan import Topology
from . import mesh, ring
from ..enums import DataType, ReduceOp
from .interface import COLLECTIVES, CollectiveCall, define, IssueContext, split_even, UnsupportedError
from .formulas import formula_resources

__all__ = ["hierarchical", "run", "groups"]


def groups(topo: Topology, rank: int) -> "tuple[List[int], List[int], int, int]":
    """(intra group, inter group, my server, my local index) of ``rank``."""
    s, l = topo.server_of(rank), topo.local_rank(rank)
    return list(topo.servers[s]), [srv[l] for srv in topo.servers], s, l


def _contiguous(topo: Topology) -> bool:
    return all(list(srv) == list(range(srv[0], srv[0] + len(srv))) for srv in topo.servers) and \
        [srv[0] for srv in topo.servers] == sorted(srv[0] for srv in topo.servers)


def _allreduce(ctx: IssueContext, intra: Sequence[int], inter: Sequence[int], send, recv, count: int, l: int) -> None:
    esz = ctx.esz
    chunks = split_even(count, len(intra))
    lens = [n for _, n in chunks]
    mine = recv + chunks[l][0] * esz
    mesh.mesh_rs(ctx, intra, [send + o * esz for o, _ in chunks], lens, mine)
    if len(inter) > 1 and lens[l]:
        ring.run(ctx, inter, CollectiveCall("allreduce", mine, mine, lens[l], ctx.dtype, ctx.op))
    mesh.mesh_ag(ctx, intra, mine, lens, [recv + o * esz for o, _ in chunks])


def run(ctx: IssueContext, topo: Topology, a: CollectiveCall) -> None:
    """Issue ``a`` on this rank over the two levels of ``topo``."""
    intra, inter, s, l = groups(topo, ctx.rank)
    esz, c = ctx.esz, a.coll
    if c == "allreduce":
        if a.count:
            _allreduce(ctx, intra, inter, a.send, a.recv, a.count, l)
    elif c == "reduce_scatter":
        if a.count:
            n = topo.n_ranks
            tmp = ctx.scratch(n * a.count * esz)
            _allreduce(ctx, intra, inter, a.send, tmp, n * a.count, l)
            ctx.copy(ctx.threads[0], a.recv, tmp + ctx.rank * a.count * esz, a.count * esz)
    elif c == "allgather":
        if not _contiguous(topo):
            raise UnsupportedError("hierarchical allgather needs the ranks of each server to be contiguous "
                                   "and servers in rank order; use algorithm='ring' or 'mesh'")
        if a.count:
            mesh.mesh_ag(ctx, intra, a.send, [a.count] * len(intra), [a.recv + g * a.count * esz for g in intra])
            if len(inter) > 1:
                block = len(intra) * a.count
                ring.run(ctx, inter, CollectiveCall("allgather", a.recv + intra[0] * a.count * esz, a.recv, block, ctx.dtype))
    elif c == "broadcast":
        lroot, sroot = topo.local_rank(a.root), topo.server_of(a.root)
        if l == lroot and len(inter) > 1:
            ring.ring_broadcast(ctx, inter, a.recv, a.count, inter[sroot])
        mesh.mesh_broadcast(ctx, intra, a.recv, a.count, intra[lroot])
    elif c == "reduce":
        lroot, sroot = topo.local_rank(a.root), topo.server_of(a.root)
        if ctx.rank == a.root:
            tmp = a.recv
        elif l == lroot:
            tmp = ctx.scratch(max(1, a.count * esz))
        else:
            tmp = None
        mesh.mesh_reduce(ctx, intra, a.send, tmp, a.count, intra[lroot])
        if l == lroot and len(inter) > 1:
            ring.ring_reduce(ctx, inter, tmp, a.recv if ctx.rank == a.root else None, a.count, inter[sroot])
    elif c == "barrier":
        mesh.mesh_barrier(ctx, intra)
        if len(inter) > 1:
            ring.ring_barrier(ctx, inter)
        mesh.mesh_barrier(ctx, intra)
    else:
        raise UnsupportedError(f"algorithm='hierarchical' has no {c}; use algorithm='mesh', 'ring' or 'native'")


def _unsupported(coll: str, dtype: DataType, op: Optional[ReduceOp], topology: Topology) -> Optional[str]:
    if topology.n_servers < 2:
        return (f"algorithm='hierarchical' needs more than one server but the topology has {topology.n_servers} "
                "(pass topology=(servers, devices_per_server) to hcomm.init() or Comm())")
    if coll == "allgather" and not _contiguous(topology):
        return ("hierarchical allgather needs the ranks of each server to be contiguous and servers in rank "
                "order")
    return None


@define("hierarchical", collectives=[c for c in COLLECTIVES if c != "alltoall"],
           resources=formula_resources("hierarchical"), unsupported=_unsupported)
def hierarchical(ctx: IssueContext, call: CollectiveCall) -> None:
    """Intra-server mesh, inter-server ring, intra-server mesh over the communicator's topology."""
    run(ctx, ctx.topology, call)
