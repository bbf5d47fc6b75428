"""The planner's buffer size becomes a real HcclCommConfig that the emulator honours."""
from __future__ import annotations

from hcomm_cffi._ffi import ffi
from hcomm_cffi.plan import Topology, make_plan
from hcomm_cffi.resources import comm_config_for
from multiproc import run_ranks
from hcomm_cffi.binding import Binding
from hcomm_cffi.lib import load


def test_config_from_plan_has_the_planned_buffer_size() -> None:
    plan = make_plan("allreduce", Topology.single_server(4), 24 << 20, "ring")
    cfg = comm_config_for(plan, comm_name="ring4")
    assert cfg.hcclBufferSize == plan.comm_config_buffer_mb() and 0 < cfg.hcclBufferSize <= 200
    assert ffi.string(cfg.hcclCommName) == b"ring4"


def _buffer_size(rank: int, n: int, root: bytes) -> int:
    plan = make_plan("allreduce", Topology.single_server(n), 6 << 20, "ring")
    b = Binding(load("sim"))
    b.set_device(rank)                   # CANN's HcclCommInitRootInfoConfig needs a device
    comm = b.comm_init_root_info(n, root, rank, comm_config_for(plan))
    _, size = b.get_hccl_buffer(comm)
    b.comm_destroy(comm)
    return size // (1 << 20)


def test_emulator_allocates_what_the_plan_configured() -> None:
    mb = make_plan("allreduce", Topology.single_server(2), 6 << 20, "ring").comm_config_buffer_mb()
    assert run_ranks(2, _buffer_size, timeout=60) == [2 * mb, 2 * mb]
