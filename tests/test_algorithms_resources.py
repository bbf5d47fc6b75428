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
    """For every case: what the first use acquires is the plan's (channels held once per peer and class, the
    main thread the stream's); a second use acquires nothing."""
    import numpy as np

    import hcomm_cffi as hcomm
    from hcomm_cffi.algorithms.formulas import plan_for
    from hcomm_cffi.binding import get_binding, reset_binding
    from hcomm_cffi.resources import COMM_NOTIFIES, channel_class

    counting = CountingBinding(get_binding())
    reset_binding(counting)  # type: ignore[arg-type]
    try:
        w = hcomm.init(rank=rank, world_size=n, root_info=root_info, topology=(2, 2))
        report = {}
        held_slaves: Dict[tuple, int] = {}
        try:
            for algo, coll, root in CASES:
                x = np.arange(8, dtype=np.float32)
                before = len(w.resources())
                _run(w, coll, x, root, algo)
                new = w.resources()[before:]
                spec = plan_for(algo, coll, w.topology, root).resources_for(rank)
                # every channel the plan names is held: by this algorithm now, or earlier by one of the same class
                held = {(p, h.engine): h.notifies for h in w.resources() if h.kind == "channel" for p in h.peers}
                for c in spec.channels:
                    notifies, engine = channel_class(c.notify_num)
                    assert held.get((c.peer, engine.name)) == notifies == c.notify_num, (algo, coll, rank, held)
                mine = [h for h in new if h.purpose == f"algorithm:{algo}"]
                assert {h.kind for h in mine} <= {"thread", "notify", "channel"}, mine
                assert [h for h in new if h.purpose not in (f"algorithm:{algo}", "comm:signature")] == [], new
                slaves = [h for h in mine if h.kind == "thread"]
                key = (algo, spec.threads, spec.thread_notify_counts)
                if spec.threads > 1 and key not in held_slaves:
                    assert [(h.count, h.notifies) for h in slaves] == [(spec.threads - 1, max(spec.thread_notify_counts[1:]))]
                    held_slaves[key] = spec.threads - 1
                else:
                    assert slaves == [], (algo, coll, slaves)
                calls = len(counting.calls)
                _run(w, coll, x, root, algo)
                assert counting.calls[calls:] == [] and len(w.resources()) == before + len(new), (algo, coll, "re-acquired")
                report[f"{algo}/{coll}"] = (spec.threads, len(spec.channels))
            # point-to-point lanes: one stream thread and the communicator's own channel (held since init: no new one)
            before, calls = len(w.resources()), len(counting.calls)
            peer = rank ^ 1
            if rank % 2 == 0:
                w.send(np.ones(4), peer)
            else:
                w.recv(np.empty(4), peer)
            made = counting.calls[calls:]
            assert [m[0] for m in made] == ["thread_acquire_with_stream", "channel_acquire"], made
            assert made[1][1] == ((peer, 0, COMM_NOTIFIES),), made
            assert [(h.purpose, h.kind, h.count, h.notifies) for h in w.resources()[before:]] == [
                ("comm:p2p", "thread", 1, 1)]      # what hcomm plan's overhead line says a lane takes
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
