"""pyhccl (the pybind11 bindings from the package index) driving HCCL through its own calls, one process per rank.

pyhccl finds the library through ``PYHCCL_LIBRARY`` (one file: libhccl.so, whose dependencies bring
libhcomm.so) or ``PYHCCL_LIBRARY_PATH``; it binds no ACL function, so device memory and the stream
come from libacl_rt.so through ctypes, as a pyhccl user without torch_npu would do.

``python pyhccl_client.py RANK NRANKS ROOTFILE [--torch]`` prints one JSON line of results.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rank_files import publish, wait_for  # noqa: E402


def main() -> None:
    rank, nranks, root_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if "--torch" in sys.argv:
        import torch  # noqa: F401  (imported before the first call into the libraries)
    import pyhccl

    acl = ctypes.CDLL(os.path.join(os.environ["ASCEND_HOME_PATH"], "lib64", "libacl_rt.so"))

    def acl_check(name: str, *args: Any) -> None:
        code = getattr(acl, name)(*args)
        if code != 0:
            raise RuntimeError(f"{name} returned {code}")

    def check(result: Any) -> Any:
        code = result[0] if isinstance(result, tuple) else result
        if code != pyhccl.HCCL_SUCCESS:
            raise RuntimeError(f"pyhccl call returned {code}: {pyhccl.get_error_string(code)}")
        return result[1] if isinstance(result, tuple) and len(result) == 2 else result

    out: Dict[str, Any] = {"libraries": pyhccl.load_library()}
    acl_check("aclrtSetDevice", rank)
    if rank == 0:
        root = check(pyhccl.HcclGetRootInfo())
        publish(root_file, bytes(root.internal))
    else:
        root = pyhccl.HcclRootInfo()
        root.internal = wait_for(root_file)
    comm = check(pyhccl.HcclCommInitRootInfo(nranks, root, rank))
    out["rank"] = check(pyhccl.HcclGetRankId(comm))
    out["size"] = check(pyhccl.HcclGetRankSize(comm))
    name = check(pyhccl.HcclGetCommName(comm))
    out["by name"] = check(pyhccl.HcclCommGetHandleWithName(name)) == comm
    stream = ctypes.c_void_p()
    acl_check("aclrtCreateStream", ctypes.byref(stream))
    count = 4 * nranks
    nbytes = count * 4
    send, recv = ctypes.c_void_p(), ctypes.c_void_p()
    acl_check("aclrtMalloc", ctypes.byref(send), ctypes.c_size_t(nbytes), 0)
    acl_check("aclrtMalloc", ctypes.byref(recv), ctypes.c_size_t(nbytes), 0)
    host = (ctypes.c_float * count)()
    fp32 = pyhccl.HcclDataType.HCCL_DATA_TYPE_FP32

    def upload() -> None:
        host[:] = [float(rank * 10 + i) for i in range(count)]
        acl_check("aclrtMemcpy", send, ctypes.c_size_t(nbytes), host, ctypes.c_size_t(nbytes), 1)

    def download(buf: Any, n: int) -> List[float]:
        acl_check("aclrtSynchronizeStream", stream)
        acl_check("aclrtMemcpy", host, ctypes.c_size_t(nbytes), buf, ctypes.c_size_t(n * 4), 2)
        return list(host[:n])

    upload()
    check(pyhccl.HcclAllReduce(send.value, recv.value, count, fp32, pyhccl.HcclReduceOp.HCCL_REDUCE_SUM,
                               comm, stream.value))
    out["allreduce"] = download(recv, count)
    upload()
    check(pyhccl.HcclAllGather(send.value, recv.value, 4, fp32, comm, stream.value))
    out["allgather"] = download(recv, count)
    upload()
    check(pyhccl.HcclGroupStart())
    check(pyhccl.HcclRecv(recv.value, count, fp32, (rank - 1) % nranks, comm, stream.value))
    check(pyhccl.HcclSend(send.value, count, fp32, (rank + 1) % nranks, comm, stream.value))
    out["in group"] = check(pyhccl.HcclGroupStatusGet())
    check(pyhccl.HcclGroupEnd())
    out["ring"] = download(recv, count)
    check(pyhccl.HcclCommDestroy(comm))
    acl_check("aclrtFree", send)
    acl_check("aclrtFree", recv)
    acl_check("aclrtDestroyStream", stream)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
