"""``hcomm.empty`` / ``hcomm.zeros`` (api/memory.py): NumPy arrays in device memory on the emulator, which its large
native collectives read where it is (a memfd block the peers map; an ordinary array is staged), freed with the last
view; bad shapes and dtypes refused naming the argument."""
from __future__ import annotations

import gc
from typing import Any, Dict

import numpy as np
import pytest

import hcomm_cffi as hcomm
from hcomm_cffi.binding import get_binding
from hcomm_cffi.sim import peer_memory
from multiproc import run_ranks

COUNT = 300_007          # float32: above the native collectives' direct threshold (1 MiB), uneven blocks


def _allocations() -> int:
    return len(get_binding().lib.state.memory)


def test_the_arrays_are_device_memory_the_peers_can_map_and_are_freed_with_their_last_view() -> None:
    get_binding().acl_init()
    before = _allocations()
    a = hcomm.zeros((256, 128), np.int32)       # from 64 KiB: a memfd block (smaller messages are never direct)
    assert a.shape == (256, 128) and a.dtype == np.int32 and a.flags.c_contiguous and a.flags.writeable
    assert not a.any()
    addr = a.__array_interface__["data"][0]
    assert peer_memory.locate(addr, a.nbytes) is not None          # a memfd block: mapped by the peers
    plain = np.zeros((256, 128), np.int32)
    assert peer_memory.locate(plain.__array_interface__["data"][0], plain.nbytes) is None
    row = a[2]
    row[:] = 7
    del a
    gc.collect()
    assert _allocations() == before + 1 and row.tolist() == [7] * 128   # a view keeps the memory
    del row
    gc.collect()
    assert _allocations() == before
    e = hcomm.empty(0, np.float64)
    assert e.shape == (0,) and e.dtype == np.float64


@pytest.mark.parametrize("shape,dtype,error,text", [
    ((-1, 2), np.float32, ValueError, "shape=(-1, 2); expected sizes >= 0"),
    ((2, "x"), np.float32, TypeError, "shape=(2, 'x'); expected an int or a sequence of ints"),
    (True, np.float32, TypeError, "shape=True; expected an int or a sequence of ints"),
    (4, np.complex64, TypeError, "dtype=complex64, which HCCL cannot carry"),
    (4, "no such type", TypeError, "dtype='no such type'; expected a NumPy dtype"),
])
def test_bad_shapes_and_dtypes_are_refused_naming_them(shape: Any, dtype: Any, error: type, text: str) -> None:
    with pytest.raises(error) as info:
        hcomm.empty(shape, dtype)
    assert text in str(info.value)


def _collectives(rank: int, n: int, root_info: bytes) -> Dict[str, Any]:
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        out: Dict[str, Any] = {}
        for kind, make in (("device", hcomm.zeros), ("host", np.zeros)):
            x = make(COUNT, np.float32)
            x[:] = np.arange(COUNT, dtype=np.float32) % 97 + rank
            total = make(COUNT, np.float32)
            w.allreduce(x, out=total)
            gathered = make(COUNT * n, np.float32)
            w.allgather(x, out=gathered)
            w.broadcast(x, root=n - 1)
            out[kind] = (total.copy(), gathered.copy(), x.copy())
        return out
    finally:
        hcomm.finalize()


@pytest.mark.slow
def test_collectives_on_them_give_what_they_give_on_numpy_arrays() -> None:
    n = 3
    results = run_ranks(n, _collectives, timeout=180)
    base = np.arange(COUNT, dtype=np.float32) % 97
    want_total = sum(base + r for r in range(n))
    want_gathered = np.concatenate([base + r for r in range(n)])
    for r, got in enumerate(results):
        for kind in ("device", "host"):
            total, gathered, bcast = got[kind]
            np.testing.assert_array_equal(total, want_total, err_msg=f"rank {r}, {kind}")
            np.testing.assert_array_equal(gathered, want_gathered, err_msg=f"rank {r}, {kind}")
            np.testing.assert_array_equal(bcast, base + n - 1, err_msg=f"rank {r}, {kind}")
