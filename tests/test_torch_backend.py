"""The torch.distributed backend "hcomm": every c10d operation against a local reference, DDP, Work semantics, bad input."""
from __future__ import annotations

import datetime
import os
import signal
import socket
import time
from typing import Any, List

import pytest

torch = pytest.importorskip("torch")

from multiproc import run_ranks  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank: int, n: int, port: int, timeout: float = 60) -> Any:
    import torch.distributed as dist
    import hcomm_cffi.torch  # noqa: F401
    dist.init_process_group("hcomm", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=timeout))
    return dist


def _ops_body(rank: int, n: int, root: bytes, port: int) -> str:
    dist = _init(rank, n, port)
    R = dist.ReduceOp
    try:
        assert dist.get_backend() == "hcomm"
        vals = [torch.arange(6, dtype=torch.float32) + 10 * r for r in range(n)]
        mine = vals[rank]
        for op, ref in ((R.SUM, sum(vals)), (R.AVG, sum(vals) / n), (R.PRODUCT, torch.stack(vals).prod(0)),
                        (R.MIN, torch.stack(vals).min(0).values), (R.MAX, torch.stack(vals).max(0).values)):
            t = mine.clone()
            dist.all_reduce(t, op)
            assert torch.allclose(t, ref), (op, t, ref)
        a, b = mine.clone(), (mine[:2] * 2).clone()
        dist.all_reduce_coalesced([a, b])
        assert torch.equal(a, sum(vals)) and torch.equal(b, sum(v[:2] * 2 for v in vals))
        t = mine.clone()
        dist.broadcast(t, src=1)
        assert torch.equal(t, vals[1])
        t = mine.clone()
        dist.reduce(t, dst=2)
        if rank == 2:
            assert torch.equal(t, sum(vals))
        outs = [torch.empty(6) for _ in range(n)]
        dist.all_gather(outs, mine)
        assert all(torch.equal(o, v) for o, v in zip(outs, vals))
        big = torch.empty(n * 6)
        dist.all_gather_into_tensor(big, mine)
        assert torch.equal(big, torch.cat(vals))
        for async_ops in (False, True):   # the coalesced forms (FSDP's): one work for several tensors
            outs = [torch.empty(n * 6), torch.empty(n * 2)]
            rs = [torch.empty(2), torch.empty(1)]
            with dist._coalescing_manager(async_ops=async_ops) as cm:
                dist.all_gather_into_tensor(outs[0], mine)
                dist.all_gather_into_tensor(outs[1], mine[:2])
            if async_ops:
                cm.wait()
            with dist._coalescing_manager(async_ops=async_ops) as cm:
                dist.reduce_scatter_tensor(rs[0], mine[:2 * n], op=R.AVG)
                dist.reduce_scatter_tensor(rs[1], mine[:n], op=R.AVG)   # torch applies the first op to all
            if async_ops:
                cm.wait()
            assert torch.equal(outs[0], torch.cat(vals)) and torch.equal(outs[1], torch.cat([v[:2] for v in vals]))
            assert torch.allclose(rs[0], (sum(vals) / n)[rank * 2:(rank + 1) * 2])
            assert torch.allclose(rs[1], (sum(vals) / n)[rank:rank + 1])
        full = [torch.arange(n * 2, dtype=torch.float32) + r for r in range(n)]
        out = torch.empty(2)
        dist.reduce_scatter(out, list(full[rank].chunk(n)))
        assert torch.equal(out, sum(full)[rank * 2:(rank + 1) * 2])
        out = torch.empty(2)
        dist.reduce_scatter_tensor(out, full[rank])
        assert torch.equal(out, sum(full)[rank * 2:(rank + 1) * 2])
        outs = [torch.empty(2) for _ in range(n)]
        dist.all_to_all(outs, [torch.full((2,), 10.0 * rank + j) for j in range(n)])
        assert [o.tolist() for o in outs] == [[10.0 * j + rank] * 2 for j in range(n)]
        # uneven splits: rank r sends r+j+1 rows to rank j
        send = [rank + j + 1 for j in range(n)]
        recv = [j + rank + 1 for j in range(n)]
        inp = torch.cat([torch.full((s, 2), 100.0 * rank + j) for j, s in enumerate(send)])
        outp = torch.empty(sum(recv), 2)
        dist.all_to_all_single(outp, inp, recv, send)
        assert torch.equal(outp, torch.cat([torch.full((s, 2), 100.0 * j + rank) for j, s in enumerate(recv)]))
        g = [torch.empty(6) for _ in range(n)] if rank == 0 else None
        dist.gather(mine, g, dst=0)
        if rank == 0:
            assert all(torch.equal(x, v) for x, v in zip(g, vals))
        s = torch.empty(3)
        dist.scatter(s, [torch.full((3,), float(j)) for j in range(n)] if rank == 1 else None, src=1)
        assert s.tolist() == [float(rank)] * 3
        if rank == 0:
            dist.send(torch.tensor([1.0, 2.0]), dst=1, tag=7)
        elif rank == 1:
            r = torch.empty(2)
            dist.recv(r, src=0, tag=7)
            assert r.tolist() == [1.0, 2.0]
        objs: List[Any] = [None] * n
        dist.all_gather_object(objs, {"rank": rank})
        assert objs == [{"rank": r} for r in range(n)]
        lst = [{"k": rank}] if rank == 0 else [None]
        dist.broadcast_object_list(lst, src=0)
        assert lst == [{"k": 0}]
        dist.barrier()
        sub = dist.new_group([2, 0])
        if rank in (0, 2):
            x = torch.ones(3)
            dist.all_reduce(x, group=sub)
            assert x.tolist() == [2.0] * 3 and dist.get_rank(sub) == [0, 2].index(rank)
        from hcomm_cffi.torch import get_comm
        assert get_comm().comm_name and get_comm().handle is not None
        return "ok"
    finally:
        dist.destroy_process_group()


def test_every_operation_against_a_local_reference() -> None:
    assert run_ranks(3, _ops_body, _port(), timeout=90) == ["ok"] * 3


def _ddp_body(rank: int, n: int, root: bytes, port: int) -> List[float]:
    dist = _init(rank, n, port)
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        ddp = DDP(model, bucket_cap_mb=0.0005)   # several buckets
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        data = torch.randn(3, n * 4, 8, generator=g)
        for step in range(3):
            opt.zero_grad()
            x = data[step][rank * 4:(rank + 1) * 4]
            ddp(x).pow(2).mean().backward()
            opt.step()
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
    finally:
        dist.destroy_process_group()


def test_ddp_three_steps_equal_a_single_process_run() -> None:
    n = 2
    res = run_ranks(n, _ddp_body, _port(), timeout=90)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(3, n * 4, 8, generator=torch.Generator().manual_seed(1))
    for step in range(3):
        opt.zero_grad()
        # DDP averages the per-rank mean losses' gradients = the mean over all shards
        model(data[step]).pow(2).mean().backward()
        opt.step()
    ref = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    for r in res:
        assert torch.allclose(torch.tensor(r), ref, atol=1e-6)


def _async_body(rank: int, n: int, root: bytes, port: int) -> List[Any]:
    dist = _init(rank, n, port)
    try:
        dist.barrier()
        if rank == 1:
            time.sleep(1.5)
        t = torch.full((1 << 14,), rank + 1.0)
        t0 = time.monotonic()
        work = dist.all_reduce(t, async_op=True)
        started = time.monotonic() - t0
        expired = ""
        if rank == 0:
            assert not work.is_completed()
            from hcomm_cffi import CommTimeoutError
            with pytest.raises(CommTimeoutError) as info:
                work.wait(datetime.timedelta(seconds=0.2))
            expired = str(info.value)
        assert work.wait() and work.is_completed() and torch.all(t == 3.0)
        assert work.get_future().value()[0] is t
        # get_future (what DDP's reducer waits on, in C++) returns at once; the backend's progress thread
        # completes it while this thread makes no library call at all
        dist.barrier()
        if rank == 1:
            time.sleep(1.0)
        u = torch.full((4,), rank + 1.0)
        pg = dist.distributed_c10d._get_default_group()
        t0 = time.monotonic()
        fut = pg.allreduce([u]).get_future()
        got_future = time.monotonic() - t0
        pending = not fut.done()
        value = fut.wait()[0]
        assert value is u and u.tolist() == [3.0] * 4
        # a callback chained with then() (DDP comm hooks do) runs when the thread completes the Future
        chained = pg.allreduce([torch.full((2,), rank + 1.0)]).get_future().then(lambda f: f.value()[0] * 10)
        assert chained.wait().tolist() == [30.0, 30.0]
        return [started, expired, got_future, pending]
    finally:
        dist.destroy_process_group()


def test_async_op_returns_before_the_peer_joined_and_wait_timeout_expires() -> None:
    res = run_ranks(2, _async_body, _port(), timeout=60)
    started, expired, got_future, pending = res[0]
    assert started < 0.5 and got_future < 0.5 and pending, res
    assert "rank 0 of process group" in expired and "hcomm allreduce did not complete within 0.2 s" in expired


def _dead_peer_body(rank: int, n: int, root: bytes, port: int) -> str:
    dist = _init(rank, n, port)
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    work = dist.all_reduce(torch.ones(1 << 14), async_op=True)
    fut = work.get_future()              # failed by the progress thread, as DDP's reducer would see it
    with pytest.raises(Exception) as via_future:
        fut.wait()
    from hcomm_cffi import CommError
    with pytest.raises(CommError) as info:
        work.wait()
    assert str(info.value) in str(via_future.value), (via_future.value, info.value)
    assert work.is_completed() and not work.is_success() and work.exception() is info.value
    with pytest.raises(CommError):
        work.wait()   # raised again, never swallowed
    return str(info.value)


def test_peer_gone_is_raised_from_wait_naming_rank_and_operation() -> None:
    ok, message = run_ranks(2, _dead_peer_body, _port(), timeout=60, expect_failure=True)[0]
    assert ok, message
    assert message.startswith("rank 0 of communicator 'world': allreduce"), message
    assert "rank 1" in message and "gone" in message, message


def _bad_input_body(rank: int, n: int, root: bytes, port: int) -> str:
    dist = _init(rank, n, port)
    try:
        with pytest.raises(ValueError, match=r"hcomm allreduce: tensor is on device meta; expected a cpu"):
            dist.all_reduce(torch.empty(4, device="meta"))
        with pytest.raises(ValueError, match=r"hcomm allreduce: tensor is not contiguous"):
            dist.all_reduce(torch.ones(4, 4).t())
        with pytest.raises(ValueError, match=r"hcomm all_gather_into_tensor: output_tensor has 5 elements; "
                                             r"expected 8"):
            dist.all_gather_into_tensor(torch.empty(5), torch.ones(4))
        with pytest.raises(ValueError, match=r"hcomm allreduce: ReduceOp.BAND is not supported; expected SUM"):
            dist.all_reduce(torch.ones(4, dtype=torch.int32), dist.ReduceOp.BAND)
        with pytest.raises(ValueError, match=r"ReduceOp.AVG needs a floating-point tensor"):
            dist.all_reduce(torch.ones(4, dtype=torch.int32), dist.ReduceOp.AVG)
        with pytest.raises(TypeError, match=rf"^rank {rank} of process group .*: hcomm broadcast: tensor has dtype "
                                            r"torch.bool; expected one of int8, "):
            dist.broadcast(torch.ones(4, dtype=torch.bool), src=0)
        t = torch.ones(3)
        dist.all_reduce(t)         # the group still works after the rejected calls
        assert t.tolist() == [2.0] * 3
        return "ok"
    finally:
        dist.destroy_process_group()


def test_bad_input_is_a_clear_error_not_a_hang() -> None:
    assert run_ranks(2, _bad_input_body, _port(), timeout=60) == ["ok"] * 2


def _barrier_body(rank: int, n: int, root: bytes, port: int) -> List[Any]:
    dist = _init(rank, n, port)
    try:
        dist.barrier()   # the first barrier sets up its resources with the peers (collective); time the second
        if rank == 1:
            time.sleep(2.0)
            dist.barrier()
            time.sleep(1.5)   # skips the monitored barrier below for a while
            dist.barrier()
            return []
        pg = dist.distributed_c10d._get_default_group()
        from hcomm_cffi import CommTimeoutError
        work = pg.barrier()
        with pytest.raises(CommTimeoutError) as info:
            work.wait(datetime.timedelta(seconds=0.5))
        work.wait()
        # monitored_barrier style: dist.barrier(timeout=...) fails within its timeout naming the late rank
        t0 = time.monotonic()
        with pytest.raises(CommTimeoutError) as monitored:
            dist.barrier(timeout=datetime.timedelta(seconds=0.5))
        took = time.monotonic() - t0
        return [str(info.value), str(monitored.value), took]
    finally:
        dist.destroy_process_group()


def test_barrier_timeout_names_the_missing_rank() -> None:
    message, monitored, took = run_ranks(2, _barrier_body, _port(), timeout=60)[0]
    assert "ranks that never entered it: [1]" in message, message
    assert monitored.startswith("rank 0 of process group") and "hcomm barrier #2 did not complete within" in monitored
    assert "ranks that never entered it: [1]" in monitored and took < 1.4, (monitored, took)


def _mismatch_body(rank: int, n: int, root: bytes, port: int) -> List[str]:
    dist = _init(rank, n, port, timeout=20)
    from hcomm_cffi import CollectiveMismatchError, CommError
    try:
        # a wrong output size on one rank: refused there before anything moves; its corrected call pairs up
        out = torch.empty(8 if rank else 5)
        if rank == 0:
            with pytest.raises(ValueError) as bad_size:
                dist.all_gather_into_tensor(out, torch.full((4,), 1.0 + rank))
            out = torch.empty(8)
        dist.all_gather_into_tensor(out, torch.full((4,), 1.0 + rank))
        assert out.tolist() == [1.0] * 4 + [2.0] * 4
        # different allreduce sizes: the signature travels with the data and fails the call before its data moves
        with pytest.raises(CollectiveMismatchError) as blocking:
            dist.all_reduce(torch.ones(4 + 2 * rank))
        with pytest.raises(CommError, match="unusable"):
            dist.all_reduce(torch.ones(3), async_op=True)   # its stream failed: the group is done
        return [str(bad_size.value) if rank == 0 else "", str(blocking.value), str(blocking.value)]
    finally:
        dist.destroy_process_group()


def test_mismatched_sizes_are_errors_naming_rank_and_operation() -> None:
    res = run_ranks(2, _mismatch_body, _port(), timeout=90)
    assert res[0][0].startswith("rank 0 of process group") and \
        "hcomm all_gather_into_tensor: output_tensor has 5 elements; expected 8" in res[0][0], res
    for rank, (_, blocking, started) in enumerate(res):
        for msg in (blocking, started):       # the emulator's library collective compares signatures in-band
            assert msg.startswith(f"rank {rank} of communicator 'world'"), msg
            assert "collective mismatch" in msg and "allreduce of 4 x fp32" in msg and "6 x fp32" in msg, msg
