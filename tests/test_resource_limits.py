"""Sizes beyond this host's memory are refused before anything is allocated (issue 25 item 8)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hcomm_cffi.bench.sizes import SizeError, bytes_per_rank, check_memory

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bytes_per_rank_counts_buffers_host_copies_and_the_hccl_buffer() -> None:
    # allreduce of 1 MiB fp32: send + receive (2 MiB), their host copies (2 MiB), 4 x 8 MiB of HCCL buffer/scratch
    assert bytes_per_rank("allreduce", 1 << 20, 4, 4, 8) == 4 * (1 << 20) + 32 * (1 << 20)
    assert bytes_per_rank("broadcast", 1 << 20, 4, 4, 8) == 2 * (1 << 20) + 32 * (1 << 20)   # in place


def test_a_size_the_host_cannot_hold_names_the_flag_and_the_numbers() -> None:
    with pytest.raises(SizeError, match=r"-e/--maxbytes=1024G .*needs \d+ bytes per rank.*2 rank\(s\) on this host, "
                                        r"but only 1000000000 bytes of memory are available; expected a smaller -e"):
        check_memory("allreduce", 1 << 40, 4, 2, 2, 8, available=10 ** 9)
    check_memory("allreduce", 1 << 20, 4, 2, 2, 8, available=10 ** 9)      # fits: no error


def test_hcomm_bench_refuses_a_million_gigabytes_before_allocating() -> None:
    """Under a 3 GiB address-space limit: an attempt to allocate would die of MemoryError, not print the reason."""
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
              "from hcomm_cffi.cli import main; sys.exit(main(['bench', '-e', '1000000G']))")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], env={**env, "PYTHONPATH": REPO, "HCOMM_BACKEND": "sim"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "-e/--maxbytes=1000000G " in proc.stderr and "bytes of memory are available" in proc.stderr, proc.stderr[-2000:]
    assert "MemoryError" not in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - t0 < 60
