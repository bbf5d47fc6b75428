"""The headers' inline initializers under their C names and the headers' constants: a C program ports line by line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict

import pytest

import hcomm_cffi
from hcomm_cffi import constants
from hcomm_cffi import initializers as init
from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import Engine, Protocol
from hcomm_cffi.initializers import (
    CommLinkInit, EndpointDescInit, HcclChannelDescInit, HcclCommConfigInit, HcclKernelLaunchCfgInit,
    HcclOpDescInit, HcclTeamCreateChannelsDescInit, HcclTeamCreateDescInit, HcommChannelDescInit, ThreadConfigInit,
)

GOLDEN: Dict[str, Any] = json.loads((Path(__file__).parent / "data" / "abi_golden.json").read_text())
NEW, OLD = GOLDEN["hcomm_2026_08"], GOLDEN["hcomm_2026_04"]
HCCL_SUCCESS, HCCL_E_PTR = 0, 2

# C initializer -> (struct, the Python initializer it must match)
ARRAY: Dict[str, Any] = {
    "HcclChannelDescInit": (HcclChannelDescInit, "HcclChannelDesc", init.channel_desc_init),
    "EndpointDescInit": (EndpointDescInit, "EndpointDesc", init.endpoint_desc_init),
    "ThreadConfigInit": (ThreadConfigInit, "ThreadConfig", init.thread_config_init),
    "HcommChannelDescInit": (HcommChannelDescInit, "HcommChannelDesc", init.hcomm_channel_desc_init),
    "CommLinkInit": (CommLinkInit, "CommLink", init.comm_link_init),
}
SINGLE: Dict[str, Any] = {
    "HcclOpDescInit": (HcclOpDescInit, "HcclOpDesc", init.op_desc_init),
    "HcclKernelLaunchCfgInit": (HcclKernelLaunchCfgInit, "HcclKernelLaunchCfg", init.kernel_launch_cfg_init),
    "HcclTeamCreateDescInit": (HcclTeamCreateDescInit, "HcclTeamCreateDesc", init.team_create_desc_init),
    "HcclTeamCreateChannelsDescInit": (HcclTeamCreateChannelsDescInit, "HcclTeamCreateChannelsDesc",
                                       init.team_create_channels_desc_init),
}


def golden(name: str) -> bytes:
    return bytes.fromhex(NEW["initializers"][name]["hex"])


def dirty(ctype: str) -> Any:
    """Memory as C leaves it on the stack: not zero (0xAA everywhere)."""
    mem = ffi.new(ctype)
    ffi.memmove(mem, b"\xaa" * ffi.sizeof(mem), ffi.sizeof(mem))
    return mem


def test_every_golden_initializer_has_its_c_name() -> None:
    assert set(NEW["initializers"]) == set(ARRAY) | set(SINGLE) | {"HcclCommConfigInit"}
    for name in NEW["initializers"]:
        assert getattr(init, name).__name__ == name and name in init.__all__


@pytest.mark.parametrize("name", sorted(ARRAY))
@pytest.mark.parametrize("n", [1, 3])
def test_array_initializers_write_the_golden_bytes(name: str, n: int) -> None:
    fn, ctype, python = ARRAY[name]
    arr = dirty(f"{ctype}[{n}]")
    assert fn(arr, n) == HCCL_SUCCESS
    assert bytes(ffi.buffer(arr)) == golden(name) * n == bytes(ffi.buffer(python(n)))


@pytest.mark.parametrize("name", sorted(ARRAY))
def test_array_initializers_on_a_pointer_and_on_part_of_an_array(name: str) -> None:
    fn, ctype, _python = ARRAY[name]
    one = dirty(f"{ctype} *")
    assert fn(one, 1) == HCCL_SUCCESS and bytes(ffi.buffer(one)) == golden(name)
    arr = dirty(f"{ctype}[3]")
    assert fn(arr, 2) == HCCL_SUCCESS                        # like C: only descNum elements are written
    size = ffi.sizeof(ctype)
    assert bytes(ffi.buffer(arr))[: 2 * size] == golden(name) * 2
    assert bytes(ffi.buffer(arr))[2 * size:] == b"\xaa" * size


@pytest.mark.parametrize("name", sorted(ARRAY))
def test_array_initializers_null_and_zero_count_as_in_c(name: str) -> None:
    fn, ctype, _python = ARRAY[name]
    assert fn(ffi.NULL, 1) == HCCL_E_PTR
    assert fn(ffi.cast(f"{ctype} *", 0), 2) == HCCL_E_PTR
    assert fn(ffi.NULL, 0) == HCCL_SUCCESS                   # NULL is only checked for a count > 0
    arr = dirty(f"{ctype}[1]")
    assert fn(arr, 0) == HCCL_SUCCESS and bytes(ffi.buffer(arr)) == b"\xaa" * ffi.sizeof(arr)


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_single_initializers_write_the_golden_bytes(name: str) -> None:
    fn, ctype, python = SINGLE[name]
    desc = dirty(f"{ctype} *")
    assert fn(desc) == HCCL_SUCCESS
    assert bytes(ffi.buffer(desc)) == golden(name) == bytes(ffi.buffer(python()))
    assert fn(ffi.NULL) == HCCL_E_PTR and fn(None) == HCCL_E_PTR


@pytest.mark.parametrize("ctype, block, python_version", [("HcclCommConfig", NEW, 11), ("HcclCommConfigV10", OLD, 10)])
def test_comm_config_init_matches_the_python_one_byte_for_byte(ctype: str, block: Dict[str, Any],
                                                               python_version: int) -> None:
    config = dirty(f"{ctype} *")
    assert HcclCommConfigInit(config) is None                # void in C
    reference = dirty(f"{ctype} *")
    init.comm_config_init(python_version, out=reference)
    assert bytes(ffi.buffer(config)) == bytes(ffi.buffer(reference))
    clean = ffi.new(f"{ctype} *")
    HcclCommConfigInit(clean)
    assert bytes(ffi.buffer(clean)) == bytes.fromhex(block["initializers"]["HcclCommConfigInit"]["hex"])
    HcclCommConfigInit(ffi.NULL)                              # ignored, as in C


@pytest.mark.parametrize("call, message", [
    (lambda: HcclChannelDescInit(ffi.new("ThreadConfig[1]"), 1),
     "channelDesc has C type 'ThreadConfig\\[1\\]'; expected 'HcclChannelDesc \\*'"),
    (lambda: HcclChannelDescInit([0], 1), "channelDesc=\\[0\\] is not a cdata; expected 'HcclChannelDesc \\*'"),
    (lambda: HcclChannelDescInit(ffi.new("HcclChannelDesc *"), 2),
     "channelDesc holds 496 bytes but 2 x HcclChannelDesc need 992 \\(pass a HcclChannelDesc\\[2\\] array"),
    (lambda: EndpointDescInit(ffi.new("EndpointDesc[2]"), 3), "endpoint holds 320 bytes but 3 x EndpointDesc"),
    (lambda: ThreadConfigInit(ffi.new("ThreadConfig[1]"), -1), "num=-1 is out of range; expected 0..4294967295"),
    (lambda: CommLinkInit(ffi.new("CommLink[1]"), 1.0), "linkNum=1.0 is not an int"),
    (lambda: HcclOpDescInit(ffi.new("char[400]")), "opDesc has C type 'char\\[400\\]'; expected 'HcclOpDesc \\*'"),
    (lambda: HcclCommConfigInit(ffi.new("HcclChannelDesc *")),
     "config has C type .*; expected 'HcclCommConfig \\*' or 'HcclCommConfigV10 \\*'"),
])
def test_bad_arguments_name_the_c_parameter(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_python_initializers_accept_a_struct_pointer_in_place() -> None:
    # the natural port of `HcclCommConfig config; HcclCommConfigInit(&config);` with the Python names
    cfg = ffi.new("HcclCommConfig *")
    assert init.comm_config_init(out=cfg) is cfg
    assert bytes(ffi.buffer(cfg)) == golden("HcclCommConfigInit")
    op = ffi.new("HcclOpDesc *")
    assert init.op_desc_init(out=op) is op and bytes(ffi.buffer(op)) == golden("HcclOpDescInit")


def test_a_vendor_sample_ports_line_by_line() -> None:
    # HcclTeamChannelsCreate sample (hccl docs): init the descriptor, then set what differs from the defaults
    channelsDesc = ffi.new("HcclTeamCreateChannelsDesc *")
    assert HcclTeamCreateChannelsDescInit(channelsDesc) == HCCL_SUCCESS
    channelsDesc.engine = Engine.AICPU_TS
    channelsDesc.notifyNum = 8
    assert channelsDesc.header.magicWord == hcomm_cffi.HCCL_TEAM_CREATE_CHANNELS_DESC_MAGIC_WORD
    assert channelsDesc.header.version == hcomm_cffi.HCCL_TEAM_CREATE_CHANNELS_DESC_VERSION
    assert channelsDesc.protocol == -1 and channelsDesc.channelCnt == 0
    # HcclChannelDesc descs[2]; HcclChannelDescInit(descs, 2); descs[i].remoteRank = ...
    descs = ffi.new("HcclChannelDesc[2]")
    assert hcomm_cffi.HcclChannelDescInit(descs, 2) == HCCL_SUCCESS
    for i, peer in enumerate((1, 3)):
        descs[i].remoteRank = peer
        descs[i].channelProtocol = Protocol.HCCS
        descs[i].notifyNum = 4
    assert bytes(ffi.buffer(descs)) == bytes(ffi.buffer(init.make_channel_descs([1, 3], Protocol.HCCS, 4)))
    rootInfo = ffi.new("HcclRootInfo *")
    assert ffi.sizeof(rootInfo[0]) == hcomm_cffi.HCCL_ROOT_INFO_BYTES


def test_constants_are_the_compiled_headers_values() -> None:
    # abi_golden.json's constants were read from the headers by a compiler
    assert set(NEW["constants"]) <= set(constants.__all__)
    for name, value in NEW["constants"].items():
        assert getattr(constants, name) == value, name
    assert OLD["constants"]["HCCL_COMM_CONFIG_VERSION"] == constants.HCCL_COMM_CONFIG_VERSION_2026_04
    assert OLD["constants"]["HCOMM_CHANNEL_VERSION"] == constants.HCOMM_CHANNEL_VERSION_2026_04


def test_initializers_write_the_named_constants() -> None:
    cfg = init.comm_config_init()
    assert cfg.hcclBufferSize == constants.HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET
    assert cfg.hcclExecTimeOut == constants.HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET
    assert cfg.hcclSymWinMaxMemSizePerRank == constants.HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE
    assert init.hcomm_channel_desc_image(constants.HCOMM_CHANNEL_VERSION_ONE)[8:12] == \
        constants.HCOMM_CHANNEL_DESC_ABI_V1_SIZE.to_bytes(4, "little")


def test_top_level_exports_are_the_same_objects() -> None:
    for name in init.__all__:
        if name[0].isupper() and name.endswith("Init"):
            assert getattr(hcomm_cffi, name) is getattr(init, name), name
    for name in constants.__all__:
        assert getattr(hcomm_cffi, name) == getattr(constants, name), name
    assert "HcclChannelDescInit" in dir(hcomm_cffi) and "HCCL_CHANNEL_MAGIC_WORD" in hcomm_cffi.__all__
    with pytest.raises(AttributeError, match="no attribute 'HcclChanelDescInit'"):
        getattr(hcomm_cffi, "HcclChanelDescInit")


def test_import_stays_light() -> None:
    code = ("import sys, hcomm_cffi as h; h.HCCL_ROOT_INFO_BYTES; "
            "print(sorted(m for m in sys.modules if m in ('hcomm_cffi.initializers', 'hcomm_cffi._ffi', 'cffi')))")
    env = {**os.environ, "PYTHONPATH": str(Path(hcomm_cffi.__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, env=env)
    assert out.stdout.strip() == "[]"
