"""Python enums for the C enums users pass around, with their element sizes and dtype maps.

Values are the C values (checked against the compiled headers by the tests).  This module is
a leaf: every layer (emulator, binding, planner, algorithms) may import it.
"""
from __future__ import annotations

import enum
from typing import Any, Dict, Optional

import numpy as np

__all__ = [
    "HcclResult", "DataType", "ReduceOp", "Engine", "Protocol", "SendRecvType", "MemcpyKind",
    "MemMallocPolicy", "ELEMENT_SIZE", "HOST_REDUCE_DTYPES", "HOST_REDUCE_OPS",
    "dtype_from_numpy", "dtype_of_array", "ARRAY_DTYPE_NAMES", "numpy_dtype", "dtype_from_torch", "parse_dtype",
    "parse_reduce_op",
    "HCCL_ROOT_INFO_BYTES", "HCCL_COMM_DEFAULT_BUFFSIZE_MB", "MAX_CHANNEL_NOTIFIES",
    "MAX_THREAD_NOTIFIES", "MAX_THREADS_PER_COMM", "MAX_NOTIFIES_PER_COMM",
    "DEFAULT_EXEC_TIMEOUT_S", "DEFAULT_CONNECT_TIMEOUT_S",
]

HCCL_ROOT_INFO_BYTES = 4108
HCCL_COMM_DEFAULT_BUFFSIZE_MB = 200       # HCCL_BUFFSIZE default; the buffer is 2x this
MAX_CHANNEL_NOTIFIES = 64                 # notifyNum per channel end
MAX_THREAD_NOTIFIES = 65535               # notifyNumPerThread upper bound (inclusive)
MAX_THREADS_PER_COMM = 200                # A2/A3 default quota
MAX_NOTIFIES_PER_COMM = 65536             # A2/A3 thread-notify quota
DEFAULT_EXEC_TIMEOUT_S = 1836             # HCCL_EXEC_TIMEOUT default (27 x 68 s)
DEFAULT_CONNECT_TIMEOUT_S = 120           # HCCL_CONNECT_TIMEOUT default


class HcclResult(enum.IntEnum):
    """HcclResult codes; the Hcomm* data-plane calls return the same numbers as int32_t."""

    SUCCESS = 0
    E_PARA = 1
    E_PTR = 2
    E_MEMORY = 3
    E_INTERNAL = 4
    E_NOT_SUPPORT = 5
    E_NOT_FOUND = 6
    E_UNAVAIL = 7
    E_SYSCALL = 8
    E_TIMEOUT = 9
    E_OPEN_FILE_FAILURE = 10
    E_TCP_CONNECT = 11
    E_ROCE_CONNECT = 12
    E_TCP_TRANSFER = 13
    E_ROCE_TRANSFER = 14
    E_RUNTIME = 15
    E_DRV = 16
    E_PROFILING = 17
    E_CCE = 18
    E_NETWORK = 19
    E_AGAIN = 20
    E_REMOTE = 21
    E_SUSPENDING = 22
    E_OPRETRY_FAIL = 23
    E_OOM = 24
    E_IN_STATUS = 1041
    E_RESERVED = 1042

    @property
    def c_name(self) -> str:
        """The C spelling, e.g. ``HCCL_E_TIMEOUT``."""
        return "HCCL_" + self.name


class DataType(enum.IntEnum):
    """HcclDataType / HcommDataType (identical values).  13 is unused in the headers."""

    INT8 = 0
    INT16 = 1
    INT32 = 2
    FP16 = 3
    FP32 = 4
    INT64 = 5
    UINT64 = 6
    UINT8 = 7
    UINT16 = 8
    UINT32 = 9
    FP64 = 10
    BFP16 = 11
    INT128 = 12
    HIF8 = 14
    FP8E4M3 = 15
    FP8E5M2 = 16
    FP8E8M0 = 17
    RESERVED = 255

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return ELEMENT_SIZE[self]


# MXFP8 = 18 exists only in the 2026-04 headers; it is deliberately not a member.
DATA_TYPE_MXFP8_2026_04 = 18


class ReduceOp(enum.IntEnum):
    """HcclReduceOp / HcommReduceOp (identical values)."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    RESERVED = 255


class Engine(enum.IntEnum):
    """CommEngine: who executes the orchestration (the data-plane calls)."""

    RESERVED = -1
    CPU = 0
    CPU_TS = 1
    AICPU = 2
    AICPU_TS = 3
    AIV = 4
    CCU = 5


class Protocol(enum.IntEnum):
    """CommProtocol of a channel.  UBC_CTP (=4) and UBG (=9) are C aliases of UB_CTP and UB_RTP."""

    RESERVED = -1
    HCCS = 0
    ROCE = 1
    PCIE = 2
    SIO = 3
    UB_CTP = 4
    UBC_TP = 5
    UB_MEM = 6
    UBOE = 7
    HCCS_ONLY = 8
    UB_RTP = 9


class SendRecvType(enum.IntEnum):
    """HcclSendRecvType of an HcclSendRecvItem."""

    SEND = 0
    RECV = 1
    RESERVED = 2


class MemcpyKind(enum.IntEnum):
    """aclrtMemcpyKind (0-3 stable across ACL versions, 4-7 newer)."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3
    DEFAULT = 4
    HOST_TO_BUF_TO_DEVICE = 5
    INNER_DEVICE_TO_DEVICE = 6
    INTER_DEVICE_TO_DEVICE = 7


class MemMallocPolicy(enum.IntEnum):
    """aclrtMemMallocPolicy selectors; the flag bits below are OR-ed into the same argument."""

    HUGE_FIRST = 0
    HUGE_ONLY = 1
    NORMAL_ONLY = 2
    HUGE_FIRST_P2P = 3
    HUGE_ONLY_P2P = 4
    NORMAL_ONLY_P2P = 5
    HUGE1G_ONLY = 6
    HUGE1G_ONLY_P2P = 7


ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x100
ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000
ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000

ELEMENT_SIZE: Dict[DataType, int] = {
    DataType.INT8: 1, DataType.INT16: 2, DataType.INT32: 4, DataType.FP16: 2, DataType.FP32: 4,
    DataType.INT64: 8, DataType.UINT64: 8, DataType.UINT8: 1, DataType.UINT16: 2,
    DataType.UINT32: 4, DataType.FP64: 8, DataType.BFP16: 2, DataType.INT128: 16,
    DataType.HIF8: 1, DataType.FP8E4M3: 1, DataType.FP8E5M2: 1, DataType.FP8E8M0: 1,
}

# What the A2/A3 host build of the Hcomm*Reduce* primitives accepts (anything else: HCCL_E_PARA).
HOST_REDUCE_DTYPES = frozenset(
    {DataType.INT8, DataType.INT16, DataType.INT32, DataType.FP16, DataType.FP32, DataType.BFP16}
)
HOST_REDUCE_OPS = frozenset({ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN})

_NUMPY_TO_DTYPE: Dict[np.dtype, DataType] = {
    np.dtype(np.int8): DataType.INT8,
    np.dtype(np.int16): DataType.INT16,
    np.dtype(np.int32): DataType.INT32,
    np.dtype(np.float16): DataType.FP16,
    np.dtype(np.float32): DataType.FP32,
    np.dtype(np.int64): DataType.INT64,
    np.dtype(np.uint64): DataType.UINT64,
    np.dtype(np.uint8): DataType.UINT8,
    np.dtype(np.uint16): DataType.UINT16,
    np.dtype(np.uint32): DataType.UINT32,
    np.dtype(np.float64): DataType.FP64,
}
_DTYPE_TO_NUMPY: Dict[DataType, np.dtype] = {v: k for k, v in _NUMPY_TO_DTYPE.items()}

_NAMES: Dict[str, DataType] = {
    "int8": DataType.INT8, "int16": DataType.INT16, "int32": DataType.INT32,
    "fp16": DataType.FP16, "float16": DataType.FP16, "half": DataType.FP16,
    "fp32": DataType.FP32, "float32": DataType.FP32, "float": DataType.FP32,
    "int64": DataType.INT64, "uint64": DataType.UINT64, "uint8": DataType.UINT8,
    "uint16": DataType.UINT16, "uint32": DataType.UINT32,
    "fp64": DataType.FP64, "float64": DataType.FP64, "double": DataType.FP64,
    "bfp16": DataType.BFP16, "bf16": DataType.BFP16, "bfloat16": DataType.BFP16,
}

_OP_NAMES: Dict[str, ReduceOp] = {
    "sum": ReduceOp.SUM, "prod": ReduceOp.PROD, "product": ReduceOp.PROD,
    "max": ReduceOp.MAX, "min": ReduceOp.MIN,
}


def numpy_dtype(dtype: DataType) -> np.dtype:
    """NumPy dtype holding one element of ``dtype``; bf16 is carried as uint16 bit patterns."""
    if dtype == DataType.BFP16:
        return np.dtype(np.uint16)
    try:
        return _DTYPE_TO_NUMPY[DataType(dtype)]
    except KeyError:
        raise ValueError(f"data type {DataType(dtype).name} has no NumPy equivalent") from None


def dtype_from_numpy(dtype: Any) -> Optional[DataType]:
    """HCCL data type for a NumPy dtype, or None if HCCL has none (e.g. complex, bool)."""
    return _NUMPY_TO_DTYPE.get(np.dtype(dtype))


#: what an array's dtype may be (:func:`dtype_of_array`), for error messages
ARRAY_DTYPE_NAMES = "int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64 or bfloat16"


def dtype_of_array(dtype: "np.dtype[Any]") -> Optional[DataType]:
    """The HCCL data type of an array of NumPy dtype ``dtype``: :func:`dtype_from_numpy`, and BFP16 for the bfloat16
    that ml_dtypes and jax add to NumPy; None where HCCL has none."""
    found = _NUMPY_TO_DTYPE.get(dtype)
    if found is None and dtype.name == "bfloat16":
        return DataType.BFP16
    return found


_TORCH_NAMES = {
    "int8": DataType.INT8, "int16": DataType.INT16, "int32": DataType.INT32,
    "float16": DataType.FP16, "float32": DataType.FP32, "int64": DataType.INT64,
    "uint64": DataType.UINT64, "uint8": DataType.UINT8, "uint16": DataType.UINT16,
    "uint32": DataType.UINT32, "float64": DataType.FP64, "bfloat16": DataType.BFP16,
}
_TORCH_SEEN: Dict[Any, Optional[DataType]] = {}   # torch dtype -> answer (every collective asks)


def torch_dtype_names() -> str:
    """The torch dtypes HCCL carries, for error messages ('torch.int8, torch.int16, ...')."""
    return ", ".join(f"torch.{name}" for name in _TORCH_NAMES)


def dtype_from_torch(dtype: Any) -> Optional[DataType]:
    """HCCL data type for a torch dtype (torch is only imported if a torch dtype is passed)."""
    try:
        return _TORCH_SEEN[dtype]
    except (KeyError, TypeError):
        pass
    name = str(dtype)
    found = _TORCH_NAMES.get(name[len("torch."):]) if name.startswith("torch.") else None
    try:
        _TORCH_SEEN[dtype] = found
    except TypeError:   # unhashable: answered, not remembered
        pass
    return found


def parse_dtype(value: Any) -> DataType:
    """Accept a DataType, its int value, a name ('fp32', 'float32', 'bf16'), or a NumPy/torch dtype."""
    if isinstance(value, DataType):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        if key in _NAMES:
            return _NAMES[key]
        raise ValueError(
            f"dtype={value!r} is not a known data type; expected one of {sorted(set(_NAMES))}"
        )
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return DataType(value)
        except ValueError:
            raise ValueError(f"dtype={value} is not an HcclDataType value") from None
    found = dtype_from_torch(value)
    if found is None:
        try:
            found = dtype_from_numpy(value)
        except TypeError:
            found = None
    if found is None:
        raise ValueError(f"dtype={value!r} has no HCCL data type")
    return found


def parse_reduce_op(value: Any) -> ReduceOp:
    """Accept a ReduceOp, its int value, or a name ('sum', 'prod', 'max', 'min')."""
    if isinstance(value, ReduceOp):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        if key in _OP_NAMES:
            return _OP_NAMES[key]
        raise ValueError(f"op={value!r} is not a reduce op; expected one of 'sum', 'prod', 'max', 'min'")
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            op = ReduceOp(value)
        except ValueError:
            raise ValueError(f"op={value} is not an HcclReduceOp value; expected one of 'sum', 'prod', 'max', 'min' "
                             "(or ReduceOp.SUM, PROD, MAX, MIN: 0, 1, 2, 3)") from None
        if op != ReduceOp.RESERVED:
            return op
    raise ValueError(f"op={value!r} is not a reduce op; expected one of 'sum', 'prod', 'max', 'min'")
