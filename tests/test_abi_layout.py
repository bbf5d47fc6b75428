"""The cdef's struct layouts and enum values against compiler-derived golden data, for both header generations."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

from hcomm_cffi import enums
from hcomm_cffi._ffi import ffi

GOLDEN: Dict[str, Any] = json.loads((Path(__file__).parent / "data" / "abi_golden.json").read_text())
NEW = GOLDEN["hcomm_2026_08"]
OLD = GOLDEN["hcomm_2026_04"]

# Structs of the 2026-04 headers whose layout is unchanged in 2026-08 (the cdef declares the 2026-08 form).
OLD_SHARED = ["HcclRootInfo", "HcclSendRecvItem", "HcclConfigValue", "CommAbiHeader", "CommAddr",
              "EndpointLoc", "EndpointDesc", "CommMem", "HcclChannelDesc", "CommLink"]


def _field(ctype: str, path: str) -> Tuple[int, int]:
    """(offset, size) of a dotted field path as cffi lays it out."""
    parts = path.split(".")
    offset = ffi.offsetof(ctype, *parts)
    t = ffi.typeof(ctype)
    for part in parts:
        t = dict(t.fields)[part].type
    return offset, ffi.sizeof(t)


def _check_struct(cdef_name: str, golden: Dict[str, Any]) -> None:
    assert ffi.sizeof(cdef_name) == golden["size"], f"sizeof({cdef_name})"
    assert ffi.alignof(cdef_name) == golden["align"], f"alignof({cdef_name})"
    mismatches = {
        path: (_field(cdef_name, path), tuple(expected))
        for path, expected in golden["fields"].items()
        if _field(cdef_name, path) != tuple(expected)
    }
    assert not mismatches, f"{cdef_name}: (cffi, golden) per field: {mismatches}"


@pytest.mark.parametrize("name", sorted(NEW["structs"]))
def test_struct_layout_2026_08(name: str) -> None:
    _check_struct(name, NEW["structs"][name])


def _opaque(name: str) -> bool:
    """A struct declared without its fields (a handle type such as aclprofConfig): it has no layout to check."""
    try:
        ffi.sizeof(name)
    except ffi.error:
        return True
    return False


def test_every_cdef_struct_has_golden_data() -> None:
    declared = {t for t in ffi.list_types()[0] if ffi.typeof(t).kind in ("struct", "union") and not _opaque(t)}
    declared -= {"HcclCommConfigV10", "HcclConfigValue", "in_addr", "in6_addr"}
    covered = set(NEW["structs"]) | {"HcclConfigValue"}
    assert declared - covered == set()


@pytest.mark.parametrize("name", OLD_SHARED)
def test_shared_struct_layout_2026_04(name: str) -> None:
    _check_struct(name, OLD["structs"][name])


def test_comm_config_v10_is_the_2026_04_layout() -> None:
    _check_struct("HcclCommConfigV10", OLD["structs"]["HcclCommConfig"])
    assert ffi.sizeof("HcclCommConfigV10") == 2240
    assert ffi.sizeof("HcclCommConfig") == 2248
    assert ffi.offsetof("HcclCommConfig", "hcclChannelSqDepth") == 2240


def test_hcomm_channel_desc_v1_is_a_prefix_of_v4() -> None:
    old = OLD["structs"]["HcommChannelDesc"]
    assert old["size"] == 344 == ffi.offsetof("HcommChannelDesc", "qos")
    for path, (offset, _size) in old["fields"].items():
        if not path.startswith("roceAttr") and path != "raws":
            assert ffi.offsetof("HcommChannelDesc", *path.split(".")) == offset, path


def test_typedef_sizes() -> None:
    for name in ("HcclComm", "ThreadHandle", "ChannelHandle", "aclrtStream", "aclrtEvent",
                 "HcommTeamHandle", "HcclCommStateCallback"):
        assert ffi.sizeof(name) == 8, name
    for name in ("HcommResult", "aclError", "EndpointAttrBwCoeff"):
        assert ffi.sizeof(name) == 4, name


@pytest.mark.parametrize("enum_name", sorted(NEW["enums"]))
def test_enum_values_2026_08(enum_name: str) -> None:
    assert ffi.typeof(enum_name).relements == NEW["enums"][enum_name]
    storage = NEW["enum_storage"][enum_name]
    assert ffi.sizeof(enum_name) == storage["size"] == 4
    as_int = int(ffi.cast(enum_name, -1))
    assert (as_int == -1) == storage["underlying_signed"], enum_name


# Old members that are not in the 2026-08 cdef, each a documented header change:
# (enum, old member) -> (value, the 2026-08 name of that value or None if it was removed)
OLD_ONLY = {
    ("HcclDataType", "HCCL_DATA_TYPE_MXFP8"): (18, None),
    ("HcommDataType", "HCOMM_DATA_TYPE_MXFP8"): (18, None),
    ("HcclOpExpansionMode", "HCCL_OP_EXPANSION_CCU_MS"): (4, "HCCL_OP_EXPANSION_MODE_CCU_MS"),
    ("HcclOpExpansionMode", "HCCL_OP_EXPANSION_CCU_SCHED"): (5, "HCCL_OP_EXPANSION_MODE_CCU_SCHED"),
}


@pytest.mark.parametrize("enum_name", sorted(OLD["enums"]))
def test_enum_values_2026_04_are_compatible(enum_name: str) -> None:
    current = ffi.typeof(enum_name).relements
    for member, value in OLD["enums"][enum_name].items():
        if (enum_name, member) in OLD_ONLY:
            expected_value, new_name = OLD_ONLY[(enum_name, member)]
            assert value == expected_value and member not in current
            if new_name is None:
                assert value not in ffi.typeof(enum_name).elements
            else:
                assert current[new_name] == value
        else:
            assert current[member] == value, f"{enum_name}.{member}"


def test_2026_04_data_type_mxfp8_and_protocol_differences() -> None:
    assert OLD["enums"]["HcclDataType"]["HCCL_DATA_TYPE_MXFP8"] == 18 == enums.DATA_TYPE_MXFP8_2026_04
    assert 18 not in set(enums.DataType)
    old_proto = OLD["enums"]["CommProtocol"]
    assert set(old_proto.values()) == set(range(-1, 7))
    assert old_proto["COMM_PROTOCOL_UBC_CTP"] == 4 and "COMM_PROTOCOL_UB_CTP" not in old_proto
    new_proto = NEW["enums"]["CommProtocol"]
    assert new_proto["COMM_PROTOCOL_UB_CTP"] == new_proto["COMM_PROTOCOL_UBC_CTP"] == 4
    assert new_proto["COMM_PROTOCOL_UBG"] == new_proto["COMM_PROTOCOL_UB_RTP"] == 9


@pytest.mark.parametrize("py_enum, c_enum, prefix", [
    (enums.HcclResult, "HcclResult", "HCCL_"),
    (enums.DataType, "HcclDataType", "HCCL_DATA_TYPE_"),
    (enums.DataType, "HcommDataType", "HCOMM_DATA_TYPE_"),
    (enums.ReduceOp, "HcclReduceOp", "HCCL_REDUCE_"),
    (enums.ReduceOp, "HcommReduceOp", "HCOMM_REDUCE_"),
    (enums.Engine, "CommEngine", "COMM_ENGINE_"),
    (enums.Protocol, "CommProtocol", "COMM_PROTOCOL_"),
    (enums.MemcpyKind, "aclrtMemcpyKind", "ACL_MEMCPY_"),
    (enums.MemMallocPolicy, "aclrtMemMallocPolicy", "ACL_MEM_MALLOC_"),
])
def test_python_enums_match_golden(py_enum: Any, c_enum: str, prefix: str) -> None:
    golden = NEW["enums"][c_enum]
    for member in py_enum:
        assert golden[prefix + member.name] == member.value, member
    members_with_prefix = {k: v for k, v in golden.items() if k.startswith(prefix)}
    assert set(members_with_prefix.values()) == {m.value for m in py_enum}


def test_send_recv_type_and_constants() -> None:
    assert {m.value for m in enums.SendRecvType} == set(NEW["enums"]["HcclSendRecvType"].values())
    constants = NEW["constants"]
    assert constants["HCCL_ROOT_INFO_BYTES"] == enums.HCCL_ROOT_INFO_BYTES == ffi.sizeof("HcclRootInfo")
    assert constants["HCCL_COMM_DEFAULT_BUFFSIZE"] == enums.HCCL_COMM_DEFAULT_BUFFSIZE_MB
    assert enums.ACL_MEM_TYPE_HIGH_BAND_WIDTH == NEW["enums"]["aclrtMemMallocPolicy"]["ACL_MEM_TYPE_HIGH_BAND_WIDTH"]
