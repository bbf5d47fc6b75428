"""Emulator raw speed between two ranks: write bandwidth and notify round-trip latency.

Rank 0 writes a message into rank 1's HCCL buffer and records DATA; rank 1 waits, records ACK;
rank 0 waits for the ACK before the next message (so each iteration is one complete, checked
transfer).  The reference is memcpy (ffi.memmove) of the same size in the same run, reported as
a ratio.  Notify latency is a zero-byte ping-pong (record -> wait -> record -> wait).  With
``--ring 4,8`` it also passes a token around a ring of 4 and 8 ranks (more ranks than the 2 cores
here): the time per hop shows whether blocked waits leave the cores to the ranks that can run.

    python benchmarks/bench_sim.py [--sizes 8,64K,1M,4M,16M,64M] [--ring 4,8] [--check off|warn|strict]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hcomm_cffi._ffi import ffi  # noqa: E402
from hcomm_cffi.binding import Binding  # noqa: E402
from hcomm_cffi.enums import Engine, Protocol  # noqa: E402
from hcomm_cffi.initializers import make_channel_descs  # noqa: E402
from hcomm_cffi.sim import SimLibrary  # noqa: E402

ACK, DATA = 0, 1


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _rank(rank: int, root: bytes, sizes: List[int], out: "mp.Queue") -> None:
    b = Binding(SimLibrary())
    b.set_device(rank)
    comm = b.comm_init_root_info(2, root, rank)
    stream = b.create_stream()
    peer = 1 - rank
    (ch,) = b.channel_acquire(comm, Engine.CPU_TS, make_channel_descs([peer], Protocol.HCCS, 2), 1)
    th = b.thread_acquire_with_stream(comm, Engine.CPU_TS, stream, 0)
    peer_buf, _ = b.channel_get_hccl_buffer(comm, ch)
    src = np.ones(max(sizes), np.uint8)
    psrc = ffi.cast("char *", ffi.from_buffer(src))
    results: Dict[str, float] = {}

    def transfer(nbytes: int) -> None:
        b.batch_mode_start(b"")
        if rank == 0:
            b.write(th, ch, peer_buf, psrc, nbytes)
            b.channel_notify_record(th, ch, DATA)
            b.channel_notify_wait(th, ch, ACK, 60)
        else:
            b.channel_notify_wait(th, ch, DATA, 60)
            b.channel_notify_record(th, ch, ACK)
        b.batch_mode_end(b"")
        b.synchronize_stream(stream)

    for nbytes in sizes:
        iters = max(5, min(2000, int(2e8 // max(nbytes, 1))))
        for _ in range(3):
            transfer(nbytes)
        t = time.perf_counter()
        for _ in range(iters):
            transfer(nbytes)
        results[f"write {nbytes}"] = (time.perf_counter() - t) / iters
    # zero-byte ping-pong: notify round trip
    iters = 5000
    for _ in range(100):
        transfer(0)
    t = time.perf_counter()
    for _ in range(iters):
        transfer(0)
    results["notify round trip"] = (time.perf_counter() - t) / iters
    b.comm_destroy(comm)
    out.put((rank, results))


def _token_rank(rank: int, n: int, root: bytes, laps: int, out: "mp.Queue") -> None:
    b = Binding(SimLibrary())
    b.set_device(rank)
    comm = b.comm_init_root_info(n, root, rank)
    stream = b.create_stream()
    right, left = (rank + 1) % n, (rank - 1) % n
    chans = dict(zip([left, right], b.channel_acquire(
        comm, Engine.CPU_TS, make_channel_descs([left, right], Protocol.HCCS, 1), 2)))
    th = b.thread_acquire_with_stream(comm, Engine.CPU_TS, stream, 0)

    def lap() -> None:
        b.batch_mode_start(b"")
        if rank == 0:
            b.channel_notify_record(th, chans[right], 0)
            b.channel_notify_wait(th, chans[left], 0, 60)
        else:
            b.channel_notify_wait(th, chans[left], 0, 60)
            b.channel_notify_record(th, chans[right], 0)
        b.batch_mode_end(b"")
        b.synchronize_stream(stream)

    for _ in range(20):
        lap()
    t = time.perf_counter()
    for _ in range(laps):
        lap()
    elapsed = time.perf_counter() - t
    b.comm_destroy(comm)
    out.put((rank, elapsed / (laps * n)))


def _root_info() -> bytes:
    """Root info made on device 0 (HcclGetRootInfo needs a device, as on CANN), then the device is reset."""
    lib = SimLibrary()
    root = ffi.new("HcclRootInfo *")
    assert lib.aclrtSetDevice(0) == 0
    assert lib.HcclGetRootInfo(root) == 0
    assert lib.aclrtResetDevice(0) == 0
    return bytes(ffi.buffer(root))


def token_ring_hop_seconds(n: int, laps: int = 500) -> float:
    """Seconds per hop of a token passed around ``n`` ranks (each hop: one record, one wait)."""
    root = _root_info()
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_token_rank, args=(r, n, root, laps, out)) for r in range(n)]
    for p in procs:
        p.start()
    hops = dict(out.get(timeout=600) for _ in procs)
    for p in procs:
        p.join()
    return hops[0]


def memcpy_seconds(nbytes: int) -> float:
    """Seconds for one memmove of ``nbytes`` between two warm buffers in this process."""
    a = np.ones(nbytes, np.uint8)
    c = np.empty(nbytes, np.uint8)
    pa, pc = ffi.from_buffer(a), ffi.from_buffer(c)
    iters = max(5, min(2000, int(2e8 // max(nbytes, 1))))
    ffi.memmove(pc, pa, nbytes)
    t = time.perf_counter()
    for _ in range(iters):
        ffi.memmove(pc, pa, nbytes)
    return (time.perf_counter() - t) / iters


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="8,64K,1M,4M,16M,64M")
    parser.add_argument("--check", default="off", choices=["off", "warn", "strict"])
    parser.add_argument("--ring", default="2,4,8", help="rank counts for the token-ring hop latency")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    os.environ["HCOMM_SIM_CHECK"] = args.check
    os.environ.setdefault("HCCL_BUFFSIZE", str(max(1, max(sizes) >> 20)))
    root = _root_info()
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, root, sizes, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=600) for _ in procs)
    for p in procs:
        p.join()
    r0 = results[0]
    print(f"emulator, 2 ranks, checker={args.check}; write = one checked transfer (write + DATA + ACK)")
    print(f"{'size':>10} {'write us':>10} {'write GB/s':>11} {'memcpy GB/s':>12} {'ratio':>7}")
    for nbytes in sizes:
        sec = r0[f"write {nbytes}"]
        ref = memcpy_seconds(nbytes)
        bw, ref_bw = nbytes / sec / 1e9, nbytes / ref / 1e9
        print(f"{nbytes:>10} {sec * 1e6:>10.2f} {bw:>11.3f} {ref_bw:>12.3f} {bw / ref_bw:>7.3f}")
    print(f"notify round trip (record->wait->record->wait): {r0['notify round trip'] * 1e6:.2f} us")
    for n in [int(x) for x in args.ring.split(",") if x]:
        print(f"token ring, {n} ranks on {os.cpu_count()} cores: {token_ring_hop_seconds(n) * 1e6:.2f} us per hop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
