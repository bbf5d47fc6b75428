"""Byte-exact Python versions of the headers' static-inline initializers, plus validated builders.

The C headers initialise HcclCommConfig, HcclChannelDesc, ... with ``static inline`` helpers that
no shared library exports, so they are reimplemented here on cffi memory (the headers are cited below).
Each ``*_init`` allocates zeroed memory with ``ffi.new`` (or initialises ``out`` in place) and then
applies exactly the writes of the C helper, so bytes the helper leaves alone keep their old value.
"""
from __future__ import annotations

import struct
from typing import Any, Dict, Iterable, Optional, Tuple, Union

from ._ffi import ffi
from .constants import (
    BUFFER_NAME_MAX_LENGTH, COMM_LINK_MAGIC_WORD, COMM_LINK_VERSION, COMM_NAME_MAX_LENGTH,
    HCCL_CHANNEL_MAGIC_WORD, HCCL_CHANNEL_VERSION, HCCL_COMM_ALGO_MAX_LENGTH,
    HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET, HCCL_COMM_CONFIG_MAGIC_WORD, HCCL_COMM_CONFIG_VERSION,
    HCCL_COMM_CONFIG_VERSION_2026_04, HCCL_COMM_DEFAULT_OP_EXPANSION_MODE,
    HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET, HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET,
    HCCL_COMM_QOS_CONFIG_NOT_SET, HCCL_COMM_RETRY_ENABLE_MAX_LENGTH, HCCL_COMM_RETRY_PARAMS_MAX_LENGTH,
    HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET, HCCL_COMM_SQ_DEPTH_CONFIG_NOT_SET,
    HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET, HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE,
    HCCL_KERNEL_LAUNCH_CFG_MAGIC_WORD, HCCL_KERNEL_LAUNCH_CFG_VERSION, HCCL_OPDESC_MAGIC_WORD,
    HCCL_OPDESC_VERSION, HCCL_TEAM_CREATE_CHANNELS_DESC_MAGIC_WORD, HCCL_TEAM_CREATE_CHANNELS_DESC_VERSION,
    HCCL_TEAM_CREATE_DESC_MAGIC_WORD, HCCL_TEAM_CREATE_DESC_VERSION, HCOMM_CHANNEL_DESC_ABI_V1_SIZE,
    HCOMM_CHANNEL_MAGIC_WORD, HCOMM_CHANNEL_VERSION, HCOMM_CHANNEL_VERSION_ONE,
    HCOMM_THREAD_CONFIG_MAGIC_WORD, HCOMM_THREAD_CONFIG_VERSION, UDI_MAX_LENGTH,
)
from .enums import MAX_CHANNEL_NOTIFIES, Protocol

__all__ = [
    "comm_config_init", "channel_desc_init", "endpoint_desc_init", "thread_config_init",
    "hcomm_channel_desc_init", "hcomm_channel_desc_image", "comm_link_init", "op_desc_init",
    "kernel_launch_cfg_init", "team_create_desc_init", "team_create_channels_desc_init",
    "make_comm_config", "make_channel_descs",
    "COMM_CONFIG_MAGIC_WORD", "COMM_CONFIG_VERSION", "COMM_CONFIG_SIZES",
    # the header initializers under their C names, with their C arguments and return codes
    "HcclCommConfigInit", "HcclChannelDescInit", "EndpointDescInit", "ThreadConfigInit", "HcommChannelDescInit",
    "CommLinkInit", "HcclOpDescInit", "HcclKernelLaunchCfgInit", "HcclTeamCreateDescInit",
    "HcclTeamCreateChannelsDescInit",
]

CData = Any  # a cffi cdata object

COMM_CONFIG_MAGIC_WORD = HCCL_COMM_CONFIG_MAGIC_WORD
COMM_CONFIG_VERSION = HCCL_COMM_CONFIG_VERSION          # 2026-08 headers; 10 = 2026-04 headers
COMM_CONFIG_SIZES = {HCCL_COMM_CONFIG_VERSION: 2248, HCCL_COMM_CONFIG_VERSION_2026_04: 2240}
_COMM_CONFIG_TYPES = {HCCL_COMM_CONFIG_VERSION: "HcclCommConfig", HCCL_COMM_CONFIG_VERSION_2026_04: "HcclCommConfigV10"}
_U32_NOT_SET = 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# helpers

def _fill(ptr: CData, nbytes: int, value: int) -> None:
    ffi.memmove(ptr, bytes((value,)) * nbytes, nbytes)


def _set_header(header: CData, version: int, magic: int, size: int) -> None:
    header.version = version
    header.magicWord = magic
    header.size = size
    header.reserved = 0


def _endpoint_fields(ep: CData) -> None:
    # EndpointDescInit after its 0xFF fill: the three "reserved" enums (-1, i.e. 0xFF bytes too)
    ep.protocol = -1
    ep.commAddr.type = -1
    ep.loc.locType = -1


def _capacity(out: CData) -> int:
    """Bytes known to be writable at ``out``: an array's size, or the one element a ``T *`` points at."""
    ctype = ffi.typeof(out)
    if ctype.kind == "pointer":
        try:
            return ffi.sizeof(ctype.item)      # a C 'T *' promises one T (ffi.sizeof(out) is the pointer's 8)
        except (ffi.error, TypeError):         # void * and function pointers: nothing known
            return 0
    return ffi.sizeof(out)


def _view(ctype: str, out: CData) -> CData:
    """``out`` itself if it is a ``ctype`` array or pointer, else a ``ctype *`` cast of it."""
    out_type = ffi.typeof(out)
    if out_type.kind in ("array", "pointer") and out_type.item is ffi.typeof(ctype):
        return out
    return ffi.cast(f"{ctype} *", out)


def _array(ctype: str, n: int, out: Optional[CData], name: str = "out") -> CData:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n={n!r} is not a valid element count; expected an int >= 0")
    if out is None:
        return ffi.new(f"{ctype}[]", n)
    if _capacity(out) < n * ffi.sizeof(ctype):
        raise ValueError(
            f"{name} holds {_capacity(out)} bytes but {n} x {ctype} need {n * ffi.sizeof(ctype)}"
            + (f" (pass a {ctype}[{n}] array, not a pointer)" if ffi.typeof(out).kind == "pointer" else "")
        )
    return _view(ctype, out)


_IMAGES: Dict[str, bytes] = {}


def _image(ctype: str) -> bytes:
    """One element's bytes after the initializer, computed once by applying its writes on scratch memory."""
    cached = _IMAGES.get(ctype)
    if cached is None:
        scratch = ffi.new(f"{ctype} *")
        _WRITERS[ctype](scratch)
        cached = _IMAGES[ctype] = bytes(ffi.buffer(scratch))
    return cached


def _init_array(ctype: str, n: int, out: Optional[CData], name: str = "out") -> CData:
    arr = _array(ctype, n, out, name)
    if n:
        image = _image(ctype)
        ffi.memmove(arr, image * n, len(image) * n)
    return arr


# ---------------------------------------------------------------------------------------------
# the writes of each C initializer, applied to one element

def _write_endpoint_desc(ep: CData) -> None:
    _fill(ep, ffi.sizeof("EndpointDesc"), 0xFF)
    _endpoint_fields(ep)


def _write_channel_desc(d: CData) -> None:
    _fill(d, ffi.sizeof("HcclChannelDesc"), 0xFF)
    _set_header(d.header, HCCL_CHANNEL_VERSION, HCCL_CHANNEL_MAGIC_WORD, ffi.sizeof("HcclChannelDesc"))
    d.remoteRank = _U32_NOT_SET
    d.channelProtocol = -1
    d.notifyNum = 0
    d.memHandles = ffi.NULL
    d.memHandleNum = 0
    _endpoint_fields(d.localEndpoint)
    _endpoint_fields(d.remoteEndpoint)


def _write_thread_config(c: CData) -> None:
    _fill(c, ffi.sizeof("ThreadConfig"), 0)
    _set_header(c.header, HCOMM_THREAD_CONFIG_VERSION, HCOMM_THREAD_CONFIG_MAGIC_WORD, ffi.sizeof("ThreadConfig"))
    c.notifyNumPerThread = 0


def _write_hcomm_channel_desc(d: CData) -> None:
    _fill(d, ffi.sizeof("HcommChannelDesc"), 0xFF)
    _set_header(d.header, HCOMM_CHANNEL_VERSION, HCOMM_CHANNEL_MAGIC_WORD, ffi.sizeof("HcommChannelDesc"))
    _endpoint_fields(d.remoteEndpoint)
    d.notifyNum = 0
    d.exchangeAllMems = False
    d.memHandles = ffi.NULL
    d.memHandleNum = 0
    d.socket = ffi.NULL
    d.role = -1
    d.port = 0
    d.roceAttr.srcPortList = ffi.NULL
    d.channelName = ffi.NULL


def _write_comm_link(link: CData) -> None:
    _fill(link, ffi.sizeof("CommLink"), 0xFF)
    _set_header(link.header, COMM_LINK_VERSION, COMM_LINK_MAGIC_WORD, ffi.sizeof("CommLink"))
    _endpoint_fields(link.srcEndpointDesc)
    _endpoint_fields(link.dstEndpointDesc)
    link.linkAttr.linkProtocol = -1
    link.linkAttr.hop = 1


def _write_op_desc(d: CData) -> None:
    _fill(d, ffi.sizeof("HcclOpDesc"), 0xFF)
    _set_header(d.header, HCCL_OPDESC_VERSION, HCCL_OPDESC_MAGIC_WORD, ffi.sizeof("HcclOpDesc"))


def _write_kernel_launch_cfg(c: CData) -> None:
    _fill(c, ffi.sizeof("HcclKernelLaunchCfg"), 0xFF)
    _set_header(c.header, HCCL_KERNEL_LAUNCH_CFG_VERSION, HCCL_KERNEL_LAUNCH_CFG_MAGIC_WORD, ffi.sizeof("HcclKernelLaunchCfg"))


def _write_team_create_desc(d: CData) -> None:
    _fill(d, ffi.sizeof("HcclTeamCreateDesc"), 0xFF)
    _set_header(d.header, HCCL_TEAM_CREATE_DESC_VERSION, HCCL_TEAM_CREATE_DESC_MAGIC_WORD, ffi.sizeof("HcclTeamCreateDesc"))
    d.rankIds = ffi.NULL
    d.rankNum = 0
    d.selfRankId = 0
    d.netLayer = 0
    d.protocol = -1
    d.requirement.signalCount = 0
    d.requirement.counterCount = 0
    d.requirement.barrierCount = 0          # requirement.reserved[5] stays 0xFF
    for i in range(4):
        d.reserved[i] = 0


def _write_team_create_channels_desc(d: CData) -> None:
    _fill(d, ffi.sizeof("HcclTeamCreateChannelsDesc"), 0xFF)
    _set_header(d.header, HCCL_TEAM_CREATE_CHANNELS_DESC_VERSION, HCCL_TEAM_CREATE_CHANNELS_DESC_MAGIC_WORD,
                ffi.sizeof("HcclTeamCreateChannelsDesc"))
    d.engine = -1
    d.notifyNum = 0
    d.protocol = -1
    d.channelCnt = 0
    for i in range(4):
        d.reserved[i] = 0


_WRITERS = {
    "EndpointDesc": _write_endpoint_desc,
    "HcclChannelDesc": _write_channel_desc,
    "ThreadConfig": _write_thread_config,
    "HcommChannelDesc": _write_hcomm_channel_desc,
    "CommLink": _write_comm_link,
    "HcclOpDesc": _write_op_desc,
    "HcclKernelLaunchCfg": _write_kernel_launch_cfg,
    "HcclTeamCreateDesc": _write_team_create_desc,
    "HcclTeamCreateChannelsDesc": _write_team_create_channels_desc,
}


# ---------------------------------------------------------------------------------------------
# public initializers

def comm_config_init(version: int = COMM_CONFIG_VERSION, out: Optional[CData] = None) -> CData:
    """HcclCommConfigInit: an ``HcclCommConfig *`` (version 11, 2248 bytes) or ``HcclCommConfigV10 *`` (10, 2240 bytes).

    With ``out`` the config is initialised in place; like the C helper, the tails of the char
    arrays and the padding bytes are left as they were.
    """
    if version not in COMM_CONFIG_SIZES:
        raise ValueError(f"version={version!r} is not a known HcclCommConfig version; expected 10 or 11")
    ctype = _COMM_CONFIG_TYPES[version]
    size = COMM_CONFIG_SIZES[version]
    if out is None:
        cfg = ffi.new(f"{ctype} *")
    else:
        if _capacity(out) < size:
            raise ValueError(f"out holds {_capacity(out)} bytes; HcclCommConfig v{version} needs {size}")
        cfg = _view(ctype, out)
    ffi.memmove(cfg, struct.pack("<QIIQ", size, COMM_CONFIG_MAGIC_WORD, version, 0), 24)
    cfg.hcclBufferSize = HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET
    cfg.hcclDeterministic = HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET
    cfg.hcclCommName[0] = b"\0"
    cfg.hcclUdi[0] = b"\0"
    cfg.hcclOpExpansionMode = HCCL_COMM_DEFAULT_OP_EXPANSION_MODE
    cfg.hcclRdmaTrafficClass = HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET
    cfg.hcclRdmaServiceLevel = HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET
    cfg.hcclWorldRankID = 0
    cfg.hcclJobID = 0
    cfg.aclGraphZeroCopyEnable = 0
    cfg.hcclExecTimeOut = HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET
    cfg.hcclAlgo[0] = b"\0"
    cfg.hcclRetryEnable[0] = b"\0"
    cfg.hcclRetryParams[0] = b"\0"
    cfg.hcclBufferName[0] = b"\0"
    cfg.hcclQos = HCCL_COMM_QOS_CONFIG_NOT_SET
    cfg.hcclSymWinMaxMemSizePerRank = HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE
    if version >= HCCL_COMM_CONFIG_VERSION:
        cfg.hcclChannelSqDepth = HCCL_COMM_SQ_DEPTH_CONFIG_NOT_SET
    return cfg


def channel_desc_init(n: int = 1, out: Optional[CData] = None) -> CData:
    """HcclChannelDescInit on ``HcclChannelDesc[n]``: 0xFF everywhere, header v1, remoteRank/protocol unset, no notifies."""
    return _init_array("HcclChannelDesc", n, out)


def endpoint_desc_init(n: int = 1, out: Optional[CData] = None) -> CData:
    """EndpointDescInit on ``EndpointDesc[n]``: all 160 bytes 0xFF (protocol, address type and location type = -1)."""
    return _init_array("EndpointDesc", n, out)


def thread_config_init(n: int = 1, out: Optional[CData] = None) -> CData:
    """ThreadConfigInit on ``ThreadConfig[n]`` (2026-08 headers): zeroed, header v1, notifyNumPerThread 0."""
    return _init_array("ThreadConfig", n, out)


def hcomm_channel_desc_init(n: int = 1, out: Optional[CData] = None) -> CData:
    """HcommChannelDescInit on ``HcommChannelDesc[n]`` (ABI v4, 360 bytes)."""
    return _init_array("HcommChannelDesc", n, out)


def hcomm_channel_desc_image(version: int = 4) -> bytes:
    """Bytes of one HcommChannelDesc after HcommChannelDescInit: v4 (360 bytes, 2026-08) or v1 (344 bytes, 2026-04)."""
    if version == HCOMM_CHANNEL_VERSION:
        return _image("HcommChannelDesc")
    if version == HCOMM_CHANNEL_VERSION_ONE:
        d = ffi.new("HcommChannelDesc *")
        _write_hcomm_channel_desc(d)
        _set_header(d.header, HCOMM_CHANNEL_VERSION_ONE, HCOMM_CHANNEL_MAGIC_WORD, HCOMM_CHANNEL_DESC_ABI_V1_SIZE)
        _fill(ffi.addressof(d, "raws"), 128, 0xFF)   # the v1 union has no srcPortList to clear
        return bytes(ffi.buffer(d))[:HCOMM_CHANNEL_DESC_ABI_V1_SIZE]
    raise ValueError(f"version={version!r} is not a known HcommChannelDesc ABI version; expected 1 or 4")


def comm_link_init(n: int = 1, out: Optional[CData] = None) -> CData:
    """CommLinkInit on ``CommLink[n]``: 0xFF, header v1, both endpoints reset, linkProtocol -1, hop 1."""
    return _init_array("CommLink", n, out)


def _single(ctype: str, out: Optional[CData]) -> CData:
    if out is not None:
        return _init_array(ctype, 1, out)
    ptr = ffi.new(f"{ctype} *")
    image = _image(ctype)
    ffi.memmove(ptr, image, len(image))
    return ptr


def op_desc_init(out: Optional[CData] = None) -> CData:
    """HcclOpDescInit: an ``HcclOpDesc *`` filled with 0xFF and an ABI header (v1, 360 bytes)."""
    return _single("HcclOpDesc", out)


def kernel_launch_cfg_init(out: Optional[CData] = None) -> CData:
    """HcclKernelLaunchCfgInit: an ``HcclKernelLaunchCfg *`` filled with 0xFF and an ABI header (v1, 128 bytes)."""
    return _single("HcclKernelLaunchCfg", out)


def team_create_desc_init(out: Optional[CData] = None) -> CData:
    """HcclTeamCreateDescInit: an ``HcclTeamCreateDesc *`` with no ranks, protocol -1, zero sync requirements."""
    return _single("HcclTeamCreateDesc", out)


def team_create_channels_desc_init(out: Optional[CData] = None) -> CData:
    """HcclTeamCreateChannelsDescInit: an ``HcclTeamCreateChannelsDesc *`` with engine/protocol -1 and no channels."""
    return _single("HcclTeamCreateChannelsDesc", out)


# ---------------------------------------------------------------------------------------------
# validated builders

_U32_MAX = 0xFFFFFFFF
_I32_MAX = 0x7FFFFFFF


def _check_int(name: str, value: Any, low: int, high: int, what: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} is not an int; expected {what or f'{low}..{high}'}")
    if not low <= value <= high:
        raise ValueError(f"{name}={value!r} is out of range; expected {what or f'{low}..{high}'}")
    return value


def _put_string(field: CData, name: str, value: Union[str, bytes], capacity: int) -> None:
    raw = value.encode("ascii") if isinstance(value, str) else bytes(value)
    try:
        raw.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"{name}={value!r} must be ASCII") from None
    if b"\0" in raw:
        raise ValueError(f"{name}={value!r} must not contain NUL characters")
    if len(raw) > capacity - 1:
        raise ValueError(
            f"{name}={value!r} is {len(raw)} bytes; at most {capacity - 1} fit (char[{capacity}] with its NUL)"
        )
    ffi.memmove(field, raw + b"\0", len(raw) + 1)


def _ascii(name: str, value: Union[str, bytes]) -> Union[str, bytes]:
    if isinstance(value, str):
        try:
            value.encode("ascii")
        except UnicodeEncodeError:
            raise ValueError(f"{name}={value!r} must be ASCII") from None
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise ValueError(f"{name}={value!r} is not a string; expected str or bytes")


def make_comm_config(
    buffer_size_mb: Optional[int] = None,
    deterministic: Optional[Union[bool, int]] = None,
    comm_name: Optional[Union[str, bytes]] = None,
    exec_timeout_s: Optional[int] = None,
    algo: Optional[Union[str, bytes]] = None,
    op_expansion_mode: Optional[int] = None,
    udi: Optional[Union[str, bytes]] = None,
    world_rank_id: Optional[int] = None,
    job_id: Optional[int] = None,
    rdma_traffic_class: Optional[int] = None,
    rdma_service_level: Optional[int] = None,
    aclgraph_zero_copy: Optional[bool] = None,
    retry_enable: Optional[Union[str, bytes]] = None,
    retry_params: Optional[Union[str, bytes]] = None,
    buffer_name: Optional[Union[str, bytes]] = None,
    qos: Optional[int] = None,
    sym_win_max_mem_gb: Optional[int] = None,
    channel_sq_depth: Optional[int] = None,
    version: int = COMM_CONFIG_VERSION,
) -> CData:
    """An initialised HcclCommConfig with the given fields set (None keeps the 'not set' default).

    Raises ValueError naming the argument for out-of-range numbers and for names that are not
    ASCII or do not fit their char array with the terminating NUL (127 bytes for names).
    """
    cfg = comm_config_init(version)
    if buffer_size_mb is not None:
        cfg.hcclBufferSize = _check_int("buffer_size_mb", buffer_size_mb, 1, _U32_MAX - 1,
                                        "an int number of MiB >= 1")
    if deterministic is not None:
        level = int(deterministic) if isinstance(deterministic, bool) else deterministic
        cfg.hcclDeterministic = _check_int("deterministic", level, 0, 2,
                                           "False/True or 0 (off), 1 (on), 2 (strict)")
    if exec_timeout_s is not None:
        cfg.hcclExecTimeOut = _check_int("exec_timeout_s", exec_timeout_s, 0, _I32_MAX,
                                         f"an int number of seconds 0..{_I32_MAX} (0 = never)")
    if op_expansion_mode is not None:
        cfg.hcclOpExpansionMode = _check_int("op_expansion_mode", op_expansion_mode, 0, 3,
                                             "0 (default), 1 (host), 2 (AI CPU) or 3 (AIV)")
    if world_rank_id is not None:
        cfg.hcclWorldRankID = _check_int("world_rank_id", world_rank_id, 0, _U32_MAX)
    if job_id is not None:
        cfg.hcclJobID = _check_int("job_id", job_id, 0, 2**64 - 1)
    if rdma_traffic_class is not None:
        cfg.hcclRdmaTrafficClass = _check_int("rdma_traffic_class", rdma_traffic_class, 0, 255)
    if rdma_service_level is not None:
        cfg.hcclRdmaServiceLevel = _check_int("rdma_service_level", rdma_service_level, 0, 7)
    if aclgraph_zero_copy is not None:
        cfg.aclGraphZeroCopyEnable = _check_int("aclgraph_zero_copy", int(aclgraph_zero_copy), 0, 1)
    if qos is not None:
        cfg.hcclQos = _check_int("qos", qos, 0, _U32_MAX - 1)
    if sym_win_max_mem_gb is not None:
        cfg.hcclSymWinMaxMemSizePerRank = _check_int("sym_win_max_mem_gb", sym_win_max_mem_gb, 1, 2**64 - 1)
    if channel_sq_depth is not None:
        if version < HCCL_COMM_CONFIG_VERSION:
            raise ValueError(f"channel_sq_depth={channel_sq_depth!r} needs HcclCommConfig version 11, not {version}")
        cfg.hcclChannelSqDepth = _check_int("channel_sq_depth", channel_sq_depth, 1, _U32_MAX - 1)
    for name, value, field, capacity in (
        ("comm_name", comm_name, "hcclCommName", COMM_NAME_MAX_LENGTH),
        ("udi", udi, "hcclUdi", UDI_MAX_LENGTH),
        ("algo", algo, "hcclAlgo", HCCL_COMM_ALGO_MAX_LENGTH),
        ("retry_enable", retry_enable, "hcclRetryEnable", HCCL_COMM_RETRY_ENABLE_MAX_LENGTH),
        ("retry_params", retry_params, "hcclRetryParams", HCCL_COMM_RETRY_PARAMS_MAX_LENGTH),
        ("buffer_name", buffer_name, "hcclBufferName", BUFFER_NAME_MAX_LENGTH),
    ):
        if value is not None:
            _put_string(getattr(cfg, field), name, _ascii(name, value), capacity)
    return cfg


def make_channel_descs(
    peers: Iterable[int],
    protocol: Union[Protocol, int],
    notify_num: int,
) -> CData:
    """``HcclChannelDesc[len(peers)]``, initialised, one per remote rank, with ``protocol`` and ``notify_num`` notifies.

    ``notify_num`` must be 0..64 (the per-channel maximum) and every peer a rank id >= 0.
    """
    peer_list = list(peers)
    if not peer_list:
        raise ValueError("peers=[] is empty; expected at least one remote rank id")
    for i, peer in enumerate(peer_list):
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < _U32_MAX:
            raise ValueError(f"peers[{i}]={peer!r} is not a rank id; expected an int 0..{_U32_MAX - 1}")
    try:
        proto = Protocol(protocol)
    except ValueError:
        raise ValueError(
            f"protocol={protocol!r} is not a CommProtocol value; expected one of "
            f"{[p.name for p in Protocol if p != Protocol.RESERVED]}"
        ) from None
    if proto == Protocol.RESERVED:
        raise ValueError("protocol=RESERVED (-1) is the 'not set' marker; pick a real protocol")
    _check_int("notify_num", notify_num, 0, MAX_CHANNEL_NOTIFIES,
               f"an int 0..{MAX_CHANNEL_NOTIFIES} (notifies per channel)")
    descs = channel_desc_init(len(peer_list))
    for i, peer in enumerate(peer_list):
        descs[i].remoteRank = peer
        descs[i].channelProtocol = int(proto)
        descs[i].notifyNum = notify_num
    return descs


# ---------------------------------------------------------------------------------------------
# the header initializers under their C names: C arguments (a pointer, or an array and a count),
# C return codes (HCCL_E_PTR for NULL), the same bytes as the Python initializers above.
# Vendor: hcomm @ 8958adb include/hccl/hccl_comm.h (HcclCommConfigInit), include/hccl/hccl_channel.h
# (HcclChannelDescInit), include/hcomm_res_defs.h (EndpointDescInit, ThreadConfigInit),
# include/hcomm_channel.h (HcommChannelDescInit), include/hccl/hccl_rank_graph.h (CommLinkInit),
# include/hccl/hccl_launch.h (HcclOpDescInit, HcclKernelLaunchCfgInit), include/hccl/hccl_team.h
# (HcclTeamCreate*DescInit); as those headers define them: NULL gives HCCL_E_PTR (2), checked only
# when the count is > 0, and HcclCommConfigInit returns nothing and ignores NULL.

_HCCL_E_PTR = 2


def _c_target(name: str, ptr: Any, ctypes: Tuple[str, ...]) -> Optional[CData]:
    """``ptr`` if it is a pointer to / array of one of ``ctypes``; None for NULL; else ValueError naming ``name``."""
    expected = " or ".join(f"'{c} *'" for c in ctypes)
    if ptr is None:
        return None
    try:
        ptr_type = ffi.typeof(ptr)
    except TypeError:
        raise ValueError(f"{name}={ptr!r} is not a cdata; expected {expected} "
                         f"(e.g. ffi.new('{ctypes[0]}[1]'))") from None
    if ptr_type.kind == "pointer" and ptr == ffi.NULL:
        return None
    if ptr_type.kind not in ("pointer", "array") or ptr_type.item not in [ffi.typeof(c) for c in ctypes]:
        raise ValueError(f"{name} has C type '{ptr_type.cname}'; expected {expected} or an array of it")
    return ptr


def _c_array_init(ctype: str, name: str, ptr: Any, count_name: str, count: Any) -> int:
    """The C array initializers: ``count`` elements at ``ptr``; 0, or HCCL_E_PTR for NULL with count > 0."""
    target = _c_target(name, ptr, (ctype,))
    _check_int(count_name, count, 0, _U32_MAX)
    if count == 0:
        return 0
    if target is None:
        return _HCCL_E_PTR
    _init_array(ctype, count, target, name)
    return 0


def _c_single_init(ctype: str, name: str, ptr: Any) -> int:
    """The C single-struct initializers: one element at ``ptr``; 0, or HCCL_E_PTR for NULL."""
    target = _c_target(name, ptr, (ctype,))
    if target is None:
        return _HCCL_E_PTR
    _init_array(ctype, 1, target, name)
    return 0


def HcclCommConfigInit(config: Any) -> None:  # noqa: N802 (the C name)
    """``void HcclCommConfigInit(HcclCommConfig *config)``: comm_config_init in place (v10 for HcclCommConfigV10); NULL is ignored."""
    target = _c_target("config", config, ("HcclCommConfig", "HcclCommConfigV10"))
    if target is not None:
        v10 = ffi.typeof(target).item is ffi.typeof("HcclCommConfigV10")
        comm_config_init(HCCL_COMM_CONFIG_VERSION_2026_04 if v10 else HCCL_COMM_CONFIG_VERSION, out=target)


def HcclChannelDescInit(channelDesc: Any, descNum: int) -> int:  # noqa: N802,N803
    """``HcclResult HcclChannelDescInit(HcclChannelDesc *channelDesc, uint32_t descNum)``: channel_desc_init in place."""
    return _c_array_init("HcclChannelDesc", "channelDesc", channelDesc, "descNum", descNum)


def EndpointDescInit(endpoint: Any, num: int) -> int:  # noqa: N802
    """``HcommResult EndpointDescInit(EndpointDesc *endpoint, uint32_t num)``: endpoint_desc_init in place."""
    return _c_array_init("EndpointDesc", "endpoint", endpoint, "num", num)


def ThreadConfigInit(config: Any, num: int) -> int:  # noqa: N802
    """``HcommResult ThreadConfigInit(ThreadConfig *config, uint32_t num)``: thread_config_init in place."""
    return _c_array_init("ThreadConfig", "config", config, "num", num)


def HcommChannelDescInit(channelDesc: Any, descNum: int) -> int:  # noqa: N802,N803
    """``HcommResult HcommChannelDescInit(HcommChannelDesc *channelDesc, uint32_t descNum)``: hcomm_channel_desc_init in place."""
    return _c_array_init("HcommChannelDesc", "channelDesc", channelDesc, "descNum", descNum)


def CommLinkInit(commLink: Any, linkNum: int) -> int:  # noqa: N802,N803
    """``HcommResult CommLinkInit(CommLink *commLink, uint32_t linkNum)``: comm_link_init in place."""
    return _c_array_init("CommLink", "commLink", commLink, "linkNum", linkNum)


def HcclOpDescInit(opDesc: Any) -> int:  # noqa: N802,N803
    """``HcclResult HcclOpDescInit(HcclOpDesc *opDesc)``: op_desc_init in place."""
    return _c_single_init("HcclOpDesc", "opDesc", opDesc)


def HcclKernelLaunchCfgInit(kernelLaunchCfg: Any) -> int:  # noqa: N802,N803
    """``HcclResult HcclKernelLaunchCfgInit(HcclKernelLaunchCfg *kernelLaunchCfg)``: kernel_launch_cfg_init in place."""
    return _c_single_init("HcclKernelLaunchCfg", "kernelLaunchCfg", kernelLaunchCfg)


def HcclTeamCreateDescInit(desc: Any) -> int:  # noqa: N802
    """``HcclResult HcclTeamCreateDescInit(HcclTeamCreateDesc *desc)``: team_create_desc_init in place."""
    return _c_single_init("HcclTeamCreateDesc", "desc", desc)


def HcclTeamCreateChannelsDescInit(desc: Any) -> int:  # noqa: N802
    """``HcclResult HcclTeamCreateChannelsDescInit(HcclTeamCreateChannelsDesc *desc)``: team_create_channels_desc_init in place."""
    return _c_single_init("HcclTeamCreateChannelsDesc", "desc", desc)
