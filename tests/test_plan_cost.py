"""Cost model, buffer sizing, quotas/warnings, argument errors and auto selection."""
from __future__ import annotations

import json

import pytest

from hcomm_cffi.enums import Engine, Protocol
from hcomm_cffi.plan import (CostModel, InvalidAlgorithm, LinkCost, Phase, Topology,
                             compare_algorithms, make_plan, parse_size)


def test_parse_size() -> None:
    assert parse_size("64M") == 64 << 20
    assert parse_size("1k") == 1024 and parse_size("2G") == 2 << 30 and parse_size("123") == 123
    for bad in ("12Q", "", "-1", "1.5M"):
        with pytest.raises(ValueError, match="is not a size"):
            parse_size(bad)


def test_phase_time_is_alpha_beta_gamma() -> None:
    model = CostModel(links={Protocol.HCCS: LinkCost(10.0, 50.0, 7)}, reduce_gbps=100.0)
    ph = Phase("x", 3, 50e6, 50e6, fanout=1, reduce_bytes=100e6, link=Protocol.HCCS)
    # 3 x 10 us + 50 MB / 50 GB/s (1000 us) + 100 MB / 100 GB/s (1000 us)
    assert model.phase_us(ph, Engine.AICPU) == pytest.approx(2030.0)
    assert model.phase_us(ph, Engine.AICPU, pieces=2) == pytest.approx(2060.0)
    wide = Phase("y", 1, 70e6, 70e6, fanout=14, link=Protocol.HCCS)   # 14 peers share 7 links
    assert model.phase_us(wide, Engine.AICPU) == pytest.approx(10 + 200.0)
    assert model.phase_us(wide, Engine.AIV) == pytest.approx(2.5 + 200.0)


def test_overrides_and_json(tmp_path) -> None:
    base = CostModel()
    m = base.with_overrides(alpha_us={Protocol.ROCE: 5.0}, bw_gbps={Protocol.HCCS: 100.0})
    assert m.link(Protocol.ROCE).alpha_us == 5.0 and m.link(Protocol.HCCS).bw_gbps == 100.0
    assert m.link(Protocol.HCCS).links == 7 and base.link(Protocol.HCCS).bw_gbps == 50.0
    f = tmp_path / "cost.json"
    f.write_text(json.dumps({"roce": {"bw_gbps": 12.5}, "reduce_gbps": 10}))
    loaded = CostModel.from_json_file(f)
    assert loaded.link(Protocol.ROCE).bw_gbps == 12.5 and loaded.reduce_gbps == 10
    with pytest.raises(ValueError, match="unknown keys"):
        CostModel.from_dict({"hccs": {"latency": 1}})
    with pytest.raises(ValueError, match="bw_gbps=0"):
        LinkCost(1.0, 0.0)


def test_faster_roce_speeds_up_cross_server_plans() -> None:
    topo = Topology.from_shape(4, 8)
    slow = make_plan("allreduce", topo, "256M", "ring")
    fast = make_plan("allreduce", topo, "256M", "ring",
                     cost=CostModel().with_overrides(bw_gbps={Protocol.ROCE: 96.0}))
    assert fast.modelled_time_us < slow.modelled_time_us


def test_buffer_pieces_and_config() -> None:
    topo = Topology.single_server(8)
    p = make_plan("allreduce", topo, "1G", "ring")
    assert p.buffer_bytes_needed == 1 << 30 and p.buffer_half_bytes == 200 << 20
    assert not p.buffer_fits and p.pieces == 6 and p.total_steps == 6 * 14
    assert p.comm_config_buffer_mb() == 200 and p.comm_config_buffer_mb(max_mb=2048) == 1024
    small = make_plan("allreduce", topo, "3M", "ring")
    assert small.buffer_fits and small.pieces == 1 and small.comm_config_buffer_mb() == 3
    assert make_plan("barrier", topo, "3M", "ring").buffer_bytes_needed == 0
    assert make_plan("allreduce", topo, "1G", "ring", buffer_mb=1024).pieces == 1


def test_quota_warnings() -> None:
    p = make_plan("allgather", Topology.single_server(300), "1M", "mesh")
    assert any("299 threads exceed the quota of 200" in w for w in p.warnings)
    assert any("thread notifies exceed the quota of 65536" in w for w in p.warnings)
    q = make_plan("allgather", Topology.single_server(8), "1M", "mesh", notifies_per_channel=65)
    assert any("65 notifies per channel exceed the maximum of 64" in w for w in q.warnings)
    assert make_plan("allgather", Topology.single_server(8), "1M", "mesh").warnings == ()
    r = make_plan("allreduce", Topology.single_server(8), "1M", "ring", dtype="int64")
    assert any("INT64" in w for w in r.warnings)


def test_argument_errors_name_the_argument() -> None:
    topo = Topology.single_server(4)
    with pytest.raises(ValueError, match="algorithm='fast'"):
        make_plan("allreduce", topo, 1024, "fast")
    with pytest.raises(ValueError, match="collective 'allsum'"):
        make_plan("allsum", topo, 1024, "ring")
    with pytest.raises(ValueError, match=r"root=4 is outside \[0, 4\)"):
        make_plan("broadcast", topo, 1024, "ring", root=4)
    with pytest.raises(ValueError, match="not a multiple of the FP32 element size"):
        make_plan("allreduce", topo, 1023, "ring")
    with pytest.raises(ValueError, match="engine='gpu'"):
        make_plan("allreduce", topo, 1024, "ring", engine="gpu")
    with pytest.raises(InvalidAlgorithm, match="more than one server"):
        make_plan("allreduce", topo, 1024, "hierarchical")
    with pytest.raises(InvalidAlgorithm, match="alltoall"):
        make_plan("alltoall", topo, 1024, "tree")


def test_auto_explains_candidates() -> None:
    p = make_plan("allreduce", Topology.single_server(8), "64M")
    assert p.algorithm == "mesh"
    assert "hierarchical: invalid (hierarchical needs more than one server" in p.explanation
    for name in ("ring", "tree", "nhr"):
        assert f"{name}: " in p.explanation
    big = make_plan("allreduce", Topology.from_shape(4, 8), "256M")
    assert big.algorithm == "hierarchical"
    cands = compare_algorithms("alltoall", Topology.single_server(8), "1M")
    assert [c.algorithm for c in cands if c.plan is None] == ["tree", "hierarchical"]


def test_small_messages_favour_few_steps() -> None:
    topo = Topology.single_server(8)
    small = {c.algorithm: c.plan.modelled_time_us for c in compare_algorithms("allreduce", topo, 64)
             if c.plan}
    assert small["mesh"] < small["tree"] < small["ring"]


def test_sendrecv_roles_and_link() -> None:
    p = make_plan("sendrecv", Topology.from_shape(2, 4), "8M", "ring", root=1, peer=6)
    assert {r.name: r.n_ranks for r in p.roles} == {"sender": 1, "receiver": 1, "idle": 6}
    (ch,) = p.resources_for(6).channels
    assert ch.peer == 1 and ch.protocol is Protocol.ROCE
    assert p.resources_for(0).threads == 0 and p.steps == 1
    assert dict(p.bytes_per_link_class) == {"ROCE": 8 << 20}


def test_to_dict_is_json() -> None:
    p = make_plan("reduce", Topology.from_shape(2, 4), "1M", "hierarchical", root=5,
                  inter_algorithm="mesh")
    d = json.loads(json.dumps(p.to_dict()))
    assert d["algorithm"] == "hierarchical" and d["collective"] == "reduce" and d["root"] == 5
    assert {r["name"] for r in d["roles"]} == {"root/root", "root/leaf", "leaf/-"}
    assert d["topology"]["n_servers"] == 2 and d["comm_config_buffer_mb"] == 1
