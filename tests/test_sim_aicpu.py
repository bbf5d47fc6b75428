"""The emulated AICPU from Python: kernel binaries, arguments, launches in stream order, failures named.

Kernels are real shared objects compiled here against the emulated install (their Hcomm* calls reach this
process's emulator through the install's libhcomm.so), loaded with aclrtBinaryLoadFromFile (CPU kernel mode
1: the .so next to its JSON) and launched with aclrtLaunchKernelWithConfig or HcclAicpuKernelLaunch.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator

import numpy as np
import pytest

from cann_install import install  # noqa: F401  (install is a fixture)
from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import Engine
from simhelp import RankEnv, open_single_rank

pytestmark = pytest.mark.slow

ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_INVALID_FILE = 100003
ACL_ERROR_KERNEL_NOT_FOUND = 100029
ACL_ERROR_RT_AICPU_TIMEOUT = 507017
ACL_ERROR_RT_AICPU_EXCEPTION = 507018

KERNELS_C = r"""
#include <hccl/hcomm_primitives.h>
#include <unistd.h>
struct CopyArgs { uint64_t thread; void *dst; const void *src; uint64_t n; };
unsigned CopyKernel(struct CopyArgs *a)
{
    if (HcommBatchModeStart("t") || HcommLocalCopyOnThread(a->thread, a->dst, a->src, a->n)) return 1;
    return HcommBatchModeEnd("t");
}
unsigned FailKernel(void *a) { (void)a; return 7; }
unsigned CrashKernel(void *a) { (void)a; volatile int *p = 0; *p = 1; return 0; }
unsigned SlowKernel(void *a) { (void)a; usleep(1500000); return 0; }
"""
NAMES = ("CopyKernel", "FailKernel", "CrashKernel", "SlowKernel")


@pytest.fixture(scope="module")
def kernels(install: Any, tmp_path_factory: Any) -> Path:
    """libtest_kernels.so and its JSON (mode 1: side by side)."""
    work = tmp_path_factory.mktemp("aicpu")
    (work / "k.c").write_text(KERNELS_C)
    so = work / "libtest_kernels.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(work / "k.c"), f"-I{install.include_dir}",
                    f"-L{install.lib_dir}", "-lhcomm", f"-Wl,-rpath,{install.lib_dir}"], check=True, timeout=120)
    doc = {name: {"opInfo": {"opKernelLib": "AICPUKernel", "kernelSo": so.name, "functionName": name}}
           for name in NAMES}
    (work / "libtest_kernels.json").write_text(json.dumps(doc))
    return work / "libtest_kernels.json"


@pytest.fixture
def rank() -> Iterator[RankEnv]:
    env = open_single_rank()
    yield env
    env.close()


def _load(lib: Any, path: Path, mode: int = 1) -> Any:
    option = ffi.new("aclrtBinaryLoadOption *")
    option.type = 3        # ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE
    option.value.cpuKernelMode = mode
    options = ffi.new("aclrtBinaryLoadOptions *", {"options": option, "numOpt": 1})
    handle = ffi.new("aclrtBinHandle *")
    assert lib.aclrtBinaryLoadFromFile(str(path).encode(), options, handle) == 0, _message(lib)
    return handle[0]


def _message(lib: Any) -> str:
    text = lib.aclGetRecentErrMsg()
    return "" if text == ffi.NULL else ffi.string(text).decode()


def _launch(lib: Any, binary: Any, name: str, stream: Any, payload: bytes, timeout_s: int = 0) -> int:
    func = ffi.new("aclrtFuncHandle *")
    assert lib.aclrtBinaryGetFunction(binary, name.encode(), func) == 0, _message(lib)
    args = ffi.new("aclrtArgsHandle *")
    assert lib.aclrtKernelArgsInit(func[0], args) == 0
    data = ffi.new("char[]", payload)
    assert lib.aclrtKernelArgsAppend(args[0], data, len(payload), ffi.new("aclrtParamHandle *")) == 0
    assert lib.aclrtKernelArgsFinalize(args[0]) == 0
    cfg = ffi.NULL
    if timeout_s:
        attr = ffi.new("aclrtLaunchKernelAttr *")
        attr.id = 7        # ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT
        attr.value.timeout = timeout_s
        cfg = ffi.new("aclrtLaunchKernelCfg *", {"attrs": attr, "numAttrs": 1})
        _launch.keep = attr     # type: ignore[attr-defined]
    return int(lib.aclrtLaunchKernelWithConfig(func[0], 1, stream, cfg, args[0], ffi.NULL))


def _copy_args(env: RankEnv, thread: int, n: int) -> Dict[str, Any]:
    src = np.arange(n, dtype=np.uint8)
    dst = np.zeros(n, dtype=np.uint8)
    packed = ffi.new("uint64_t[4]", [thread, int(ffi.cast("uintptr_t", env.ptr(dst))),
                                     int(ffi.cast("uintptr_t", env.ptr(src))), n])
    return {"src": src, "dst": dst, "payload": ffi.buffer(packed)[:]}


def test_kernel_runs_in_stream_order(kernels: Path, rank: RankEnv) -> None:
    lib = rank.lib
    (thread,) = rank.b.thread_acquire(rank.comm, Engine.AICPU_TS, 1, 1)
    copy = _copy_args(rank, thread, 4096)
    binary = _load(lib, kernels)
    assert _launch(lib, binary, "CopyKernel", rank.stream, copy["payload"]) == 0
    assert lib.aclrtSynchronizeStream(rank.stream) == 0, _message(lib)
    rank.b.synchronize_stream(rank.stream)
    lib.aclrtSynchronizeDevice()
    assert np.array_equal(copy["dst"], copy["src"])
    assert lib.aclrtBinaryUnLoad(binary) == 0


@pytest.mark.parametrize("name, code, words", [
    ("FailKernel", ACL_ERROR_RT_AICPU_EXCEPTION, "returned 7"),
    ("CrashKernel", ACL_ERROR_RT_AICPU_EXCEPTION, "crashed with SIGSEGV"),
    ("SlowKernel", ACL_ERROR_RT_AICPU_TIMEOUT, "did not return within its launch timeout of 1 s"),
])
def test_failing_kernel_fails_the_stream_naming_it(kernels: Path, rank: RankEnv, name: str, code: int,
                                                   words: str) -> None:
    lib = rank.lib
    binary = _load(lib, kernels)
    assert _launch(lib, binary, name, rank.stream, b"\0" * 8, timeout_s=1) == 0
    assert lib.aclrtSynchronizeStream(rank.stream) == code
    message = _message(lib)
    assert f"AICPU kernel {name} (libtest_kernels.so) on device 0" in message and words in message, message
    lib.aclrtBinaryUnLoad(binary)


def test_load_and_launch_errors_name_the_argument(kernels: Path, rank: RankEnv, tmp_path: Path) -> None:
    lib = rank.lib
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    handle = ffi.new("aclrtBinHandle *")
    option = ffi.new("aclrtBinaryLoadOption *", {"type": 3})
    options = ffi.new("aclrtBinaryLoadOptions *", {"options": option, "numOpt": 1})
    assert lib.aclrtBinaryLoadFromFile(str(bad).encode(), options, handle) == ACL_ERROR_INVALID_FILE
    assert "is not valid JSON" in _message(lib)
    binary = _load(lib, kernels)
    func = ffi.new("aclrtFuncHandle *")
    assert lib.aclrtBinaryGetFunction(binary, b"NoSuchKernel", func) == ACL_ERROR_KERNEL_NOT_FOUND
    assert "kernelName='NoSuchKernel' is not in" in _message(lib) and "CopyKernel" in _message(lib)
    assert lib.aclrtBinaryGetFunction(binary, b"FailKernel", func) == 0
    args = ffi.new("aclrtArgsHandle *")
    assert lib.aclrtKernelArgsInit(func[0], args) == 0
    assert lib.aclrtLaunchKernelWithConfig(func[0], 1, rank.stream, ffi.NULL, args[0], ffi.NULL) == \
        ACL_ERROR_INVALID_PARAM
    assert "not finalized" in _message(lib)
    lib.aclrtBinaryUnLoad(binary)


def test_hccl_aicpu_kernel_launch(kernels: Path, rank: RankEnv) -> None:
    lib = rank.lib
    (thread,) = rank.b.thread_acquire(rank.comm, Engine.AICPU_TS, 1, 1)
    copy = _copy_args(rank, thread, 1000)
    unfold = rank.b.create_stream()
    op = ffi.new("HcclOpDesc *")
    op.p2p.unfoldStream = unfold
    func = ffi.new("HcclKernelFuncInfo *")
    func.kernelSoName = str(kernels.with_suffix(".so")).encode()
    func.kernelFuncName = b"CopyKernel"
    payload = ffi.new("char[]", copy["payload"])
    func.args = payload
    func.argSize = len(copy["payload"])
    cfg = ffi.new("HcclKernelLaunchCfg *")
    cfg.timeOut = 30
    assert lib.HcclAicpuKernelLaunch(rank.comm, op, func, thread, rank.stream, cfg) == 0, _message(lib)
    assert lib.aclrtSynchronizeStream(rank.stream) == 0, _message(lib)
    assert lib.aclrtSynchronizeStream(unfold) == 0, _message(lib)
    assert np.array_equal(copy["dst"], copy["src"])
    rank.b.destroy_stream(unfold)
