"""Hypothesis properties of the planner (reference formulas re-derived here, not imported)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hcomm_cffi.plan import ALGORITHMS, PLATFORMS, Collective, Topology, compare_algorithms, make_plan

FLAT = ("ring", "mesh", "tree", "nhr")
OPS = [c.value for c in Collective if c is not Collective.SENDRECV]
sizes = st.integers(min_value=0, max_value=1 << 34).map(lambda x: x - x % 4)


def _ref_nhr(n: int) -> int:
    peers, d = set(), 1
    while d < n:
        peers |= {d % n, (-d) % n}
        d *= 2
    peers.discard(0)
    return len(peers)


@given(st.integers(2, 5000))
def test_ring_resources_are_bounded_independently_of_n(n: int) -> None:
    p = make_plan("allreduce", Topology.single_server(n), 1 << 20, "ring")
    assert (p.threads, p.thread_notifies) == ((1, 0) if n == 2 else (2, 2))   # N = 2: one direction
    assert p.n_channels == (1 if n == 2 else 2)
    assert p.channel_notifies <= 4


@given(st.integers(2, 3000), st.sampled_from(["allreduce", "allgather", "alltoall", "barrier"]))
def test_mesh_channels_are_n_minus_1(n: int, op: str) -> None:
    p = make_plan(op, Topology.single_server(n), 1024, "mesh")
    assert p.n_channels == n - 1 and p.threads == n - 1
    assert p.channel_notifies == 2 * (n - 1)


@given(st.integers(2, 64), st.integers(1, 16), st.sampled_from(["ring", "nhr", "tree", "mesh"]))
def test_hierarchical_is_intra_plus_inter(servers: int, devices: int, inter: str) -> None:
    p = make_plan("allreduce", Topology.from_shape(servers, devices), 1 << 20, "hierarchical",
                  inter_algorithm=inter)
    intra = make_plan("allreduce", Topology.single_server(devices), 1 << 20, "mesh")
    other = make_plan("allreduce", Topology.single_server(servers), 1 << 20, inter)
    assert p.n_channels == intra.n_channels + other.n_channels
    assert p.threads == max(intra.threads, other.threads)
    if inter == "nhr":
        assert p.n_channels == (devices - 1) + _ref_nhr(servers)


@given(st.integers(2, 4096), st.data())
def test_nhr_channel_count_and_symmetry(n: int, data: st.DataObject) -> None:
    p = make_plan("reduce_scatter", Topology.single_server(n), 4096, "nhr")
    assert p.n_channels == _ref_nhr(n)
    r = data.draw(st.integers(0, n - 1))
    for ch in p.resources_for(r).channels:
        assert r in {c.peer for c in p.resources_for(ch.peer).channels}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ALGORITHMS), st.sampled_from(OPS), st.integers(1, 6), st.integers(1, 6), st.data())
def test_every_plan_is_consistent(algo: str, op: str, servers: int, devices: int, data: st.DataObject) -> None:
    """Channels are symmetric with equal protocols; roles partition the ranks; summaries match ranks."""
    topo = Topology.from_shape(servers, devices)
    root = data.draw(st.integers(0, topo.n_ranks - 1))
    platform = data.draw(st.sampled_from(PLATFORMS))
    cands = {c.algorithm: c for c in compare_algorithms(op, topo, 1 << 16, root=root, platform=platform,
                                                        algorithms=ALGORITHMS)}
    plan = cands[algo].plan
    if plan is None:
        return
    assert sum(r.n_ranks for r in plan.roles) == topo.n_ranks
    summary = {r.name: r for r in plan.roles}
    counted = {name: 0 for name in summary}
    for rank in range(topo.n_ranks):
        res = plan.resources_for(rank)
        counted[res.role] += 1
        s = summary[res.role]
        assert (res.threads, len(res.channels), res.total_notifies) == (s.threads, s.n_channels, s.total_notifies)
        assert len({c.peer for c in res.channels}) == len(res.channels)
        for ch in res.channels:
            assert ch.peer != rank
            back = [c for c in plan.resources_for(ch.peer).channels if c.peer == rank]
            assert len(back) == 1 and back[0].protocol is ch.protocol and back[0].notify_num == ch.notify_num
    assert counted == {r.name: r.n_ranks for r in plan.roles}


@given(st.integers(2, 2000), st.sampled_from(["ring", "mesh", "nhr"]),
       st.sampled_from(["reduce_scatter", "allgather"]), sizes)
def test_bytes_per_rank_are_n_minus_1_over_n(n: int, algo: str, op: str, size: int) -> None:
    p = make_plan(op, Topology.single_server(n), size, algo)
    total = sum(v for _, v in p.bytes_per_link_class)
    assert abs(total - (n - 1) * size / n) <= 1
    assert p.pieces == max(1, -(-size // (200 << 20)))


@settings(max_examples=60)
@given(st.integers(1, 8), st.integers(1, 16), st.sampled_from(OPS), sizes)
def test_auto_picks_a_valid_minimum(servers: int, devices: int, op: str, size: int) -> None:
    topo = Topology.from_shape(servers, devices)
    best = make_plan(op, topo, size)
    cands = compare_algorithms(op, topo, size)
    valid = {c.algorithm: c.plan.modelled_time_us for c in cands if c.plan is not None}
    assert best.algorithm in valid
    assert best.modelled_time_us == min(valid.values())
    for c in cands:
        assert c.algorithm in best.explanation
        if c.plan is None:
            assert c.reason and c.reason in best.explanation
