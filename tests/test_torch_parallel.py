"""torch's parallelism libraries train the same bits on backend "hcomm" as on gloo (tests/torch_parallel.py).

One multi-process job per backend and world size (2 and 4 ranks) runs every workload: the seven pipeline
schedules (shapes inferred and given; messages below and above the eager limit), pipeline x TP on a 2 x 2
mesh, TP, SP, FSDP2, HSDP, FSDP x TP, expert parallel with uneven all_to_all_single, and DCP (FSDP2 save ->
TP load, broadcast_from_rank0, async_save on its own group while the default group trains, consolidation
to a full state dict).  Every parameter, loss and saved tensor of every rank is compared with gloo's, bit for
bit, except where the sum behind it has more than two addends (:data:`SUMMATION_ORDER`).
"""
from __future__ import annotations

import shutil
import socket
import tempfile
from typing import Any, Dict, List, Tuple

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

import torch_parallel  # noqa: E402
from multiproc import run_ranks  # noqa: E402

pytestmark = pytest.mark.slow

SIZES = (2, 4)
#: (world size, tensor-name prefix) -> why gloo's bits may differ: a reduction over 4 ranks (TP's allreduce,
#: SP's and FSDP2's reduce-scatter of 4 addends) may add in another order on each backend (gloo's ring and
#: hcomm's algorithm), so the last bits of a sum may differ; every other tensor must match bit for bit.
#: Over 2 ranks a + b == b + a: bit for bit.  HSDP and FSDP x TP reduce over 2 ranks per mesh dimension.
SUMMATION_ORDER: Dict[Tuple[int, str], str] = {
    (4, "tp."): "Rowwise allreduce of 4 partial sums",
    (4, "sp."): "reduce-scatter of 4 partial sums",
    (4, "fsdp."): "FSDP2 reduce-scatter of 4 gradients",
    (4, "dcp."): "the model saved and loaded was trained with FSDP2 over 4 ranks",
}
#: the tolerance there: float32 values of order 1 after two steps; the differences seen are a few ulp (<1e-8)
RTOL, ATOL = 1e-5, 1e-6


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs() -> Dict[Tuple[str, int], List[Dict[str, Dict[str, Any]]]]:
    torch_parallel.preload()
    base = tempfile.mkdtemp(prefix="hcomm-torch-parallel-")
    try:
        return {(backend, n): run_ranks(n, torch_parallel.job, _port(), backend, base, timeout=400)
                for n in SIZES for backend in ("gloo", "hcomm")}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _tolerance(n: int, name: str) -> str:
    """Why ``name`` may differ in its last bits at world size ``n`` ('' when it must match bit for bit)."""
    return next((why for (size, prefix), why in SUMMATION_ORDER.items() if size == n and name.startswith(prefix)), "")


def compare(gloo: List[Dict[str, Dict[str, Any]]], hcomm: List[Dict[str, Dict[str, Any]]],
            n: int) -> Dict[str, str]:
    """{workload: 'bit for bit' or 'within rtol/atol (why), max difference d'}; raises on any other difference."""
    table: Dict[str, str] = {}
    assert list(gloo[0]) == list(hcomm[0])
    for workload in gloo[0]:
        worst, whys = 0.0, set()
        for r in range(n):
            mine, ref = hcomm[r][workload], gloo[r][workload]
            assert sorted(mine) == sorted(ref), (workload, r)
            for name, want in ref.items():
                got = mine[name]
                assert got.dtype == want.dtype and got.shape == want.shape, (workload, r, name)
                if got.tobytes() == want.tobytes():
                    continue
                why = _tolerance(n, name)
                diff = float(np.abs(got.astype(np.float64) - want).max())
                assert why and np.allclose(got, want, rtol=RTOL, atol=ATOL), \
                    f"{workload}, rank {r}, {name}: hcomm differs from gloo by {diff}"
                worst, whys = max(worst, diff), whys | {why}
        within = f"within rtol {RTOL:g} / atol {ATOL:g} ({'; '.join(sorted(whys))}), max difference {worst:.1e}"
        table[workload] = "bit for bit" if not whys else within
    return table


@pytest.mark.parametrize("n", SIZES)
def test_every_workload_gives_gloos_bits(runs, n) -> None:
    table = compare(runs["gloo", n], runs["hcomm", n], n)
    print(f"\nworld size {n}:\n" + "\n".join(f"  {w}: {how}" for w, how in table.items()))
    assert len(table) == len(torch_parallel.workloads(n, "", "hcomm"))


@pytest.mark.parametrize("backend", ["gloo", "hcomm"])
@pytest.mark.parametrize("n", SIZES)
def test_checkpoints_hold_what_was_trained(runs, backend, n) -> None:
    """Within one run: the FSDP2 checkpoint, consolidated, is the full state dict; the TP model loaded from it,
    the FSDP2 model broadcast from rank 0 and the async save (made before the busy steps) hold the same bits."""
    ranks = [r["DCP"] for r in runs[backend, n]]
    full = {k[len("dcp.full."):]: v for k, v in ranks[0].items() if k.startswith("dcp.full.")}
    saved = {k[len("dcp.saved."):]: v for k, v in ranks[0].items() if k.startswith("dcp.saved.")}
    later = {k[len("dcp.async."):]: v for k, v in ranks[0].items() if k.startswith("dcp.async.")}
    assert sorted(full) == sorted(saved) == sorted(later) and full
    for key, want in full.items():
        assert saved[key].tobytes() == want.tobytes() == later[key].tobytes(), key
        for mine in ranks:
            assert mine[f"dcp.tp_loaded.{key}"].tobytes() == want.tobytes(), key
            assert mine[f"dcp.broadcast.{key}"].tobytes() == want.tobytes(), key
            assert mine[f"dcp.fsdp.{key}"].tobytes() == want.tobytes(), key
    busy = ranks[0][f"dcp.busy.{next(iter(full))}"]
    assert busy.tobytes() != full[next(iter(full))].tobytes()   # the default group trained on meanwhile
