# Point-to-point between ranks 0 and 1 (seed document 000).  Run: hcomm run -n 2 -- python examples/seed/p2p.py
import hcomm
import torch

hcomm.init()
hcomm.set_device(0)
comm = hcomm.Comm("p2p_0_1", ranks=[0, 1])
if comm.get_rank() == 0:
    data = torch.randn(1024, 1024).npu()
    comm.send(data, dst=1)
else:
    data = torch.empty(1024, 1024).npu()
    comm.recv(data, src=0)
comm.destroy()
hcomm.finalize()
