"""The vendor profiles against a table read by hand from the vendor's source (AI CPU engine).

Each row: platform, algorithm, collective, servers x devices, then the per-rank threads and channels
the vendor code acquires, and where in the source the figure comes from.  Every rank (root or not)
must hold the same; channels carry 3 notifies; fork/join thread notifies are main T-1 + 1 per slave
(NHR allgather slaves 2).  The package's model's figures stay reachable with ``platform="doc"``.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from hcomm_cffi.plan import InvalidAlgorithm, Topology, make_plan

HC = "hicann/hccl@09300b70df9a031339f08e5f2ca06d7bf294d009:src/ops/"
LG = "libochao-huawei/hcomm@8958adbf038b710779d790842b36b504c185c9e4:src/legacy/ascend910/algorithm/"
EX = LG + "impl/coll_executor/"
RING_A2 = EX + "coll_all_reduce/coll_all_reduce_ring_executor.cc:29-41"
RING_AG_A2 = EX + "coll_all_gather/coll_all_gather_ring_executor.cc:23-27"
RING_RS_A2 = EX + "coll_reduce_scatter/coll_reduce_scatter_ring_executor.cc:63-67"
RING_BC = EX + "coll_broadcast/coll_broadcast_ring_executor.cc:29-40"
RING_A3 = EX + "coll_all_reduce/coll_all_reduce_ring_for_910_93_executor.cc:36-42 + impl/legacy/hccl_impl.h:41-46"
RING_AG_A3 = EX + "coll_all_gather/coll_all_gather_ring_for_910_93_executor.cc:28-35"
RING_RS_A3 = EX + "coll_reduce_scatter/coll_reduce_scatter_ring_for_910_93_executor.cc:88-94"
RING_RED_A3 = EX + "coll_reduce/coll_reduce_ring_for_910_93_executor.cc:25-31"
RING_8P = LG + "impl/legacy/hccl_impl.h:44 (LEVEL0_PLANE_NUM_IN_8PRING = 4)"
RING_CH = LG + "base/communicator/calc_ring_transport_req.cc:53-69"
MESH_RS = HC + "reduce_scatter/template/aicpu/ins_temp_reduce_scatter_mesh_1D.cc:55-60"
MESH_AR = HC + "all_reduce/template/aicpu/ins_temp_all_reduce_mesh_1D_one_shot.cc:59-62"
MESH_RED = HC + "reduce/template/aicpu/reduce_mesh_1D.cc:35-40"
MESH_AG = HC + "all_gather/template/aicpu/ins_temp_all_gather_mesh_1D.cc:65-77"
MESH_BC = HC + "broadcast/template/aicpu/ins_temp_broadcast_mesh_1D_two_shot.cc:35-42"
MESH_A2A = HC + "all_to_all_v/template/aicpu/ins_temp_all_to_all_v_mesh_1D.cc:56-62 (.h:20 concurrency 16)"
MESH_BAR = HC + "barrier/template/aicpu/ins_temp_barrier_mesh_1D.cc:27-31"
# the legacy mesh executors (A2/A3/910A run them in every expansion mode: hicann/hccl src/ops/all_reduce/
# all_reduce_op.cc:28-35 + src/common/hccl_common.h:272-275), as the operators pick them for op-base
OP = LG + "impl/operator/"
LMESH_AR_1 = EX + "coll_all_reduce/coll_all_reduce_mesh_small_count_executor.cc:60-71 + " + OP + "all_reduce_operator.cc:531-538"
LMESH_AG_1 = EX + "coll_all_gather/coll_all_gather_mesh_opbase_executor.cc:21-27 + " + OP + "all_gather_operator.cc:203-205"
LMESH_RS_1 = EX + "coll_reduce_scatter/coll_reduce_scatter_mesh_dma_elimination.cc:29-36 + " + OP + "reduce_scatter_operator.cc:296-303"
LMESH_RED = EX + "coll_reduce/coll_reduce_mesh_executor.cc:31-37 (devices - 1) + " + OP + "reduce_operator.cc:122"
LMESH_BC = EX + "coll_broadcast/coll_broadcast_mesh_executor.cc:20-37 (910B op-base: devices; else devices - 1)"
LMESH_AR = EX + "coll_all_reduce/coll_all_reduce_mesh_executor.cc:33-39 (devices - 1) + " + OP + "all_reduce_operator.cc:448-449"
LMESH_AG = EX + "coll_all_gather/coll_all_gather_mesh_executor.cc:21-27 (devices - 1) + " + OP + "all_gather_operator.cc:216-218"
LMESH_RS = EX + "coll_reduce_scatter/coll_reduce_scatter_mesh_executor.cc:66-72 (devices - 1) + " + OP + "reduce_scatter_operator.cc:343"
LMESH_AIV = EX + "coll_all_reduce/coll_all_reduce_mesh_aiv_executor.cc:24-29 (streamNum = 0) + " + OP + "all_gather_operator.cc:141-147"
LNHR = EX + "coll_all_reduce/coll_all_reduce_comm_executor.cc:55-58 (NHR, 1 stream) + " + LG + "base/communicator/calc_nhr_transport_req.cc:49-73"
NHR_AR = HC + "all_reduce/template/aicpu/ins_temp_all_reduce_nhr.cc:84-91"
NHR_RS = HC + "reduce_scatter/template/aicpu/ins_temp_reduce_scatter_nhr.cc:89-96"
NHR_AG = HC + "all_gather/template/aicpu/ins_temp_all_gather_nhr.cc:89-102"
NHR_BC = HC + "broadcast/template/aicpu/ins_temp_broadcast_nhr.cc:41-48"
NHR_RED = HC + "reduce/template/aicpu/reduce_nhr.cc:33-36"
NHR_BAR = HC + "barrier/template/aicpu/ins_temp_barrier_nhr_aicpu.cc:28-30"
NB = EX + "coll_all_reduce/coll_all_reduce_comm_executor.cc:55-65 + base/communicator/calc_nb_transport_req.cc:49-73"
PW = EX + "coll_all_to_all/coll_all_to_all_v_fullmesh_executor.cc:20-27,36"
DR = EX + "coll_all_reduce/coll_all_reduce_ring_for_910_93_executor.cc:36-42 (NP double ring)"
AHC = LG + "base/alg_template/asymmetric_hierarchical_concatenate_base.cc:174-207,369-420"
NHR_CH = LG + "base/communicator/calc_nhr_transport_req.cc:49-73"
HD = LG + "base/communicator/calc_hd_transport_req.cc:53-71 + base/alg_template/alg_template_base.cc:942-996"

# platform, algorithm, collective, servers, devices, threads, channels, source
CASES = [
    # ring: 1 stream on A2 and 910A (4 on the 910A 8P ring), 2 on A3; both neighbours
    ("a2", "ring", "allreduce", 1, 4, 1, 2, RING_A2), ("a2", "ring", "allreduce", 1, 8, 1, 2, RING_A2),
    ("a2", "ring", "allreduce", 1, 16, 1, 2, RING_A2), ("a2", "ring", "allreduce", 2, 8, 1, 2, RING_A2),
    ("a2", "ring", "allreduce", 4, 16, 1, 2, RING_A2), ("a2", "ring", "allgather", 1, 8, 1, 2, RING_AG_A2),
    ("a2", "ring", "reduce_scatter", 1, 8, 1, 2, RING_RS_A2), ("a2", "ring", "broadcast", 1, 8, 1, 2, RING_BC),
    ("a3", "ring", "allreduce", 1, 4, 2, 2, RING_A3), ("a3", "ring", "allreduce", 1, 16, 2, 2, RING_A3),
    ("a3", "ring", "allreduce", 2, 8, 2, 2, RING_A3), ("a3", "ring", "allgather", 1, 8, 2, 2, RING_AG_A3),
    ("a3", "ring", "reduce_scatter", 4, 16, 2, 2, RING_RS_A3), ("a3", "ring", "reduce", 1, 8, 2, 2, RING_RED_A3),
    ("910a", "ring", "allreduce", 1, 8, 4, 2, RING_8P), ("910a", "ring", "allgather", 1, 8, 4, 2, RING_8P),
    ("910a", "ring", "allreduce", 1, 4, 1, 2, RING_A2),
    # mesh, legacy layer (A2/A3/910A, op-base): one server -> the op-base variants, a stream per device (reduce:
    # devices - 1); several servers -> the base executors, devices - 1; all-to-all -> the full-mesh executor
    ("a2", "mesh", "reduce_scatter", 1, 4, 4, 3, LMESH_RS_1), ("a2", "mesh", "reduce_scatter", 1, 8, 8, 7, LMESH_RS_1),
    ("a2", "mesh", "reduce_scatter", 1, 16, 16, 15, LMESH_RS_1), ("a2", "mesh", "allreduce", 1, 4, 4, 3, LMESH_AR_1),
    ("a2", "mesh", "allreduce", 1, 8, 8, 7, LMESH_AR_1), ("a2", "mesh", "allreduce", 1, 16, 16, 15, LMESH_AR_1),
    ("a2", "mesh", "reduce", 1, 4, 3, 3, LMESH_RED), ("a2", "mesh", "reduce", 1, 8, 7, 7, LMESH_RED),
    ("a2", "mesh", "allgather", 1, 4, 4, 3, LMESH_AG_1), ("a2", "mesh", "allgather", 1, 8, 8, 7, LMESH_AG_1),
    ("a2", "mesh", "broadcast", 1, 8, 8, 7, LMESH_BC), ("a3", "mesh", "broadcast", 1, 8, 7, 7, LMESH_BC),
    ("910a", "mesh", "broadcast", 1, 4, 3, 3, LMESH_BC + " + impl/legacy/hccl_impl.h:45 (4P mesh: 3)"),
    ("a2", "mesh", "alltoall", 1, 4, 1, 3, PW), ("a2", "mesh", "alltoall", 1, 16, 1, 15, PW),
    ("a2", "mesh", "alltoall", 2, 16, 1, 31, PW), ("a3", "mesh", "allreduce", 1, 16, 16, 15, LMESH_AR_1),
    ("910a", "mesh", "allreduce", 1, 4, 4, 3, LMESH_AR_1),
    # mesh, new layer (Ascend 950, AI CPU templates): N threads for RS / AR / reduce / alltoall, N-1 for AG / broadcast /
    # barrier
    ("950", "mesh", "reduce_scatter", 1, 4, 4, 3, MESH_RS), ("950", "mesh", "reduce_scatter", 1, 8, 8, 7, MESH_RS),
    ("950", "mesh", "reduce_scatter", 1, 16, 16, 15, MESH_RS), ("950", "mesh", "allreduce", 1, 4, 4, 3, MESH_AR),
    ("950", "mesh", "allreduce", 1, 8, 8, 7, MESH_AR), ("950", "mesh", "allreduce", 1, 16, 16, 15, MESH_AR),
    ("950", "mesh", "reduce", 1, 4, 4, 3, MESH_RED), ("950", "mesh", "reduce", 1, 8, 8, 7, MESH_RED),
    ("950", "mesh", "alltoall", 1, 4, 4, 3, MESH_A2A), ("950", "mesh", "alltoall", 1, 16, 16, 15, MESH_A2A),
    ("950", "mesh", "alltoall", 2, 16, 17, 31, MESH_A2A), ("950", "mesh", "allgather", 1, 4, 3, 3, MESH_AG),
    ("950", "mesh", "allgather", 1, 8, 7, 7, MESH_AG), ("950", "mesh", "broadcast", 1, 8, 7, 7, MESH_BC),
    ("950", "mesh", "barrier", 1, 8, 7, 7, MESH_BAR),
    # NHR, legacy layer: the whole-communicator executors with level-1 NHR, 1 stream; channels (r +- 2^k)
    ("a2", "nhr", "allreduce", 1, 4, 1, 3, LNHR), ("a2", "nhr", "allreduce", 1, 8, 1, 5, LNHR),
    ("a2", "nhr", "allreduce", 2, 8, 1, 7, LNHR), ("a2", "nhr", "allgather", 1, 8, 1, 5, LNHR),
    ("a2", "nhr", "reduce_scatter", 4, 16, 1, 11, LNHR), ("a3", "nhr", "broadcast", 1, 8, 1, 5, LNHR),
    # NHR, new layer (950): 1 thread (allgather 2); channels (r +- 2^k): 4 -> 3, 8 -> 5, 16 -> 7, 32 -> 9, 64 -> 11
    ("950", "nhr", "allreduce", 1, 4, 1, 3, NHR_AR), ("950", "nhr", "allreduce", 1, 8, 1, 5, NHR_AR),
    ("950", "nhr", "allreduce", 1, 16, 1, 7, NHR_AR), ("950", "nhr", "allreduce", 2, 8, 1, 7, NHR_AR),
    ("950", "nhr", "allreduce", 4, 16, 1, 11, NHR_AR), ("950", "nhr", "reduce_scatter", 1, 8, 1, 5, NHR_RS),
    ("950", "nhr", "allgather", 1, 8, 2, 5, NHR_AG), ("950", "nhr", "allgather", 2, 8, 2, 7, NHR_AG),
    ("950", "nhr", "broadcast", 1, 8, 1, 5, NHR_BC), ("950", "nhr", "broadcast", 4, 16, 1, 11, NHR_BC),
    ("950", "nhr", "reduce", 1, 16, 1, 7, NHR_RED), ("950", "nhr", "barrier", 1, 8, 1, 5, NHR_BAR),
    # NB: whole-communicator executor, 1 stream, channels (r +- 2^k)
    ("a2", "nb", "allreduce", 1, 4, 1, 3, NB), ("a2", "nb", "allreduce", 1, 8, 1, 5, NB),
    ("a2", "nb", "allreduce", 1, 16, 1, 7, NB), ("a2", "nb", "allgather", 2, 8, 1, 7, NB),
    ("a2", "nb", "reduce_scatter", 4, 16, 1, 11, NB), ("a3", "nb", "allreduce", 2, 8, 1, 7, NB),
    # pairwise all-to-all: 1 stream outside an A3 super pod, N inside; a channel to every peer
    ("a2", "alltoall_pairwise", "alltoall", 1, 4, 1, 3, PW), ("a2", "alltoall_pairwise", "alltoall", 1, 8, 1, 7, PW),
    ("a2", "alltoall_pairwise", "alltoall", 2, 8, 1, 15, PW), ("a2", "alltoall_pairwise", "alltoall", 4, 16, 1, 63, PW),
    ("a3", "alltoall_pairwise", "alltoall", 1, 8, 8, 7, PW), ("a3", "alltoall_pairwise", "alltoall", 1, 16, 16, 15, PW),
    # double ring (A3): 2 rings x 2 DMA-reduce streams, the two neighbours
    ("a3", "double_ring", "allreduce", 1, 8, 4, 2, DR), ("a3", "double_ring", "allreduce", 1, 16, 4, 2, DR),
    ("a3", "double_ring", "allgather", 2, 8, 4, 2, DR), ("a3", "double_ring", "reduce_scatter", 1, 4, 4, 2, DR),
    # AHC: NHR inside a server, ring between same-index ranks (NHR above 3 servers), 1 stream
    ("a2", "ahc", "allreduce", 2, 8, 1, 5 + 1, AHC), ("a2", "ahc", "allreduce", 2, 4, 1, 3 + 1, AHC),
    ("a2", "ahc", "allreduce", 4, 16, 1, 7 + 3, AHC), ("a2", "ahc", "allgather", 2, 16, 1, 7 + 1, AHC),
    # hierarchical (legacy A2): the level 0 of several servers is the base mesh executor (devices - 1 streams, the
    # issue-34 evidence: CollReduceScatterMeshExecutor::CalcStreamNum) + the level-1 algorithm (NHR by default) between
    # same-index ranks on the executor's main stream, every rank in both levels
    ("a2", "hierarchical", "allreduce", 2, 8, 7, 7 + 1, LMESH_AR + " + " + NHR_CH),
    ("a2", "hierarchical", "allreduce", 4, 16, 15, 15 + 3, LMESH_AR + " + " + NHR_CH),
    ("a2", "hierarchical", "allgather", 2, 8, 7, 7 + 1, LMESH_AG + " + " + NHR_CH),
    ("a2", "hierarchical", "reduce_scatter", 2, 8, 7, 7 + 1, LMESH_RS + " + " + NHR_CH),
    ("a2", "hierarchical", "broadcast", 4, 16, 16, 15 + 3, LMESH_BC + " + " + NHR_CH),
    # hierarchical on 950: the AI CPU templates' level 0 (N threads for allreduce)
    ("950", "hierarchical", "allreduce", 2, 8, 8, 7 + 1, MESH_AR + " + " + NHR_CH),
]
# the same with another level-1 algorithm: (inter, servers, devices, threads, channels, source)
INTER_CASES = [
    ("ring", 4, 8, 7, 7 + 2, LMESH_AR + " + " + RING_CH), ("ring", 2, 16, 15, 15 + 1, LMESH_AR + " + " + RING_CH),
    ("tree", 4, 8, 7, 7 + 2, LMESH_AR + " + " + HD), ("tree", 2, 8, 7, 7 + 1, LMESH_AR + " + " + HD),
    ("nb", 4, 16, 15, 15 + 3, LMESH_AR + " + " + LG + "base/communicator/calc_nb_transport_req.cc:49-73"),
]


def _topo(servers: int, devices: int) -> Topology:
    return Topology.single_server(devices) if servers == 1 else Topology.from_shape(servers, devices)


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 60
    assert {c[1] for c in CASES} >= {"ring", "mesh", "nhr", "nb", "alltoall_pairwise", "double_ring", "ahc", "hierarchical"}
    # both layers: the legacy executors on every platform that runs them, the AI CPU templates on 950
    assert {c[0] for c in CASES} == {"a2", "a3", "910a", "950"}
    assert {c[1] for c in CASES if c[0] == "950"} >= {"mesh", "nhr", "hierarchical"}
    assert {(c[3], c[4]) for c in CASES} >= {(1, 4), (1, 8), (1, 16), (2, 8), (4, 16)}


@pytest.mark.parametrize("platform,algo,coll,servers,devices,threads,channels,source", CASES)
def test_vendor_profile(platform: str, algo: str, coll: str, servers: int, devices: int, threads: int,
                        channels: int, source: str) -> None:
    topo = _topo(servers, devices)
    roots = (0, topo.n_ranks - 1) if coll in ("broadcast", "reduce") else (0,)
    for root in roots:
        plan = make_plan(coll, topo, "1M", algo, engine="aicpu", platform=platform, root=root)
        assert len(plan.roles) == 1, plan.roles            # root or not, every rank holds the same
        nhr_ag = algo == "nhr" and coll == "allgather" and platform == "950"
        fork_join = 2 * (threads - 1) + (1 if nhr_ag else 0)   # the NHR AG template's slaves: 2
        for rank in {0, root, topo.n_ranks // 2, topo.n_ranks - 1}:
            res = plan.resources_for(rank)
            assert (res.threads, len(res.channels)) == (threads, channels), (rank, source)
            assert res.thread_notifies == fork_join, (rank, source)
            assert res.channel_notifies == 3 * channels      # hicann/hccl channel.h:19 NORMAL_NOTIFY_NUM
            assert res.host_sync_notifies == 1               # AI CPU: op_common.cc:1550 / :1606
        assert plan.platform == platform and plan.source


@pytest.mark.parametrize("inter,servers,devices,threads,channels,source", INTER_CASES)
def test_hierarchical_level1(inter: str, servers: int, devices: int, threads: int, channels: int, source: str) -> None:
    plan = make_plan("allreduce", _topo(servers, devices), "1M", "hierarchical", inter_algorithm=inter, platform="a2")
    assert not plan.warnings, plan.warnings
    for rank in range(plan.topology.n_ranks):
        res = plan.resources_for(rank)
        assert (res.threads, len(res.channels)) == (threads, channels), (rank, source)


def test_hd_between_three_servers_folds_one() -> None:
    """3 servers: HD pairs server 1 with server 0 (fold), server 0 also with 2 (alg_template_base.cc:969-996)."""
    plan = make_plan("allreduce", _topo(3, 8), "1M", "hierarchical", inter_algorithm="tree", platform="a2")
    inter = {s: len([c for c in plan.resources_for(8 * s).channels if c.level == "inter"]) for s in range(3)}
    assert inter == {0: 2, 1: 1, 2: 1}
    assert sum(r.n_ranks for r in plan.roles) == 24 and len(plan.roles) == 3


def test_host_engines_add_no_host_sync_and_uniform_requests_add_it_to_every_thread() -> None:
    topo = Topology.single_server(8)
    host = make_plan("allreduce", topo, "1M", "mesh", engine="cpu_ts", platform="a2").resources_for(0)
    assert host.host_sync_notifies == 0                      # op_common.cc:1630-1637
    ag = make_plan("allgather", topo, "1M", "nhr", platform="950").resources_for(0)
    assert ag.notifies_per_thread == 2 + 1                   # max(1, 2) + host sync, on every thread (:1604-1606)


@pytest.mark.parametrize("algo,figures", [("ring", (2, 4, 2)), ("mesh", (3, 6, 3))])
def test_seed_document_figures_are_the_default_plan(algo: str, figures: tuple) -> None:
    p = make_plan("allreduce", Topology.single_server(4), "1M", algo, platform="doc")
    assert (p.threads, p.channel_notifies, p.n_channels) == figures
    out = subprocess.run([sys.executable, "-m", "hcomm_cffi", "plan", "--algo", algo, "--ranks", "4"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"the package's {algo}, as it runs here")
    assert "profile doc (the package's model)" in out.stdout


@pytest.mark.parametrize("algo,coll", [("tree", "allreduce"), ("ring", "alltoall"), ("nhr", "alltoall"),
                                       ("ring", "barrier"), ("tree", "broadcast")])
@pytest.mark.parametrize("platform", ["a2", "doc"])
def test_planner_algorithms_the_vendor_lacks_say_so(algo: str, coll: str, platform: str) -> None:
    p = make_plan(coll, Topology.single_server(8), "1M", algo, platform=platform)
    assert any("no vendor executor" in w for w in p.warnings), p.warnings


def test_mesh_between_servers_is_not_the_vendors() -> None:
    p = make_plan("allreduce", Topology.from_shape(2, 8), "1M", "hierarchical", inter_algorithm="mesh")
    assert any("no vendor executor (A2, A3, 910A, 950) runs hierarchical (inter mesh)" in w for w in p.warnings)


def test_vendor_only_algorithms_refuse_what_the_vendor_does_not_run() -> None:
    with pytest.raises(InvalidAlgorithm, match=r"the vendor runs it on Atlas A3 \(910_93\) \(--platform a3\)"):
        make_plan("allreduce", Topology.single_server(8), "1M", "double_ring", platform="a2")
    with pytest.raises(InvalidAlgorithm, match="more than one server"):
        make_plan("allreduce", Topology.single_server(8), "1M", "ahc")
    with pytest.raises(InvalidAlgorithm, match="alltoall_pairwise allreduce"):
        make_plan("allreduce", Topology.single_server(8), "1M", "alltoall_pairwise")


def test_size_past_the_address_space_is_a_clear_error() -> None:
    out = subprocess.run([sys.executable, "-m", "hcomm_cffi", "plan", "--algo", "mesh", "--size", "1024G"],
                         capture_output=True, text=True, timeout=120)     # a package plan: its dry run addresses it
    assert out.returncode == 0, out.stderr
    assert "exceeds the 64 GiB per buffer a dry run addresses" in out.stdout
    assert "rank 4547" not in out.stdout


@pytest.mark.parametrize("platform", ["a2", "a3", "910a", "doc"])
def test_roles_summarise_every_rank(platform: str) -> None:
    """Whatever the level-1 algorithm and shape, a role's counts are every member's and roles partition the ranks."""
    from hcomm_cffi.plan import INTER_ALGORITHMS
    for servers in range(2, 7):
        for devices in (1, 2, 3, 4):
            for inter in INTER_ALGORITHMS:
                for coll in ("allreduce", "broadcast", "allgather"):
                    try:
                        plan = make_plan(coll, _topo(servers, devices), "1M", "hierarchical", inter_algorithm=inter,
                                         platform=platform, root=servers * devices - 1)
                    except InvalidAlgorithm:
                        continue
                    summary = {r.name: r for r in plan.roles}
                    assert sum(r.n_ranks for r in plan.roles) == plan.topology.n_ranks
                    for rank in range(plan.topology.n_ranks):
                        res = plan.resources_for(rank)
                        s = summary[res.role]
                        assert (res.threads, len(res.channels)) == (s.threads, s.n_channels), (inter, coll, rank)


def test_a_ring_inside_a_server_says_when_the_vendor_would_run_mesh() -> None:
    ring_a2 = make_plan("allreduce", Topology.single_server(8), "1M", "ring", platform="a2")
    assert any("HCCS-linked: mesh instead" in w and "alg_configurator.cc:389-409" in w for w in ring_a2.warnings)
    ring_910a = make_plan("allreduce", Topology.single_server(8), "1M", "ring", platform="910a")
    assert not ring_910a.warnings and ring_910a.threads == 4          # the 8P ring is 910A's default
    ring_a3 = make_plan("allreduce", Topology.single_server(8), "1M", "ring", platform="a3")
    assert not ring_a3.warnings                                        # A3's level 0 is a ring


# the expansion mode (--engine) on the legacy layer: AIV picks the mesh AIV executors (no slave stream); host and AI
# CPU expansion run the same executors; CCU exists on 950 only
ENGINE_CASES = [
    ("a2", "mesh", "allreduce", 1, 8, "aiv", 1, 7, LMESH_AIV), ("a2", "mesh", "allgather", 1, 8, "aiv", 1, 7, LMESH_AIV),
    ("a2", "mesh", "allreduce", 1, 8, "cpu", 8, 7, LMESH_AR_1), ("a2", "mesh", "reduce_scatter", 1, 8, "cpu_ts", 8, 7, LMESH_RS_1),
    ("a2", "ring", "allreduce", 1, 8, "cpu", 1, 2, RING_A2), ("a3", "ring", "allreduce", 1, 8, "aicpu_ts", 2, 2, RING_A3),
]

#: Cases where the vendor's operator picks an executor the planner does not model (it plans the op-base choice
#: for data the inline reduce handles): platform, algorithm, collective, servers, devices, the vendor's threads and
#: channels, the planner's, and why they differ.
KNOWN_DIFFERENCES = [
    ("a2", "mesh", "reduce_scatter", 1, 8, 7, 7, 8, 7,
     "a dtype/op the SDMA inline reduce cannot do (SingleMeshInlineReduce false, e.g. int64 or prod): the operator "
     "falls through to ReduceScatterMeshExecutor, devices - 1 streams (" + OP + "reduce_scatter_operator.cc:296-343); "
     "the planner has no dtype/op input for the vendor layer and plans the inline-reduce executor"),
    ("a2", "mesh", "broadcast", 1, 8, 7, 7, 8, 7,
     "graph mode (HCCL_WORKFLOW_MODE_OPS_KERNEL_INFO_LIB): BroadCastMeshExecutor counts devices - 1 "
     "(coll_broadcast_mesh_executor.cc:26-31); the planner plans the library's own op-base collective"),
]


@pytest.mark.parametrize("platform,algo,coll,servers,devices,engine,threads,channels,source", ENGINE_CASES)
def test_expansion_mode_picks_the_executor(platform: str, algo: str, coll: str, servers: int, devices: int,
                                           engine: str, threads: int, channels: int, source: str) -> None:
    plan = make_plan(coll, _topo(servers, devices), "1M", algo, engine=engine, platform=platform)
    res = plan.resources_for(0)
    assert (res.threads, len(res.channels)) == (threads, channels), source


def test_ccu_expansion_exists_on_950_only() -> None:
    with pytest.raises(ValueError, match="CCU expansion exists on Ascend 950 only"):
        make_plan("allreduce", Topology.single_server(8), "1M", "mesh", engine="ccu", platform="a2")
    with pytest.raises(ValueError, match="only the AI CPU templates are modelled"):
        make_plan("allreduce", Topology.single_server(8), "1M", "mesh", engine="aiv", platform="950")


def _planned(platform: str, algo: str, coll: str, servers: int, devices: int, engine: str = "aicpu") -> tuple:
    res = make_plan(coll, _topo(servers, devices), "1M", algo, engine=engine, platform=platform).resources_for(0)
    return res.threads, len(res.channels)


def test_agreement_with_the_vendor_is_at_least_95_percent() -> None:
    """Every row of the table, both layers, every platform: the planner's threads and channels against the vendor's."""
    rows = [(c[:5], "aicpu", c[5:7]) for c in CASES] + [(c[:5], c[5], c[6:8]) for c in ENGINE_CASES]

    agree = sum(_planned(*key, engine) == vendor for key, engine, vendor in rows)
    for platform, algo, coll, servers, devices, vt, vc, pt, pc, why in KNOWN_DIFFERENCES:
        assert _planned(platform, algo, coll, servers, devices) == (pt, pc) != (vt, vc), why
        assert why
    total = len(rows) + len(KNOWN_DIFFERENCES)
    assert agree == len(rows)                    # every disagreement is a KNOWN_DIFFERENCES row, with its reason
    assert agree / total >= 0.95, f"{agree}/{total}"
