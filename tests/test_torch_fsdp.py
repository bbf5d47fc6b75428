"""FSDP2 (``torch.distributed.fsdp.fully_shard``) over the backend "hcomm": one step equals a single-process step."""
from __future__ import annotations

import datetime
import socket
from typing import Any, List

import pytest

torch = pytest.importorskip("torch")
fsdp = pytest.importorskip("torch.distributed.fsdp")

from multiproc import run_ranks  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _data(n: int) -> Any:
    return torch.randn(n * 4, 8, generator=torch.Generator().manual_seed(1))


def _fsdp_body(rank: int, n: int, root: bytes, port: int) -> List[float]:
    import torch.distributed as dist
    import hcomm_cffi.torch  # noqa: F401
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("hcomm", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=60))
    try:
        mesh = init_device_mesh("cpu", (n,))
        model = _model()
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = _data(n)[rank * 4:(rank + 1) * 4]
        model(x).pow(2).mean().backward()
        opt.step()
        return torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()]).tolist()
    finally:
        dist.destroy_process_group()


def test_fully_shard_step_equals_a_single_process_step() -> None:
    n = 2
    res = run_ranks(n, _fsdp_body, _port(), timeout=90)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(_data(n)).pow(2).mean().backward()   # FSDP averages the ranks' gradients: the mean over all shards
    opt.step()
    ref = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    for r in res:
        assert torch.allclose(torch.tensor(r), ref, atol=1e-6), (torch.tensor(r) - ref).abs().max()
    assert not torch.allclose(ref, torch.cat([p.detach().reshape(-1) for p in _model().parameters()]))
