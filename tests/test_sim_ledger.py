"""The emulator's acquisition ledger: every thread, channel and HCCL buffer its C functions hand out, per
communicator, tagged by the package's purpose; the HCOMM_SIM_LEDGER dump a C program leaves behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, List

from hcomm_cffi.binding import Binding
from hcomm_cffi.enums import Engine, Protocol
from hcomm_cffi.initializers import make_channel_descs
from hcomm_cffi.lib import load
from hcomm_cffi.sim import ledger


def _two_ranks_acquire(b: Binding, comms: List, errors: List[BaseException]) -> None:
    def rank_main(rank: int) -> None:
        try:
            b.set_device(rank)
            peer = 1 - rank
            with ledger.tagged("algorithm:test"):
                b.thread_acquire(comms[rank], Engine.AICPU_TS, 2, 3)
                b.channel_acquire(comms[rank], Engine.AICPU_TS, make_channel_descs([peer], Protocol.HCCS, 2))
            # the same (peer, engine, protocol) again: the emulator reuses the channel, nothing new is held
            b.channel_acquire(comms[rank], Engine.AICPU_TS, make_channel_descs([peer], Protocol.HCCS, 2))
            stream = b.create_stream()
            b.thread_acquire_with_stream(comms[rank], Engine.CPU_TS, stream, 1)
            b.thread_acquire_with_stream(comms[rank], Engine.CPU_TS, stream, 4)   # 3 notifies more, same thread
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank did not finish within 60 s"


def test_ledger_records_what_the_c_functions_hand_out() -> None:
    ledger.clear()
    b = Binding(load("sim"))
    b.set_device(0)
    comms = b.comm_init_all([0, 1])
    errors: List[BaseException] = []
    try:
        _two_ranks_acquire(b, comms, errors)
    finally:
        for c in comms:
            b.comm_destroy(c)
    assert not errors, errors
    records = ledger.acquisitions()
    name = records[0].comm
    assert ledger.acquisitions(name) == records and ledger.acquisitions("no such communicator") == []
    rank0 = [(a.kind, a.engine, a.count, a.notifies, a.purpose, a.peers) for a in records if a.rank == 0]
    buffer = [a for a in records if a.rank == 0 and a.kind == "buffer"]
    assert len(buffer) == 1 and buffer[0].count >= 2 << 20 and buffer[0].engine == ""
    assert [r for r in rank0 if r[0] != "buffer"] == [
        ("thread", "AICPU_TS", 2, 3, "algorithm:test", ()),
        ("channel", "AICPU_TS", 1, 2, "algorithm:test", (1,)),       # the repeated acquire is a reuse: no record
        ("thread", "CPU_TS", 1, 1, "", ()),
        ("notify", "CPU_TS", 3, 0, "", ()),
    ]
    ledger.clear()
    assert ledger.acquisitions() == []


_C_SIDE = r"""
import sys
from hcomm_cffi.binding import Binding
from hcomm_cffi.enums import Engine
from hcomm_cffi.lib import load
b = Binding(load("sim"))
b.set_device(0)
comm = b.comm_init_all([0])[0]
b.thread_acquire(comm, Engine.CPU_TS, 3, 2)
import os
os._exit(0)          # no atexit: the dump must already be on disk
"""


def test_ledger_dump_is_on_disk_without_a_normal_exit(tmp_path: Path) -> None:
    env = dict(os.environ, HCOMM_SIM_LEDGER=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", _C_SIDE], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (path,) = tmp_path.glob("ledger-*.json")
    assert path.name == f"ledger-{json.loads(path.read_text())['pid']}.json"
    records = ledger.load(str(path))
    assert [(a.kind, a.engine, a.count, a.notifies, a.function) for a in records] == [
        ("thread", "CPU_TS", 3, 2, "HcclThreadAcquire")]     # one rank: no HCCL buffer (HcclGetHcclBuffer: NULL)
