"""torch's own DTensor test harness (``DTensorTestBase``, in the wheel at
torch/testing/_internal/distributed/_tensor/common_dtensor.py) pointed at backend "hcomm", with tests of this
project written in its style: ``@with_comms``, ``self.build_device_mesh()``, ``self.assertEqual``.

The subclass names the backend and initialises the group itself: the base's ``init_pg`` accepts only the
backends on its own list (common_dtensor.py:809-821).  Each test spawns its ranks (``MultiProcessTestCase``).
"""
from __future__ import annotations

import datetime
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")   # torch's test harness needs it (the test extra)
os.environ.setdefault("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "120")   # read when common_distributed is imported

import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor  # noqa: E402
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module  # noqa: E402
from torch.testing._internal.distributed._tensor.common_dtensor import DTensorTestBase, with_comms  # noqa: E402

pytestmark = pytest.mark.slow


class HcommDTensorTestBase(DTensorTestBase):
    """DTensorTestBase on backend "hcomm", cpu, 2 ranks (the base's default is 4: each rank is a fresh interpreter
    importing torch, and the suite's budget is tight)."""

    @property
    def world_size(self) -> int:
        return 2

    @property
    def backend(self) -> str:
        return "hcomm"

    @property
    def device_type(self) -> str:
        return "cpu"

    def init_pg(self, eager_init: bool, backend: str | None = None) -> None:
        import hcomm_cffi.torch  # noqa: F401  (registers the backend in the spawned rank)
        dist.init_process_group(backend=backend or self.backend, world_size=self.world_size, rank=self.rank,
                                init_method=f"file://{self.file_name}", timeout=datetime.timedelta(seconds=60))


class DTensorOnHcommTest(HcommDTensorTestBase):
    @with_comms
    def test_distribute_redistribute_and_partial_sums(self) -> None:
        self.assertEqual(dist.get_backend(), "hcomm")
        mesh = self.build_device_mesh()
        torch.manual_seed(0)
        full = torch.randn(3 * self.world_size, 5)
        sharded = distribute_tensor(full, mesh, [Shard(0)])       # scatter from rank 0
        self.assertEqual(sharded.to_local(), full.chunk(self.world_size)[self.rank])
        self.assertEqual(sharded.redistribute(mesh, [Replicate()]).to_local(), full)   # all_gather
        cols = sharded.redistribute(mesh, [Shard(1)])                                  # all_to_all
        self.assertEqual(cols.full_tensor(), full)
        partial = DTensor.from_local(torch.full((4,), float(self.rank + 1)), mesh, [Partial()])
        total = sum(range(1, self.world_size + 1))                 # integers: every order sums exactly
        self.assertEqual(partial.redistribute(mesh, [Replicate()]).to_local(), torch.full((4,), float(total)))
        scattered = partial.redistribute(mesh, [Shard(0)])          # reduce_scatter
        self.assertEqual(scattered.full_tensor(), torch.full((4,), float(total)))

    @with_comms
    def test_tensor_parallel_mlp_step_matches_one_process(self) -> None:
        mesh = self.build_device_mesh()

        def mlp() -> nn.Module:
            torch.manual_seed(5)
            return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        local, tp = mlp(), parallelize_module(mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        x = torch.randn(6, 8, generator=torch.Generator().manual_seed(6))
        for model in (local, tp):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model(x).pow(2).sum().backward()
            opt.step()
        for (name, want), got in zip(local.named_parameters(), tp.parameters()):
            # Rowwise adds 2 partial products where one process sums them in one matmul: float tolerance
            self.assertEqual(got.full_tensor(), want, msg=name)
        self.assertIsInstance(tp[0].weight, DTensor)
        self.assertEqual(tp[0].weight.placements, (Shard(0),))
