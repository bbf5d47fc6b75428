"""Binding over a fake C library (a test double for the lib): checked calls, typed errors, out-parameters."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import pytest

from hcomm_cffi import binding as binding_mod
from hcomm_cffi import errors
from hcomm_cffi._ffi import ffi
from hcomm_cffi.binding import Binding, get_binding, reset_binding
from hcomm_cffi.enums import DataType, Engine, MemcpyKind, MemMallocPolicy, Protocol, ReduceOp
from hcomm_cffi.initializers import make_channel_descs, make_comm_config


class FakeLib:
    """Returns chosen codes per C function, records calls, and fills out-parameters like the C side."""

    def __init__(self, codes: Optional[Dict[str, int]] = None, recent: Optional[bytes] = None,
                 missing: Set[str] = frozenset()) -> None:
        self.codes = dict(codes or {})
        self.calls: List[Tuple[str, tuple]] = []
        self.missing = set(missing)
        self.recent = recent
        self._keep: List[Any] = []
        self.buffer = ffi.new("char[]", 64)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or name in self.__dict__.get("missing", ()):
            raise AttributeError(name)
        handler = getattr(type(self), "h_" + name, None)

        def call(*args: Any) -> Any:
            self.calls.append((name, args))
            if handler is not None:
                result = handler(self, *args)
                if result is not None:
                    return result
            return self.codes.get(name, 0)
        return call

    # message getters (return char * like the C functions)
    def h_aclGetRecentErrMsg(self) -> Any:
        if self.recent is None:
            return ffi.NULL
        text = ffi.new("char[]", self.recent)
        self._keep.append(text)
        return text

    def h_HcclGetErrorString(self, code: int) -> Any:
        text = ffi.new("char[]", f"error string for {code}".encode())
        self._keep.append(text)
        return text

    # out-parameters
    def h_HcclGetRootInfo(self, info: Any) -> None:
        ffi.memmove(info, bytes(range(256)) * 16 + bytes(12), 4108)

    def h_HcclCommInitRootInfo(self, n: int, info: Any, rank: int, comm: Any) -> None:
        comm[0] = ffi.cast("HcclComm", 0x1000 + rank)

    def h_HcclCommInitRootInfoConfig(self, n: int, info: Any, rank: int, cfg: Any, comm: Any) -> None:
        assert ffi.typeof(cfg) is ffi.typeof("HcclCommConfig *")
        comm[0] = ffi.cast("HcclComm", 0x2000 + cfg.hcclBufferSize)

    def h_HcclCommInitClusterInfo(self, path: bytes, rank: int, comm: Any) -> None:
        comm[0] = ffi.cast("HcclComm", 0x3000 + rank)

    def h_HcclCreateSubCommConfig(self, parent: Any, n: int, ids: Any, sub_id: int, sub_rank: int,
                                  cfg: Any, sub: Any) -> None:
        self.sub_args = (int(ffi.cast("uintptr_t", parent[0])), list(ids[0:n]), sub_id, sub_rank, cfg.hcclBufferSize)
        sub[0] = ffi.cast("HcclComm", 0x4000)

    def h_HcclCommInitAll(self, n: int, devs: Any, comms: Any) -> None:
        for i in range(n):
            comms[i] = ffi.cast("HcclComm", 0x5000 + devs[i])

    def h_HcclGetRankId(self, comm: Any, out: Any) -> None:
        out[0] = 3

    def h_HcclGetRankSize(self, comm: Any, out: Any) -> None:
        out[0] = 8

    def h_HcclGetCommName(self, comm: Any, buf: Any) -> None:
        ffi.memmove(buf, b"world\0", 6)

    def h_HcclGetCommAsyncError(self, comm: Any, out: Any) -> None:
        out[0] = 21

    def h_HcclGetHcclBuffer(self, comm: Any, ptr: Any, size: Any) -> None:
        ptr[0] = self.buffer
        size[0] = 419430400

    def h_HcclChannelGetHcclBuffer(self, comm: Any, channel: int, ptr: Any, size: Any) -> None:
        ptr[0] = self.buffer
        size[0] = channel

    def h_HcclThreadAcquire(self, comm: Any, engine: int, n: int, notifies: int, threads: Any) -> None:
        for i in range(n):
            threads[i] = 0xA000 + i

    def h_HcclThreadAcquireWithStream(self, comm: Any, engine: int, stream: Any, n: int, thread: Any) -> None:
        thread[0] = 0xB000

    def h_HcclChannelAcquire(self, comm: Any, engine: int, descs: Any, n: int, channels: Any) -> None:
        for i in range(n):
            channels[i] = 0xC000 + descs[i].remoteRank

    def h_aclrtMalloc(self, ptr: Any, size: int, policy: int) -> None:
        ptr[0] = self.buffer

    def h_aclrtGetDevice(self, out: Any) -> None:
        out[0] = 5

    def h_aclrtCreateStream(self, out: Any) -> None:
        out[0] = ffi.cast("aclrtStream", 0x77)

    def h_aclrtCreateEvent(self, out: Any) -> None:
        out[0] = ffi.cast("aclrtEvent", 0x88)

    def h_aclrtGetSocName(self) -> Any:
        return ffi.NULL


COMM = ffi.cast("HcclComm", 0x1234)
STREAM = ffi.cast("aclrtStream", 0x99)
BUF = ffi.new("char[]", 64)
PTR = ffi.cast("void *", BUF)

# (binding method, arguments, C function it must call with exactly these arguments)
PASS_THROUGH = [
    ("local_copy", (1, PTR, PTR, 64), "HcommLocalCopyOnThread"),
    ("local_reduce", (1, PTR, PTR, 16, DataType.FP32, ReduceOp.SUM), "HcommLocalReduceOnThread"),
    ("write", (1, 2, PTR, PTR, 64), "HcommWriteOnThread"),
    ("read", (1, 2, PTR, PTR, 64), "HcommReadOnThread"),
    ("write_reduce", (1, 2, PTR, PTR, 16, DataType.INT32, ReduceOp.MAX), "HcommWriteReduceOnThread"),
    ("read_reduce", (1, 2, PTR, PTR, 16, DataType.FP16, ReduceOp.MIN), "HcommReadReduceOnThread"),
    ("write_with_notify", (1, 2, PTR, PTR, 64, 3), "HcommWriteWithNotifyOnThread"),
    ("write_reduce_with_notify", (1, 2, PTR, PTR, 16, 4, 0, 3), "HcommWriteReduceWithNotifyOnThread"),
    ("write_nbi", (1, 2, PTR, PTR, 64), "HcommWriteNbiOnThread"),
    ("read_nbi", (1, 2, PTR, PTR, 64), "HcommReadNbiOnThread"),
    ("thread_notify_record", (1, 7, 2), "HcommThreadNotifyRecordOnThread"),
    ("thread_notify_wait", (1, 2, 30), "HcommThreadNotifyWaitOnThread"),
    ("channel_notify_record", (1, 2, 5), "HcommChannelNotifyRecordOnThread"),
    ("channel_notify_wait", (1, 2, 5, 30), "HcommChannelNotifyWaitOnThread"),
    ("fence", (1,), "HcommFenceOnThread"),
    ("channel_fence", (1, 2), "HcommChannelFenceOnThread"),
    ("channel_drain", (1, 2), "HcommChannelDrainOnThread"),
    ("set_notify_wait_timeout", (2.5,), "HcommSetNotifyWaitTimeOut"),
    ("comm_destroy", (COMM,), "HcclCommDestroy"),
    ("barrier", (COMM, STREAM), "HcclBarrier"),
    ("comm_suspend", (COMM,), "HcclCommSuspend"),
    ("comm_resume", (COMM,), "HcclCommResume"),
    ("group_start", (), "HcclGroupStart"),
    ("group_end", (), "HcclGroupEnd"),
    ("set_config", (0, 1), "HcclSetConfig"),
    ("acl_finalize", (), "aclFinalize"),
    ("set_device", (3,), "aclrtSetDevice"),
    ("reset_device", (3,), "aclrtResetDevice"),
    ("synchronize_device", (), "aclrtSynchronizeDevice"),
    ("destroy_stream", (STREAM,), "aclrtDestroyStream"),
    ("synchronize_stream", (STREAM,), "aclrtSynchronizeStream"),
    ("synchronize_stream_with_timeout", (STREAM, 1000), "aclrtSynchronizeStreamWithTimeout"),
    ("free", (PTR,), "aclrtFree"),
    ("free_host", (PTR,), "aclrtFreeHost"),
    ("memcpy", (PTR, 64, PTR, 32, MemcpyKind.DEVICE_TO_HOST), "aclrtMemcpy"),
    ("memcpy_async", (PTR, 64, PTR, 32, MemcpyKind.HOST_TO_DEVICE, STREAM), "aclrtMemcpyAsync"),
    ("memset", (PTR, 64, 0, 64), "aclrtMemset"),
    ("record_event", (PTR, STREAM), "aclrtRecordEvent"),
    ("stream_wait_event", (STREAM, PTR), "aclrtStreamWaitEvent"),
    ("synchronize_event", (PTR,), "aclrtSynchronizeEvent"),
    ("destroy_event", (PTR,), "aclrtDestroyEvent"),
    ("all_reduce", (PTR, PTR, 16, DataType.FP32, ReduceOp.SUM, COMM, STREAM), "HcclAllReduce"),
    ("broadcast", (PTR, 16, DataType.FP32, 0, COMM, STREAM), "HcclBroadcast"),
    ("all_gather", (PTR, PTR, 16, DataType.FP32, COMM, STREAM), "HcclAllGather"),
    ("all_gather_v", (PTR, 16, PTR, PTR, PTR, DataType.FP32, COMM, STREAM), "HcclAllGatherV"),
    ("reduce_scatter", (PTR, PTR, 16, DataType.FP32, ReduceOp.SUM, COMM, STREAM), "HcclReduceScatter"),
    ("reduce_scatter_v", (PTR, PTR, PTR, PTR, 16, DataType.FP32, ReduceOp.SUM, COMM, STREAM), "HcclReduceScatterV"),
    ("reduce", (PTR, PTR, 16, DataType.FP32, ReduceOp.SUM, 1, COMM, STREAM), "HcclReduce"),
    ("scatter", (PTR, PTR, 16, DataType.FP32, 1, COMM, STREAM), "HcclScatter"),
    ("all_to_all", (PTR, 4, DataType.INT8, PTR, 4, DataType.INT8, COMM, STREAM), "HcclAlltoAll"),
    ("all_to_all_v", (PTR, PTR, PTR, 2, PTR, PTR, PTR, 2, COMM, STREAM), "HcclAlltoAllV"),
    ("all_to_all_vc", (PTR, PTR, 2, PTR, 2, COMM, STREAM), "HcclAlltoAllVC"),
    ("send", (PTR, 16, DataType.FP32, 1, COMM, STREAM), "HcclSend"),
    ("recv", (PTR, 16, DataType.FP32, 0, COMM, STREAM), "HcclRecv"),
]


@pytest.mark.parametrize("method, args, c_name", PASS_THROUGH, ids=[p[0] for p in PASS_THROUGH])
def test_pass_through_success(method: str, args: tuple, c_name: str) -> None:
    lib = FakeLib()
    assert getattr(Binding(lib), method)(*args) is None
    assert lib.calls == [(c_name, args)]


@pytest.mark.parametrize("method, args, c_name", PASS_THROUGH, ids=[p[0] for p in PASS_THROUGH])
def test_pass_through_failure_names_the_c_function(method: str, args: tuple, c_name: str) -> None:
    code = 507048 if c_name.startswith("acl") else 9
    lib = FakeLib({c_name: code}, recent=b"notify wait timed out after 30 s")
    with pytest.raises(errors.HcclError) as info:
        getattr(Binding(lib), method)(*args)
    err = info.value
    assert err.function == c_name and err.code == code and isinstance(err, TimeoutError)
    assert err.library_message == "notify wait timed out after 30 s"
    assert str(err).startswith(f"{c_name} failed: {err.code_name} ({code}): notify wait timed out after 30 s")
    assert ". Hint: " in str(err) and "\n" not in str(err)


def test_batch_mode_tags_and_batch_calls() -> None:
    lib = FakeLib()
    b = Binding(lib)
    b.batch_mode_start()
    b.batch_mode_end("step1")
    items = ffi.new("HcclSendRecvItem[3]")
    b.batch_send_recv(items, None, COMM, STREAM)
    b.batch_send_recv(items, 2, COMM, STREAM)
    descs = ffi.new("HcommBatchTransferDesc[4]")
    b.batch_transfer(1, 2, descs)
    assert lib.calls == [("HcommBatchModeStart", (ffi.NULL,)), ("HcommBatchModeEnd", (b"step1",)),  # untagged: NULL
                         ("HcclBatchSendRecv", (items, 3, COMM, STREAM)),
                         ("HcclBatchSendRecv", (items, 2, COMM, STREAM)),
                         ("HcommBatchTransferOnThread", (1, 2, descs, 4))]
    with pytest.raises(ValueError, match="n=4 exceeds the 3 elements of items"):
        b.batch_send_recv(items, 4, COMM, STREAM)


# ------------------------------------------------------------------ error-message path

def test_message_falls_back_to_error_string_when_recent_is_null() -> None:
    lib = FakeLib({"HcommWriteOnThread": 1}, recent=None)
    with pytest.raises(errors.HcclParaError) as info:
        Binding(lib).write(1, 2, PTR, PTR, 8)
    assert info.value.library_message == "error string for 1"


def test_message_getter_failures_do_not_mask_the_error() -> None:
    class Broken(FakeLib):
        def h_aclGetRecentErrMsg(self) -> Any:
            raise RuntimeError("getter exploded")

        def h_HcclGetErrorString(self, code: int) -> Any:
            raise OSError("also broken")

    with pytest.raises(errors.HcclUnavailError) as info:
        Binding(Broken({"HcclThreadAcquire": 7})).thread_acquire(COMM, Engine.CPU_TS, 2, 4)
    assert info.value.library_message is None
    assert "200 threads" in str(info.value) and "engine=1 thread_num=2" in str(info.value)


def test_missing_message_getters() -> None:
    lib = FakeLib({"HcclGetRankId": 2}, missing={"aclGetRecentErrMsg", "HcclGetErrorString"})
    with pytest.raises(errors.HcclPtrError) as info:
        Binding(lib).get_rank_id(COMM)
    assert info.value.library_message is None and str(info.value).startswith("HcclGetRankId failed: HCCL_E_PTR (2). Hint:")


def test_acl_code_does_not_ask_hccl_error_string() -> None:
    lib = FakeLib({"aclrtSetDevice": 107001})
    with pytest.raises(errors.AclRtInvalidDeviceError) as info:
        Binding(lib).set_device(9)
    assert info.value.library_message is None and "device=9" in str(info.value)
    assert [c[0] for c in lib.calls] == ["aclrtSetDevice", "aclGetRecentErrMsg"]


def test_unknown_code_still_raises() -> None:
    with pytest.raises(errors.HcclError) as info:
        Binding(FakeLib({"HcommFenceOnThread": 4242})).fence(1)
    assert type(info.value) is errors.HcclError and "(4242)" in str(info.value)


# ------------------------------------------------------------------ control plane

def test_root_info_round_trip() -> None:
    lib = FakeLib()
    b = Binding(lib)
    info = b.get_root_info()
    assert isinstance(info, bytes) and len(info) == 4108 and info[:3] == b"\x00\x01\x02"
    comm = b.comm_init_root_info(4, info, 2)
    assert ffi.typeof(comm) is ffi.typeof("HcclComm") and int(ffi.cast("uintptr_t", comm)) == 0x1002
    name, args = lib.calls[-1]
    assert name == "HcclCommInitRootInfo" and args[0] == 4 and args[2] == 2
    assert bytes(ffi.buffer(args[1])) == info


@pytest.mark.parametrize("n_ranks, root_info, rank, match", [
    (4, b"x" * 4107, 0, "root_info is 4107 bytes; expected exactly 4108"),
    (4, b"x" * 4108, 4, "rank=4 is out of range; expected an int in 0..3"),
    (0, b"x" * 4108, 0, "n_ranks=0 is out of range"),
    (4, b"x" * 4108, -1, "rank=-1"),
])
def test_comm_init_root_info_validation(n_ranks: int, root_info: bytes, rank: int, match: str) -> None:
    lib = FakeLib()
    with pytest.raises(ValueError, match=match):
        Binding(lib).comm_init_root_info(n_ranks, root_info, rank)
    assert lib.calls == []


def test_comm_init_root_info_with_config_v11_and_v10() -> None:
    b = Binding(FakeLib())
    comm = b.comm_init_root_info(2, bytes(4108), 0, make_comm_config(buffer_size_mb=64))
    assert int(ffi.cast("uintptr_t", comm)) == 0x2000 + 64
    v10 = make_comm_config(buffer_size_mb=32, version=10)
    assert int(ffi.cast("uintptr_t", b.comm_init_root_info(2, bytes(4108), 0, v10))) == 0x2000 + 32
    with pytest.raises(ValueError, match="config has C type 'HcclChannelDesc \\*'"):
        b.comm_init_root_info(2, bytes(4108), 0, ffi.new("HcclChannelDesc *"))
    with pytest.raises(ValueError, match="config=42"):
        b.comm_init_root_info(2, bytes(4108), 0, 42)


def test_comm_init_root_info_error_carries_detail() -> None:
    with pytest.raises(errors.HcclTcpConnectError) as info:
        Binding(FakeLib({"HcclCommInitRootInfo": 11})).comm_init_root_info(4, bytes(4108), 1)
    assert "[n_ranks=4 rank=1]" in str(info.value) and "60000" in str(info.value)


def test_cluster_info_and_sub_comm() -> None:
    lib = FakeLib()
    b = Binding(lib)
    comm = b.comm_init_cluster_info("/etc/hccl/ranktable.json", 3)
    assert int(ffi.cast("uintptr_t", comm)) == 0x3003
    assert lib.calls[-1][1][0] == b"/etc/hccl/ranktable.json"
    with pytest.raises(ValueError, match="path=''"):
        b.comm_init_cluster_info("", 0)
    sub = b.create_sub_comm(COMM, [0, 2, 4], 17, 1)
    assert int(ffi.cast("uintptr_t", sub)) == 0x4000
    assert lib.sub_args == (0x1234, [0, 2, 4], 17, 1, 0xFFFFFFFF)
    with pytest.raises(ValueError, match="rank_ids=\\[\\] is empty"):
        b.create_sub_comm(COMM, [], 1, 0)
    with pytest.raises(ValueError, match="sub_comm_rank_id=3 is out of range"):
        b.create_sub_comm(COMM, [0, 1, 2], 1, 3)
    with pytest.raises(ValueError, match="rank_ids\\[1\\]=-2"):
        b.create_sub_comm(COMM, [0, -2], 1, 0)


def test_comm_init_all() -> None:
    b = Binding(FakeLib())
    comms = b.comm_init_all([0, 1, 3])
    assert [int(ffi.cast("uintptr_t", c)) for c in comms] == [0x5000, 0x5001, 0x5003]
    with pytest.raises(ValueError, match="lists a device twice"):
        b.comm_init_all([0, 0])
    with pytest.raises(ValueError, match="devices=\\[\\] is empty"):
        b.comm_init_all([])


def test_getters() -> None:
    b = Binding(FakeLib())
    assert b.get_rank_id(COMM) == 3
    assert b.get_rank_size(COMM) == 8
    assert b.get_comm_name(COMM) == "world"
    assert b.get_comm_async_error(COMM) == 21
    assert b.get_error_string(9) == "error string for 9"
    assert b.get_device() == 5
    assert b.get_soc_name() is None


# ------------------------------------------------------------------ resources

def test_resources_out_params() -> None:
    lib = FakeLib()
    b = Binding(lib)
    ptr, size = b.get_hccl_buffer(COMM)
    assert ffi.typeof(ptr) is ffi.typeof("char *") and ptr == ffi.cast("char *", lib.buffer) and size == 419430400
    assert b.thread_acquire(COMM, Engine.CPU_TS, 3, 8) == [0xA000, 0xA001, 0xA002]
    assert b.thread_acquire_with_stream(COMM, Engine.CPU, STREAM, 4) == 0xB000
    descs = make_channel_descs([1, 5], Protocol.HCCS, 3)
    assert b.channel_acquire(COMM, Engine.CPU_TS, descs) == [0xC001, 0xC005]
    assert b.channel_acquire(COMM, Engine.CPU_TS, descs, 1) == [0xC001]
    ptr, size = b.channel_get_hccl_buffer(COMM, 0xC001)
    assert size == 0xC001 and ffi.typeof(ptr) is ffi.typeof("char *")
    b.channel_destroy(COMM, [0xC001, 0xC005])
    name, args = lib.calls[-1]
    assert name == "HcclChannelDestroy" and list(args[1]) == [0xC001, 0xC005] and args[2] == 2


def test_resource_validation() -> None:
    b = Binding(FakeLib())
    with pytest.raises(ValueError, match="thread_num=-1"):
        b.thread_acquire(COMM, Engine.CPU_TS, -1, 1)
    with pytest.raises(ValueError, match="notify_num_per_thread=1.5"):
        b.thread_acquire(COMM, Engine.CPU_TS, 1, 1.5)
    descs = make_channel_descs([1], Protocol.HCCS, 3)
    with pytest.raises(ValueError, match="pass its element count as n"):
        b.channel_acquire(COMM, Engine.CPU_TS, ffi.cast("HcclChannelDesc *", descs))
    with pytest.raises(ValueError, match="descs is empty"):
        b.channel_acquire(COMM, Engine.CPU_TS, descs, 0)


# ------------------------------------------------------------------ ACL

def test_acl_init_and_memory() -> None:
    lib = FakeLib()
    b = Binding(lib)
    assert b.acl_init() is True
    assert lib.calls[-1] == ("aclInit", (ffi.NULL,))
    lib.codes["aclInit"] = 100002
    assert b.acl_init("/tmp/acl.json") is False
    lib.codes["aclInit"] = 100001
    with pytest.raises(errors.AclUninitializedError):
        b.acl_init()
    p = b.malloc(1024)
    assert ffi.typeof(p) is ffi.typeof("char *")
    assert lib.calls[-1][1][1:] == (1024, MemMallocPolicy.HUGE_FIRST)
    with pytest.raises(ValueError, match="size=0"):
        b.malloc(0)
    lib.codes["aclrtMalloc"] = 207001
    with pytest.raises(errors.AclRtMemoryAllocationError) as info:
        b.malloc(1 << 40)
    assert "HCCL_BUFFSIZE" in str(info.value)
    assert int(ffi.cast("uintptr_t", b.create_stream())) == 0x77
    assert int(ffi.cast("uintptr_t", b.create_event())) == 0x88
    with pytest.raises(ValueError, match="count=65 exceeds dst_max=64"):
        b.memcpy(PTR, 64, PTR, 65, MemcpyKind.HOST_TO_HOST)


# ------------------------------------------------------------------ process-wide binding and layering

def test_get_binding_is_process_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    import hcomm_cffi.lib as lib_pkg

    made: List[FakeLib] = []
    monkeypatch.setattr(lib_pkg, "load", lambda backend=None: made.append(FakeLib()) or made[-1])
    reset_binding()
    try:
        first = get_binding()
        assert get_binding() is first and first.lib is made[0] and len(made) == 1
        reset_binding()
        assert get_binding() is not first and len(made) == 2
    finally:
        reset_binding()


def test_binding_imports_no_upper_layer() -> None:
    tree = ast.parse(Path(binding_mod.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add((node.level, node.module or ""))
            imported.update((node.level, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update((0, alias.name) for alias in node.names)
    names = {name for _level, name in imported}
    for forbidden in ("sim", "algorithms", "api", "plan", "launch", "cli"):
        assert not any(n == forbidden or n.startswith(forbidden + ".") or f".{forbidden}" in n for n in names), forbidden


def test_every_public_method_has_a_docstring() -> None:
    for name in dir(Binding):
        if not name.startswith("_"):
            assert getattr(Binding, name).__doc__, name
