"""An allreduce the way Ascend's PyTorch sample does it: torch_npu, mp.spawn, init_method tcp://, npu tensors.

The project's own program in the shape of hicann/hccl examples/03_ai_framework/01_pytorch/
hccl_pytorch_allreduce_test.py; it prints what that sample's README shows.  Usage: PROGRAM PORT.
"""
import sys

import torch
import torch_npu
import torch.distributed as dist
import torch.multiprocessing as mp


def run_hccl(rank: int, world_size: int, master_ip: str, master_port: int):
    torch_npu.npu.set_device(rank)
    init_method = f"tcp://{master_ip}:{master_port}"
    dist.init_process_group(backend="hccl", rank=rank, world_size=world_size, init_method=init_method)
    data = torch.arange(8, dtype=torch.float32, device="npu")
    print("[Rank %d] Input: %s" % (rank, data), flush=True)
    dist.all_reduce(data, op=dist.ReduceOp.SUM)
    print("[Rank %d] Output: %s" % (rank, data), flush=True)
    dist.destroy_process_group()


def main():
    rank_size = torch_npu.npu.device_count()
    print("Available NPU count: %d" % rank_size, flush=True)
    mp.spawn(run_hccl, args=(rank_size, "127.0.0.1", int(sys.argv[1])), nprocs=rank_size, join=True)


if __name__ == "__main__":
    main()
