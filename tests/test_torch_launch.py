"""One DDP training script with backend "hcomm" under both launchers: hcomm run and torchrun (env://)."""
from __future__ import annotations

import importlib.util
import sys

import pytest
from test_launch_helpers import launcher, run_job

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch is not installed (it comes with the test extras: pip install -e .[test])")

# Every rank also trains the same model alone on all shards; DDP's parameters must equal that reference.
DDP_SCRIPT = r'''
import torch
import torch.distributed as dist
import hcomm_cffi.torch  # noqa: F401
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend="hcomm")
rank, n = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)


def model_and_opt():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    return m, torch.optim.SGD(m.parameters(), lr=0.1)


data = torch.randn(2, n * 4, 8, generator=torch.Generator().manual_seed(1))
model, opt = model_and_opt()
ddp = DDP(model, bucket_cap_mb=0.0005)
ref, ref_opt = model_and_opt()
for step in range(2):
    opt.zero_grad()
    ddp(data[step][rank * 4:(rank + 1) * 4]).pow(2).mean().backward()
    opt.step()
    ref_opt.zero_grad()
    ref(data[step]).pow(2).mean().backward()
    ref_opt.step()
got = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
want = torch.cat([p.detach().reshape(-1) for p in ref.parameters()])
assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()
print(f"rank {rank}/{n} DDP OK via {dist.get_backend()}", flush=True)
dist.destroy_process_group()
'''


@pytest.mark.parametrize("which", ["hcomm run", "torchrun"])
def test_ddp_script_under_each_launcher(which: str, shm: str, tmp_path) -> None:
    script = tmp_path / "ddp_hcomm.py"
    script.write_text(DDP_SCRIPT)
    if which == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)]
    else:
        cmd = launcher(2, sys.executable, str(script), module="hcomm_cffi")
    rc, out, err = run_job(cmd, {"HCOMM_SIM_SHM_DIR": shm, "OMP_NUM_THREADS": "1"})
    assert rc == 0, out + err
    for r in range(2):
        assert f"rank {r}/2 DDP OK via hcomm" in out, out + err
