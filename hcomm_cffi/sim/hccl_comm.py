"""hccl/hccl_comm.h on the emulator: root info, communicator life cycle and names, configs, error strings.

The header's other functions: the group calls in sim/group.py, memory ranges and symmetric windows in
sim/zero_copy.py, HcclBarrier with the collectives in sim/native.py.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import struct
import time
import uuid
from typing import Any, List, Optional

from .. import settings
from .. import trace as _trace
from .._ffi import ffi
from ..enums import HCCL_ROOT_INFO_BYTES
from .acl import current_device, interned
from .comm import SimComm
from .config import CheckerWarning, SimConfig, read_config
from . import ledger
from .errors import ACL_ERROR_RT_INTERNAL_ERROR, HcclResult, SimError, warn_caller
from .native import NATIVE_PROTOCOL
from .part import Part, check_out
from .queues import Queue, SimThread
from .runtime import EXECUTOR
from .state import SimState, c_string
from .tasks import C_WAIT, T_WAIT
from .zero_copy import remember_config

__all__ = ["HcclCommCalls"]

ROOT_MAGIC = b"HCOMMSIM"
ROOT_VERSION = 1
ROOT_SECRET_BYTES = 16      # after magic (8), version and pid (8), comm id (20)
COMM_CONFIG_MAGIC = 0xF0F0F0F0
NOT_SET_U32 = 0xFFFFFFFF
_HCCL_DETERMINISTIC = 0


class HcclCommCalls(Part):
    """Communicator creation, destruction and queries, HcclGet/SetConfig, HcclGetErrorString."""

    HEADERS = ("hccl/hccl_comm.h",)

    def __init__(self, state: SimState, traces_c_program: bool = False) -> None:
        super().__init__(state)
        #: the emulated install's core runs a C program: HCOMM_TRACE from each communicator's creation on
        self.traces_c_program = traces_c_program

    def _require_device(self, function: str) -> int:
        """The calling thread's device; CANN's init calls fail with HCCL_E_RUNTIME without one.

        hcomm @ 8958adb: HcclGetRootInfo (legacy/ascend910/framework/op_base/src/op_base.cc:1383),
        HcclCommInitRootInfoInner (:2010), HcclCommInitClusterInfo (:771) and HcclCommInitAll (:319) start with
        HcclDeviceRefresh (:5305) -> hrtGetDeviceRefresh (legacy/ascend910/platform/common/adapter/
        adapter_rts.cc:264), which returns HCCL_E_RUNTIME when aclrtGetDevice fails (no device set).
        """
        device = current_device()
        if device < 0:
            raise SimError(HcclResult.E_RUNTIME, f"no device is set on this thread: call aclrtSetDevice before "
                                                 f"{function} (CANN's aclrtGetDevice fails here)")
        return device

    # ------------------------------------------------------------------ root info and init
    def HcclGetRootInfo(self, rootInfo: Any) -> int:
        self._require_device("HcclGetRootInfo")
        check_out(rootInfo, "rootInfo")
        comm_id = uuid.uuid4().hex[:20]
        # the job secret travels with the root info (through the job's rendezvous) and is checked at attach
        blob = (ROOT_MAGIC + struct.pack("<II", ROOT_VERSION, os.getpid()) + comm_id.encode()
                + secrets.token_bytes(ROOT_SECRET_BYTES))
        ffi.memmove(ffi.cast("char *", rootInfo), blob.ljust(HCCL_ROOT_INFO_BYTES, b"\0"), HCCL_ROOT_INFO_BYTES)
        return 0

    def HcclCommInitRootInfo(self, nRanks: int, rootInfo: Any, rank: int, comm: Any) -> int:
        return self._init_root(nRanks, rootInfo, rank, None, comm)

    def HcclCommInitRootInfoConfig(self, nRanks: int, rootInfo: Any, rank: int, config: Any, comm: Any) -> int:
        check_out(config, "config")
        return self._init_root(nRanks, rootInfo, rank, config, comm)

    def _init_root(self, n: int, root: Any, rank: int, config: Any, out: Any) -> int:
        self._require_device("HcclCommInitRootInfoConfig" if config is not None else "HcclCommInitRootInfo")
        check_out(root, "rootInfo")
        check_out(out, "comm")
        blob = bytes(ffi.buffer(ffi.cast("char *", root), HCCL_ROOT_INFO_BYTES))
        if not blob.startswith(ROOT_MAGIC):
            raise SimError(HcclResult.E_PARA, "rootInfo was not produced by HcclGetRootInfo of the emulator "
                                              "(bad magic); pass the 4108 bytes unchanged to every rank")
        comm_id = blob[16:36].decode("ascii", "replace")
        # the root info's secret, and the job's (hcomm run exports one per launch): a rank of another job that
        # got hold of this root info (e.g. through a shared HCOMM_RUN_JOB_DIR) is still refused at attach
        secret = blob[36:36 + ROOT_SECRET_BYTES] + (settings.value("HCOMM_JOB_SECRET") or "").encode()
        if n < 1:
            raise SimError(HcclResult.E_PARA, f"nRanks={n}; expected at least 1")
        comm = self._new_comm(out, comm_id, rank, n, config, secret)
        remember_config(comm.handle, config)          # the fields zero copy and windows read (sim/zero_copy.py)
        return 0

    def _config(self, config: Any, default_name: str) -> "tuple[SimConfig, str]":
        cfg = read_config()
        if config is None or config == ffi.NULL:
            return cfg, default_name
        head = bytes(ffi.buffer(ffi.cast("char *", config), 24))
        size, magic, version = struct.unpack_from("<QII", head)
        if magic != COMM_CONFIG_MAGIC:
            raise SimError(HcclResult.E_PARA, f"config magic word is 0x{magic:08x}, expected 0x{COMM_CONFIG_MAGIC:08X}; "
                                              "initialise it with HcclCommConfigInit")
        c = ffi.cast("HcclCommConfig *", config)
        if c.hcclBufferSize != NOT_SET_U32:
            if c.hcclBufferSize < 1:
                raise SimError(HcclResult.E_PARA, "config.hcclBufferSize=0; expected at least 1 (MiB)")
            cfg = dataclasses.replace(cfg, buffsize_mb=int(c.hcclBufferSize))
        if c.hcclExecTimeOut >= 0:
            cfg = dataclasses.replace(cfg, exec_timeout_s=settings.exec_wait_s(float(c.hcclExecTimeOut)))
        return cfg, ffi.string(c.hcclCommName, 128).decode("utf-8", "replace") or default_name

    def _new_comm(self, out: Any, comm_id: str, rank: int, n: int, config: Any, secret: bytes,
                  inherited: Optional[SimConfig] = None) -> SimComm:
        """Make, connect and hand out through ``*out`` communicator ``comm_id``: its settings from ``config``
        (else ``inherited``, else the environment's), its name from ``config`` (else ``comm_id``)."""
        cfg, name = self._config(config, comm_id)
        if inherited is not None and (config is None or config == ffi.NULL):
            cfg = inherited
        with self.state.lock:
            handle = self.state.new_ptr_key()
            comm = SimComm(handle, comm_id, name, rank, n, cfg, secret)
            comm.device = current_device()
            self.state.comms[handle] = comm
        try:
            comm.connect()
        except BaseException:
            with self.state.lock:
                del self.state.comms[handle]
            comm.destroy()
            raise
        _record_buffer(comm, "HcclCommInit")
        if self.traces_c_program:
            _trace.start(rank)   # HCOMM_TRACE of a C program (the Comm API starts it for Python programs)
        out[0] = ffi.cast("HcclComm", comm.handle)
        return comm

    def HcclCommInitClusterInfo(self, clusterInfo: Any, rank: int, comm: Any) -> int:
        return self._init_cluster(clusterInfo, rank, None, comm)

    def HcclCommInitClusterInfoConfig(self, clusterInfo: Any, rank: int, config: Any, comm: Any) -> int:
        return self._init_cluster(clusterInfo, rank, config, comm)

    def _init_cluster(self, path_c: Any, rank: int, config: Any, out: Any) -> int:
        self._require_device("HcclCommInitClusterInfo")
        check_out(path_c, "clusterInfo")
        check_out(out, "comm")
        path = c_string(path_c).decode()
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
        except OSError as exc:
            raise SimError(HcclResult.E_OPEN_FILE_FAILURE, f"cannot open ranktable {path!r}: {exc.strerror}") from None
        try:
            table = json.loads(raw)
        except ValueError as exc:
            raise SimError(HcclResult.E_PARA, f"ranktable {path!r} is not valid JSON: {exc}") from None
        ranks = _ranktable_rank_ids(table, path)
        if rank not in ranks:
            raise SimError(HcclResult.E_PARA, f"rank={rank} is not a rank_id of ranktable {path!r} "
                                              f"(it lists {sorted(ranks)[:8]}{'...' if len(ranks) > 8 else ''})")
        # the job secret (hcomm run exports one per launch) keeps two jobs with the same ranktable and job id apart
        secret = (settings.value("HCOMM_JOB_SECRET") or "").encode()
        digest = hashlib.sha1(os.path.realpath(path).encode() + raw
                              + (settings.value("HCOMM_JOB_ID") or "").encode() + secret).hexdigest()[:20]
        self._new_comm(out, digest, rank, len(ranks), config, secret)
        return 0

    def HcclCreateSubCommConfig(self, comm: Any, rankNum: int, rankIds: Any, subCommId: int, subCommRankId: int,
                                config: Any, subComm: Any) -> int:
        check_out(comm, "comm")
        check_out(subComm, "subComm")
        check_out(rankIds, "rankIds")
        parent = self.state.comm(comm[0])
        if rankNum < 1 or rankNum > parent.nranks:
            raise SimError(HcclResult.E_PARA, f"rankNum={rankNum}; expected 1..{parent.nranks}")
        ids = [int(rankIds[i]) for i in range(rankNum)]
        if len(set(ids)) != len(ids) or any(not 0 <= r < parent.nranks for r in ids):
            raise SimError(HcclResult.E_PARA, f"rankIds={ids} must be distinct ranks of the parent (0..{parent.nranks - 1})")
        if not 0 <= subCommRankId < rankNum or ids[subCommRankId] != parent.rank:
            raise SimError(HcclResult.E_PARA, f"subCommRankId={subCommRankId} does not point at this rank "
                                              f"({parent.rank}) in rankIds={ids}")
        digest = hashlib.sha1(f"{parent.comm_id}/{subCommId}/{ids}".encode()).hexdigest()[:20]
        self._new_comm(subComm, digest, subCommRankId, rankNum, config, parent.secret, inherited=parent.config)
        return 0

    def HcclCommInitAll(self, ndev: int, devices: Any, comms: Any) -> int:
        self._require_device("HcclCommInitAll")
        check_out(devices, "devices")
        check_out(comms, "comms")
        devs = [int(devices[i]) for i in range(ndev)]
        if ndev < 1 or len(set(devs)) != ndev:
            raise SimError(HcclResult.E_PARA, f"devices={devs}: expected ndev >= 1 distinct device ids")
        comm_id = uuid.uuid4().hex[:20]
        secret = secrets.token_bytes(ROOT_SECRET_BYTES)
        cfg = read_config()
        made: List[SimComm] = []
        try:
            with self.state.lock:
                for r in range(ndev):
                    handle = self.state.new_ptr_key()
                    c = SimComm(handle, comm_id, comm_id, r, ndev, cfg, secret)
                    c.device = devs[r]
                    self.state.comms[handle] = c
                    made.append(c)
            deadline = time.monotonic() + cfg.connect_timeout_s
            for c in made:        # all ranks live in this process: map everyone first, then confirm
                c.map_peers(deadline)
            for c in made:
                c.wait_connected(deadline)
            for c in made:
                c.unlink_names()
        except BaseException:
            for c in made:
                self.state.comms.pop(c.handle, None)
                c.destroy()
            raise
        for r, c in enumerate(made):
            _record_buffer(c, "HcclCommInitAll")
            comms[r] = ffi.cast("HcclComm", c.handle)
        return 0

    def HcclCommDestroy(self, comm: Any) -> int:
        c = self.state.comm(comm)
        EXECUTOR.settle()
        clean = not c.async_error
        stranded = []
        with EXECUTOR.lock:
            for th in c.all_threads():
                q = th.queue
                if q.tasks:
                    stranded.append(_stranded(c, th, q))
                    EXECUTOR.fail_queue(q, HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR,
                                        f"{q.name}: communicator {c.name} destroyed with tasks pending")
        # after a failed operation leftovers are a consequence, not a schedule bug: report only clean runs
        # records on the native collectives' own channels come from peers already in a collective this rank
        # never joins (it finalised first): their failure names this rank; here they are not a schedule bug
        leftovers = (c.unconsumed_channel_records(skip_protocol=NATIVE_PROTOCOL)
                     if c.config.check != "off" and not c.async_error else [])
        messages = [f"checker: rank {c.rank}, communicator {c.name}: {text} was recorded but never waited on"
                    for text in leftovers]
        if clean and c.config.check != "off":
            messages += stranded
        c.reports.extend(messages)
        messages += c.strict_findings          # e.g. a thread notify left set at the end of a batch
        if c.config.check == "warn":
            for message in messages:
                warn_caller(message, CheckerWarning)
        with self.state.lock:
            for th in c.threads:
                self.state.threads.pop(th.handle, None)
                # the stream of an acquired thread dies with it (the vendor frees the Thread and its Stream):
                # its aclrtStream handle from HcclThreadResGetInfo dangles from now on
                for key in [k for k, q in self.state.streams.items() if q is th.queue]:
                    self.state.release_stream(key, f"it was the stream of {th.label}, released by HcclCommDestroy "
                                                   f"of communicator {c.name}")
            for th in c.stream_threads.values():
                self.state.threads.pop(th.handle, None)
            for ch in c.channels.values():
                self.state.channels.pop(ch.handle, None)
            for context in c.engine_contexts.values():       # HcclEngineCtxCreate's memory dies with the comm
                self.state.device.remove(int(ffi.cast("uintptr_t", context.memory)))
            c.engine_contexts.clear()
            self.state.comms.pop(c.handle, None)
        EXECUTOR.retire(c, c.destroy)            # other ranks of this process may be polling its words
        if self.traces_c_program and _trace.ACTIVE:
            _trace.flush()                       # a C program never runs the exit-time flush
        if messages and c.config.check == "strict":  # everything is released; the schedule was still wrong
            raise SimError(HcclResult.E_INTERNAL, "; ".join(messages))
        return 0

    # ------------------------------------------------------------------ queries
    def _answer(self, comm: Any, out: Any, what: str, field: str) -> int:
        """``*out`` = the communicator's ``field`` (the out pointer ``what`` is checked first)."""
        check_out(out, what)
        out[0] = getattr(self.state.comm(comm), field)
        return 0

    def HcclGetRankId(self, comm: Any, rank: Any) -> int:
        return self._answer(comm, rank, "rank", "rank")

    def HcclGetRankSize(self, comm: Any, rankSize: Any) -> int:
        return self._answer(comm, rankSize, "rankSize", "nranks")

    def HcclGetCommName(self, comm: Any, commName: Any) -> int:
        check_out(commName, "commName")
        name = self.state.comm(comm).name.encode()[:127] + b"\0"
        ffi.memmove(ffi.cast("char *", commName), name, len(name))
        return 0

    def HcclGetCommAsyncError(self, comm: Any, asyncError: Any) -> int:
        return self._answer(comm, asyncError, "asyncError", "async_error")

    def HcclGetErrorString(self, code: int) -> Any:
        return interned(_ERROR_STRINGS.get(int(code), f"unknown HcclResult {int(code)}"))

    def HcclGetCommConfigCapability(self) -> int:
        return 12  # every HcclCommConfigCapability item up to HCCL_COMM_CONFIG_BUFFER_NAME

    # ------------------------------------------------------------------ communicators by name
    def HcclCommGetHandleWithName(self, commName: Any, comm: Any) -> int:
        """hcomm op_base HcclCommGetHandleWithName: NULL -> HCCL_E_PTR, an unknown name -> HCCL_E_PARA.

        One process may hold one communicator of a name per device (a thread per device): the calling
        thread's current device (aclrtSetDevice) picks among them, as the vendor's per-device lookup does.
        """
        check_out(commName, "commName")
        check_out(comm, "comm")
        name = c_string(commName).decode("utf-8", "replace")
        with self.state.lock:
            found = [c for c in self.state.comms.values() if c.name == name and not c.destroyed]
        if not found:
            raise SimError(HcclResult.E_PARA, f"no communicator named {name!r} in this process")
        if len(found) > 1:
            device = current_device()
            mine = [c for c in found if c.device == device]
            if len(mine) != 1:
                raise SimError(HcclResult.E_PARA, f"{len(found)} communicators are named {name!r} in this process and "
                                                  f"{len(mine)} of them on this thread's device {device}; set the "
                                                  "device of the one you want first (aclrtSetDevice)")
            found = mine
        comm[0] = ffi.cast("HcclComm", found[0].handle)
        return 0

    # ------------------------------------------------------------------ process-wide configuration
    # hcomm HcclSetConfig/HcclGetConfig: only HCCL_DETERMINISTIC; its value is 0 or 1, anything else HCCL_E_PARA.
    def HcclSetConfig(self, config: int, configValue: int) -> int:
        if config != _HCCL_DETERMINISTIC:
            raise SimError(HcclResult.E_NOT_SUPPORT, f"config={config}; only HCCL_DETERMINISTIC (0) is supported")
        if configValue not in (0, 1):
            raise SimError(HcclResult.E_PARA, f"HCCL_DETERMINISTIC value={configValue}; expected 0 or 1")
        self.state.client_calls["deterministic"] = int(configValue)
        return 0

    def HcclGetConfig(self, config: int, configValue: Any) -> int:
        check_out(configValue, "configValue")
        if config != _HCCL_DETERMINISTIC:
            raise SimError(HcclResult.E_NOT_SUPPORT, f"config={config}; only HCCL_DETERMINISTIC (0) is supported")
        configValue[0].value = self.state.client_calls.get("deterministic", 0)
        return 0


def _stranded(c: SimComm, th: SimThread, q: Queue) -> str:
    """The checker's words for a thread whose tasks never ran before its communicator was destroyed."""
    head = q.tasks[0]
    if head[0] == T_WAIT:
        waits = f"waits on thread notify {head.index}, which nothing recorded"
    elif head[0] == C_WAIT:
        waits = f"waits on channel notify {head.index} from rank {head.channel.peer}, which it never recorded"
    else:
        waits = f"is {head.name}"
    return (f"checker: rank {c.rank}, communicator {c.name}: destroyed while {th.label} still had {len(q.tasks)} "
            f"task(s) (step {q.executed} {waits}); they never ran: every thread's work must end before the stream "
            "that waits for it is synchronised (a missing record, or a thread left out of the join)")


def _record_buffer(c: SimComm, function: str) -> None:
    """The communicator's HCCL buffer, made with it (``2 x HCCL_BUFFSIZE`` per rank; none on one rank, whose
    HcclGetHcclBuffer answers NULL and 0)."""
    if c.nranks > 1:
        ledger.record(c.name, "buffer", "", c.buffer_bytes, 0, rank=c.rank, function=function)


def _ranktable_rank_ids(table: Any, path: str) -> List[int]:
    """Rank ids listed in a ranktable (1.0/1.2 server_list, or 2.0 rank_list)."""
    ids: List[int] = []
    try:
        if "rank_list" in table:
            ids = [int(r["rank_id"]) for r in table["rank_list"]]
        else:
            for server in table["server_list"]:
                ids.extend(int(d["rank_id"]) for d in server["device"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SimError(HcclResult.E_PARA, f"ranktable {path!r}: cannot read rank ids ({exc!r})") from None
    if sorted(ids) != list(range(len(ids))):
        raise SimError(HcclResult.E_PARA, f"ranktable {path!r}: rank ids {sorted(ids)} are not 0..{len(ids) - 1}")
    return ids


_ERROR_STRINGS = {
    0: "no error", 1: "parameter error", 2: "empty pointer", 3: "memory error", 4: "internal error",
    5: "not support feature", 6: "not found specific resource", 7: "resource unavailable",
    8: "call system interface error", 9: "timeout", 10: "open file fail", 11: "tcp connect fail",
    12: "roce connect fail", 13: "tcp transfer fail", 14: "roce transfer fail", 15: "call runtime api fail",
    16: "call driver api fail", 17: "call profiling api fail", 18: "call cce api fail",
    19: "call network api fail", 20: "try again", 21: "error cqe", 22: "communicator suspended",
    23: "operator retry failed", 24: "out of memory", 1041: "see status output",
}
