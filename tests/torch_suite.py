"""Run PyTorch's own distributed test bodies (``DistributedTest._DistTestBase``, shipped in the torch wheel)
against backend "hcomm" and, as the reference, gloo.

This is the project's own runner (not upstream's ``test_distributed_spawn.py``): one server process imports
torch and the test module once per *variant*, then forks the ranks of every test from it (about a second
per test instead of a fresh interpreter per rank).  The test module reads ``BACKEND`` and ``WORLD_SIZE``
when it is imported (its skip guards are evaluated then), so each variant is a separate import of the same
file under another module name:

* ``gloo``: gloo's guards, run on gloo (the reference);
* ``hcomm``: hcomm's guards ("hcomm" joins the ``plugin``, ``ddp`` and ``subgroup`` feature sets, as a
  third-party backend does, and the lists of backends whose profiler events the bodies check), run on hcomm;
* ``hcomm-as-gloo``: gloo's guards, run on hcomm, for the :data:`GLOO_GUARDED` bodies whose guard names
  gloo but whose body tests generic behaviour.

Every rank reports pass / skip (with the reason) / fail (with the traceback); a test whose ranks do not
finish within :data:`TEST_TIMEOUT_S` is a hang, its ranks are killed and its segments swept.

``python tests/torch_suite.py [--json FILE] [--all] [-k SUBSTRING]`` runs it alone (``--all``: every test of
the class, to refresh the selection); ``tests/test_torch_suite.py`` runs it under pytest (marker ``slow``).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from typing import Any, Dict, List, Optional, Tuple

os.environ.setdefault("HCOMM_BACKEND", "sim")
os.environ.setdefault("HCOMM_SIM_CHECK", "strict")   # as the test session (tests/conftest.py)
os.environ.setdefault("HCCL_CONNECT_TIMEOUT", "30")
os.environ.setdefault("HCCL_EXEC_TIMEOUT", "60")
os.environ.setdefault("HCCL_BUFFSIZE", "8")

#: a test whose ranks are not all done after this long is a hang
TEST_TIMEOUT_S = 90.0
#: the process group's timeout in the tests (upstream's default is 300 s)
PG_TIMEOUT_S = 60.0
#: the exit codes torch's skip helpers end a rank with (common_distributed.TEST_SKIPS), checked at import
SKIP_EXIT_CODES: Dict[int, str] = {}

#: The selection, at world size 2: every test of ``_DistTestBase`` gloo passes there (torch 2.13.0, CPU: 90 of
#: its 315; the others need CUDA, NCCL or MPI, or are skipped for every backend).  Regenerate with ``--all``.
SELECTED: List[str] = [
    "test_Backend_enum_class", "test_DistributedDataParallelCPU", "test_DistributedDataParallelCPU_grad_is_view",
    "test_DistributedDataParallel_requires_grad", "test_accumulate_gradients_no_sync",
    "test_accumulate_gradients_no_sync_allreduce_hook", "test_accumulate_gradients_no_sync_allreduce_with_then_hook",
    "test_accumulate_gradients_no_sync_grad_is_view", "test_all_gather", "test_all_gather_coalesced_complex",
    "test_all_gather_coalesced_full_group", "test_all_gather_coalesced_simple",
    "test_all_gather_coalesced_with_empty", "test_all_gather_complex", "test_all_gather_full_group",
    "test_all_gather_object_default_pg", "test_all_gather_object_subgroup",
    "test_all_reduce_coalesced_full_group_max", "test_all_reduce_coalesced_full_group_min",
    "test_all_reduce_coalesced_full_group_product", "test_all_reduce_coalesced_full_group_sum",
    "test_all_reduce_coalesced_max", "test_all_reduce_coalesced_max_complex_unsupported",
    "test_all_reduce_coalesced_min", "test_all_reduce_coalesced_product", "test_all_reduce_coalesced_sum",
    "test_all_reduce_complex_unsupported_ops", "test_all_reduce_full_group_max", "test_all_reduce_full_group_min",
    "test_all_reduce_full_group_product", "test_all_reduce_full_group_sum", "test_all_reduce_max",
    "test_all_reduce_min", "test_all_reduce_product", "test_all_reduce_sum", "test_all_reduce_sum_async",
    "test_all_reduce_sum_complex", "test_barrier", "test_barrier_full_group", "test_barrier_timeout_full_group",
    "test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags", "test_broadcast", "test_broadcast_full_group",
    "test_ddp_create_graph", "test_ddp_logging_data_cpu", "test_destroy_full_group", "test_destroy_group",
    "test_dump_DDP_relevant_env_vars", "test_gather", "test_gather_checks", "test_gather_full_group",
    "test_get_backend", "test_get_future", "test_get_rank", "test_get_rank_size_full_group",
    "test_get_rank_size_group", "test_grads_same_across_ranks_with_no_sync", "test_irecv", "test_isend",
    "test_isend_autograd_profiler", "test_isend_torch_profiler", "test_monitored_barrier_gloo",
    "test_monitored_barrier_gloo_rank_0_timeout", "test_monitored_barrier_gloo_subgroup",
    "test_reduce_full_group_max", "test_reduce_full_group_min", "test_reduce_full_group_product",
    "test_reduce_full_group_sum", "test_reduce_max", "test_reduce_min", "test_reduce_product", "test_reduce_sum",
    "test_reduce_sum_twice", "test_scatter", "test_scatter_checks", "test_scatter_complex", "test_scatter_full_group",
    "test_scatter_object_list", "test_send_recv", "test_send_recv_any_source",
    "test_send_recv_any_source_autograd_profiler", "test_send_recv_any_source_torch_profiler",
    "test_send_recv_autograd_profiler", "test_send_recv_torch_profiler", "test_send_recv_with_tag",
    "test_send_recv_with_tag_autograd_profiler", "test_send_recv_with_tag_torch_profiler",
    "test_sparse_all_reduce_sum", "test_static_graph_api_cpu",
]

#: Tests that need more ranks: the group tests (a new_group of ranks [1, 2]) skip below 8 ranks
#: (``skip_if_small_worldsize``): (world size, names gloo passes there).
WIDE: List[Tuple[int, List[str]]] = [(8, [
    "test_all_gather_coalesced_group", "test_all_gather_group", "test_all_reduce_coalesced_group_max",
    "test_all_reduce_coalesced_group_min", "test_all_reduce_coalesced_group_product",
    "test_all_reduce_coalesced_group_sum", "test_all_reduce_group_max", "test_all_reduce_group_min",
    "test_all_reduce_group_product", "test_all_reduce_group_sum", "test_barrier_group", "test_barrier_timeout_group",
    "test_broadcast_group", "test_destroy_group", "test_gather_group", "test_get_rank_size_group",
    "test_reduce_group_max", "test_reduce_group_min", "test_reduce_group_product", "test_reduce_group_sum",
    "test_scatter_group",
])]

#: Bodies of the selection (any world size) guarded by ``BACKEND == "gloo"`` (or a list of backends without plugins) that test
#: generic behaviour (coalesced allreduce, object collectives, batched p2p, get_future, no_sync, timeouts):
#: run on hcomm with gloo's guards and gloo's runtime branches (variant ``hcomm-as-gloo``, :class:`AsGloo`).
GLOO_GUARDED: List[str] = [
    "test_accumulate_gradients_no_sync", "test_accumulate_gradients_no_sync_allreduce_hook",
    "test_accumulate_gradients_no_sync_allreduce_with_then_hook", "test_accumulate_gradients_no_sync_grad_is_view",
    "test_all_gather_object_default_pg", "test_all_gather_object_subgroup",
    "test_all_reduce_coalesced_full_group_max", "test_all_reduce_coalesced_group_max",
    "test_all_reduce_coalesced_group_min", "test_all_reduce_coalesced_group_product",
    "test_all_reduce_coalesced_group_sum", "test_barrier_timeout_group", "test_all_reduce_coalesced_full_group_min",
    "test_all_reduce_coalesced_full_group_product", "test_all_reduce_coalesced_full_group_sum",
    "test_all_reduce_coalesced_max", "test_all_reduce_coalesced_min", "test_all_reduce_coalesced_product",
    "test_all_reduce_coalesced_sum", "test_barrier_timeout_full_group", "test_batch_isend_irecv_gloo",
    "test_batch_isend_irecv_gloo_tags", "test_get_future", "test_grads_same_across_ranks_with_no_sync",
    "test_scatter_object_list", "test_sparse_all_reduce_sum",
]

#: hcomm's named exceptions: test -> why hcomm does not pass what gloo passes (not run on hcomm).
EXCEPTIONS: Dict[str, str] = {
    "test_monitored_barrier_gloo": "torch's dist.monitored_barrier refuses every backend but gloo (ValueError "
                                   "'monitored_barrier is only implemented for GLOO backend')",
    "test_monitored_barrier_gloo_rank_0_timeout": "torch's dist.monitored_barrier refuses every backend but gloo",
    "test_monitored_barrier_gloo_subgroup": "torch's dist.monitored_barrier refuses every backend but gloo",
}


#: Settings some bodies run with, and why (the rest run with the test session's: the strict checker).
SETTINGS: Dict[str, Dict[str, str]] = {
    # rank 0 alone enters a barrier and times out: its notify to the absent ranks is never waited on, which
    # the strict checker reports as an error at HcclCommDestroy on those ranks; the default (warn) warns
    "test_barrier_timeout_full_group": {"HCOMM_SIM_CHECK": "warn"},
    "test_barrier_timeout_group": {"HCOMM_SIM_CHECK": "warn"},
}


def _load(variant: str, world_size: int) -> Any:
    """Import torch's distributed_test module for ``variant`` (its guards read BACKEND/WORLD_SIZE now)."""
    import torch.testing._internal.common_distributed as cd
    import torch.testing._internal.distributed as pkg

    guards = "gloo" if variant != "hcomm" else "hcomm"
    for feature in ("plugin", "ddp", "subgroup"):
        cd.DistTestCases.backend_feature[feature].add("hcomm")
    cd.DistTestCases.backend_feature["plugin"].add("hcomm")
    os.environ["BACKEND"] = guards
    os.environ["WORLD_SIZE"] = str(world_size)
    os.environ.setdefault("TEMP_DIR", tempfile.gettempdir())
    name = f"_hcomm_suite_{variant.replace('-', '_')}_{world_size}"
    spec = importlib.util.spec_from_file_location(name, os.path.join(pkg.__path__[0], "distributed_test.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    for allow in (mod.PROFILING_SUPPORTED_BACKENDS, mod.SEND_RECV_PROFILING_SUPPORTED_BACKENDS):
        allow.append("hcomm")   # the bodies then check hcomm's profiler events as they do gloo's
    for skip in cd.TEST_SKIPS.values():
        SKIP_EXIT_CODES[skip.exit_code] = skip.message
    return mod


def _case_class(mod: Any) -> type:
    """A TestCase with the attributes the bodies use of upstream's per-rank test object."""
    from torch.testing._internal.common_utils import TestCase

    class Case(mod.DistributedTest._DistTestBase, TestCase):  # type: ignore[misc,name-defined]
        rank = 0
        file_name = ""
        skip_return_code_checks: List[Any] = []

        @property
        def world_size(self) -> str:
            return os.environ["WORLD_SIZE"]

        @property
        def init_method(self) -> str:
            return f"file://{self.file_name}"

        @property
        def destroy_pg_upon_exit(self) -> bool:
            return False
    Case.__name__ = Case.__qualname__ = "HcommSuiteCase"
    return Case


class AsGloo(str):
    """``BACKEND`` for a gloo-guarded body run on hcomm: the string "hcomm" (what ``init_process_group`` and
    ``new_group`` get), equal to "gloo" too, so the body's runtime branches take gloo's (CPU) path."""

    def __new__(cls) -> "AsGloo":
        return super().__new__(cls, "hcomm")

    def __eq__(self, other: object) -> bool:
        return other in ("gloo", "hcomm") if isinstance(other, str) else NotImplemented

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _barrier(tmp: str, tag: str, rank: int, n: int, timeout: float = 60.0) -> None:
    """The harness's rendezvous of a test's ranks before and after its body, as upstream's runner makes around each
    test: each rank makes a file ``tag.rank`` in the test's own directory and waits until there are ``n``.

    Not the module's ``Barrier.sync``, which the bodies themselves use and which looks every 0.1 s: twice a test, that
    was most of a test's time here.  Its own directory, so that the module's barrier counts only its own files."""
    from test_launch_helpers import wait_files

    where = os.path.join(tmp, "harness-barrier")
    os.makedirs(where, exist_ok=True)
    open(os.path.join(where, f"{tag}.{rank}"), "w").close()
    wait_files(where, f"{tag}.", n, within=timeout, every=0.002)


def _rank(mod: Any, case_cls: type, name: str, backend: str, rank: int, n: int, tmp: str, port: int,
          wfd: int, as_gloo: bool) -> None:
    """One rank of one test, in a forked child: init, run the body, report one JSON line, exit."""
    import torch.distributed as dist

    env = {"BACKEND": backend, "WORLD_SIZE": str(n), "RANK": str(rank), "TEMP_DIR": tmp,
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "INIT_METHOD": "env://"}
    os.environ.update(env)
    os.environ.update(SETTINGS.get(name, {}))
    logfd = os.open(os.path.join(tmp, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(logfd, 1)
    os.dup2(logfd, 2)
    mod.BACKEND = AsGloo() if as_gloo else backend
    outcome: Dict[str, Any] = {"rank": rank, "status": "pass"}
    try:
        try:
            dist.init_process_group(backend, init_method=f"file://{tmp}/init", rank=rank, world_size=n,
                                    timeout=timedelta(seconds=PG_TIMEOUT_S))
            case = case_cls(name)
            case.rank = rank
            case.file_name = f"{tmp}/init2"
            case.setUp()
            try:
                _barrier(tmp, "before", rank, n)
                getattr(case, name)()
                _barrier(tmp, "after", rank, n)
            finally:
                case.tearDown()
        except SystemExit as exc:
            if exc.code in SKIP_EXIT_CODES:
                outcome = {"rank": rank, "status": "skip", "why": SKIP_EXIT_CODES[int(exc.code)]}  # type: ignore[arg-type]
            elif exc.code not in (0, None):
                raise
        except Exception as exc:
            import unittest
            if isinstance(exc, unittest.SkipTest):
                outcome = {"rank": rank, "status": "skip", "why": str(exc)}
            else:
                raise
        if dist.is_initialized():
            used = dist.get_backend()
            dist.destroy_process_group()
            if used != backend and outcome["status"] == "pass":
                raise AssertionError(f"the body ended on a process group of backend {used!r}, not {backend!r}")
    except BaseException:
        outcome = {"rank": rank, "status": "fail", "why": traceback.format_exc()[-4000:]}
    finally:
        try:
            os.write(wfd, (json.dumps(outcome) + "\n").encode())
        except BaseException:
            pass
        try:
            from hcomm_cffi.sim import shutdown
            shutdown()   # a rank that failed mid-test still leaves nothing in /dev/shm
        except BaseException:
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def run_test(mod: Any, case_cls: type, name: str, backend: str, n: int, as_gloo: bool = False) -> Dict[str, Any]:
    """Fork ``n`` ranks of test ``name`` on ``backend``; its outcome (pass, skip, fail or hang) and time."""
    start = time.monotonic()
    method = getattr(case_cls, name)
    if getattr(method, "__unittest_skip__", False):   # unittest.skip* and torch's skip_but_pass_in_sandcastle_if
        return {"test": name, "backend": backend, "world_size": n, "seconds": 0.0, "status": "skip",
                "why": getattr(method, "__unittest_skip_why__", "")}
    with tempfile.TemporaryDirectory(prefix="hcomm-suite-") as tmp:
        for sub in ("barrier", "test_dir", "init_dir"):
            os.mkdir(os.path.join(tmp, sub))
        port = _port()
        rfd, wfd = os.pipe()
        pids = []
        for rank in range(n):
            pid = os.fork()
            if pid == 0:
                os.close(rfd)
                os.setpgid(0, 0)
                _rank(mod, case_cls, name, backend, rank, n, tmp, port, wfd, as_gloo)
            pids.append(pid)
        os.close(wfd)
        text, status = _collect(rfd, pids, TEST_TIMEOUT_S)
        os.close(rfd)
        logs = {r: _tail(os.path.join(tmp, f"rank{r}.log")) for r in range(n)}
    outcomes = [json.loads(line) for line in text.splitlines() if line.strip()]
    result: Dict[str, Any] = {"test": name, "backend": backend, "world_size": n,
                              "seconds": round(time.monotonic() - start, 2)}
    if status == "hang":
        result.update(status="hang", why=f"ranks still running after {TEST_TIMEOUT_S:g} s; killed", logs=logs)
    elif len(outcomes) < n:
        result.update(status="fail", why=f"only {len(outcomes)} of {n} ranks reported (a rank died): {status}",
                      logs=logs)
    elif any(o["status"] == "fail" for o in outcomes):
        result.update(status="fail", why="\n".join(f"rank {o['rank']}: {o['why']}" for o in outcomes
                                                   if o["status"] == "fail"))
    elif any(o["status"] == "skip" for o in outcomes):
        result.update(status="skip", why=next(o["why"] for o in outcomes if o["status"] == "skip"))
    else:
        result.update(status="pass")
    return result


def _tail(path: str, nbytes: int = 3000) -> str:
    """The end of a rank's output (its stdout and stderr), for failure reports."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - nbytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _collect(rfd: int, pids: List[int], timeout: float) -> Tuple[str, str]:
    """Read the ranks' reports until all exited (or kill them at ``timeout``); (text, exit summary)."""
    import select

    chunks: List[bytes] = []
    deadline = time.monotonic() + timeout
    codes: Dict[int, int] = {}
    hung = False
    while len(codes) < len(pids):
        ready, _, _ = select.select([rfd], [], [], 0.005)   # (the ranks' exits are looked for between reads)
        if ready:
            data = os.read(rfd, 65536)
            if data:
                chunks.append(data)
        for pid in pids:
            if pid not in codes:
                done, code = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = code
        if time.monotonic() > deadline and len(codes) < len(pids):
            hung = True
            for pid in pids:
                if pid not in codes:
                    _kill(pid)
            for pid in pids:
                if pid not in codes:
                    codes[pid] = os.waitpid(pid, 0)[1]
    while True:
        ready, _, _ = select.select([rfd], [], [], 0)
        data = os.read(rfd, 65536) if ready else b""
        if not data:
            break
        chunks.append(data)
    _sweep()
    summary = ", ".join(f"pid {p}: {_describe(codes[p])}" for p in pids)
    return b"".join(chunks).decode(errors="replace"), "hang" if hung else summary


def _kill(pid: int) -> None:
    for sig in (signal.SIGKILL,):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass


def _describe(code: int) -> str:
    if os.WIFSIGNALED(code):
        return f"killed by {signal.Signals(os.WTERMSIG(code)).name}"
    return f"exit {os.WEXITSTATUS(code)}"


def _sweep() -> None:
    """Segments of killed ranks (their owners are dead) leave /dev/shm."""
    from hcomm_cffi.sim.shm import sweep_stale
    sweep_stale()


def run(selection: List[Tuple[str, str, int, List[str]]], log: Any = None) -> List[Dict[str, Any]]:
    """Run every (variant, backend, world size, names) group; the results in order."""
    import hcomm_cffi.torch  # noqa: F401  (registers the backend before the forks)

    results = []
    loaded: Dict[Tuple[str, int], Tuple[Any, type]] = {}
    for variant, backend, n, names in selection:
        key = (variant, n)
        if key not in loaded:
            mod = _load(variant, n)
            loaded[key] = (mod, _case_class(mod))
        mod, cls = loaded[key]
        for name in names:
            r = run_test(mod, cls, name, backend, n, as_gloo=variant == "hcomm-as-gloo")
            r["variant"] = variant
            results.append(r)
            if log is not None:
                print(f"{variant:14} ws{n} {r['status']:5} {r['seconds']:6.2f}s {name}", file=log, flush=True)
    return results


def all_tests() -> List[str]:
    """Every test name of ``_DistTestBase`` (import with gloo's guards at world size 2)."""
    mod = _load("gloo", 2)
    return sorted(n for n in dir(mod.DistributedTest._DistTestBase) if n.startswith("test_"))


def default_selection() -> List[Tuple[str, str, int, List[str]]]:
    """The project test's selection: gloo and hcomm on :data:`SELECTED` and :data:`WIDE`, plus the gloo-guarded bodies."""
    sel = []
    for n, names in [(2, SELECTED)] + WIDE:
        sel += [("gloo", "gloo", n, names),
                ("hcomm", "hcomm", n, [t for t in names if t not in GLOO_GUARDED and t not in EXCEPTIONS]),
                ("hcomm-as-gloo", "hcomm", n, [t for t in names if t in GLOO_GUARDED])]
    return sel


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--all", action="store_true", help="every test of the class, not the selection")
    p.add_argument("--variants", default="gloo,hcomm,hcomm-as-gloo")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("-k", default="", help="only tests whose name contains this")
    a = p.parse_args(argv)
    if a.all:
        names = all_tests()
        backends = {"gloo": "gloo", "hcomm": "hcomm", "hcomm-as-gloo": "hcomm"}
        sel = [(v, backends[v], a.world_size, names) for v in a.variants.split(",")]
    else:
        sel = [s for s in default_selection() if s[0] in a.variants.split(",")]
    sel = [(v, b, n, [t for t in names if a.k in t]) for v, b, n, names in sel]
    start = time.monotonic()
    results = run(sel, sys.stderr)
    took = time.monotonic() - start
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"seconds": took, "results": results}, f, indent=1)
    counts: Dict[str, Dict[str, int]] = {}
    for r in results:
        c = counts.setdefault(r["variant"], {})
        c[r["status"]] = c.get(r["status"], 0) + 1
    print(json.dumps({"seconds": round(took, 1), "counts": counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
