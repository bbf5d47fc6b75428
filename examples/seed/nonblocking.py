# Nonblocking and batch calls between two ranks (seed document 000).
# Run: hcomm run -n 2 -- python examples/seed/nonblocking.py
import hcomm
import torch


def compute_something(x):  # the seed leaves it undefined: work done while the transfer is in flight
    return (x @ x.T).sum()


hcomm.init()
comm = hcomm.Comm("nb_0_1", ranks=[0, 1])
rank = comm.get_rank()
hcomm.set_device(rank)
peer = 1 - rank

# isend / irecv, work in between, then wait
outgoing = torch.full((256,), float(rank + 1)).npu()
incoming = torch.empty(256).npu()
recv_req = comm.irecv(incoming, src=peer)
send_req = comm.isend(outgoing, dst=peer)
work = compute_something(torch.randn(64, 64).npu())
recv_req.wait()
send_req.wait()

# batch: three tensors in one call
if rank == 0:
    comm.send_multi([torch.arange(5).npu(), torch.ones(2, 3).npu(), torch.full((7,), -1.0).npu()], dst=1)
    batch = []
else:
    batch = comm.recv_multi([torch.empty(5, dtype=torch.int64).npu(), torch.empty(2, 3).npu(),
                             torch.empty(7).npu()], src=0)
comm.destroy()
hcomm.finalize()
