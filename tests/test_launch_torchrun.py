"""The allreduce example under torchrun (torch 2.13.0 CPU): TCP store on MASTER_PORT+1, or torch's own store."""
from __future__ import annotations

import importlib.util
import sys

import pytest
from test_launch_helpers import check_example_output, run_job

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch is not installed (it comes with the test extras: pip install -e .[test])")

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]

# init_process_group first: discover() must then use torch.distributed's default store
WITH_TORCH_STORE = r'''
import os
import sys
import torch.distributed as dist
dist.init_process_group("gloo")
from hcomm_cffi.examples.allreduce import main
rc = main([])
from torch.distributed import distributed_c10d
store = distributed_c10d._get_default_store()
job = os.environ["TORCHELASTIC_RUN_ID"]
key = f"hcomm/torchrun-{job}/0/e0/claim/{dist.get_rank()}"   # the rank's claim of its rendezvous slot
print(f"torch store holds {key}: {store.check([key])}", flush=True)
dist.destroy_process_group()
sys.exit(rc)
'''


def _run(cmd, shm):
    return run_job(cmd, {"HCOMM_SIM_SHM_DIR": shm, "OMP_NUM_THREADS": "1"})


def _check(out: str, n: int) -> None:
    check_example_output(out, n, "torchrun")


def test_torchrun_example_uses_the_tcp_store(shm):
    rc, out, err = _run([*TORCHRUN, "2", "-m", "hcomm_cffi.examples.allreduce"], shm)
    assert rc == 0, err
    _check(out, 2)


def test_torchrun_after_init_process_group_uses_torch_store(shm, tmp_path):
    script = tmp_path / "with_torch_store.py"
    script.write_text(WITH_TORCH_STORE)
    rc, out, err = _run([*TORCHRUN, "2", str(script)], shm)
    assert rc == 0, err
    _check(out, 2)
    assert out.count(": True") == 2, out
