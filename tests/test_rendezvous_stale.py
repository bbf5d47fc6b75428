"""A stale claim and a job split by its secrets fail within seconds and say what happened (issue 36.5).

* Job A's rank 1 exits while its rank 0 lingers (holding its claim); job B starts with the same job id.
  B's rank 1 used to take A's exited rank's slot, find A's root info there and join A's finished
  cohort, so both of B's ranks waited the whole HCCL_CONNECT_TIMEOUT.  Now a slot taken in a cohort
  that already completed moves the newcomer to the next epoch, where B meets itself.
* Ranks of one job given different HCOMM_JOB_SECRETs on a shared job directory wait in two namespaces;
  they used to time out blaming "rank 1 did not arrive".  Now the split is named at once.
Processes are real (a claim's liveness is its holder's flock); the rendezvous is the file store's.
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Dict, List

from hcomm_cffi.bootstrap import BootstrapError, FileStore, exchange_root_info

BLOB_A, BLOB_B = b"A" * 4108, b"B" * 4108

RANK = """
import sys, time
from hcomm_cffi.bootstrap import FileStore, exchange_root_info
root, rank, letter, linger = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
t0 = time.monotonic()
try:
    blob = exchange_root_info(FileStore(root), rank, 2, lambda: letter.encode() * 4108, 20.0, "job-7", watch=30.0)
    print("got", chr(blob[0]), round(time.monotonic() - t0, 2), flush=True)
except Exception as exc:
    print("error", type(exc).__name__, exc, flush=True)
time.sleep(linger)
"""


def _rank(root: str, rank: int, letter: str, linger: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RANK, root, str(rank), letter, str(linger)],
                            stdout=subprocess.PIPE, text=True)


def test_a_later_job_never_takes_a_finished_jobs_root_info_from_an_exited_ranks_slot(tmp_path) -> None:
    a0, a1 = _rank(str(tmp_path), 0, "A", 30.0), _rank(str(tmp_path), 1, "A", 0.0)
    try:
        assert a1.communicate(timeout=60)[0].startswith("got A")      # A's rank 1 is done and exits
        assert a0.stdout is not None and a0.stdout.readline().startswith("got A")   # A's rank 0 lingers
        time.sleep(0.3)
        t0 = time.monotonic()
        b0, b1 = _rank(str(tmp_path), 0, "B", 0.0), _rank(str(tmp_path), 1, "B", 0.0)
        outs = [p.communicate(timeout=60)[0] for p in (b0, b1)]
        took = time.monotonic() - t0
    finally:
        a0.kill()
        a0.wait()
    assert all(o.startswith("got B") for o in outs), outs     # B's own root info on both ranks
    assert took < 10, took


def _one(root: str, rank: int, namespace: str, results: Dict, key: str, blob: bytes) -> threading.Thread:
    def body() -> None:
        t0 = time.monotonic()
        try:
            results[key] = exchange_root_info(FileStore(root), rank, 2, lambda: blob, 20.0, namespace,
                                              started=time.time())
        except Exception as exc:      # collected for the assertions
            results[key] = exc
        results[key + " took"] = time.monotonic() - t0
    t = threading.Thread(target=body)
    t.start()
    return t


def test_ranks_with_different_secrets_are_told_so_within_seconds(tmp_path) -> None:
    results: Dict = {}
    # the namespace is "<hash of the secret>-<generation>" (bootstrap._exchange): one rank per secret
    threads = [_one(str(tmp_path), 0, "aaaaaaaaaaaa-0", results, "rank 0", BLOB_A),
               _one(str(tmp_path), 1, "bbbbbbbbbbbb-0", results, "rank 1", BLOB_A)]
    for t in threads:
        t.join(60)
    for key in ("rank 0", "rank 1"):
        err = results[key]
        assert isinstance(err, BootstrapError) and "different job secret (HCOMM_JOB_SECRET)" in str(err), err
        assert results[key + " took"] < 6, results


def test_two_jobs_with_their_own_secrets_still_never_meet_and_both_succeed(tmp_path) -> None:
    results: Dict = {}
    threads: List[threading.Thread] = []
    for rank in (0, 1):
        threads.append(_one(str(tmp_path), rank, "aaaaaaaaaaaa-0", results, f"A{rank}", BLOB_A))
        threads.append(_one(str(tmp_path), rank, "bbbbbbbbbbbb-0", results, f"B{rank}", BLOB_B))
    for t in threads:
        t.join(60)
    assert [results[k] for k in ("A0", "A1", "B0", "B1")] == [BLOB_A, BLOB_A, BLOB_B, BLOB_B], results
