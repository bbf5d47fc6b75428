"""Local copy/reduce operands are checked at the call: past the end of known memory, or overlapping, is HCCL_E_PARA."""
from __future__ import annotations

import numpy as np

from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import DataType, Engine, HcclResult, ReduceOp
from multiproc import run_ranks
from simhelp import open_rank


def _operands(rank: int, n: int, root: bytes) -> dict:
    """Issue each bad operand pair with the C names (as a vendor sample would) and collect the return codes."""
    env = open_rank(rank, n, root)
    lib, b = env.lib, env.b
    th = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 0)
    buf = ffi.cast("char *", env.buf)
    size = env.buf_size
    block = ffi.new("void **")
    assert lib.aclrtMalloc(block, 256, 0) == 0
    dev = ffi.cast("char *", block[0])
    host = np.zeros(64, np.float32)
    codes = {}
    b.batch_mode_start(b"ops")
    codes["past_buffer"] = lib.HcommLocalCopyOnThread(th, buf + size - 64, env.ptr(host), 128)
    codes["past_buffer_text"] = ffi.string(lib.aclGetRecentErrMsg()).decode()
    codes["overlap"] = lib.HcommLocalCopyOnThread(th, buf + 16, buf, 64)
    codes["overlap_text"] = ffi.string(lib.aclGetRecentErrMsg()).decode()
    codes["past_malloc"] = lib.HcommLocalReduceOnThread(th, dev + 128, buf, 64, DataType.FP32, ReduceOp.SUM)
    codes["past_malloc_text"] = ffi.string(lib.aclGetRecentErrMsg()).decode()
    codes["reduce_overlap"] = lib.HcommLocalReduceOnThread(th, buf, buf + 4, 4, DataType.FP32, ReduceOp.SUM)
    codes["fits"] = lib.HcommLocalCopyOnThread(th, buf + size - 64, env.ptr(host), 64)
    codes["fits_malloc"] = lib.HcommLocalReduceOnThread(th, dev, buf, 64, DataType.FP32, ReduceOp.SUM)
    b.batch_mode_end(b"ops")
    b.synchronize_stream(env.stream)
    assert lib.aclrtFree(block[0]) == 0
    env.close()
    return codes


def test_bad_local_operands_are_rejected_at_the_call() -> None:
    codes = run_ranks(2, _operands, timeout=60)[0]      # 2 ranks: a one-rank communicator has no HCCL buffer
    assert codes["past_buffer"] == HcclResult.E_PARA
    assert "runs 64 bytes past the end of rank 0's HCCL buffer" in codes["past_buffer_text"]
    assert codes["overlap"] == HcclResult.E_PARA and "overlap" in codes["overlap_text"]
    assert codes["past_malloc"] == HcclResult.E_PARA
    assert "past the end of its aclrtMalloc block" in codes["past_malloc_text"]
    assert codes["reduce_overlap"] == HcclResult.E_PARA
    assert codes["fits"] == 0 and codes["fits_malloc"] == 0
