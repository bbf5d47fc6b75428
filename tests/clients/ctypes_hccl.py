"""A ctypes HCCL client in the style of vllm-ascend's communicator wrapper, written for hcomm_cffi's tests.

Like that wrapper it opens ONE library, ``libhccl.so`` from ``HCCL_SO_PATH``, declares the functions it
uses in a table (name, result type, argument types) and resolves each by name on that handle: the
communicator calls (``HcclGetRootInfo``, ``HcclGetErrorString``, ...) live in libhcomm.so and the
``aclrt*`` calls in libacl_rt.so, which a CANN libhccl.so depends on (DT_NEEDED), so dlsym finds them.

Run one process per rank: ``python ctypes_hccl.py RANK NRANKS ROOTFILE [--torch]``; it prints one JSON
line with what every collective returned.  ``--torch`` imports torch before the first call.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rank_files import ROOT_INFO_BYTES, publish, wait_for  # noqa: E402

hccl_result_t = ctypes.c_int
acl_error_t = ctypes.c_int
comm_t = ctypes.c_void_p
stream_t = ctypes.c_void_p
buffer_t = ctypes.c_void_p
FP32, SUM, MAX = 4, 0, 2
H2D, D2H = 1, 2


class RootInfo(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * ROOT_INFO_BYTES)]


@dataclass(frozen=True)
class CFunction:
    name: str
    result: Any
    args: List[Any]


class HcclLibrary:
    """The functions of libhccl.so this client calls, resolved once on one handle."""

    TABLE = [
        CFunction("HcclGetErrorString", ctypes.c_char_p, [hccl_result_t]),
        CFunction("HcclGetRootInfo", hccl_result_t, [ctypes.POINTER(RootInfo)]),
        CFunction("HcclCommInitRootInfo", hccl_result_t,
                  [ctypes.c_uint32, ctypes.POINTER(RootInfo), ctypes.c_uint32, ctypes.POINTER(comm_t)]),
        CFunction("HcclGetRankId", hccl_result_t, [comm_t, ctypes.POINTER(ctypes.c_uint32)]),
        CFunction("HcclGetRankSize", hccl_result_t, [comm_t, ctypes.POINTER(ctypes.c_uint32)]),
        CFunction("HcclAllReduce", hccl_result_t,
                  [buffer_t, buffer_t, ctypes.c_uint64, ctypes.c_int, ctypes.c_int, comm_t, stream_t]),
        CFunction("HcclBroadcast", hccl_result_t,
                  [buffer_t, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint32, comm_t, stream_t]),
        CFunction("HcclAllGather", hccl_result_t,
                  [buffer_t, buffer_t, ctypes.c_uint64, ctypes.c_int, comm_t, stream_t]),
        CFunction("HcclReduceScatter", hccl_result_t,
                  [buffer_t, buffer_t, ctypes.c_uint64, ctypes.c_int, ctypes.c_int, comm_t, stream_t]),
        CFunction("HcclSend", hccl_result_t,
                  [buffer_t, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint32, comm_t, stream_t]),
        CFunction("HcclRecv", hccl_result_t,
                  [buffer_t, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint32, comm_t, stream_t]),
        CFunction("HcclGroupStart", hccl_result_t, []),
        CFunction("HcclGroupEnd", hccl_result_t, []),
        CFunction("HcclCommDestroy", hccl_result_t, [comm_t]),
        CFunction("aclrtSetDevice", acl_error_t, [ctypes.c_int32]),
        CFunction("aclrtCreateStream", acl_error_t, [ctypes.POINTER(stream_t)]),
        CFunction("aclrtDestroyStream", acl_error_t, [stream_t]),
        CFunction("aclrtSynchronizeStream", acl_error_t, [stream_t]),
        CFunction("aclrtMalloc", acl_error_t, [ctypes.POINTER(buffer_t), ctypes.c_size_t, ctypes.c_int]),
        CFunction("aclrtFree", acl_error_t, [buffer_t]),
        CFunction("aclrtMemcpy", acl_error_t, [buffer_t, ctypes.c_size_t, buffer_t, ctypes.c_size_t, ctypes.c_int]),
        CFunction("aclGetRecentErrMsg", ctypes.c_char_p, []),
    ]

    def __init__(self, path: str = "") -> None:
        path = path or os.environ["HCCL_SO_PATH"]
        self.handle = ctypes.CDLL(path)
        self.fn: Dict[str, Any] = {}
        for entry in self.TABLE:
            function = getattr(self.handle, entry.name)       # AttributeError: undefined symbol
            function.restype = entry.result
            function.argtypes = entry.args
            self.fn[entry.name] = function

    def check(self, name: str, *args: Any) -> None:
        code = self.fn[name](*args)
        if code != 0:
            text = self.fn["HcclGetErrorString"](code) if name.startswith("Hccl") else b"acl error"
            raise RuntimeError(f"{name} returned {code} ({text.decode()}): {self.fn['aclGetRecentErrMsg']()!r}")


def main() -> None:
    rank, nranks, root_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if "--torch" in sys.argv:
        import torch  # noqa: F401  (the hang this checks came from torch's import before the first call)
    lib = HcclLibrary()
    lib.check("aclrtSetDevice", rank)
    root = RootInfo()
    if rank == 0:
        lib.check("HcclGetRootInfo", ctypes.byref(root))
        publish(root_file, bytes(root.internal))
    else:
        ctypes.memmove(ctypes.addressof(root), wait_for(root_file), ROOT_INFO_BYTES)
    comm = comm_t()
    lib.check("HcclCommInitRootInfo", nranks, ctypes.byref(root), rank, ctypes.byref(comm))
    stream = stream_t()
    lib.check("aclrtCreateStream", ctypes.byref(stream))
    count = 8 * nranks
    nbytes = count * 4
    send, recv = buffer_t(), buffer_t()
    lib.check("aclrtMalloc", ctypes.byref(send), nbytes, 0)
    lib.check("aclrtMalloc", ctypes.byref(recv), nbytes, 0)
    host = (ctypes.c_float * count)()

    def upload(values: List[float]) -> None:
        host[:] = values
        lib.check("aclrtMemcpy", send, nbytes, host, nbytes, H2D)

    def download(buf: Any, n: int) -> List[float]:
        lib.check("aclrtSynchronizeStream", stream)
        lib.check("aclrtMemcpy", host, nbytes, buf, n * 4, D2H)
        return list(host[:n])

    mine = [float(rank * 100 + i) for i in range(count)]
    out: Dict[str, Any] = {}
    upload(mine)
    lib.check("HcclAllReduce", send, recv, count, FP32, SUM, comm, stream)
    out["allreduce"] = download(recv, count)
    upload(mine)
    lib.check("HcclBroadcast", send, count, FP32, nranks - 1, comm, stream)
    out["broadcast"] = download(send, count)
    upload(mine)
    lib.check("HcclAllGather", send, recv, 8, FP32, comm, stream)
    out["allgather"] = download(recv, count)
    upload(mine)
    lib.check("HcclReduceScatter", send, recv, 8, FP32, MAX, comm, stream)
    out["reduce_scatter"] = download(recv, 8)
    upload(mine)
    lib.check("HcclGroupStart")                 # receive first, send second: only a group makes this order work
    lib.check("HcclRecv", recv, count, FP32, (rank - 1) % nranks, comm, stream)
    lib.check("HcclSend", send, count, FP32, (rank + 1) % nranks, comm, stream)
    lib.check("HcclGroupEnd")
    out["ring"] = download(recv, count)
    size = ctypes.c_uint32()
    lib.check("HcclGetRankSize", comm, ctypes.byref(size))
    out["size"] = size.value
    out["error string"] = lib.fn["HcclGetErrorString"](4).decode()
    lib.check("HcclCommDestroy", comm)
    lib.check("aclrtFree", send)
    lib.check("aclrtFree", recv)
    lib.check("aclrtDestroyStream", stream)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
