"""A plan is what the run acquires: each built-in runs at 2, 4 and 8 ranks and the emulator's ledger of what its C
functions handed out (sim/ledger.py) equals the package's plan -- its headline and JSON -- and ``Comm.resources()``.

Each algorithm runs on a communicator of its own (two servers, so hierarchical runs too), so the ledger of that
communicator holds exactly: its HCCL buffer, the communicator's own channels (init), the stream's thread (its first
signature handshake), and what the algorithm acquired.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from multiproc import run_ranks

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
#: built-in -> the collective it runs here (native acquires nothing through the package: it is the library's own)
BUILTINS = {"ring": "allreduce", "mesh": "allreduce", "tree": "allreduce", "hierarchical": "allreduce",
            "nb": "allreduce", "alltoall_pairwise": "alltoall", "double_ring": "allreduce"}


def body(rank: int, n: int, root_info: bytes) -> Dict[str, Any]:
    """Per algorithm: the ledger's records of its communicator, Comm.resources(), and this rank's declared plan."""
    import numpy as np

    import hcomm_cffi as hcomm
    from hcomm_cffi.algorithms import registry
    from hcomm_cffi.algorithms.formulas import package_plan
    from hcomm_cffi.enums import DataType
    from hcomm_cffi.sim import ledger

    shape = (2, n // 2)
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info, topology=shape)
    out: Dict[str, Any] = {}
    try:
        for algo, coll in BUILTINS.items():
            alg = registry.resolve(algo)
            if alg.unsupported(coll, DataType.FP32, None, w.topology) is not None:
                continue
            c = hcomm.Comm(f"acq-{algo}", topology=shape, buffer_size_mb=1)
            x = np.arange(4 * n, dtype=np.float32)
            for _ in range(2):                       # the second call acquires nothing more
                if coll == "alltoall":
                    c.alltoall(x, algorithm=algo)
                else:
                    c.allreduce(x, algorithm=algo)
            spec = package_plan(alg, coll, c.topology, x.nbytes).resources_for(rank)
            out[algo] = {
                "ledger": [[a.purpose, a.kind, a.engine, a.count, a.notifies, list(a.peers)]
                           for a in ledger.acquisitions(f"acq-{algo}") if a.rank == rank],
                "held": [[h.purpose, h.kind, h.engine, h.count, h.notifies, list(h.peers)] for h in c.resources()],
                "plan": (spec.threads, list(spec.thread_notify_counts), [(ch.peer, ch.notify_num) for ch in spec.channels]),
            }
            c.destroy()
        return out
    finally:
        hcomm.finalize()


def _headline(algo: str, coll: str, n: int) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "hcomm_cffi", "plan", "--algo", algo, "--op", coll, "--servers", "2",
                          "--devices", str(n // 2), "--size", str(16 * n), "--json"],
                         capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _by(records: List[list], purpose: str) -> List[list]:
    return [r for r in records if r[0] == purpose]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_ledger_equals_the_plan(n: int) -> None:
    ranks = run_ranks(n, body, timeout=300)
    table: Dict[str, Tuple[int, int, int]] = {}
    for algo, coll in BUILTINS.items():
        if algo not in ranks[0]:
            continue
        most = [0, 0, 0]
        for rank, report in enumerate(ranks):
            got = report[algo]
            led = got["ledger"]
            # the package's own accounting is the emulator's, record for record (the buffer untagged in the ledger)
            assert [r[1:] for r in led] == [r[1:] for r in got["held"]], (algo, rank)
            assert [r[0] for r in led if r[1] != "buffer"] == [r[0] for r in got["held"] if r[1] != "buffer"]
            # the communicator's own: its buffer, one channel to every peer (6 notifies, engine CPU_TS), and the stream's
            # thread, made for the first signature handshake (before an algorithm's channels: every rank must agree)
            assert [r[1] for r in led if r[0] == ""] == ["buffer"]
            own = _by(led, "comm:channels")            # one record per link class (HCCS inside, RoCE between servers)
            assert {(r[1], r[2], r[4]) for r in own} == {("channel", "CPU_TS", 6)}, (algo, rank, own)
            assert sorted(p for r in own for p in r[5]) == [p for p in range(n) if p != rank]
            assert sum(r[3] for r in own) == n - 1
            assert _by(led, "comm:signature") == [["comm:signature", "thread", "CPU_TS", 1, 1, []]], (algo, rank)
            # nothing else is acquired but what the algorithm's plan says: its main thread is the stream's (its
            # notifies added to it), the others its own
            mine = _by(led, f"algorithm:{algo}")
            assert len(led) == 2 + len(own) + len(mine), (algo, rank, led)
            threads, counts, chans = got["plan"]
            extra = [r for r in mine if r[1] == "notify"]
            slaves = [r for r in mine if r[1] == "thread"]
            more = counts[0] - 1 if counts else 0          # beyond the handshake's one (its host-sync notify)
            assert extra == ([[f"algorithm:{algo}", "notify", "CPU_TS", more, 0, []]] if more > 0 else []), (algo, mine)
            assert slaves == ([[f"algorithm:{algo}", "thread", "CPU_TS", threads - 1, max(counts[1:]), []]]
                              if threads > 1 else []), (algo, rank, mine)
            acquired_threads = (1 if threads else 0) + sum(r[3] for r in slaves)
            assert acquired_threads == threads
            ch = [r for r in mine if r[1] == "channel"]
            assert sorted(p for r in ch for p in r[5]) == sorted(p for p, _ in chans), (algo, rank)
            assert all(r[4] == nn for r in ch for p in r[5] for q, nn in chans if p == q)
            n_ch = sum(r[3] for r in ch)
            ch_ntf = sum(r[3] * r[4] for r in ch)
            most = [max(most[0], acquired_threads), max(most[1], ch_ntf), max(most[2], n_ch)]
        d = _headline(algo, coll, n)
        assert d["plan_of"] == "package"
        # the plan's overhead lines are the ledger's communicator records checked above
        assert d["overhead"] == [{"purpose": "comm:channels", "kind": "channel", "engine": "CPU_TS", "count": n - 1,
                                  "notifies": 6},
                                 {"purpose": "comm:signature", "kind": "thread", "engine": "CPU_TS", "count": 1,
                                  "notifies": 1},
                                 {"purpose": "comm:p2p", "kind": "thread", "engine": "CPU_TS", "count": 1,
                                  "notifies": 1, "per": "peer and direction a send/recv uses"}]
        assert (d["threads"], d["channel_notifies"], d["n_channels"]) == tuple(most), (algo, n, d["what"])
        table[algo] = tuple(most)        # type: ignore[assignment]
    if n == 4:
        assert table["ring"] == (2, 4, 2) and table["mesh"] == (3, 6, 3)    # the seed's, measured
    print(f"\n{n} ranks (2 servers): algorithm -> threads / channel notifies / channels acquired:",
          {k: v for k, v in table.items()})
