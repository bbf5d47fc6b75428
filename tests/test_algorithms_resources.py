"""Each algorithm acquires exactly the resources its plan names, once per communicator (A2 thread quota)."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from multiproc import run_ranks

CASES = [("ring", "allreduce", 0), ("mesh", "allreduce", 0), ("tree", "allreduce", 0), ("mesh", "broadcast", 2),
         ("tree", "reduce", 1), ("ring", "alltoall", 0), ("hierarchical", "allreduce", 0),
         ("hierarchical", "broadcast", 3)]


class CountingBinding:
    """Wraps the real binding and records every acquisition call with its arguments."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: List[Tuple[str, tuple]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name in ("thread_acquire", "thread_acquire_with_stream", "channel_acquire"):
            def wrapped(*args: Any) -> Any:
                if name == "channel_acquire":
                    descs = args[2]
                    n = args[3]
                    self.calls.append((name, tuple((int(descs[i].remoteRank), int(descs[i].channelProtocol),
                                                    int(descs[i].notifyNum)) for i in range(n))))
                else:
                    self.calls.append((name, tuple(a for a in args[1:] if isinstance(a, int))))
                return attr(*args)
            return wrapped
        return attr


def body(rank: int, n: int, root_info: bytes) -> Dict[str, Any]:
    """For every case: the calls made on first use equal the plan; a second use acquires nothing."""
    import numpy as np

    import hcomm_cffi as hcomm
    from hcomm_cffi.algorithms.context import NOTIFIES_PER_CHANNEL
    from hcomm_cffi.algorithms.formulas import plan_for
    from hcomm_cffi.binding import get_binding, reset_binding
    from hcomm_cffi.resources import shape_key

    counting = CountingBinding(get_binding())
    reset_binding(counting)  # type: ignore[arg-type]
    try:
        w = hcomm.init(rank=rank, world_size=n, root_info=root_info, topology=(2, 2))
        counting.calls.clear()  # pre-connection of peers at init is not an algorithm's
        report = {}
        seen: set = set()
        # the first call of a package algorithm also opens the signature handshake's channels to every peer
        # (api/signatures.py: the same handles as the channels pre-connected at init), once per stream
        signature: Dict[int, list] = {}
        for p in range(n):
            if p != rank:
                proto = int(w.topology.link(rank, p))
                signature.setdefault(proto, []).append((p, proto, NOTIFIES_PER_CHANNEL))
        sig_calls = [("channel_acquire", tuple(v)) for v in signature.values()]
        try:
            for algo, coll, root in CASES:
                x = np.arange(8, dtype=np.float32)
                before = len(counting.calls)
                _run(w, coll, x, root, algo)
                made = counting.calls[before:]
                spec = plan_for(algo, coll, w.topology, root).resources_for(rank)
                expect: List[Tuple[str, tuple]] = [("thread_acquire_with_stream", (1, spec.thread_notify_counts[0]))]
                if spec.threads > 1:
                    expect.append(("thread_acquire", (1, spec.threads - 1, max(spec.thread_notify_counts[1:]))))
                by_proto: Dict[int, list] = {}
                for c in spec.channels:
                    by_proto.setdefault(int(c.protocol), []).append((c.peer, int(c.protocol), c.notify_num))
                expect += [("channel_acquire", tuple(v)) for _, v in by_proto.items()]
                key = shape_key(algo, spec)
                if key in seen:  # same resource shape as an earlier collective: reused, nothing acquired
                    expect = []
                seen.add(key)
                expect, sig_calls = expect + sig_calls, []
                assert made == expect, (algo, coll, rank, made, expect)
                before = len(counting.calls)
                _run(w, coll, x, root, algo)
                assert counting.calls[before:] == [], (algo, coll, "re-acquired")
                report[f"{algo}/{coll}"] = (spec.threads, len(spec.channels))
            # point-to-point lanes: one stream thread and one channel (the plan's sendrecv resources)
            before = len(counting.calls)
            peer = rank ^ 1
            if rank % 2 == 0:
                w.send(np.ones(4), peer)
            else:
                w.recv(np.empty(4), peer)
            made = counting.calls[before:]
            assert [m[0] for m in made] == ["thread_acquire_with_stream", "channel_acquire"], made
            assert made[1][1] == ((peer, 0, NOTIFIES_PER_CHANNEL),), made
            return report
        finally:
            hcomm.finalize()
    finally:
        reset_binding(None)


def _run(w: Any, coll: str, x: Any, root: int, algo: str) -> None:
    if coll == "allreduce":
        w.allreduce(x, algorithm=algo)
    elif coll == "broadcast":
        w.broadcast(x, root, algorithm=algo)
    elif coll == "reduce":
        w.reduce(x, root, algorithm=algo)
    elif coll == "alltoall":
        w.alltoall(x, algorithm=algo)


def test_acquired_equals_plan() -> None:
    """4 ranks as 2 servers x 2: ring/mesh/tree/hierarchical, rooted and not, plus a p2p lane."""
    reports = run_ranks(4, body, timeout=120)
    r0 = reports[0]
    assert r0["ring/allreduce"] == (2, 2)      # seed figure: ring = 2 threads, 2 channels
    assert r0["mesh/allreduce"] == (3, 3)      # seed figure: mesh = 3 threads, 3 channels
    assert r0["tree/allreduce"] == (1, 2)
    assert reports[2]["mesh/broadcast"] == (3, 3) and reports[1]["mesh/broadcast"] == (1, 1)
    # 1 intra peer (mesh over 2) + 1 inter peer (ring over 2 servers: one direction, one thread)
    assert r0["hierarchical/allreduce"] == (1, 2)
