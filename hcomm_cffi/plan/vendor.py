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
server), ``a3`` (Atlas A3 / 910_93 super pods), ``910a`` (Atlas 800 with 910A), ``950`` (Ascend 950,
the device the new layer's AI CPU templates are written for), and ``doc`` (the package's model,
docs/design/plan-model.md, which the package's built-in ring/mesh/tree/hierarchical implement).

Which layer runs is the vendor's own choice (``LAYER_SOURCE``): every collective's entry in hicann/hccl
(e.g. ``src/ops/all_reduce/all_reduce_op.cc:28-35``) calls ``Hccl<Op>Inner`` -- hcomm's legacy executors --
below CANN 9.0.0 or on a device that is not "out-place", and only DEV_TYPE_950/960 are
(``src/common/hccl_common.h:272-275``).  So on A2, A3 and 910A every expansion mode (host, AI CPU, AIV)
runs the legacy executors, chosen by the operator classes (``impl/operator/*_operator.cc``; for the
library's own op-base collective on one server they pick the op-base mesh variants, which count a
stream per device, and for the level 0 of several servers the base mesh executors, devices - 1); the
AI CPU templates run on 950.  Within the legacy layer the expansion mode matters where the operator picks by
it: AIV mode picks the mesh AIV executors, which take no slave stream
(``coll_all_reduce_mesh_aiv_executor.cc:24-29``; ``all_gather_operator.cc:141-147``); CCU expansion
exists on 950 only (``alg_env_config.cc:848-853``).  Of the legacy mesh executors the planner models the
one each operator picks for op-base mesh topologies (``CollAllReduceMeshExecutor``,
``all_reduce_operator.cc:448-449``; ``AllGatherMeshExecutor``, ``all_gather_operator.cc:216-218``;
``ReduceScatterMeshExecutor``, ``reduce_scatter_operator.cc:343``; ``BroadCastMeshExecutor``,
``broadcast_operator.cc:169``; ``ReduceMeshExecutor``, ``reduce_operator.cc:122``); the small-count,
deterministic and pipeline variants chosen by size, dtype and op are not.  The engine also changes
the host-sync accounting below.

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

__all__ = ["PLATFORMS", "VENDOR_PLATFORMS", "LEGACY_PLATFORMS", "DEFAULT_PLATFORM", "PLATFORM_NAMES",
           "VENDOR_NOTIFIES_PER_CHANNEL", "VendorRule", "vendor_rule", "parse_platform", "expansion_of", "layer_of",
           "check_expansion", "native_algorithm", "LAYER_SOURCE", "HCCL", "HCOMM", "DOC_SOURCE"]

HCCL = "hicann/hccl@09300b70df9a031339f08e5f2ca06d7bf294d009"
HCOMM = "libochao-huawei/hcomm@8958adbf038b710779d790842b36b504c185c9e4"
_EXE = f"{HCOMM}:src/legacy/ascend910/algorithm/impl/coll_executor/"
_TPL = f"{HCCL}:src/ops/"
DOC_SOURCE = "the model's example (one server of 4 ranks, AI CPU engine: ring 2/4/2, mesh 3/6/3)"

PLATFORMS = ("a2", "a3", "910a", "950", "doc")
#: The platforms whose executors are modelled, and those of them that run hcomm's legacy layer.
VENDOR_PLATFORMS = ("a2", "a3", "910a", "950")
LEGACY_PLATFORMS = ("a2", "a3", "910a")
#: Where the vendor chooses the layer (see the module docstring).
LAYER_SOURCE = (f"{HCCL}:src/ops/all_reduce/all_reduce_op.cc:28-35 (each op's entry: Hccl<Op>Inner, hcomm's legacy "
                f"executors, unless CANN >= 9.0.0 on an out-place device) + src/common/hccl_common.h:272-275 "
                "(out-place: DEV_TYPE_950/960)")
#: The most widely deployed Ascend training server today (Atlas 800T A2); A3 super pods are newer and fewer.
DEFAULT_PLATFORM = "a2"
PLATFORM_NAMES = {"a2": "Atlas A2 (910B)", "a3": "Atlas A3 (910_93)", "910a": "Atlas 800 (910A)",
                  "950": "Ascend 950", "doc": "the package's model"}
#: expansion mode (HCCL_OP_EXPANSION_MODE: alg_env_config.cc:839-912) of each engine name
_EXPANSION = {"CPU": "host", "CPU_TS": "host", "AICPU": "AI CPU", "AICPU_TS": "AI CPU", "AIV": "AIV", "CCU": "CCU"}
#: HCCL channel.h:19 NORMAL_NOTIFY_NUM: every channel the vendor requests has 3 notifies.
VENDOR_NOTIFIES_PER_CHANNEL = 3


def expansion_of(engine_name: str) -> str:
    """The expansion mode an engine stands for: host, AI CPU, AIV or CCU."""
    return _EXPANSION.get(engine_name, engine_name)


def layer_of(platform: str) -> str:
    """Which algorithm layer the library runs on ``platform``: hcomm's legacy executors or the AI CPU templates."""
    if platform in LEGACY_PLATFORMS:
        return "the legacy executors (hcomm src/legacy/ascend910)"
    if platform == "950":
        return "the AI CPU templates (hicann/hccl src/ops/*/template/aicpu)"
    return "the package's model"


def check_expansion(platform: str, engine_name: str) -> Optional[str]:
    """Why ``engine_name``'s expansion mode is not planned on ``platform`` (None when it is)."""
    mode = expansion_of(engine_name)
    if platform in LEGACY_PLATFORMS and mode == "CCU":
        return (f"CCU expansion exists on Ascend 950 only ({HCCL}:src/common/alg_env_config.cc:848-853); "
                f"{PLATFORM_NAMES[platform]} expands on the host, the AI CPU or AIV")
    if platform == "950" and mode != "AI CPU":
        return (f"on Ascend 950 only the AI CPU templates are modelled ({mode} expansion runs "
                "src/ops/*/template/aiv or ccu, not planned here); use --engine aicpu")
    return None


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
    if platform not in LEGACY_PLATFORMS:
        return None                      # a legacy executor: Ascend 950 runs the templates (mesh, NHR) instead
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
    if platform not in LEGACY_PLATFORMS:
        return None                      # a legacy executor: Ascend 950 runs the templates (mesh, NHR) instead
    if platform != "a3" or coll not in (C.ALLREDUCE, C.ALLGATHER, C.REDUCE_SCATTER):
        return None
    # NP double ring, op-base: LEVEL0_PLANE_NUM_IN_NPRING_DOUBLE(2) x 2 DMA-reduce streams (hccl_impl.h:42,46)
    return _t(4, _EXE + "coll_all_reduce/coll_all_reduce_ring_for_910_93_executor.cc:36-42 (TOPO_TYPE_NP_DOUBLE_RING; "
              "the second ring is the first reversed: topo_info_extractor.cc:1537-1547)")


_OPS = f"{HCOMM}:src/legacy/ascend910/algorithm/impl/operator/"


def _mesh_legacy(platform: str, coll: Collective, n: int, devices: int, expansion: str,
                 level0: bool = False) -> Optional[VendorRule]:
    """The legacy mesh executors the operators pick for the library's own (op-base) collective.

    One server (one mesh aggregation) picks the op-base variants, which count every device's stream, the
    main one included (``totalStreamNum = deviceNumPerAggregation``); the level 0 of several servers picks
    the base executors, ``totalStreamNum = deviceNumPerAggregation - 1`` (e.g. ``CollReduceScatterMeshExecutor``
    ``CalcStreamNum``).  AIV mode: the mesh AIV executors, no slave stream.
    """
    if coll is C.BARRIER:
        return None
    if coll is C.ALLTOALL:                  # the legacy all-to-all is the full-mesh executor, whatever the level 0
        return _pairwise(platform, coll, n, devices)
    if expansion == "AIV":
        return _t(1, _EXE + "coll_all_reduce/coll_all_reduce_mesh_aiv_executor.cc:24-29 (AIV: no slave stream; "
                  f"picked in AIV mode: {_OPS}all_gather_operator.cc:141-147)")
    per = devices if devices else n
    one_server = per == n and not level0
    if coll is C.BROADCAST:
        # op-base on 910B inside one mesh: deviceNumPerAggregation streams; 4P mesh: LEVEL0_PLANE_NUM_IN_4PMESH = 3
        total = 3 if platform == "910a" and per == 4 else (per if platform == "a2" else per - 1)
        return _t(max(1, total), _EXE + "coll_broadcast/coll_broadcast_mesh_executor.cc:20-37 (picked: "
                  f"{_OPS}broadcast_operator.cc:169; 4P mesh: impl/legacy/hccl_impl.h:45)")
    if one_server and coll is not C.REDUCE:
        files = {C.ALLREDUCE: ("coll_all_reduce/coll_all_reduce_mesh_small_count_executor.cc:60-71 (up to 256 KB; "
                               "larger: AllReduceMeshOpbaseLoopExecutor, coll_all_reduce_mesh_opbase_executor.cc:23-34, "
                               "the same count)", "all_reduce_operator.cc:531-538"),
                 C.ALLGATHER: ("coll_all_gather/coll_all_gather_mesh_opbase_executor.cc:21-27",
                               "all_gather_operator.cc:203-205"),
                 C.REDUCE_SCATTER: ("coll_reduce_scatter/coll_reduce_scatter_mesh_dma_elimination.cc:29-36 (inline "
                                    "reduce, not deterministic)", "reduce_scatter_operator.cc:296-303")}
        exe, picked = files[coll]
        return _t(per, _EXE + exe + f" (op-base, one server: a stream per device, the main one included; picked: "
                  f"{_OPS}{picked})")
    files = {C.ALLREDUCE: ("coll_all_reduce/coll_all_reduce_mesh_executor.cc:33-39", "all_reduce_operator.cc:448-449"),
             C.ALLGATHER: ("coll_all_gather/coll_all_gather_mesh_executor.cc:21-27", "all_gather_operator.cc:216-218"),
             C.REDUCE_SCATTER: ("coll_reduce_scatter/coll_reduce_scatter_mesh_executor.cc:66-72",
                                "reduce_scatter_operator.cc:343"),
             C.REDUCE: ("coll_reduce/coll_reduce_mesh_executor.cc:31-37", "reduce_operator.cc:122")}
    exe, picked = files[coll]
    return _t(max(1, per - 1), _EXE + exe + f" (devices - 1 streams, the main one included; picked: {_OPS}{picked})")


def _mesh(platform: str, coll: Collective, n: int, devices: int, expansion: str = "AI CPU",
          level0: bool = False) -> Optional[VendorRule]:
    if platform in LEGACY_PLATFORMS:
        return _mesh_legacy(platform, coll, n, devices, expansion, level0)
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
    if platform in LEGACY_PLATFORMS:
        # the whole-communicator executors with level-1 NHR (COMM_TAG_NONUNIFORM_HIERARCHICAL_RING), no CalcStreamNum
        # override: 1 stream (coll_native_executor_base.cc:70-76); no legacy barrier executor
        legacy = {C.ALLREDUCE: "coll_all_reduce/coll_all_reduce_comm_executor.cc:55-58",
                  C.ALLGATHER: "coll_all_gather/coll_all_gather_comm_executor.cc",
                  C.REDUCE_SCATTER: "coll_reduce_scatter/coll_reduce_scatter_comm_executor.cc",
                  C.BROADCAST: "coll_broadcast/coll_broadcast_comm_executor.cc",
                  C.REDUCE: "coll_reduce/coll_reduce_comm_executor.cc"}
        if coll not in legacy:
            return None
        return _t(1, _EXE + legacy[coll] + " (NHR whole-communicator executor: 1 stream, coll_native_executor_base.cc:70-76)")
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
    if platform not in LEGACY_PLATFORMS:
        return None                      # a legacy executor: Ascend 950 runs the templates (mesh, NHR) instead
    if coll not in (C.ALLREDUCE, C.ALLGATHER, C.REDUCE_SCATTER):
        return None
    # whole-communicator executor: no CalcStreamNum override, 0 slave streams (coll_native_executor_base.cc:70-76)
    return _t(1, _EXE + "coll_all_reduce/coll_all_reduce_comm_executor.cc:55-65 (NB: COMM_TAG_NONUNIFORM_BRUCK; "
              "channels calc_nb_transport_req.cc:49-73; 1 stream: coll_native_executor_base.cc:70-76)")


def _pairwise(platform: str, coll: Collective, n: int, devices: int) -> Optional[VendorRule]:
    if platform not in LEGACY_PLATFORMS:
        return None                      # a legacy executor: Ascend 950 runs the templates (mesh, NHR) instead
    if coll is not C.ALLTOALL:
        return None
    src = _EXE + "coll_all_to_all/coll_all_to_all_v_fullmesh_executor.cc:20-27"
    if platform == "a3":
        return _t(n, src + " (inside a super pod: N-1 slave streams)")
    return _t(1, src + " (outside an A3 super pod: no slave stream)")


def _ahc(platform: str, coll: Collective, n: int, devices: int) -> Optional[VendorRule]:
    if platform not in LEGACY_PLATFORMS:
        return None                      # a legacy executor: Ascend 950 runs the templates (mesh, NHR) instead
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
                level: str = "flat", expansion: str = "AI CPU") -> Optional[VendorRule]:
    """The vendor's thread request for ``algorithm`` on ``n`` members (``devices`` per server), or None when
    no vendor executor runs it on this platform (the caller then says so and keeps the document model).

    ``level="inter"``: as the level-1 algorithm between servers of a hierarchical executor (one
    thread: the executor's threads are its level 0's); the vendor has no mesh there.  ``level="intra"``:
    the level 0 of several servers (the legacy operators pick the base mesh executors there).
    """
    if n < 2:
        return None
    if level == "inter":
        src = _INTER.get(algorithm)
        symmetric = coll in (C.ALLREDUCE, C.ALLGATHER, C.REDUCE_SCATTER)
        return None if src is None or (algorithm == "tree" and not symmetric) else _t(1, src)
    if algorithm == "mesh":
        return _mesh(platform, coll, n, devices, expansion, level0=level == "intra")
    fn = _RULES.get(algorithm)
    return None if fn is None else fn(platform, coll, n, devices)


def native_algorithm(platform: str, servers: int, devices: int, coll: Collective) -> Tuple[str, str]:
    """The algorithm the library's own collective runs on ``platform`` (the planner's name) and why.

    Level 0 as the vendor defaults it (hcomm alg_configurator.cc:389-409 GetDefaultAlgoLevel0Module: 8 devices
    an 8P ring, 4 a 4P mesh, 1-2 a single ring, else the whole ring; a 910B whose devices are all HCCS-linked a
    mesh); all-to-all is the full-mesh executor on the legacy layer; several servers add a level 1 (hierarchical).
    Ascend 950 runs the mesh AI CPU templates.
    """
    src = f"{HCOMM}:src/legacy/ascend910/algorithm/impl/alg_configurator.cc:389-409"
    if coll is C.ALLTOALL and platform in LEGACY_PLATFORMS:
        return "alltoall_pairwise", f"all-to-all: the full-mesh executor ({_EXE}coll_all_to_all/coll_all_to_all_v_fullmesh_executor.cc)"
    if platform in ("a2", "950"):
        level0 = "mesh"
        why = ("910B, every device pair HCCS-linked: NP mesh (" + src + ")" if platform == "a2"
               else "Ascend 950: the mesh AI CPU templates")
    elif platform == "a3":
        level0, why = "ring", f"910_93: a ring at level 0 ({_EXE}coll_all_reduce/coll_all_reduce_ring_for_910_93_executor.cc)"
    else:
        level0 = "mesh" if devices == 4 else "ring"
        why = f"{devices} devices: {'4P mesh' if devices == 4 else ('8P ring' if devices == 8 else 'ring')} ({src})"
    if servers > 1 and coll is not C.BARRIER:
        return "hierarchical", f"{servers} servers: level 0 {level0} ({why}), level 1 between servers"
    return level0, why
