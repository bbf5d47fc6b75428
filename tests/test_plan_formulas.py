"""Planner counts against the formulas of docs/design/plan-model.md (notify accounting, cost model), by hand."""
from __future__ import annotations

import pytest

from hcomm_cffi.enums import Engine, Protocol
from hcomm_cffi.plan import Topology, make_plan

NS = (2, 3, 4, 8, 16, 1000)


def _plan(algo: str, n: int, op: str = "allreduce", size: int = 1 << 20, **kw):
    return make_plan(op, Topology.single_server(n), size, algo, **kw)


def test_seed_figures_ring_4_ranks_aicpu() -> None:
    p = _plan("ring", 4, engine=Engine.AICPU)
    assert (p.threads, p.channel_notifies, p.n_channels) == (2, 4, 2)
    r = p.resources_for(0)
    assert r.threads == 2 and r.channel_notifies == 4 and len(r.channels) == 2
    assert {c.peer for c in r.channels} == {3, 1}
    assert all(c.notify_num == 2 and c.protocol is Protocol.HCCS for c in r.channels)
    assert r.thread_notifies == 2 and r.host_sync_notifies == 1
    assert r.total_notifies == 2 + 1 + 4


def test_seed_figures_mesh_4_ranks_aicpu() -> None:
    p = _plan("mesh", 4, engine=Engine.AICPU)
    assert (p.threads, p.channel_notifies, p.n_channels) == (3, 6, 3)
    r = p.resources_for(2)
    assert sorted(c.peer for c in r.channels) == [0, 1, 3]
    assert r.thread_notify_counts == (2 + 1, 1, 1)   # main joins 2 slaves + host start notify
    assert r.notifies_per_thread == 3 and r.physical_thread_notifies == 9


# (channels, threads, channel notifies, fork/join thread notifies) per N for allreduce
# ring at N = 2: one neighbour, one direction -> 1 thread (what the ring schedule uses; a dry run derives it)
RING = {2: (1, 1, 2, 0), 3: (2, 2, 4, 2), 4: (2, 2, 4, 2), 8: (2, 2, 4, 2), 16: (2, 2, 4, 2),
        1000: (2, 2, 4, 2)}
MESH = {2: (1, 1, 2, 0), 3: (2, 2, 4, 2), 4: (3, 3, 6, 4), 8: (7, 7, 14, 12), 16: (15, 15, 30, 28),
        1000: (999, 999, 1998, 1996)}
NHR = {2: (1, 1, 2, 0), 3: (2, 1, 4, 0), 4: (3, 1, 6, 0), 8: (5, 1, 10, 0), 16: (7, 1, 14, 0),
       1000: (20, 1, 40, 0)}
TREE = {2: (1, 1, 2, 0), 3: (2, 1, 4, 0), 4: (2, 1, 4, 0), 8: (3, 1, 6, 0), 16: (4, 1, 8, 0),
        1000: (10, 1, 20, 0)}


@pytest.mark.parametrize("algo,table", [("ring", RING), ("mesh", MESH), ("nhr", NHR), ("tree", TREE)])
@pytest.mark.parametrize("n", NS)
def test_resources_per_algorithm(algo: str, table: dict, n: int) -> None:
    p = _plan(algo, n)
    assert (p.n_channels, p.threads, p.channel_notifies, p.thread_notifies) == table[n]


ALLREDUCE_STEPS = {
    "ring": {2: 2, 3: 4, 4: 6, 8: 14, 16: 30, 1000: 1998},
    "mesh": {2: 2, 3: 2, 4: 2, 8: 2, 16: 2, 1000: 2},
    "tree": {2: 2, 3: 4, 4: 4, 8: 6, 16: 8, 1000: 20},     # 2 log2 p, else 2 floor(log2 p) + 2
    "nhr": {2: 2, 3: 4, 4: 4, 8: 6, 16: 8, 1000: 20},      # 2 ceil(log2 p)
}
RS_STEPS = {
    "ring": {2: 1, 3: 2, 4: 3, 8: 7, 16: 15, 1000: 999},
    "mesh": {2: 1, 3: 1, 4: 1, 8: 1, 16: 1, 1000: 1},
    "tree": {2: 1, 3: 3, 4: 2, 8: 3, 16: 4, 1000: 11},     # log2 p, else floor(log2 p) + 2
    "nhr": {2: 1, 3: 2, 4: 2, 8: 3, 16: 4, 1000: 10},
}


@pytest.mark.parametrize("algo", ["ring", "mesh", "tree", "nhr"])
@pytest.mark.parametrize("n", NS)
def test_step_counts(algo: str, n: int) -> None:
    assert _plan(algo, n).steps == ALLREDUCE_STEPS[algo][n]
    assert _plan(algo, n, "reduce_scatter").steps == RS_STEPS[algo][n]
    assert _plan(algo, n, "allgather").steps == RS_STEPS[algo][n]


def test_rooted_step_counts() -> None:
    assert _plan("ring", 8, "broadcast").steps == 7
    assert _plan("mesh", 8, "broadcast").steps == 1
    assert _plan("tree", 8, "broadcast").steps == 3
    assert _plan("tree", 5, "reduce").steps == 3
    assert _plan("nhr", 8, "broadcast").steps == 6
    assert _plan("nhr", 8, "alltoall").steps == 3
    assert _plan("ring", 8, "alltoall").steps == 7
    assert _plan("mesh", 8, "barrier").steps == 1
    assert _plan("tree", 6, "barrier").steps == 4


def test_rhd_non_power_of_two_roles_1000() -> None:
    p = _plan("tree", 1000)
    roles = {r.name: (r.n_ranks, r.n_channels) for r in p.roles}
    assert roles == {"rhd+fold": (488, 10), "folded": (488, 1), "rhd": (24, 9)}
    assert [c.peer for c in p.resources_for(1).channels] == [0]
    assert len(p.resources_for(999).channels) == 9


def test_rooted_mesh_is_a_star() -> None:
    p = _plan("mesh", 8, "broadcast", root=3)
    roles = {r.name: (r.n_ranks, r.threads, r.n_channels) for r in p.roles}
    assert roles == {"root": (1, 7, 7), "leaf": (7, 1, 1)}
    assert [c.peer for c in p.resources_for(5).channels] == [3]


def test_binomial_tree_broadcast_8() -> None:
    p = _plan("tree", 8, "broadcast", root=2)
    assert sorted(c.peer for c in p.resources_for(2).channels) == [3, 4, 6]   # v = 1, 2, 4
    assert sorted(c.peer for c in p.resources_for(3).channels) == [2, 5, 7]   # v=1: parent 0, kids 3, 5
    assert sum(r.n_ranks for r in p.roles) == 8


def test_nhr_allgather_uses_two_threads() -> None:
    r = _plan("nhr", 8, "allgather").resources_for(0)
    assert r.threads == 2 and r.thread_notify_counts == (1 + 1, 2) and r.thread_notifies == 3


def test_single_rank_needs_one_thread_for_its_copy() -> None:
    """N = 1: no channels, no steps; the local copy of a collective that moves data needs one thread."""
    for algo in ("ring", "mesh", "tree", "nhr"):
        p = _plan(algo, 1)
        assert (p.threads, p.n_channels, p.steps, p.modelled_time_us) == (1, 0, 0, 0.0)
        assert _plan(algo, 1, op="broadcast").threads == 0
        assert p.resources_for(0).total_notifies == 1   # the host-sync notify of the one thread


@pytest.mark.parametrize("servers,devices,inter,channels", [
    (2, 8, "nhr", 8), (2, 8, "ring", 8), (4, 8, "ring", 9), (4, 8, "nhr", 10), (16, 8, "nhr", 14),
])
def test_hierarchical_examples(servers: int, devices: int, inter: str, channels: int) -> None:
    p = make_plan("allreduce", Topology.from_shape(servers, devices), 1 << 20, "hierarchical",
                  inter_algorithm=inter)
    assert p.n_channels == channels
    assert p.threads == 7 and p.thread_notifies == 12
    assert p.channel_notifies == 2 * channels
    r = p.resources_for(9)
    assert [c.level for c in r.channels].count("intra") == 7
    assert all(c.protocol is Protocol.ROCE for c in r.channels if c.level == "inter")
    assert all(p_.topology.server_of(c.peer) != 1 for p_ in [p] for c in r.channels if c.level == "inter")


def test_hierarchical_2x8_totals() -> None:
    p = make_plan("allreduce", Topology.from_shape(2, 8), 1 << 20, "hierarchical")
    r = p.resources_for(0)
    assert (r.threads, len(r.channels), r.channel_notifies, r.thread_notifies, r.host_sync_notifies) == \
        (7, 8, 16, 12, 1)
    assert p.steps == 1 + 2 + 1     # intra RS, inter AR over 2 servers, intra AG


def test_ccu_fixes_eight_notifies_per_channel() -> None:
    p = _plan("ring", 4, engine="ccu")
    assert all(c.notify_num == 8 for c in p.resources_for(0).channels)
    assert any("CCU" in w for w in p.warnings)


def test_notifies_per_channel_three_like_hccl() -> None:
    assert _plan("mesh", 8, notifies_per_channel=3).channel_notifies == 21
