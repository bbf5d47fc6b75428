"""The built-ins the vendor has and the document lacks: NB, pairwise all-to-all and the double ring.

They run on the emulator under the strict checker (tests/conftest.py) on 2, 3 and 4 ranks and
must match NumPy on every rank (``run_case`` of test_algorithms_collectives); their resources are the
planner's vendor profile they implement (NB and pairwise: A2; double ring: A3) and equal what a dry
run of their own schedule derives, in one call and followed by itself.
"""
from __future__ import annotations

from typing import List

import pytest

from hcomm_cffi.algorithms import COLLECTIVES, CollectiveCall, dry_run, registry, resolve
from hcomm_cffi.enums import DataType, ReduceOp
from hcomm_cffi.plan import Topology, make_plan
from multiproc import run_ranks
from test_algorithms_collectives import Case, cases_body

PROFILE = {"nb": "a2", "alltoall_pairwise": "a2", "double_ring": "a3"}
COUNTS = (0, 1, 7, 1000, 1_300_000)     # the last is larger than the 4 MiB collective region: pieces


def _cases(n: int) -> List[Case]:
    cases: List[Case] = []
    k = 0
    for algo, colls in (("nb", ("allreduce", "reduce_scatter", "allgather")), ("alltoall_pairwise", ("alltoall",)),
                        ("double_ring", ("allreduce", "reduce_scatter", "allgather"))):
        if algo == "double_ring" and n < 3:
            continue
        for coll in colls:
            for count in COUNTS:
                if coll in ("reduce_scatter", "alltoall", "allgather") and count > 1000:
                    count //= n          # per-rank blocks: keep the job small
                dtype, op = (("float32", "sum"), ("int32", "max"), ("float16", "min"), ("int8", "sum"))[k % 4]
                cases.append((coll, algo, dtype, op, count, k))
                k += 1
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3, 4])
def test_vendor_builtins_match_numpy_on_the_emulator(n: int) -> None:
    cases = _cases(n)
    results = run_ranks(n, cases_body, cases, n, timeout=300)
    assert all(r == ["ok"] * len(cases) for r in results), results


@pytest.mark.parametrize("name", sorted(PROFILE))
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9])
def test_vendor_builtins_acquire_their_profile(name: str, n: int) -> None:
    topo = Topology.single_server(n)
    alg = resolve(name)
    checked = 0
    for coll in COLLECTIVES:
        if alg.unsupported(coll, DataType.FP32, None, topo):
            continue
        plan = make_plan(coll, topo, "1M", name, platform=PROFILE[name])
        for count in (1, 1000, 300_000):
            call = CollectiveCall(coll, 0, 0, count, DataType.FP32)
            derived = dry_run(alg, topo, call, 1 << 20, declared=False)
            for r in range(n):
                want, got = plan.resources_for(r), derived.resources_for(r)
                assert want.threads == got.threads and want.thread_notifies == got.thread_notifies, (coll, r)
                assert sorted(c.peer for c in want.channels) == sorted(c.peer for c in got.channels), (coll, r)
            dry_run(alg, topo, call, 1 << 20, declared=True)
        checked += 1
    assert checked == (0 if name == "double_ring" and n < 3 else 1 if name == "alltoall_pairwise" else 3)


def test_the_registry_lists_them_and_auto_does_not_pick_them() -> None:
    assert {"nb", "alltoall_pairwise", "double_ring"} <= set(registry.names())
    topo = Topology.single_server(4)
    for size in (2 << 20, 64 << 20):
        alg = registry.choose("auto", "allreduce", topo, size, DataType.FP32, None)
        assert alg.name in ("ring", "mesh", "tree", "hierarchical", "native")


def test_double_ring_refuses_two_ranks() -> None:
    with pytest.raises(ValueError, match="double_ring' needs at least 3 ranks"):
        registry.choose("double_ring", "allreduce", Topology.single_server(2), 64, DataType.FP32, None)


def test_auto_takes_the_library_collective_for_device_memory_and_the_model_for_large_host_buffers() -> None:
    topo = Topology.single_server(4)
    for size in (8, 2 << 20, 64 << 20):          # device memory (CANN, NPU tensors): the library's own at every size
        assert registry.choose("auto", "allreduce", topo, size, DataType.FP32, ReduceOp.SUM).name == "native", size
    # host buffers on the emulator: the library's own up to 1 MiB, then the planner's cheapest
    assert registry.choose("auto", "allreduce", topo, 1 << 20, DataType.FP32, ReduceOp.SUM,
                           device_operands=False).name == "native"
    alg, why = registry.explain("auto", "allreduce", topo, 64 << 20, DataType.FP32, ReduceOp.SUM, device_operands=False)
    assert alg.name in ("ring", "mesh", "tree") and "lowest modelled time" in why, (alg.name, why)
    alg, why = registry.explain("auto", "allreduce", topo, 64 << 20, DataType.INT64, ReduceOp.PROD, device_operands=False)
    assert alg.name == "native" and "cannot reduce" in why, why
    # ... unless the ranks outnumber the host's cores: then the library's own at every size too
    alg, why = registry.explain("auto", "allreduce", topo, 64 << 20, DataType.FP32, ReduceOp.SUM, device_operands=False,
                                ranks_share_cores=True)
    assert alg.name == "native" and "4 ranks share fewer host cores" in why, why
    one = Topology.single_server(1)
    assert registry.choose("auto", "allreduce", one, 64 << 20, DataType.FP32, ReduceOp.SUM).name == "ring"
