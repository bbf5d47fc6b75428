# A 3-stage pipeline (seed document 000).  Run: hcomm run -n 3 -- python examples/seed/pipeline.py
import hcomm
import torch

# the seed leaves these two undefined: three batches, and the middle stage's work
dataloader = [torch.full((4, 8), float(i)) for i in range(3)]


def compute_something(x):
    return x * 2 + 1


hcomm.init()
comm = hcomm.Comm("pipeline", ranks=[0, 1, 2])
rank = comm.get_rank()
hcomm.set_device(rank)
outputs = []
for batch in dataloader:
    if rank == 0:
        x = batch.npu()
        comm.send(x, dst=1)
    elif rank == 1:
        x = torch.empty(4, 8).npu()
        comm.recv(x, src=0)
        y = compute_something(x)
        comm.send(y, dst=2)
    else:
        y = torch.empty(4, 8).npu()
        comm.recv(y, src=1)
        outputs.append(y)
comm.destroy()
hcomm.finalize()
