"""Per-communicator options: HCCL buffer size (init and Comm), the communicator's name and handle, Comm.split."""
from __future__ import annotations

from typing import Any, List

import numpy as np
import pytest

from multiproc import run_ranks

MIB = 1 << 20


def _options_body(rank: int, n: int, root: bytes) -> List[Any]:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root, buffer_size_mb=3)
    try:
        assert w.buffer_bytes == 2 * 3 * MIB and w.handle is not None and w.comm_name
        small = hcomm.Comm("small", buffer_size_mb=1)
        assert small.buffer_bytes == 2 * MIB and small.comm_name == "small"
        x = np.full(3 * MIB // 4, rank + 1, np.float32)          # 3 MiB through a 2 MiB buffer: in pieces
        small.allreduce(x)
        assert np.all(x == sum(range(1, n + 1)))
        with pytest.raises(ValueError, match=r"buffer_size_mb=0.*expected an int number of MiB >= 1"):
            hcomm.Comm("bad", buffer_size_mb=0)
        pair = hcomm.Comm("pair", ranks=[0, 1], buffer_size_mb=2)
        if rank >= 2:
            assert pair.handle is None
            with pytest.raises(hcomm.NotMemberError):
                pair.comm_name
        # split: color = parity, key = -rank (reverse order); rank 3 opts out of the second split
        half = w.split(rank % 2, key=-rank)
        expect = sorted([r for r in range(n) if r % 2 == rank % 2], reverse=True)
        assert half.parent_ranks == expect and half.get_rank() == expect.index(rank), half.parent_ranks
        total = half.allreduce(np.array([rank]))
        assert int(total[0]) == sum(expect)
        assert half.comm_name == f"split0.{rank % 2}"
        low = w.split(None if rank == 3 else 0, name="low")
        if rank == 3:
            assert not low and low.get_rank() == -1
        else:
            assert low.get_size() == 3 and low.get_rank() == rank
            assert int(low.allreduce(np.array([1]))[0]) == 3
        with pytest.raises(TypeError, match=r"split: color='a'; expected an int \(or None\)"):
            w.split("a")
        return [half.get_rank(), int(total[0])]
    finally:
        hcomm.finalize()


def test_buffer_size_name_handle_and_split() -> None:
    assert run_ranks(4, _options_body, timeout=60) == [[1, 2], [1, 4], [0, 2], [0, 4]]
