"""The claim protocol of the root-info rendezvous (issue 25 items 1, 5, 9), one thread per rank.

Threads stand in for processes: ``started`` gives each its process start time, and the file store's
claims are flock'ed files, so a second claimant of a slot is refused exactly as another process is.
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional

import pytest

from hcomm_cffi.bootstrap import FileStore, JobClash, SettingsDisagree, exchange_root_info

BLOB_A, BLOB_B = b"A" * 4108, b"B" * 4108


def _cohort(root: str, n: int, blob: bytes, started: float, results: Dict, tag: str, watch: float = 0.0,
            clashes: Optional[List[str]] = None, agree: Optional[Callable[[int], Dict[str, str]]] = None,
            settle: bool = False) -> List[threading.Thread]:
    def body(rank: int) -> None:
        try:
            results[(tag, rank)] = exchange_root_info(
                FileStore(root), rank, n, lambda: blob, 20.0, "ns", watch=watch, settle=settle, started=started,
                on_clash=(clashes.append if clashes is not None else None),
                agree=agree(rank) if agree else None)
        except Exception as exc:   # collected for the assertions
            results[(tag, rank)] = exc

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    return threads


def test_two_cohorts_at_once_both_stop(tmp_path) -> None:
    results: Dict = {}
    now = time.time()
    threads = _cohort(str(tmp_path), 2, BLOB_A, now, results, "A", settle=True) + \
        _cohort(str(tmp_path), 2, BLOB_B, now, results, "B", settle=True)
    for t in threads:
        t.join(30)
    blobs = {k: v for k, v in results.items() if isinstance(v, bytes)}
    # whoever got a blob got its own job's, and at least the losers of each slot stopped with JobClash
    assert all(v == (BLOB_A if k[0] == "A" else BLOB_B) for k, v in blobs.items()), blobs
    assert sum(isinstance(v, JobClash) for v in results.values()) >= 2, results
    for v in results.values():
        if isinstance(v, JobClash):
            assert "two jobs share the file rendezvous" in str(v) and "already claimed by pid" in str(v)


def test_a_late_rank_of_another_job_stops_the_cohort_it_would_have_mixed_with(tmp_path) -> None:
    results: Dict = {}
    clashes: List[str] = []
    started = time.time() - 10
    for t in _cohort(str(tmp_path), 2, BLOB_A, started, results, "A", watch=10.0, clashes=clashes):
        t.join(30)
    assert results == {("A", 0): BLOB_A, ("A", 1): BLOB_A}
    # a rank 1 that started before cohort A completed, i.e. a sibling of one of A's members, arrives late
    with pytest.raises(JobClash, match="rank 1 is already claimed"):
        exchange_root_info(FileStore(str(tmp_path)), 1, 2, lambda: BLOB_B, 5.0, "ns", started=started)
    end = time.monotonic() + 5
    while len(clashes) < 2 and time.monotonic() < end:
        time.sleep(0.05)
    assert len(clashes) == 2 and all("two jobs share" in c for c in clashes), clashes   # both members told


def test_a_later_job_with_the_same_rendezvous_gets_its_own_epoch(tmp_path) -> None:
    results: Dict = {}
    for t in _cohort(str(tmp_path), 2, BLOB_A, time.time() - 10, results, "A", watch=5.0, clashes=[]):
        t.join(30)
    time.sleep(0.2)
    for t in _cohort(str(tmp_path), 2, BLOB_B, time.time(), results, "B", watch=5.0, clashes=[]):
        t.join(30)
    assert results == {("A", 0): BLOB_A, ("A", 1): BLOB_A, ("B", 0): BLOB_B, ("B", 1): BLOB_B}, results


def test_a_dead_processs_claim_is_taken_over(tmp_path) -> None:
    child = ("import sys; from hcomm_cffi.bootstrap import FileStore; "
             "FileStore(sys.argv[1]).claim('ns/e0/claim/1', b'{\"pid\": 1, \"token\": \"old\", \"arrived\": 0}')")
    subprocess.run([sys.executable, "-c", child, str(tmp_path)], check=True, timeout=60)   # exits: lock dropped
    results: Dict = {}
    for t in _cohort(str(tmp_path), 2, BLOB_A, time.time(), results, "A"):
        t.join(30)
    assert results == {("A", 0): BLOB_A, ("A", 1): BLOB_A}


def test_settings_that_differ_fail_every_rank_naming_them(tmp_path) -> None:
    results: Dict = {}

    def agree(rank: int) -> Dict[str, str]:
        return {"HCOMM_STEP_BYTES": "65536" if rank else "unset"}

    for t in _cohort(str(tmp_path), 3, BLOB_A, time.time(), results, "A", agree=agree):
        t.join(30)
    assert all(isinstance(v, SettingsDisagree) for v in results.values()), results
    assert all("rank 0 has HCOMM_STEP_BYTES=unset, ranks 1-2 have HCOMM_STEP_BYTES=65536" in str(v)
               for v in results.values())


class _SlowAfterClaim(FileStore):
    """The last rank's store: after its claim lands, it reads on only once the others completed the cohort
    (a process descheduled between its claim and its next look, as on a loaded machine)."""

    def claim(self, key: str, raw: bytes) -> Optional[bytes]:
        held = super().claim(key, raw)
        if held is None and key == "ns/e0/claim/2":
            limit = time.monotonic() + 10
            while not self.get("ns/e0/done") and time.monotonic() < limit:
                time.sleep(0.005)
        return held


def test_a_rank_whose_claim_completed_the_cohort_before_it_looked_joins_it(tmp_path) -> None:
    results: Dict = {}
    started = time.time()

    def body(rank: int) -> None:
        store = _SlowAfterClaim(str(tmp_path)) if rank == 2 else FileStore(str(tmp_path))
        try:
            results[rank] = exchange_root_info(store, rank, 3, lambda: BLOB_A, 5.0, "ns", started=started)
        except Exception as exc:   # collected for the assertions
            results[rank] = exc

    threads = [threading.Thread(target=body, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {0: BLOB_A, 1: BLOB_A, 2: BLOB_A}, results
