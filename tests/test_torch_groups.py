"""The torch backend "hcomm" where torch's parallelism libraries meet it, checked against gloo in one session.

Each body runs once on gloo and once on hcomm (2 ranks, one job per backend) and records per section what
it saw, or the error it raised; the tests compare the two.  Sections:

* a tensor subclass reaching the backend: funcol's ``AsyncCollectiveTensor`` sent with eager ``isend``
  (pipeline x tensor parallel does that), and a DTensor handed to ``all_reduce`` refused naming the argument;
* the devices of a group (``_device_types``, ``_get_pg_default_device``, ``_get_backend``) and DCP's
  ``set_model_state_dict(..., broadcast_from_rank0=True)``, which reads them;
* groups over all ranks independent of the default group and of each other: async collectives issued in
  opposite orders on two of them, two threads on two groups at once (what ``dcp.async_save`` with a
  checkpoint group does), and ``destroy_process_group(g)`` leaving the default group working.

The backend is imported in this process, before the ranks fork.
"""
from __future__ import annotations

import datetime
import socket
import threading
from typing import Any, Callable, Dict, List

import pytest

torch = pytest.importorskip("torch")

import hcomm_cffi.torch  # noqa: E402,F401  (before the ranks fork, as a program that forks its workers does:
#                                       each rank must lock with a lock of its own, not one copied from here)
from multiproc import run_ranks  # noqa: E402

pytestmark = pytest.mark.slow

BACKENDS = ("gloo", "hcomm")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _section(out: Dict[str, Any], name: str, fn: Callable[[], Any]) -> None:
    """``out[name]``: what ``fn`` returned, or the error it raised (as 'ErrorType: message')."""
    try:
        out[name] = fn()
    except Exception as exc:   # recorded: the test names the section that failed
        out[name] = f"{type(exc).__name__}: {exc}"


def _subclass_p2p(rank: int, n: int) -> List[float]:
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    t = torch.arange(6, dtype=torch.float32) + rank
    if rank == 0:
        act = funcol.all_reduce(t, "sum", dist.group.WORLD)   # an AsyncCollectiveTensor, its collective pending
        assert isinstance(act, funcol.AsyncCollectiveTensor)
        dist.isend(act, 1).wait()
        return []
    funcol.all_reduce(t, "sum", dist.group.WORLD).wait()
    got = torch.empty(6)
    dist.irecv(got, 0).wait()
    return got.tolist()


def _dtensor_refused(n: int) -> str:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    dt = distribute_tensor(torch.ones(2 * n, 3), init_device_mesh("cpu", (n,)), [Shard(0)])
    pg = dist.distributed_c10d._get_default_group()
    try:
        pg.allreduce([dt])
    except TypeError as exc:
        return str(exc)
    return "accepted"


def _devices() -> Dict[str, Any]:
    import torch.distributed as dist
    pg = dist.distributed_c10d._get_default_group()
    try:
        pg._get_backend(torch.device("meta"))
        other = "served"
    except RuntimeError:      # the type torch's callers catch (distributed_c10d.py:2488-2491)
        other = "RuntimeError"
    return {"cpu in _device_types": torch.device("cpu") in pg._device_types,
            "default device": str(dist.distributed_c10d._get_pg_default_device()),
            "cpu backend": pg._get_backend(torch.device("cpu")) is not None, "meta backend": other}


def _broadcast_from_rank0(rank: int) -> List[float]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    torch.manual_seed(rank)              # every rank starts different; rank 0's full state dict wins
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 2))
    full = {k: v.detach().clone() for k, v in model.state_dict().items()} if rank == 0 else {}
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def _opposite_orders(rank: int, n: int) -> List[float]:
    import torch.distributed as dist
    g1, g2 = dist.new_group(list(range(n))), dist.new_group(list(range(n)))
    a, b = torch.tensor([float(rank + 1)]), torch.tensor([100.0 * (rank + 1)])
    order = [(a, g1), (b, g2)] if rank == 0 else [(b, g2), (a, g1)]
    works = [dist.all_reduce(t, group=g, async_op=True) for t, g in order]
    for w in works:
        w.wait()
    return [a.item(), b.item()]


def _two_threads(rank: int, n: int) -> Dict[str, Any]:
    """The default group on one thread, a group over all ranks on another, different collectives on each."""
    import torch.distributed as dist
    g = dist.new_group(list(range(n)))
    got: Dict[str, Any] = {}

    def on_default() -> None:
        t = torch.full((1000,), float(rank + 1))
        for _ in range(30):
            dist.all_reduce(t)
            t.div_(n)
        got["default"] = t[:3].tolist()

    def on_group() -> None:
        outs = [torch.empty(7) for _ in range(n)]
        for i in range(30):
            dist.all_gather(outs, torch.full((7,), float(10 * rank + i)), group=g)
        got["group"] = [o[0].item() for o in outs]
    threads = [threading.Thread(target=on_default, daemon=True), threading.Thread(target=on_group, daemon=True)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(40)
    assert not any(th.is_alive() for th in threads), f"threads still running: {got}"
    dist.destroy_process_group(g)     # the default group goes on
    t = torch.ones(3)
    dist.all_reduce(t)
    got["after destroy"] = t.tolist()
    return got


def _body(rank: int, n: int, root: bytes, port: int, backend: str) -> Dict[str, Any]:
    import torch.distributed as dist
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=30))
    out: Dict[str, Any] = {}
    try:
        _section(out, "async collective tensor sent", lambda: _subclass_p2p(rank, n))
        if backend == "hcomm":
            _section(out, "dtensor refused", lambda: _dtensor_refused(n))
        _section(out, "devices", _devices)
        _section(out, "broadcast_from_rank0", lambda: _broadcast_from_rank0(rank))
        _section(out, "opposite orders", lambda: _opposite_orders(rank, n))
        _section(out, "two threads", lambda: _two_threads(rank, n))
    finally:
        dist.destroy_process_group()
    return out


@pytest.fixture(scope="module")
def seen() -> Dict[str, List[Dict[str, Any]]]:
    return {b: run_ranks(2, _body, _port(), b, timeout=150) for b in BACKENDS}


def _same(seen: Dict[str, List[Dict[str, Any]]], section: str) -> List[Dict[str, Any]]:
    gloo, hcomm = ([r[section] for r in seen[b]] for b in BACKENDS)
    assert hcomm == gloo, f"{section}: hcomm {hcomm} != gloo {gloo}"
    return hcomm


def test_an_async_collective_tensor_is_waited_for_and_its_tensor_sent(seen) -> None:
    got = _same(seen, "async collective tensor sent")
    assert got[1] == [float(2 * i + 1) for i in range(6)]   # rank 0 + rank 1 of arange(6) + rank


def test_a_tensor_without_storage_is_refused_naming_the_argument(seen) -> None:
    for r, msg in enumerate(r["dtensor refused"] for r in seen["hcomm"]):
        assert f"rank {r} of process group" in msg and "hcomm all_reduce: tensors[0] is a " in msg, msg
        assert "DTensor, a tensor subclass without storage" in msg and ".to_local()" in msg, msg


def test_a_group_reports_its_cpu_device_as_gloo_does(seen) -> None:
    assert _same(seen, "devices") == [{"cpu in _device_types": True, "default device": "cpu",
                                       "cpu backend": True, "meta backend": "RuntimeError"}] * 2


def test_set_model_state_dict_broadcasts_rank0s_full_state(seen) -> None:
    got = _same(seen, "broadcast_from_rank0")
    assert isinstance(got[0], list) and got[0] == got[1]


def test_async_collectives_in_opposite_orders_on_two_groups(seen) -> None:
    assert _same(seen, "opposite orders") == [[3.0, 300.0]] * 2


def test_two_threads_on_two_groups_and_destroying_one(seen) -> None:
    got = _same(seen, "two threads")
    assert got[0]["after destroy"] == [2.0] * 3 and got[0]["group"] == [29.0, 39.0], got
