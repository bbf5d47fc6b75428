"""Ranktable parsing (1.0, 1.2, 2.0) and every validation error's message."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from hcomm_cffi.enums import Protocol
from hcomm_cffi.plan import RanktableError, Topology, load_ranktable, make_plan, parse_ranktable

DATA = Path(__file__).parent / "data"


def _load(name: str) -> dict:
    return json.loads((DATA / f"ranktable_{name}.json").read_text())


def test_v1_0_two_servers() -> None:
    topo = load_ranktable(DATA / "ranktable_v1_0.json")
    assert topo.n_ranks == 8 and topo.servers == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert topo.server_ids == ("srv-a", "srv-b")
    assert topo.link(1, 2) is Protocol.HCCS and topo.link(3, 4) is Protocol.ROCE
    assert topo.server_of(6) == 1 and topo.local_rank(6) == 2


def test_v1_0_single_server_without_device_ip() -> None:
    topo = load_ranktable(DATA / "ranktable_v1_0_single.json")
    assert topo.n_servers == 1 and topo.n_ranks == 8


def test_v1_2_super_pods() -> None:
    topo = load_ranktable(DATA / "ranktable_v1_2.json")
    assert topo.n_ranks == 8 and topo.super_pods == ("0", "0")


def test_v2_0_servers_from_net_layer_0() -> None:
    topo = load_ranktable(DATA / "ranktable_v2_0.json")
    assert topo.servers == ((0, 1, 2), (3, 4, 5)) and topo.devices_per_server == 3
    plan = make_plan("allreduce", topo, 1 << 20, "hierarchical")
    assert plan.n_channels == 2 + 1


@pytest.mark.parametrize("name,needles", [
    ("duplicate_rank", ["'rank_id'", "duplicate rank_id 2", "srv-a", "srv-b"]),
    ("noncontiguous", ["'rank_id'", "srv-a", "[0, 1, 2, 7]", "not contiguous"]),
    ("missing_device_ip", ["'device_ip'", "rank 6", "more than one server"]),
    ("int_in_v1", ["'rank_id'", "device[1]", "must be JSON strings"]),
    ("string_in_v2", ["'device_id'", "rank 4", "must be JSON integers"]),
    ("status", ["'status'", "'initializing'", "completed"]),
    ("comments", ["not valid JSON", "line 2"]),
])
def test_broken_ranktables(name: str, needles: list) -> None:
    with pytest.raises(RanktableError) as info:
        load_ranktable(DATA / f"ranktable_bad_{name}.json")
    msg = str(info.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_missing_file() -> None:
    with pytest.raises(RanktableError, match="cannot read"):
        load_ranktable(DATA / "no_such_ranktable.json")


def test_unknown_version() -> None:
    data = _load("v1_0")
    data["version"] = "3.1"
    with pytest.raises(RanktableError, match="field 'version' is '3.1'"):
        parse_ranktable(data)


def test_server_count_mismatch() -> None:
    data = _load("v1_0")
    data["server_count"] = "3"
    with pytest.raises(RanktableError, match="'server_count' is '3' but server_list has 2"):
        parse_ranktable(data)


def test_rank_ids_must_start_at_zero() -> None:
    data = _load("v1_0")
    for server in data["server_list"]:
        for dev in server["device"]:
            dev["rank_id"] = str(int(dev["rank_id"]) + 1)
    with pytest.raises(RanktableError, match="rank_id 8 .* out of range"):
        parse_ranktable(data)


def test_v2_rank_count_and_local_id() -> None:
    data = _load("v2_0")
    bad = copy.deepcopy(data)
    bad["rank_count"] = 7
    with pytest.raises(RanktableError, match="'rank_count' is 7 but rank_list has 6"):
        parse_ranktable(bad)
    bad = copy.deepcopy(data)
    bad["rank_list"][2]["local_id"] = 65
    with pytest.raises(RanktableError, match=r"rank 2\).*'local_id' is 65"):
        parse_ranktable(bad)


def test_v1_2_empty_super_pod_list_rejected() -> None:
    data = _load("v1_2")
    data["super_pod_list"] = []
    with pytest.raises(RanktableError, match="'super_pod_list' must be a non-empty list"):
        parse_ranktable(data)


def test_topology_shape_and_errors() -> None:
    topo = Topology.from_shape(3, 4)
    assert topo.servers[2] == (8, 9, 10, 11) and topo.link(0, 4) is Protocol.ROCE
    with pytest.raises(ValueError, match="servers=0"):
        Topology.from_shape(0, 4)
    with pytest.raises(ValueError, match="ranks=0"):
        Topology.single_server(0)
    with pytest.raises(ValueError, match="itself"):
        topo.link(3, 3)
    with pytest.raises(ValueError, match="rank 5 appears on servers 0 and 1"):
        Topology(6, ((0, 1, 5), (2, 3, 5)))


# ---------------------------------------------------------------------------------------------- issue 46 item 7
def _v1(n: int, ident=str) -> dict:
    """A 1.2 ranktable of ``n`` one-device servers in one super pod; server ids made by ``ident``."""
    return {"version": "1.2", "status": "completed", "server_count": str(n),
            "server_list": [{"server_id": ident(f"s{i}"),
                             "device": [{"device_id": "0", "device_ip": "10.0.0.1", "rank_id": str(i)}]}
                            for i in range(n)],
            "super_pod_list": [{"super_pod_id": "p0", "server_list": [{"server_id": ident(f"s{i}")} for i in range(n)]}]}


def test_deeply_nested_json_is_a_ranktable_error(tmp_path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 200000 + "]" * 200000)
    with pytest.raises(RanktableError, match=f"ranktable '{path}': JSON nested too deeply"):
        load_ranktable(path)


def test_a_number_of_thousands_of_digits_is_a_ranktable_error(tmp_path) -> None:
    path = tmp_path / "digits.json"
    path.write_text('{"version": "2.0", "status": "completed", "rank_count": ' + "9" * 5000 + "}")
    with pytest.raises(RanktableError, match=f"ranktable '{path}': not a usable JSON document: .*digits"):
        load_ranktable(path)
    table = _v1(2)
    table["server_list"][1]["device"][0]["rank_id"] = "1" * 5000      # 1.0/1.2 numbers are strings
    path.write_text(json.dumps(table))
    with pytest.raises(RanktableError, match=f"{path}: server 's1' device\\[0\\]: field 'rank_id' is a 5000-digit "
                                             "number; expected at most 18 digits"):
        load_ranktable(path)
    table["server_list"][1]["device"][0]["rank_id"] = "１"             # a digit to Python, not to the vendor
    path.write_text(json.dumps(table))
    with pytest.raises(RanktableError, match="field 'rank_id' is '１'; expected a decimal integer"):
        load_ranktable(path)


class _CountingId(str):
    """A server id that counts how often it is compared for equality (hash lookups compare only on a collision)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountingId.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_parsing_is_linear_in_the_number_of_servers() -> None:
    """Finding duplicate or unknown server ids must not compare every id with every other (quadratic: 4,000 servers
    took seconds); counted, not timed."""
    n = 2000
    _CountingId.compared = 0
    topo = parse_ranktable(_v1(n, _CountingId))
    assert topo.n_ranks == n and len(topo.super_pods) == n
    assert _CountingId.compared <= 10 * n, _CountingId.compared     # a few per server (before: ~n²/2)
