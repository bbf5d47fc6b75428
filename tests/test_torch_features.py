"""Backend "hcomm" features PyTorch's suite exercises, checked on their own: profiler events of a DDP step,
receive from any source (3 ranks, eager and rendezvous sizes), all_gather_coalesced, sparse allreduce (SUM,
as gloo) and sparse tensors refused elsewhere, monitored_barrier's timeout conventions."""
from __future__ import annotations

import datetime
import socket
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from multiproc import run_ranks  # noqa: E402

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank: int, n: int, port: int) -> Any:
    import torch.distributed as dist
    import hcomm_cffi.torch  # noqa: F401
    dist.init_process_group("hcomm", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=60))
    return dist


def _profile_body(rank: int, n: int, root: bytes, port: int) -> Any:
    dist = _init(rank, n, port)
    from torch.nn.parallel import DistributedDataParallel as DDP
    try:
        torch.manual_seed(0)
        ddp = DDP(torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 10)), bucket_cap_mb=0.0001)
        x = torch.randn(3, 10)
        ddp(x).sum().backward()            # the first step has one bucket; later ones one per parameter
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            ddp(x).sum().backward()
            t = torch.ones(5)
            if rank == 0:
                dist.send(t, 1)
            else:
                dist.recv(t, 0)
        return [(e.name, e.is_async, e.input_shapes, dict(e.kwinputs or {})) for e in prof.events()
                if e.name.startswith("hcomm:")]
    finally:
        dist.destroy_process_group()


def test_a_ddp_step_shows_each_bucket_allreduce_and_the_p2p_ops_in_the_profiler() -> None:
    for rank, events in enumerate(run_ranks(2, _profile_body, _port(), timeout=120)):
        reduces = [e for e in events if e[0] == "hcomm:all_reduce"]
        # one per bucket (the step after the first rebuilds the buckets, broadcasting them), each asynchronous,
        # with the bucket's flat tensor as input: 10x10 weights + 10 biases, twice, in float32
        assert len(reduces) >= 2 and all(e[1] for e in reduces), events
        assert sum(e[3]["bytes"] for e in reduces) == 4 * 220 and all(len(e[2]) == 1 for e in reduces), events
        assert "hcomm:broadcast" in [e[0] for e in events], events
        p2p = [e for e in events if e[0] == ("hcomm:send" if rank == 0 else "hcomm:recv")]
        assert len(p2p) == 1 and p2p[0][2] == [[5]] and p2p[0][3] == {"bytes": 20}, events


def _any_source_body(rank: int, n: int, root: bytes, port: int) -> Any:
    dist = _init(rank, n, port)
    try:
        sizes = [3, 1 << 20]      # eager, and rendezvous (larger than an inbox: several pieces)
        # a barrier between the sizes: without it an any-source receive of 3 floats may meet a sender's next,
        # larger message first, which is a size mismatch (as in MPI), not what this test is about
        if rank == 0:
            got = []
            for size in sizes:
                for _ in range(n - 1):
                    t = torch.empty(size)
                    src = dist.recv(t)
                    assert torch.equal(t, torch.full((size,), float(src))), (src, t[:4])
                    got.append(src)
                dist.barrier()
            work = dist.irecv(torch.empty(2), tag=7)     # no src: the work names the sender
            work.wait()
            got.append(work._source_rank())
            return got
        for size in sizes:
            dist.send(torch.full((size,), float(rank)), 0)
            dist.barrier()
        if rank == 2:
            dist.send(torch.ones(2), 0, tag=7)
        return rank
    finally:
        dist.destroy_process_group()


def test_recv_without_src_takes_whichever_message_arrives_first() -> None:
    got = run_ranks(3, _any_source_body, _port(), timeout=120)[0]
    assert sorted(got[:2]) == [1, 2] and sorted(got[2:4]) == [1, 2] and got[4] == 2, got


def _misc_body(rank: int, n: int, root: bytes, port: int) -> Any:
    dist = _init(rank, n, port)
    try:
        outs = [[torch.empty(2), torch.empty(3, dtype=torch.float32)] for _ in range(n)]
        dist.all_gather_coalesced(outs, [torch.full((2,), float(rank)), torch.full((3,), 10.0 + rank)])
        assert all(torch.equal(outs[r][0], torch.full((2,), float(r))) and
                   torch.equal(outs[r][1], torch.full((3,), 10.0 + r)) for r in range(n)), outs
        sparse = torch.sparse_coo_tensor([[0, 2 + rank]], [1.0, 2.0], (4,))   # SUM as gloo: [2, 0, 2, 2]
        dist.all_reduce(sparse)
        assert sparse.is_sparse and sparse.to_dense().tolist() == [2.0, 0.0, 2.0, 2.0], sparse
        with pytest.raises(ValueError, match="sparse tensors are not supported here"):
            dist.broadcast(sparse, 0)
        with pytest.raises(ValueError, match="sparse tensors support ReduceOp.SUM only"):
            dist.all_reduce(sparse, dist.ReduceOp.MAX)
        pg = dist.distributed_c10d._get_default_group()   # the ProcessGroupHcomm itself
        store = dist.distributed_c10d._get_default_store()
        if rank == 0:   # rank 1 stays out: zero expires at once, naming it (gloo's reading of timeout=0)
            from hcomm_cffi import CommError
            with pytest.raises(CommError, match="Rank 1 failed to pass monitoredBarrier in 0 ms"):
                pg.monitored_barrier(datetime.timedelta(0))
            store.set("expired", "1")
        else:
            store.wait(["expired"])
            pg.monitored_barrier(datetime.timedelta(seconds=10))   # meets rank 0's expired one, still pending there
        pg.monitored_barrier(datetime.timedelta(seconds=10))
        return "ok"
    finally:
        dist.destroy_process_group()


def test_all_gather_coalesced_sparse_allreduce_and_monitored_barrier_timeouts() -> None:
    assert run_ranks(2, _misc_body, _port(), timeout=120) == ["ok", "ok"]
