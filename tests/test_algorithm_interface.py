"""The algorithm interface: derived plans equal the formulas, user algorithms plug in, broken schedules are caught.

Derivation: a dry run issues an algorithm for every rank into a recording sink and reads off
threads, notifies and channels; for the built-ins that must equal the planner's formulas.  User
algorithms come from temporary files (``module:attr`` and ``file.py:attr``), run on real
processes under the strict checker and are compared with NumPy; broken schedules are rejected
by the dry run before any process starts.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest

from hcomm_cffi.algorithms import COLLECTIVES, CollectiveCall, ScheduleError, dry_run, registry, resolve
from hcomm_cffi.algorithms.interface import FunctionAlgorithm, UnsupportedError
from hcomm_cffi.enums import DataType, ReduceOp
from hcomm_cffi.plan import Topology
from multiproc import run_ranks

BUFFER = 16 << 20   # bytes of every rank's HCCL buffer in the dry runs


def _key(res: Any) -> tuple:
    """What must agree between a formula and a derived plan: threads, per-thread notifies, channels."""
    return (res.threads, res.thread_notify_counts, sorted((c.peer, int(c.protocol)) for c in res.channels))


def _cases(topo: Topology) -> List[tuple]:
    n = topo.n_ranks
    return [(coll, root) for coll in COLLECTIVES for root in ((0, n - 1) if coll in ("broadcast", "reduce") else (0,))]


def _check_formula(name: str, topo: Topology) -> int:
    alg = resolve(name)
    checked = 0
    for coll, root in _cases(topo):
        if alg.unsupported(coll, DataType.FP32, None, topo):
            continue
        call = CollectiveCall(coll, 0, 0, 1000, DataType.FP32, root=root)
        derived = dry_run(alg, topo, call, BUFFER, declared=False)
        for r in range(topo.n_ranks):
            formula = alg.resources(topo, call, r)
            assert formula is not None
            assert _key(formula) == _key(derived.resources_for(r)), (name, coll, root, r)
            # ACK + DATA on each channel: the formula's channel notifies at 2 per channel
            assert derived.ranks[r].channel_notifies == 2 * len(formula.channels), (name, coll, root, r)
        dry_run(alg, topo, call, BUFFER, declared=True)   # the schedule also fits what is declared
        checked += 1
    return checked


@pytest.mark.parametrize("n", range(2, 10))
@pytest.mark.parametrize("name", ["ring", "mesh", "tree"])
def test_flat_builtins_derive_their_formula(name: str, n: int) -> None:
    assert _check_formula(name, Topology.single_server(n)) >= 6


@pytest.mark.parametrize("shape", [(2, 4), (4, 8)])
def test_hierarchical_derives_its_formula(shape: tuple) -> None:
    assert _check_formula("hierarchical", Topology.from_shape(*shape)) == 8   # no alltoall; rooted ops twice


def test_seed_figures_are_derived() -> None:
    """Ring 2/4/2 and Mesh 3/6/3 on four ranks; mesh N-1 channels; ring 2 channels at N >= 3."""
    call = CollectiveCall("allreduce", 0, 0, 4096, DataType.FP32)
    figures = {}
    for name in ("ring", "mesh"):
        s = dry_run(resolve(name), Topology.single_server(4), call, BUFFER, declared=False).summary()
        figures[name] = (s["threads"], s["notifies"], s["channels"])
    assert figures == {"ring": (2, 4, 2), "mesh": (3, 6, 3)}
    for n in range(3, 10):
        topo = Topology.single_server(n)
        assert dry_run(resolve("mesh"), topo, call, BUFFER, declared=False).summary()["channels"] == n - 1
        assert dry_run(resolve("ring"), topo, call, BUFFER, declared=False).summary()["channels"] == 2


# ---------------------------------------------------------------- broken schedules
def _alg(fn: Any) -> FunctionAlgorithm:
    return FunctionAlgorithm(fn, fn.__name__, None)


def wait_never_recorded(ctx: Any, call: Any) -> None:
    th = ctx.threads[0]
    if ctx.rank == 0:
        ctx.wait(th, 1, 1)              # nobody records notify 1 toward rank 0
    elif ctx.rank == 1:
        ctx.record(th, 0, 0)
        ctx.wait(th, 0, 0)


def record_never_waited(ctx: Any, call: Any) -> None:
    th = ctx.threads[0]
    if ctx.rank == 0:
        ctx.record(th, 1, 0)
    elif ctx.rank == 1:
        ctx.wait(th, 0, 0)
        ctx.record(th, 0, 1)            # rank 0 never waits for it


def write_without_channel(ctx: Any, call: Any) -> None:
    if ctx.rank == 0:
        ctx.put(ctx.threads[0], 2, 0, call.send, 64)   # rank 2 never uses its end of the channel


def lost_signal(ctx: Any, call: Any) -> None:
    th = ctx.threads[0]
    if ctx.rank == 0:
        ctx.record(th, 1, 0)
        ctx.record(th, 1, 0)            # the first is still set: this one is lost
    elif ctx.rank == 1:
        ctx.wait(th, 0, 0)
        ctx.wait(th, 0, 0)


@pytest.mark.parametrize("fn,words", [
    (wait_never_recorded, ["wait never recorded", "rank 0, thread 0, step 1", "from rank 1", "rank 1 never records"]),
    (record_never_waited, ["record never waited", "rank 1, thread 0, step 2", "to rank 0", "rank 0 never waits"]),
    (write_without_channel, ["write to a peer with no channel", "rank 0, thread 0, step 1", "to rank 2",
                             "rank 2 never uses a channel to rank 0"]),
    (lost_signal, ["lost signal", "rank 0, thread 0, step 2", "to rank 1"]),
])
def test_dry_run_rejects_broken_schedules(fn: Any, words: List[str]) -> None:
    with pytest.raises(ScheduleError) as info:
        dry_run(_alg(fn), Topology.single_server(3), CollectiveCall("x", 0, 0, 16, DataType.FP32), BUFFER)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_dry_run_rejects_declared_overflow() -> None:
    """A built-in's schedule is issued within what it declares: a peer outside its channels is an error."""
    from hcomm_cffi.algorithms.formulas import formula_resources

    alg = FunctionAlgorithm(write_without_channel, "liar", None, resources=formula_resources("ring"))
    with pytest.raises(ScheduleError, match=r"rank 0 addresses rank 2, but its plan acquires channels only to "
                                            r"ranks \[1, 3\]"):
        dry_run(alg, Topology.single_server(4), CollectiveCall("allreduce", 0, 0, 16, DataType.FP32), BUFFER)



def test_builtins_are_listed_by_the_registry_and_plug_in_like_user_algorithms() -> None:
    """registry.BUILTIN_ALGORITHMS lists the built-ins; each is the object its name resolves to, registered through
    register() (a second, different algorithm under a built-in's name is refused) and made by interface.define, the
    function under @algorithm -- no built-in module imports the registry."""
    assert registry.BUILTINS == ("ring", "mesh", "tree", "hierarchical", "native", "nb", "alltoall_pairwise",
                                 "double_ring")
    for alg in registry.BUILTIN_ALGORITHMS:
        assert resolve(alg.name) is alg and isinstance(alg, FunctionAlgorithm)
        source = Path(sys.modules[alg.fn.__module__].__file__ or "").read_text()
        assert "registry" not in source, f"{alg.fn.__module__} mentions the registry"
        with pytest.raises(ValueError, match=f"algorithm name {alg.name!r} is already registered"):
            registry.register(FunctionAlgorithm(write_without_channel, alg.name, None))


# ---------------------------------------------------------------- user algorithms from files
STAR = '''
"""A user's allreduce: everyone writes its vector into rank 0's slot, rank 0 reduces and writes the sum back."""
from hcomm_cffi import algorithm
from hcomm_cffi.algorithms import ACK, DATA


@algorithm("test_star", collectives=("allreduce",))
def star(ctx, call):
    n, me, th, nb = ctx.size, ctx.rank, ctx.threads[0], call.count * ctx.esz
    slot = ctx.region_bytes // n
    if nb > slot:
        raise ValueError("message too large for the star's slots")
    if me != 0:
        ctx.send(th, 0, [(me * slot, call.send, nb)])       # wait 0's ACK, write my slot, DATA
        ctx.record(th, 0, ACK)                              # my buffer is free for the result
        ctx.wait(th, 0, DATA)
        ctx.copy(th, call.recv, ctx.mine(0), nb)
        return
    ctx.copy(th, call.recv, call.send, nb)
    for p in range(1, n):
        ctx.record(th, p, ACK)
    for p in range(1, n):
        ctx.wait(th, p, DATA)
        ctx.reduce(th, call.recv, ctx.mine(p * slot), call.count)
    for p in range(1, n):
        ctx.send(th, p, [(0, call.recv, nb)])


class NotAnAlgorithm:
    pass
'''


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``usralgos/star.py`` on sys.path (children forked by run_ranks inherit it) and in PYTHONPATH."""
    pkg = tmp_path / "usralgos"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "star.py").write_text(textwrap.dedent(STAR))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return pkg / "star.py"


def user_body(rank: int, n: int, root_info: bytes, spec: str) -> List[float]:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        out = []
        for count, dtype in ((1, np.float32), (1000, np.int32), (4096, np.float16)):
            x = (np.arange(count) % 7 + rank).astype(dtype)
            y = w.allreduce(x.copy(), algorithm=spec)
            expect = sum((np.arange(count) % 7 + r).astype(np.float64) for r in range(n)).astype(dtype)
            np.testing.assert_array_equal(y, expect)
            out.append(float(y.sum()))
        return out
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("n", [3, 4])
def test_user_algorithm_from_module_runs_on_real_ranks(user_module: Path, n: int) -> None:
    results = run_ranks(n, user_body, "usralgos.star:star", timeout=120)
    assert all(r == results[0] for r in results)


def test_user_algorithm_from_file_path(user_module: Path) -> None:
    run_ranks(3, user_body, f"{user_module}:star", timeout=120)


def test_user_algorithm_plan_through_cli(user_module: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "hcomm_cffi", "plan", "--algo", "usralgos.star:star", "--ranks", "4",
                          "--size", "4K", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["formula"] is None and d["collective"] == "allreduce"
    assert (d["derived"]["threads"], d["derived"]["channels"]) == (1, 3)      # rank 0 talks to everyone
    assert [len(r["channels"]) for r in d["derived"]["per_rank"]] == [3, 1, 1, 1]


def test_user_algorithm_bench_through_cli(user_module: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "hcomm_cffi", "bench", "--op", "allreduce", "-N", "3", "-b", "64",
                          "-e", "4K", "-f", "8", "-n", "3", "-w", "1", "--algo", "usralgos.star:star"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "algorithm usralgos.star:star" in out.stdout and "Wrong elements       : 0 (OK)" in out.stdout


BROKEN = '''
from hcomm_cffi import algorithm


@algorithm("test_broken_wait", collectives=("allreduce",))
def broken(ctx, call):
    if ctx.rank == 0:
        ctx.wait(ctx.threads[0], 1, 1)
    elif ctx.rank == 1:
        ctx.record(ctx.threads[0], 0, 0)
        ctx.wait(ctx.threads[0], 0, 0)
'''


def test_broken_user_schedule_rejected_by_cli_before_running(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text(textwrap.dedent(BROKEN))
    out = subprocess.run([sys.executable, "-m", "hcomm_cffi", "plan", "--algo", f"{path}:broken", "--ranks", "3",
                          "--size", "1K"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "wait never recorded: rank 0, thread 0, step 1 (wait notify 1 from rank 1)" in out.stderr, out.stderr


def broken_body(rank: int, n: int, root_info: bytes, path: str) -> str:
    """Through Comm: the first call derives the plan by a dry run, which fails on every rank alike."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        with pytest.raises(ScheduleError) as info:
            w.allreduce(np.ones(4, np.float32), algorithm=f"{path}:broken")
        w.allreduce(np.ones(4, np.float32))      # nothing was launched: the communicator still works
        return str(info.value)
    finally:
        hcomm.finalize()


def test_broken_user_schedule_rejected_by_comm_on_every_rank(tmp_path: Path) -> None:
    path = tmp_path / "broken_comm.py"
    path.write_text(textwrap.dedent(BROKEN).replace("test_broken_wait", "test_broken_wait_comm"))
    messages = run_ranks(3, broken_body, str(path), timeout=120)
    assert all("wait never recorded: rank 0, thread 0, step 1" in m for m in messages)


# ---------------------------------------------------------------- the examples shipped with the package
def examples_body(rank: int, n: int, root_info: bytes) -> None:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        x = (np.arange(n * 300, dtype=np.float32) + 1000 * rank)
        y = w.alltoall(x, algorithm="hcomm_cffi.examples.pairwise:pairwise")
        expect = np.concatenate([np.arange(rank * 300, (rank + 1) * 300, dtype=np.float32) + 1000 * r
                                 for r in range(n)])
        np.testing.assert_array_equal(y, expect)
        v = np.full(5, rank, np.int32)
        got = w.run_algorithm("neighbor_exchange", v, out=np.empty(10, np.int32))
        np.testing.assert_array_equal(got, [(rank - 1) % n] * 5 + [(rank + 1) % n] * 5)
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("n", [2, 3, 4])
def test_shipped_examples(n: int) -> None:
    import hcomm_cffi.examples.pairwise  # noqa: F401  (registers "neighbor_exchange" in the parent, forked)
    run_ranks(n, examples_body, timeout=120)


# ---------------------------------------------------------------- bad input
def test_reference_that_does_not_import() -> None:
    with pytest.raises(ValueError, match=r"algorithm='no_such_pkg\.algos:x': .*no_such_pkg"):
        registry.resolve("no_such_pkg.algos:x")


def test_attribute_that_is_not_an_algorithm(user_module: Path) -> None:
    with pytest.raises(ValueError, match=r"NotAnAlgorithm is a type, not an algorithm; define it with "
                                         r"@hcomm_cffi\.algorithm"):
        registry.resolve("usralgos.star:NotAnAlgorithm")
    with pytest.raises(ValueError, match=r"has no attribute 'nope'; algorithms it defines: star"):
        registry.resolve("usralgos.star:nope")


def test_unknown_name_lists_the_alternatives() -> None:
    with pytest.raises(ValueError, match=r"algorithm='rign' is not known; expected one of auto, ring, mesh, tree, "
                                         r"hierarchical, native"):
        registry.resolve("rign")


def test_unsupported_collective_dtype_op_name_the_alternatives() -> None:
    import hcomm_cffi.examples.pairwise  # noqa: F401
    topo = Topology.single_server(4)
    with pytest.raises(UnsupportedError, match=r"algorithm='pairwise' does not implement allreduce; it implements "
                                               r"alltoall; algorithms that can: ring, mesh, tree, native"):
        registry.choose("pairwise", "allreduce", topo, 64, DataType.FP32, ReduceOp.SUM)
    with pytest.raises(UnsupportedError, match=r"algorithm='ring' cannot reduce with dtype=int64.*algorithms that can: "
                                               r"native"):
        registry.choose("ring", "allreduce", topo, 64, DataType.INT64, ReduceOp.SUM)
    with pytest.raises(UnsupportedError, match=r"algorithm='mesh' cannot reduce with op=prod"):
        registry.choose("mesh", "reduce", topo, 64, DataType.FP32, ReduceOp.PROD)
    with pytest.raises(UnsupportedError, match=r"algorithm='tree' does not implement alltoall"):
        registry.choose("tree", "alltoall", topo, 64, DataType.FP32, None)
