"""Other ways to create communicators on the emulator: HcclCommInitAll and ranktables."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np

from hcomm_cffi._ffi import ffi
from hcomm_cffi.binding import Binding
from hcomm_cffi.enums import DataType, ReduceOp
from hcomm_cffi.lib import load
from multiproc import run_ranks


def test_comm_init_all_one_process_one_thread_per_device() -> None:
    """HcclCommInitAll makes every rank in this process; each rank's ops run on its own OS thread."""
    b = Binding(load("sim"))
    b.set_device(0)                      # CANN's HcclCommInitAll needs a device (op_base.cc HcclDeviceRefresh)
    comms = b.comm_init_all([0, 1, 2])
    results, errors = {}, []

    def rank_main(rank: int) -> None:
        try:
            b.set_device(rank)
            stream = b.create_stream()
            x = np.full(1000, rank + 1, np.float32)
            y = np.zeros_like(x)
            px, py = ffi.cast("char *", ffi.from_buffer(x)), ffi.cast("char *", ffi.from_buffer(y))
            for _ in range(20):
                b.all_reduce(px, py, x.size, DataType.FP32, ReduceOp.SUM, comms[rank], stream)
                b.synchronize_stream(stream)
            results[rank] = (b.get_rank_id(comms[rank]), b.get_rank_size(comms[rank]), float(y[0]))
            b.destroy_stream(stream)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert results == {r: (r, 3, 6.0) for r in range(3)}
    for c in comms:
        b.comm_destroy(c)
    b.reset_device(0)


def _cluster(rank: int, n: int, root: bytes, path: str) -> tuple:
    b = Binding(load("sim"))
    b.set_device(rank)                   # CANN's HcclCommInitClusterInfo needs a device (op_base.cc:771)
    comm = b.comm_init_cluster_info(path, rank)
    stream = b.create_stream()
    x = np.arange(16, dtype=np.int32) * (rank + 1)
    px = ffi.cast("char *", ffi.from_buffer(x))
    b.all_reduce(px, px, x.size, DataType.INT32, ReduceOp.SUM, comm, stream)
    b.synchronize_stream(stream)
    out = (b.get_rank_id(comm), b.get_rank_size(comm), x.tolist())
    b.comm_destroy(comm)
    return out


def test_comm_init_cluster_info_from_a_ranktable(tmp_path: Path) -> None:
    table = {"status": "completed", "version": "1.0", "server_count": "1", "server_list": [
        {"server_id": "node-a", "device": [{"device_id": str(d), "rank_id": str(d)} for d in range(3)]}]}
    path = tmp_path / "ranktable.json"
    path.write_text(json.dumps(table))
    results = run_ranks(3, _cluster, str(path), timeout=60, env={"HCOMM_JOB_ID": "ranktable-test"})
    expected = (np.arange(16) * 6).tolist()
    assert results == [(r, 3, expected) for r in range(3)]


def test_comm_init_cluster_info_errors(tmp_path: Path) -> None:
    lib = load("sim")
    comm = ffi.new("HcclComm *")
    assert lib.HcclCommInitClusterInfo(str(tmp_path / "missing.json").encode(), 0, comm) == 15  # no device: E_RUNTIME
    assert lib.aclrtSetDevice(0) == 0
    assert lib.HcclCommInitClusterInfo(str(tmp_path / "missing.json").encode(), 0, comm) == 10  # OPEN_FILE_FAILURE
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    assert lib.HcclCommInitClusterInfo(str(bad).encode(), 0, comm) == 1
    assert "not valid JSON" in ffi.string(lib.aclGetRecentErrMsg()).decode()
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"status": "completed", "version": "1.0", "server_list": [
        {"server_id": "a", "device": [{"device_id": "0", "rank_id": "0"}]}]}))
    assert lib.HcclCommInitClusterInfo(str(table).encode(), 5, comm) == 1
    assert "rank=5 is not a rank_id" in ffi.string(lib.aclGetRecentErrMsg()).decode()
    assert lib.aclrtResetDevice(0) == 0
