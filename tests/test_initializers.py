"""The Python initializers produce the golden byte images of the C static-inline initializers; builders validate."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hcomm_cffi import initializers as init
from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import Protocol

GOLDEN: Dict[str, Any] = json.loads((Path(__file__).parent / "data" / "abi_golden.json").read_text())
NEW = GOLDEN["hcomm_2026_08"]["initializers"]
OLD = GOLDEN["hcomm_2026_04"]["initializers"]


def image(block: Dict[str, Any], name: str) -> bytes:
    return bytes.fromhex(block[name]["hex"])


# golden initializer name -> (cdef struct, python initializer returning an array of n)
ARRAY_INITS: Dict[str, Any] = {
    "HcclChannelDescInit": ("HcclChannelDesc", init.channel_desc_init),
    "EndpointDescInit": ("EndpointDesc", init.endpoint_desc_init),
    "ThreadConfigInit": ("ThreadConfig", init.thread_config_init),
    "HcommChannelDescInit": ("HcommChannelDesc", init.hcomm_channel_desc_init),
    "CommLinkInit": ("CommLink", init.comm_link_init),
}
SINGLE_INITS: Dict[str, Any] = {
    "HcclOpDescInit": ("HcclOpDesc", init.op_desc_init),
    "HcclKernelLaunchCfgInit": ("HcclKernelLaunchCfg", init.kernel_launch_cfg_init),
    "HcclTeamCreateDescInit": ("HcclTeamCreateDesc", init.team_create_desc_init),
    "HcclTeamCreateChannelsDescInit": ("HcclTeamCreateChannelsDesc", init.team_create_channels_desc_init),
}


def test_every_golden_initializer_is_covered() -> None:
    assert set(NEW) == set(ARRAY_INITS) | set(SINGLE_INITS) | {"HcclCommConfigInit"}


def test_comm_config_v11_bytes() -> None:
    cfg = init.comm_config_init()
    assert ffi.typeof(cfg) is ffi.typeof("HcclCommConfig *")
    assert bytes(ffi.buffer(cfg)) == image(NEW, "HcclCommConfigInit")


def test_comm_config_v10_bytes_match_2026_04() -> None:
    cfg = init.comm_config_init(version=10)
    assert ffi.typeof(cfg) is ffi.typeof("HcclCommConfigV10 *")
    assert ffi.sizeof(cfg[0]) == 2240
    assert bytes(ffi.buffer(cfg)) == image(OLD, "HcclCommConfigInit")


@pytest.mark.parametrize("version, block", [(11, NEW), (10, OLD)])
def test_comm_config_leaves_untouched_ranges_alone(version: int, block: Dict[str, Any]) -> None:
    golden = block["HcclCommConfigInit"]
    size = golden["size"]
    buf = ffi.new("uint8_t[]", size)
    ffi.memmove(buf, b"\xaa" * size, size)
    init.comm_config_init(version=version, out=buf)
    got = bytes(ffi.buffer(buf))
    expected = bytearray(image(block, "HcclCommConfigInit"))
    untouched = set()
    for first, last in golden["untouched_inclusive"]:
        untouched.update(range(first, last + 1))
        expected[first:last + 1] = b"\xaa" * (last + 1 - first)
    assert got == bytes(expected)
    # and on a zeroed buffer the untouched ranges stay zero, as in the golden image
    assert all(image(block, "HcclCommConfigInit")[i] == 0 for i in untouched)


@pytest.mark.parametrize("name", sorted(ARRAY_INITS))
@pytest.mark.parametrize("n", [1, 3])
def test_array_initializers(name: str, n: int) -> None:
    ctype, fn = ARRAY_INITS[name]
    arr = fn(n)
    assert ffi.typeof(arr) is ffi.typeof(f"{ctype}[]") and len(arr) == n
    assert bytes(ffi.buffer(arr)) == image(NEW, name) * n


@pytest.mark.parametrize("name", sorted(ARRAY_INITS))
def test_array_initializers_in_place_overwrite_everything(name: str) -> None:
    ctype, fn = ARRAY_INITS[name]
    out = ffi.new(f"{ctype}[2]")
    ffi.memmove(out, b"\xaa" * ffi.sizeof(out), ffi.sizeof(out))
    assert fn(2, out=out) is out
    assert bytes(ffi.buffer(out)) == image(NEW, name) * 2     # golden: no untouched bytes
    assert NEW[name]["untouched_inclusive"] == []


@pytest.mark.parametrize("name", sorted(SINGLE_INITS))
def test_single_initializers(name: str) -> None:
    ctype, fn = SINGLE_INITS[name]
    ptr = fn()
    assert ffi.typeof(ptr) is ffi.typeof(f"{ctype} *")
    assert bytes(ffi.buffer(ptr)) == image(NEW, name)


@pytest.mark.parametrize("name", ["HcclChannelDescInit", "EndpointDescInit", "CommLinkInit"])
def test_2026_04_images_unchanged(name: str) -> None:
    _ctype, fn = ARRAY_INITS[name]
    assert bytes(ffi.buffer(fn(1))) == image(OLD, name)


def test_hcomm_channel_desc_v1_image() -> None:
    assert init.hcomm_channel_desc_image(1) == image(OLD, "HcommChannelDescInit")
    assert init.hcomm_channel_desc_image(4) == image(NEW, "HcommChannelDescInit")
    with pytest.raises(ValueError, match="version=2"):
        init.hcomm_channel_desc_image(2)


def test_channel_desc_fields_read_back() -> None:
    d = init.channel_desc_init(1)[0]
    assert (d.header.version, d.header.magicWord, d.header.size, d.header.reserved) == (1, 0x0F0F0F0F, 496, 0)
    assert d.remoteRank == 0xFFFFFFFF and d.channelProtocol == -1 and d.notifyNum == 0
    assert d.memHandles == ffi.NULL and d.roceAttr.queueNum == 0xFFFFFFFF
    assert d.localEndpoint.protocol == -1 and d.remoteEndpoint.loc.locType == -1


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="version=12"):
        init.comm_config_init(version=12)
    with pytest.raises(ValueError, match="n=-1"):
        init.channel_desc_init(-1)
    with pytest.raises(ValueError, match="out holds 496 bytes"):
        init.channel_desc_init(2, out=ffi.new("HcclChannelDesc[1]"))
    with pytest.raises(ValueError, match="needs 2248"):
        init.comm_config_init(out=ffi.new("HcclCommConfigV10 *"))


# ---------------------------------------------------------------- make_comm_config

def test_make_comm_config_sets_fields_and_keeps_defaults() -> None:
    cfg = init.make_comm_config(buffer_size_mb=1024, deterministic=True, comm_name="world",
                                exec_timeout_s=60, algo="level0:NA;level1:ring", job_id=7,
                                channel_sq_depth=128)
    assert cfg.hcclBufferSize == 1024 and cfg.hcclDeterministic == 1 and cfg.hcclExecTimeOut == 60
    assert ffi.string(cfg.hcclCommName) == b"world"
    assert ffi.string(cfg.hcclAlgo) == b"level0:NA;level1:ring"
    assert cfg.hcclJobID == 7 and cfg.hcclChannelSqDepth == 128
    assert cfg.hcclQos == 0xFFFFFFFF and cfg.hcclSymWinMaxMemSizePerRank == 16
    head = bytes(ffi.buffer(cfg))[:24]
    assert head == image(NEW, "HcclCommConfigInit")[:24]


def test_make_comm_config_all_defaults_is_init_image() -> None:
    assert bytes(ffi.buffer(init.make_comm_config())) == image(NEW, "HcclCommConfigInit")
    assert bytes(ffi.buffer(init.make_comm_config(version=10))) == image(OLD, "HcclCommConfigInit")


@pytest.mark.parametrize("kwargs, argument", [
    ({"buffer_size_mb": 0}, "buffer_size_mb"),
    ({"buffer_size_mb": 1.5}, "buffer_size_mb"),
    ({"deterministic": 3}, "deterministic"),
    ({"exec_timeout_s": -1}, "exec_timeout_s"),
    ({"comm_name": "x" * 128}, "comm_name"),
    ({"comm_name": "wörld"}, "comm_name"),
    ({"comm_name": "a\0b"}, "comm_name"),
    ({"comm_name": 5}, "comm_name"),
    ({"buffer_name": "b" * 128}, "buffer_name"),
    ({"algo": "a" * 1600}, "algo"),
    ({"retry_enable": "r" * 50}, "retry_enable"),
    ({"op_expansion_mode": 4}, "op_expansion_mode"),
    ({"channel_sq_depth": 8, "version": 10}, "channel_sq_depth"),
])
def test_make_comm_config_rejects(kwargs: Dict[str, Any], argument: str) -> None:
    with pytest.raises(ValueError) as info:
        init.make_comm_config(**kwargs)
    assert str(info.value).startswith(f"{argument}=")


def test_make_comm_config_limits_are_inclusive() -> None:
    cfg = init.make_comm_config(comm_name="n" * 127, buffer_size_mb=1, algo="a" * 1599, retry_enable="r" * 49)
    assert ffi.string(cfg.hcclCommName) == b"n" * 127 and cfg.hcclBufferSize == 1


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=127), max_size=127))
def test_comm_name_round_trips(name: str) -> None:
    cfg = init.make_comm_config(comm_name=name)
    assert ffi.string(cfg.hcclCommName).decode("ascii") == name
    assert cfg.hcclCommName[len(name)] == b"\0"


# ---------------------------------------------------------------- make_channel_descs

def test_make_channel_descs() -> None:
    descs = init.make_channel_descs([3, 1], Protocol.ROCE, 64)
    assert len(descs) == 2
    assert [d.remoteRank for d in descs] == [3, 1]
    assert all(d.channelProtocol == Protocol.ROCE and d.notifyNum == 64 for d in descs)
    # everything except the three fields is the initializer's image
    reference = init.channel_desc_init(1)[0]
    reference.remoteRank, reference.channelProtocol, reference.notifyNum = 1, int(Protocol.ROCE), 64
    assert bytes(ffi.buffer(ffi.addressof(descs, 1))) == bytes(ffi.buffer(ffi.addressof(reference)))


@pytest.mark.parametrize("peers, protocol, notify_num, argument", [
    ([], 0, 1, "peers"),
    ([-1], 0, 1, "peers[0]"),
    ([0, True], 0, 1, "peers[1]"),
    ([0, "1"], 0, 1, "peers[1]"),
    ([0], 42, 1, "protocol"),
    ([0], Protocol.RESERVED, 1, "protocol"),
    ([0], Protocol.HCCS, 65, "notify_num"),
    ([0], Protocol.HCCS, -1, "notify_num"),
])
def test_make_channel_descs_rejects(peers: List[Any], protocol: Any, notify_num: int, argument: str) -> None:
    with pytest.raises(ValueError) as info:
        init.make_channel_descs(peers, protocol, notify_num)
    assert str(info.value).startswith(argument)
