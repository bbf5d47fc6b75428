"""HCOMM_STEP_BYTES: the most an algorithm stages per step and peer; messages above it go in more steps.

The emulator prefers 1 MiB steps (a step is still in cache when the peer reads it); 0 means "as
large as the HCCL buffer allows" (CANN's default).  Every built-in algorithm takes its landing
slots from ``IssueContext.slot_elems``, so one cap reaches all of them: results must not change,
only the number of steps (tasks) a recorded schedule holds.
"""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from hcomm_cffi import settings
from multiproc import run_ranks
from test_algorithms_collectives import COLLS, TOPO, expect_unsupported, run_case

ALGOS = ("ring", "mesh", "tree", "hierarchical")


def _ring_allreduce_tasks(w: Any, count: int) -> int:
    """Tasks in the recorded schedule of the ring allreduce of ``count`` fp32 elements on ``w``'s stream."""
    found = [s.tasks for key, (s, _) in w._engine.targets.own.schedules.items()
             if key[0].name == "ring" and key[1] == "allreduce" and key[2] == count]
    assert len(found) == 1, found
    return found[0]


def steps_body(rank: int, n: int, root_info: bytes) -> Dict[str, Any]:
    """Every collective x algorithm on messages of several steps, against NumPy; the ring's task count."""
    import hcomm_cffi as hcomm

    w = hcomm.init(rank=rank, world_size=n, root_info=root_info, topology=TOPO[n])
    try:
        ran: List[str] = []
        for count in (5_003, 64):          # 20 KB (several 1 KiB steps per chunk, odd tail) and one step
            for algo in ALGOS:
                for coll in COLLS[:-1]:
                    if expect_unsupported(coll, algo, "float32", "sum"):
                        continue
                    c = count // n if coll in ("reduce_scatter", "alltoall", "allgather") else count
                    ran.append(run_case(w, rank, n, (coll, algo, "float32", "sum", c, 1), 23))
        return {"ran": ran, "ring_tasks": _ring_allreduce_tasks(w, 5_003), "step": w._engine.step_bytes}
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("n", [3, 4])
def test_small_steps_give_the_same_results_in_more_tasks(n: int) -> None:
    small = run_ranks(n, steps_body, env={"HCOMM_STEP_BYTES": "1K"}, timeout=200)
    whole = run_ranks(n, steps_body, env={"HCOMM_STEP_BYTES": "0"}, timeout=200)
    for got in small + whole:
        assert got["ran"] and set(got["ran"]) == {"ok"}
    assert {r["step"] for r in small} == {1024} and {r["step"] for r in whole} == {None}
    # 20 KB in 1 KiB steps: the ring's reduce-scatter and allgather repeat per step, several times the tasks
    for s, h in zip(small, whole):
        assert s["ring_tasks"] >= 2 * h["ring_tasks"], (s["ring_tasks"], h["ring_tasks"])


def default_body(rank: int, n: int, root_info: bytes) -> Any:
    import hcomm_cffi as hcomm

    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        return w._engine.step_bytes
    finally:
        hcomm.finalize()


def test_the_emulator_prefers_one_mib_steps() -> None:
    assert run_ranks(2, default_body, timeout=60) == [1 << 20, 1 << 20]


def test_step_bytes_setting_parses_sizes_and_names_a_bad_value() -> None:
    assert settings.value("HCOMM_STEP_BYTES", {"HCOMM_STEP_BYTES": "512K"}) == 512 << 10
    assert settings.value("HCOMM_STEP_BYTES", {"HCOMM_STEP_BYTES": "0"}) == 0
    assert settings.value("HCOMM_STEP_BYTES", {}) is None
    for bad, why in (("64", "below 128 bytes"), ("lots", "not an integer number of bytes")):
        with pytest.raises(settings.SettingsError) as info:
            settings.value("HCOMM_STEP_BYTES", {"HCOMM_STEP_BYTES": bad})
        text = str(info.value)
        assert f"HCOMM_STEP_BYTES={bad!r}" in text and why in text and "expected" in text
