# A 4-rank ring: four times, send to the right, receive from the left, add (seed document 000).
# Run: hcomm run -n 4 -- python examples/seed/ring.py
import hcomm
import torch

hcomm.init()
comm = hcomm.Comm("ring", ranks=[0, 1, 2, 3])
rank, size = comm.get_rank(), comm.get_size()
hcomm.set_device(rank)
data = torch.arange(10, dtype=torch.float32).npu() if rank == 0 else torch.zeros(10).npu()
for _ in range(4):
    comm.send(data, dst=(rank + 1) % size)
    received = torch.empty(10).npu()
    comm.recv(received, src=(rank - 1) % size)
    data = data + received
comm.destroy()
hcomm.finalize()
