"""Every Comm API call and every torch.distributed operation on npu tensors (2 ranks, under hcomm run).

Each result is checked against the arithmetic it must equal; the tensors stay npu tensors throughout.
"""
import torch
import torch.distributed as dist

import hcomm

world = hcomm.init()
rank, n = world.get_rank(), world.get_size()
peer = 1 - rank
dev = torch.device("npu", torch.npu.current_device())
assert dev.index == rank, dev           # hcomm.init() chose the local rank's device, which torch's current npu is


def full(v, size=4, dtype=torch.float32):
    return torch.full((size,), float(v), dtype=dtype, device="npu")


def same(t, want):
    assert t.device == dev, t.device
    assert torch.equal(t.cpu(), torch.as_tensor(want, dtype=t.dtype)), (t, want)


# ---- the Comm API
x = full(rank + 1)
world.allreduce(x)
same(x, [3.0] * 4)
out = torch.empty(4, device="npu")
world.allreduce(full(rank + 1), op="max", out=out)
same(out, [2.0] * 4)
b = full(rank * 10 + 7)
world.broadcast(b, root=1)
same(b, [17.0] * 4)
same(world.allgather(full(rank, 2)), [[0.0, 0.0], [1.0, 1.0]])
same(world.reduce_scatter(torch.arange(4, dtype=torch.float32, device="npu")), [0.0, 2.0] if rank == 0 else [4.0, 6.0])
same(world.alltoall(torch.tensor([rank * 2.0, rank * 2.0 + 1], device="npu")), [float(rank), rank + 2.0])
r = full(rank + 1)
world.reduce(r, root=0)
same(r, [3.0] * 4 if rank == 0 else [2.0] * 4)
world.barrier()
req = world.iallreduce(full(1))
same(req.wait(timeout=30), [2.0] * 4)
s = torch.npu.Stream()                  # a collective stream-ordered on a torch.npu stream
y = full(rank + 1)
world.allreduce(y, stream=s)
s.synchronize()
same(y, [3.0] * 4)
world.send(full(rank, 3), dst=peer) if rank == 0 else same(world.recv(torch.empty(3, device="npu"), src=peer), [0.0] * 3)

# ---- torch.distributed with backend "hccl": this package's backend, the same world
dist.init_process_group(backend="hccl")
t = full(rank + 1)
dist.all_reduce(t)
same(t, [3.0] * 4)
t = full(rank)
dist.broadcast(t, src=1)
same(t, [1.0] * 4)
g = torch.empty(4, device="npu")
dist.all_gather_into_tensor(g, full(rank, 2))
same(g, [0.0, 0.0, 1.0, 1.0])
parts = [torch.empty(2, device="npu") for _ in range(n)]
dist.all_gather(parts, full(rank + 5, 2))
same(torch.cat(parts), [5.0, 5.0, 6.0, 6.0])
rs = torch.empty(2, device="npu")
dist.reduce_scatter_tensor(rs, torch.arange(4, dtype=torch.float32, device="npu"))
same(rs, [0.0, 2.0] if rank == 0 else [4.0, 6.0])
a2a = torch.empty(2, device="npu")
dist.all_to_all_single(a2a, torch.tensor([rank * 2.0, rank * 2.0 + 1], device="npu"))
same(a2a, [float(rank), rank + 2.0])
got = torch.empty(3, device="npu")
ops = [dist.P2POp(dist.isend, full(rank + 40, 3), peer), dist.P2POp(dist.irecv, got, peer)]
for w in dist.batch_isend_irecv(ops):
    w.wait()
same(got, [peer + 40.0] * 3)
work = dist.all_reduce(full(2), async_op=True)
work.wait()
dist.barrier()
dist.destroy_process_group()
hcomm.finalize()
print(f"rank {rank}: every call OK on {dev}", flush=True)
