"""Vendor profiles: the threads, thread notifies and channels the vendor's own executors acquire.

Read by hand from two public repositories (pinned; ``HCCL`` and ``HCOMM`` below):

* the new algorithm layer, ``hicann/hccl`` ``src/ops/<op>/template/aicpu/*``: the AI CPU templates
  (mesh and NHR) and their ``CalcRes``/``GetRes``, turned into thread and channel requests by
  ``src/ops/op_common/op_common.cc`` (``HcclThreadAcquire[WithConfig]``, ``HcclChannelAcquire``);
* the executors A2 (910B), A3 (910_93) and 910A servers run today, ``hcomm``
  ``src/legacy/ascend910/algorithm/impl/coll_executor/*`` (``CalcStreamNum``: slave streams;
  ``CalcNotifyNum``: 2 per slave) and the channel shapes of
  ``src/legacy/ascend910/algorithm/base/communicator/calc_*_transport_req.cc``.

Profiles: ``a2`` (Atlas 800T A2, 910B: the default, the most widely deployed Ascend training
server), ``a3`` (Atlas A3 / 910_93 super pods), ``910a`` (Atlas 800 with 910A), and ``doc`` (the
seed document's model, which the emulator's built-in ring/mesh/tree/hierarchical implement).
Mesh and NHR follow the AI CPU templates (the AI CPU engine; the same on every platform; the
legacy host-driven mesh executors are chosen among several variants by dtype, reduce op and
determinism — e.g. ``impl/operator/reduce_scatter_operator.cc:285-350`` — and are not modelled);
ring, double ring, NB, AHC and pairwise follow the legacy executors of the platform.  The engine
changes the host-sync accounting below.

Common to every vendor profile: every rank holds the same channels and threads, root or not (the
transport calculators take no root: calc_ring_transport_req.cc:53-69, calc_mesh_transport_req.cc:53-68,
calc_nhr_transport_req.cc:49-73, hicann/hccl channel_request.cc:56-73); 3 notifies per channel (HCCL channel.h:19 ``NORMAL_NOTIFY_NUM``,
set on every request at channel.cc:58/182/221/294); fork/join thread notifies main T-1 and 1 per
slave (legacy coll_native_executor_base.cc:78-83: 2 per slave stream), NHR allgather slaves 2.
Host sync (op_common.cc): AI CPU engines add 1 to the main thread when the per-thread API exists
(op_common.cc:1550) and 1 to every thread with the uniform ``HcclThreadAcquire`` (op_common.cc:1604-1606);
other engines wrap the caller's stream with no extra notify (op_common.cc:1630-1637).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from .algos.common import Collective, fork_join_notifies

__all__ = ["PLATFORMS", "DEFAULT_PLATFORM", "PLATFORM_NAMES", "VENDOR_NOTIFIES_PER_CHANNEL", "VendorRule",
           "vendor_rule", "parse_platform", "HCCL", "HCOMM", "DOC_SOURCE"]

HCCL = "hicann/hccl@09300b70df9a031339f08e5f2ca06d7bf294d009"
HCOMM = "libochao-huawei/hcomm@8958adbf038b710779d790842b36b504c185c9e4"
_EXE = f"{HCOMM}:src/legacy/ascend910/algorithm/impl/coll_executor/"
_TPL = f"{HCCL}:src/ops/"
DOC_SOURCE = "the seed document's example (one server of 4 ranks, AI CPU engine: ring 2/4/2, mesh 3/6/3)"

PLATFORMS = ("a2", "a3", "910a", "doc")
#: The most widely deployed Ascend training server today (Atlas 800T A2); A3 super pods are newer and fewer.
DEFAULT_PLATFORM = "a2"
PLATFORM_NAMES = {"a2": "Atlas A2 (910B)", "a3": "Atlas A3 (910_93)", "910a": "Atlas 800 (910A)",
                  "doc": "the seed document's model"}
#: HCCL channel.h:19 NORMAL_NOTIFY_NUM: every channel the vendor requests has 3 notifies.
VENDOR_NOTIFIES_PER_CHANNEL = 3


def parse_platform(value: object) -> str:
    """'a2', 'A3', '910A', 'doc' -> the profile name; ValueError names the alternatives."""
    key = str(value).strip().lower()
    if key not in PLATFORMS:
        raise ValueError(f"platform={value!r} is not known; expected one of {', '.join(PLATFORMS)}")
    return key


@dataclass(frozen=True)
class VendorRule:
    """Per-rank threads (fork/join notifies per thread, main first) and where the figure comes from."""

    fork_join: Tuple[int, ...]
    source: str
    note: str = ""          # what a reader should know (e.g. the vendor would not pick this by default)


C = Collective
RuleFn = Callable[[str, Collective, int, int], Optional[VendorRule]]


def _t(threads: int, source: str, per_slave: int = 1) -> VendorRule:
    return VendorRule(fork_join_notifies(threads, per_slave), source)


def _ring(platform: str, coll: Collective, n: int, devices: int) -> Optional[VendorRule]:
    if coll in (C.ALLTOALL, C.BARRIER):
        return None
    if platform == "a3":
        # single ring, op-base: LEVEL0_PLANE_NUM_IN_NPRING_SINGLE(1) x STREAM_NUM_FOR_DMAREDUCE_ONE_RING(2)
        # (legacy/hccl_impl.h:41,46)
        files = {C.ALLREDUCE: "coll_all_reduce/coll_all_reduce_ring_for_910_93_executor.cc:36-42",
                 C.ALLGATHER: "coll_all_gather/coll_all_gather_ring_for_910_93_executor.cc:28-35",
                 C.REDUCE_SCATTER: "coll_reduce_scatter/coll_reduce_scatter_ring_for_910_93_executor.cc:88-94",
                 C.BROADCAST: "coll_broadcast/coll_broadcast_ring_for_910_93_executor.cc:33-41",
                 C.REDUCE: "coll_reduce/coll_reduce_ring_for_910_93_executor.cc:25-31"}
        return _t(2, _EXE + files[coll])
    if coll is C.REDUCE:
        return None                      # no A2/910A ring reduce executor in hcomm's legacy layer
    files = {C.ALLREDUCE: "coll_all_reduce/coll_all_reduce_ring_executor.cc:29-41",
             C.ALLGATHER: "coll_all_gather/coll_all_gather_ring_executor.cc:23-27",
             C.REDUCE_SCATTER: "coll_reduce_scatter/coll_reduce_scatter_ring_executor.cc:63-67",
             C.BROADCAST: "coll_broadcast/coll_broadcast_ring_executor.cc:29-40"}
    if platform == "910a" and devices == 8:
        return _t(4, _EXE + files[coll] + " (8P ring: LEVEL0_PLANE_NUM_IN_8PRING = 4, hccl_impl.h:44)")
    rule = _t(1, _EXE + files[coll] + " (NP single ring: 1 stream)")
    default = {"a2": "910B with every device pair HCCS-linked: mesh"}.get(platform, "4 devices: 4P mesh")
    if platform == "910a" and devices != 4:
        return rule                      # 1-2 devices: single ring, other counts: whole ring (the default)
    return VendorRule(rule.fork_join, rule.source, note=(
        f"inside a server the vendor picks this ring only where it is the default level-0 algorithm "
        f"({default} instead; {HCOMM}:src/legacy/ascend910/algorithm/impl/alg_configurator.cc:389-409)"))


def _double_ring(platform: str, coll: Collective, n: int, devices: int) -> Optional[VendorRule]:
    if platform != "a3" or coll not in (C.ALLREDUCE, C.ALLGATHER, C.REDUCE_SCATTER):
        return None
    # NP double ring, op-base: LEVEL0_PLANE_NUM_IN_NPRING_DOUBLE(2) x 2 DMA-reduce streams (hccl_impl.h:42,46)
    return _t(4, _EXE + "coll_all_reduce/coll_all_reduce_ring_for_910_93_executor.cc:36-42 (TOPO_TYPE_NP_DOUBLE_RING; "
              "the second ring is the first reversed: topo_info_extractor.cc:1537-1547)")


def _mesh(platform: str, coll: Collective, n: int, devices: int) -> Optional[VendorRule]:
    # the AI CPU templates of the new layer (threads per remote rank = 1 channel per peer)
    if coll is C.REDUCE_SCATTER:
        return _t(n, _TPL + "reduce_scatter/template/aicpu/ins_temp_reduce_scatter_mesh_1D.cc:55-60")
    if coll is C.ALLREDUCE:
        return _t(n, _TPL + "all_reduce/template/aicpu/ins_temp_all_reduce_mesh_1D_one_shot.cc:59-62 (two-shot, above "
                  "8 MiB: ins_temp_all_reduce_mesh_1D_two_shot.cc:79-85, also N)")
    if coll is C.REDUCE:
        return _t(n, _TPL + "reduce/template/aicpu/reduce_mesh_1D.cc:35-40")
    if coll is C.ALLTOALL:
        # min(ALLTOALLV_DIRECT_FULLMESH_CONCURRENT_SIZE = 16, N-1) slaves (ins_temp_all_to_all_v_mesh_1D.h:20)
        return _t(min(16, n - 1) + 1, _TPL + "all_to_all_v/template/aicpu/ins_temp_all_to_all_v_mesh_1D.cc:56-62")
    if coll is C.ALLGATHER:
        return _t(n - 1, _TPL + "all_gather/template/aicpu/ins_temp_all_gather_mesh_1D.cc:65-77")
    if coll is C.BROADCAST:
        return _t(n - 1, _TPL + "broadcast/template/aicpu/ins_temp_broadcast_mesh_1D_two_shot.cc:35-42")
    return _t(n - 1, _TPL + "barrier/template/aicpu/ins_temp_barrier_mesh_1D.cc:27-31")


def _nhr(platform: str, coll: Collective, n: int, devices: int) -> Optional[VendorRule]:
    files = {C.REDUCE_SCATTER: "reduce_scatter/template/aicpu/ins_temp_reduce_scatter_nhr.cc:89-96",
             C.ALLREDUCE: "all_reduce/template/aicpu/ins_temp_all_reduce_nhr.cc:84-91",
             C.BROADCAST: "broadcast/template/aicpu/ins_temp_broadcast_nhr.cc:41-48",
             C.REDUCE: "reduce/template/aicpu/reduce_nhr.cc:33-36",
             C.BARRIER: "barrier/template/aicpu/ins_temp_barrier_nhr_aicpu.cc:28-30"}
    if coll is C.ALLGATHER:
        # 2 x channels per peer, slaves 2 notifies (the post-copy overlaps the last step)
        return _t(2, _TPL + "all_gather/template/aicpu/ins_temp_all_gather_nhr.cc:89-102", per_slave=2)
    if coll not in files:
        return None
    return _t(1, _TPL + files[coll])


def _nb(platform: str, coll: Collective, n: int, devices: int) -> Optional[VendorRule]:
    if coll not in (C.ALLREDUCE, C.ALLGATHER, C.REDUCE_SCATTER):
        return None
    # whole-communicator executor: no CalcStreamNum override, 0 slave streams (coll_native_executor_base.cc:70-76)
    return _t(1, _EXE + "coll_all_reduce/coll_all_reduce_comm_executor.cc:55-65 (NB: COMM_TAG_NONUNIFORM_BRUCK; "
              "channels calc_nb_transport_req.cc:49-73; 1 stream: coll_native_executor_base.cc:70-76)")


def _pairwise(platform: str, coll: Collective, n: int, devices: int) -> Optional[VendorRule]:
    if coll is not C.ALLTOALL:
        return None
    src = _EXE + "coll_all_to_all/coll_all_to_all_v_fullmesh_executor.cc:20-27"
    if platform == "a3":
        return _t(n, src + " (inside a super pod: N-1 slave streams)")
    return _t(1, src + " (outside an A3 super pod: no slave stream)")


def _ahc(platform: str, coll: Collective, n: int, devices: int) -> Optional[VendorRule]:
    if coll not in (C.ALLREDUCE, C.ALLGATHER, C.REDUCE_SCATTER):
        return None
    return _t(1, f"{HCOMM}:src/legacy/ascend910/algorithm/base/alg_template/asymmetric_hierarchical_concatenate_base."
              "cc:174-207,369-420 (intra NHR, inter ring; coll_alg_operator.cc:1034-1055: inter NHR above 3 groups; "
              "groups = servers: topo_info_extractor.cc:1328-1349; 1 stream)")


_RULES: Dict[str, RuleFn] = {"ring": _ring, "double_ring": _double_ring, "mesh": _mesh, "nhr": _nhr, "nb": _nb,
                             "alltoall_pairwise": _pairwise, "ahc": _ahc}

_COMM = f"{HCOMM}:src/legacy/ascend910/algorithm/base/communicator/"
#: Level-1 (between servers) algorithms of the vendor's hierarchical executors, and their channel calculators:
#: the executors pick ring, NHR, NB or HD for level 1 (e.g. coll_all_reduce_mesh_executor.cc:143-173,
#: coll_all_reduce_ring_for_910_93_executor.cc:105-116), driven from the executor's main stream.
_INTER = {"ring": _COMM + "calc_ring_transport_req.cc:53-69",
          "nhr": _COMM + "calc_nhr_transport_req.cc:49-73",
          "nb": _COMM + "calc_nb_transport_req.cc:49-73",
          "tree": _COMM + "calc_hd_transport_req.cc:53-71 (HD: alg_template_base.cc:942-996, the planner's RHD geometry)"}


def vendor_rule(platform: str, algorithm: str, coll: Collective, n: int, devices: int,
                level: str = "flat") -> Optional[VendorRule]:
    """The vendor's thread request for ``algorithm`` on ``n`` members (``devices`` per server), or None when
    no vendor executor runs it on this platform (the caller then says so and keeps the document model).

    ``level="inter"``: as the level-1 algorithm between servers of a hierarchical executor (one
    thread: the executor's threads are its level 0's); the vendor has no mesh there.
    """
    if n < 2:
        return None
    if level == "inter":
        src = _INTER.get(algorithm)
        symmetric = coll in (C.ALLREDUCE, C.ALLGATHER, C.REDUCE_SCATTER)
        return None if src is None or (algorithm == "tree" and not symmetric) else _t(1, src)
    fn = _RULES.get(algorithm)
    return None if fn is None else fn(platform, coll, n, devices)
