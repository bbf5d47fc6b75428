"""Soak: a long seeded mix of operations on every rank, sampling RSS and open fds (a leak check), then the
consistency check's cost on an 8-byte allreduce.

    hcomm run -n 4 -- python benchmarks/soak.py [--ops 10000] [--sample 250] [--warmup 1000]
                                                [--rss-bound-mb 32] [--maps-bound 16] [--seed 1]
                                                [--latency-calls 2000]

Every rank draws the same sequence (one seed): collectives of every kind (blocking and nonblocking)
with random sizes, dtypes, reduce ops, roots and algorithms, point-to-point around the ring, and
now and then a sub-communicator over a random subset created, used and destroyed.  Results are
checked against a local reference.  Each rank samples its private and shared resident memory
(/proc/self/status RssAnon, RssShmem), its mappings (/proc/self/maps) and its open file descriptors
(/proc/self/fd) every ``--sample`` operations; the leak check compares the sample after ``--warmup``
operations (caches, lanes and schedules are filled by then) with the last one: it fails (exit
status 1, "LEAK" on stdout) when private RSS grew by more than ``--rss-bound-mb``, the mappings by
more than ``--maps-bound``, or the fds at all (shared RSS grows as HCCL buffer pages are first
touched: reported, not judged).  Then it times ``--latency-calls`` 8-byte allreduces on the world
(collective signature check on, the emulator's default) and on a communicator created with
``HCOMM_CHECK_COLLECTIVES=0``, alternating blocks, and prints µs per call and their ratio.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from typing import Any, Callable, List, Tuple

import numpy as np

import hcomm_cffi as hcomm

ALGOS = ["ring", "mesh", "tree", "native", "auto"]
NO_TREE = ["ring", "mesh", "native", "auto"]      # allgather, reduce_scatter and alltoall have no tree
DTYPES = [np.float32, np.int32, np.float16, np.int8, np.float64]
COUNTS = [1, 8, 100, 1000, 4096, 65536, 262144]
COUNT_WEIGHTS = [4, 4, 4, 3, 3, 2, 1]
KINDS = ["allreduce", "iallreduce", "broadcast", "allgather", "reduce_scatter", "reduce", "alltoall", "barrier",
         "p2p"]
STATS = 11  # per rank: private RSS start/end/max, shared RSS start/end, maps start/end, fds start/end/max, ops


def memory() -> Tuple[int, int, int]:
    """(private resident bytes, resident shared-memory bytes, mappings) of this process now.

    Shared-memory residency grows as the HCCL buffers' pages are first touched, which is not a leak;
    private memory and the number of mappings (a segment never unmapped) are what must stay flat.
    """
    fields = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssShmem"):
                fields[key] = int(rest.split()[0]) * 1024
    with open("/proc/self/maps") as fh:
        maps = sum(1 for _ in fh)
    return fields.get("RssAnon", 0), fields.get("RssShmem", 0), maps


def open_fds() -> int:
    """Open file descriptors of this process now."""
    return len(os.listdir("/proc/self/fd"))


def _ref(count: int, dtype: Any, rank: int) -> np.ndarray:
    return ((np.arange(count) + rank) % 5).astype(dtype)


def one_op(w: Any, rng: random.Random, step: int) -> None:
    """Draw one operation (same on every rank), run it, check it against a local reference."""
    rank, n = w.get_rank(), w.get_size()
    if step % 97 == 96:   # now and then: a sub-communicator over a random subset
        size = rng.randint(2, n)
        members = rng.sample(range(n), size)
        sub = hcomm.Comm(f"soak{step}", ranks=members)
        if sub:
            x = np.full(16, rank, np.int64)
            sub.allreduce(x)
            assert (x == sum(members)).all(), (step, "sub-communicator", members, x[:2])
        sub.destroy()
        return
    kind = rng.choice(KINDS)
    count = rng.choices(COUNTS, COUNT_WEIGHTS)[0]
    dt = rng.choice(DTYPES)
    algo = rng.choice(NO_TREE if kind in ("allgather", "reduce_scatter", "alltoall") else ALGOS)
    if dt is np.float64 and kind in ("allreduce", "iallreduce", "reduce_scatter"):
        algo = "native"   # the data-plane reduce has no fp64 (the registry says so): the vendor collective does
    what = (step, kind, count, dt.__name__, algo)
    if kind in ("allreduce", "iallreduce"):
        op = rng.choice(["sum", "max", "min"])
        x = _ref(count, dt, rank)
        if kind == "allreduce":
            w.allreduce(x, op=op, algorithm=algo)
        else:
            w.iallreduce(x, op=op, algorithm=algo).wait(120)
        stack = np.stack([_ref(count, dt, r) for r in range(n)])
        exp = {"sum": np.sum, "max": np.max, "min": np.min}[op](stack, axis=0).astype(dt)
        assert np.array_equal(x, exp), what + (op,)
    elif kind == "broadcast":
        root = rng.randrange(n)
        x = _ref(count, dt, 0) if rank == root else np.zeros(count, dt)
        w.broadcast(x, root=root, algorithm=algo)
        assert np.array_equal(x, _ref(count, dt, 0)), what
    elif kind == "allgather":
        out = w.allgather(np.full(count, rank, dt), algorithm=algo)
        assert np.array_equal(np.asarray(out).reshape(n, count), np.repeat(np.arange(n), count).reshape(n, count)
                              .astype(dt)), what
    elif kind == "reduce_scatter":
        blk = max(1, count // n)
        out = np.zeros(blk, dt)
        w.reduce_scatter(np.ones(blk * n, dt), out=out, algorithm=algo)
        assert (out == n).all(), what
    elif kind == "reduce":
        root = rng.randrange(n)
        out = np.zeros(count, np.float32)
        w.reduce(np.ones(count, np.float32), root=root, out=out, algorithm=algo)
        assert rank != root or (out == n).all(), what
    elif kind == "alltoall":
        blk = max(1, count // n)
        out = w.alltoall(np.repeat(np.arange(n, dtype=np.int32) + 10 * rank, blk), algorithm=algo)
        assert np.array_equal(np.asarray(out).ravel(), np.repeat(10 * np.arange(n, dtype=np.int32) + rank, blk)), what
    elif kind == "p2p":
        y = np.zeros(count, dt)
        req = w.irecv(y, (rank - 1) % n)
        w.send(np.full(count, rank, dt), (rank + 1) % n)
        req.wait(120)
        assert (y == (rank - 1) % n).all(), what
    else:
        w.barrier(algorithm=rng.choice(["native", "auto"]))


def soak(w: Any, ops: int, sample: int, warmup: int, seed: int) -> Tuple[np.ndarray, float]:
    """Run ``ops`` operations; returns this rank's stats row and the seconds taken."""
    rng = random.Random(seed)
    samples: List[Tuple[int, int, int, int]] = []   # private RSS, shared RSS, mappings, fds
    t0 = time.perf_counter()
    for step in range(ops):
        one_op(w, rng, step)
        done = step + 1
        if done == warmup or (done > warmup and (done - warmup) % sample == 0) or done == ops:
            samples.append(memory() + (open_fds(),))
    elapsed = time.perf_counter() - t0
    first, last = samples[0], samples[-1]
    row = np.array([first[0], last[0], max(s[0] for s in samples), first[1], last[1], first[2], last[2],
                    first[3], last[3], max(s[3] for s in samples), ops], np.int64)
    return row, elapsed


def leaks(table: np.ndarray, rss_bound_mb: float, maps_bound: int) -> List[Tuple[int, int, int, int]]:
    """(rank, private RSS growth, mapping growth, fd growth) of every rank past a bound (STATS rows)."""
    bound = rss_bound_mb * 2**20
    return [(r, int(t[1] - t[0]), int(t[6] - t[5]), int(t[8] - t[7])) for r, t in enumerate(table)
            if t[1] - t[0] > bound or t[6] - t[5] > maps_bound or t[8] > t[7]]


def _time_block(call: Callable[[], Any], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - t0) / calls


def check_cost(w: Any, calls: int) -> Tuple[float, float]:
    """(µs per 8-byte allreduce with the signature check, without it): medians of alternating blocks."""
    os.environ["HCOMM_CHECK_COLLECTIVES"] = "0"
    try:
        plain = hcomm.Comm("soak-nocheck")
    finally:
        del os.environ["HCOMM_CHECK_COLLECTIVES"]
    # on the emulator both carry the in-band check of its library collectives (it cannot be turned off);
    # the setting only adds the package's handshake to them on a backend without one (CANN)
    x = np.ones(1, np.float64)   # 8 bytes
    on, off = (lambda: w.allreduce(x, algorithm="native")), (lambda: plain.allreduce(x, algorithm="native"))
    block = max(10, calls // 10)
    _time_block(on, block // 2)
    _time_block(off, block // 2)
    t_on: List[float] = []
    t_off: List[float] = []
    for _ in range(max(1, calls // block)):
        w.barrier()
        t_on.append(_time_block(on, block))
        w.barrier()
        t_off.append(_time_block(off, block))
    plain.destroy()
    return float(np.median(t_on) * 1e6), float(np.median(t_off) * 1e6)


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10000, help="operations per rank (default 10000)")
    ap.add_argument("--sample", type=int, default=250, help="sample RSS and fds every N operations (default 250)")
    ap.add_argument("--warmup", type=int, default=None, help="operations before the baseline sample "
                    "(default: a tenth of --ops)")
    ap.add_argument("--rss-bound-mb", type=float, default=32.0, help="allowed RSS growth after the warm-up (MB)")
    ap.add_argument("--maps-bound", type=int, default=16, help="allowed growth of the mapping count after the "
                    "warm-up (default 16: the allocator may add an arena; one leaked communicator maps >= 3 segments "
                    "per member, and the soak creates one every 97 operations)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--latency-calls", type=int, default=2000, help="8-byte allreduces per variant (default 2000)")
    args = ap.parse_args(argv)
    for name in ("ops", "sample", "latency_calls"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}={getattr(args, name)}; expected >= 1")
    warmup = args.warmup if args.warmup is not None else max(1, args.ops // 10)
    if not 1 <= warmup <= args.ops:
        ap.error(f"--warmup={warmup}; expected 1..--ops ({args.ops})")
    w = hcomm.init()
    if w.get_size() < 2:
        hcomm.finalize()
        ap.error(f"{w.get_size()} rank: the soak needs 2 ranks or more (point-to-point around the ring, "
                 "sub-communicators over subsets); run it as `hcomm run -n 4 -- python benchmarks/soak.py`")
    try:
        rank, n = w.get_rank(), w.get_size()
        row, elapsed = soak(w, args.ops, args.sample, warmup, args.seed)
        table = np.asarray(w.allgather(row)).reshape(n, STATS)
        on_us, off_us = check_cost(w, args.latency_calls)
        lat = np.asarray(w.allgather(np.array([on_us, off_us], np.float64))).reshape(n, 2)
    finally:
        hcomm.finalize()
    grew = leaks(table, args.rss_bound_mb, args.maps_bound)
    if rank == 0:
        mb = lambda v: f"{v / 2**20:7.1f}"   # noqa: E731
        print(f"soak: {args.ops} operations on {n} ranks in {elapsed:.1f} s ({elapsed / args.ops * 1e3:.2f} ms/op), "
              f"seed {args.seed}; baseline after {warmup} operations, samples every {args.sample}", flush=True)
        print("rank | private RSS MB: start   end   max growth | shared RSS MB: start   end | mappings: start  end "
              "| fds: start end max", flush=True)
        for r, t in enumerate(table):
            print(f"{r:4d} |               {mb(t[0])} {mb(t[1])} {mb(t[2])} {(t[1] - t[0]) / 2**20:+6.1f} |"
                  f"              {mb(t[3])} {mb(t[4])} |          {t[5]:5d} {t[6]:4d} | {t[7]:10d} {t[8]:3d} {t[9]:3d}",
                  flush=True)
        if grew:
            print("LEAK: " + "; ".join(f"rank {r}: private RSS {g / 2**20:+.1f} MB, mappings {m:+d}, fds {f:+d}"
                                       for r, g, m, f in grew)
                  + f" (bounds: private RSS +{args.rss_bound_mb:g} MB, mappings +{args.maps_bound}, fds +0)", flush=True)
        else:
            print(f"leak check: PASS on every rank (private RSS growth <= {args.rss_bound_mb:g} MB, mappings "
                  f"<= +{args.maps_bound}, no fd growth)", flush=True)
        on, off = float(np.mean(lat[:, 0])), float(np.mean(lat[:, 1]))
        print(f"8-byte allreduce (native, mean over ranks of the median block): signature check on {on:.1f} µs/call, "
              f"HCOMM_CHECK_COLLECTIVES=0 {off:.1f} µs/call, ratio {on / off:.2f}", flush=True)
    return 1 if grew else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
