"""Misuse is caught before any library call, with a message naming the argument, the value and what was expected.

All cases run inside one 2-rank job (cheap); each case is then reported as its own test.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

from multiproc import run_ranks

# name -> (exception class name, regex the message must match); the callables live in _cases()
EXPECTED: Dict[str, Tuple[str, str]] = {
    "op_unknown": ("ValueError", r"op='mean' is not a reduce op; expected one of 'sum', 'prod', 'max', 'min', or "
                                 r"'avg' \(the sum divided by the number of ranks\)"),
    "algorithm_unknown": ("ValueError", r"algorithm='fastest' is not known; expected one of auto, ring, mesh"),
    "dtype_complex": ("TypeError", r"x has dtype complex64, which HCCL cannot carry"),
    "dtype_bool": ("TypeError", r"x has dtype bool, which HCCL cannot carry"),
    "not_contiguous": ("ValueError", r"x is not C-contiguous \(strides"),
    "readonly_inplace": ("ValueError", r"x is read-only but this call writes its result into it"),
    "out_wrong_size": ("ValueError", r"allreduce: out has 3 elements \(shape \(3,\)\); expected 4"),
    "out_wrong_dtype": ("ValueError", r"allreduce: out has dtype int32 but x has fp32; expected the same dtype"),
    "out_readonly": ("ValueError", r"out is read-only"),
    "out_overlaps": ("ValueError", r"allgather: out overlaps x; expected separate buffers"),
    "out_partial_overlap": ("ValueError", r"allreduce: out overlaps x; expected separate buffers \(or out=None"),
    "dst_out_of_range": ("ValueError", r"dst=5 is out of range for communicator 'world' of 2 ranks; expected 0..1"),
    "dst_negative": ("ValueError", r"dst=-1 is out of range"),
    "dst_not_int": ("TypeError", r"dst='1' is not an int rank; expected 0..1"),
    "send_to_self": ("ValueError", r"dst=\d is this rank; sending to oneself is not supported"),
    "src_out_of_range": ("ValueError", r"src=2 is out of range"),
    "root_out_of_range": ("ValueError", r"root=3 is out of range for communicator 'world' of 2 ranks"),
    "root_float": ("TypeError", r"root=0.0 is not an int rank"),
    "recv_readonly": ("ValueError", r"buf is read-only but this call writes its result into it"),
    "rs_not_divisible": ("ValueError", r"reduce_scatter: x has 5 elements, not divisible by the communicator size 2"),
    "a2a_not_divisible": ("ValueError", r"alltoall: x has 3 elements, not divisible by the communicator size 2"),
    "allgather_out_size": ("ValueError", r"allgather: out has 4 elements \(shape \(4,\)\); expected 6"),
    "reduce_out_size": ("ValueError", r"reduce: out has 2 elements"),
    "tree_alltoall": ("UnsupportedError", r"algorithm='tree' does not implement alltoall.*algorithms that can: ring, "
                                          r"mesh, native"),
    "ring_prod": ("UnsupportedError", r"algorithm='ring' cannot reduce with op=prod.*use algorithm='native'"),
    "mesh_int64": ("UnsupportedError", r"algorithm='mesh' cannot reduce with dtype=int64.*int8/int16/int32/fp16/fp32/bf16"),
    "tree_uint8_max": ("UnsupportedError", r"algorithm='tree' cannot reduce with dtype=uint8"),
    "hierarchical_one_server": ("UnsupportedError", r"hierarchical' needs more than one server.*topology=\(servers"),
    "list_input": ("TypeError", r"x is a list; expected a NumPy array, a torch tensor, or an object with DLPack"),
    "multi_empty": ("ValueError", r"send_multi: items is empty; expected at least one buffer"),
    "multi_not_list": ("TypeError", r"recv_multi: items is a ndarray; expected a list or tuple of buffers"),
    "multi_item_readonly": ("ValueError", r"items\[1\] is read-only"),
    "init_twice": ("CommError", r"hcomm is already initialised \(world of 2 ranks\); call hcomm.finalize\(\) first"),
    "sub_duplicate_ranks": ("ValueError", r"ranks=\[0, 1, 0\] lists rank\(s\) \[0\] more than once"),
    "sub_rank_out_of_range": ("ValueError", r"ranks\[1\]=7 is out of range; the parent communicator 'world' has ranks 0..1"),
    "sub_empty": ("ValueError", r"ranks=\[\] is empty"),
    "sub_bad_name": ("ValueError", r"name='' ; expected|name=''; expected a non-empty ASCII string"),
    "topology_mismatch": ("ValueError", r"topology has 6 ranks but the communicator has 2"),
    "set_device_negative": ("ValueError", r"device=-1; expected a device index >= 0"),
    "eager_negative": ("ValueError", r"eager_limit=-5; expected bytes >= 0"),
    "wait_negative_timeout": ("ValueError", r"timeout=-1; expected None \(no limit\) or a finite number of seconds >= 0"),
    "wait_all_not_request": ("TypeError", r"requests\[0\] is a int; expected a Request"),
    "use_after_destroy": ("CommError", r"allreduce: communicator 'tmp' was destroyed; create a new one"),
}


def _cases(hcomm: Any, w: Any, rank: int) -> Dict[str, Callable[[], Any]]:
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    x4 = np.ones(4, np.float32)
    peer = 1 - rank
    tmp = hcomm.Comm("tmp")
    tmp.destroy()
    return {
        "op_unknown": lambda: w.allreduce(x4, "mean"),
        "algorithm_unknown": lambda: w.allreduce(x4, algorithm="fastest"),
        "dtype_complex": lambda: w.allreduce(np.ones(2, np.complex64)),
        "dtype_bool": lambda: w.broadcast(np.ones(2, bool)),
        "not_contiguous": lambda: w.allreduce(np.ones((4, 4), np.float32)[:, 1]),
        "readonly_inplace": lambda: w.allreduce(ro),
        "out_wrong_size": lambda: w.allreduce(x4, out=np.empty(3, np.float32)),
        "out_wrong_dtype": lambda: w.allreduce(x4, out=np.empty(4, np.int32)),
        "out_readonly": lambda: w.allreduce(x4, out=ro),
        "out_overlaps": lambda: (lambda big: w.allgather(big[:3], out=big))(np.ones(6, np.float32)),
        "out_partial_overlap": lambda: (lambda big: w.allreduce(big[:4], out=big[1:5]))(np.ones(6, np.float32)),
        "dst_out_of_range": lambda: w.send(x4, 5),
        "dst_negative": lambda: w.isend(x4, -1),
        "dst_not_int": lambda: w.send(x4, "1"),
        "send_to_self": lambda: w.send(x4, rank),
        "src_out_of_range": lambda: w.recv(x4, 2),
        "root_out_of_range": lambda: w.broadcast(x4, root=3),
        "root_float": lambda: w.reduce(x4, root=0.0),
        "recv_readonly": lambda: w.recv(ro, peer),
        "rs_not_divisible": lambda: w.reduce_scatter(np.ones(5, np.float32)),
        "a2a_not_divisible": lambda: w.alltoall(np.ones(3, np.float32)),
        "allgather_out_size": lambda: w.allgather(np.ones(3, np.float32), out=np.empty(4, np.float32)),
        "reduce_out_size": lambda: w.reduce(x4, root=rank, out=np.empty(2, np.float32)),
        "tree_alltoall": lambda: w.alltoall(x4, algorithm="tree"),
        "ring_prod": lambda: w.allreduce(x4, "prod", algorithm="ring"),
        "mesh_int64": lambda: w.allreduce(np.ones(2, np.int64), algorithm="mesh"),
        "tree_uint8_max": lambda: w.reduce_scatter(np.ones(2, np.uint8), "max", algorithm="tree"),
        "hierarchical_one_server": lambda: w.allreduce(x4, algorithm="hierarchical"),
        "list_input": lambda: w.allreduce([1.0, 2.0]),
        "multi_empty": lambda: w.send_multi([], peer),
        "multi_not_list": lambda: w.recv_multi(np.ones(2), peer),
        "multi_item_readonly": lambda: w.recv_multi([np.ones(2), ro], peer),
        "init_twice": lambda: hcomm.init(rank=rank, world_size=2, root_info=b"x" * 4108),
        "sub_duplicate_ranks": lambda: hcomm.Comm("dup", ranks=[0, 1, 0]),
        "sub_rank_out_of_range": lambda: hcomm.Comm("oor", ranks=[0, 7]),
        "sub_empty": lambda: hcomm.Comm("empty", ranks=[]),
        "sub_bad_name": lambda: hcomm.Comm(""),
        "topology_mismatch": lambda: hcomm.Comm("topo", topology=(2, 3)),
        "set_device_negative": lambda: hcomm.set_device(-1),
        "eager_negative": lambda: setattr(w, "eager_limit", -5),
        "wait_negative_timeout": lambda: hcomm.Request("x", lambda t: True).wait(timeout=-1),
        "wait_all_not_request": lambda: hcomm.wait_all([3]),
        "use_after_destroy": lambda: tmp.allreduce(x4),
    }


def body(rank: int, n: int, root_info: bytes) -> Dict[str, Tuple[str, str]]:
    """Run every case; record the exception class and message (or 'no error')."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    out: Dict[str, Tuple[str, str]] = {}
    try:
        for name, fn in _cases(hcomm, w, rank).items():
            try:
                fn()
                out[name] = ("no error", "")
            except Exception as exc:  # noqa: BLE001 - the class is what we check
                out[name] = (type(exc).__name__, str(exc))
        # after all that misuse the communicator still works: nothing reached the library half-done
        out["_still_works"] = ("ok", str(int(w.allreduce(np.array([1], np.int32))[0])))
        return out
    finally:
        hcomm.finalize()


@pytest.fixture(scope="module")
def outcomes() -> List[Dict[str, Tuple[str, str]]]:
    return run_ranks(2, body, timeout=60)


def test_at_least_thirty_cases() -> None:
    assert len(EXPECTED) >= 30


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_misuse_case(name: str, outcomes: List[Dict[str, Tuple[str, str]]]) -> None:
    cls, pattern = EXPECTED[name]
    for rank, res in enumerate(outcomes):
        got_cls, msg = res[name]
        assert got_cls == cls, f"rank {rank}: {name}: expected {cls}, got {got_cls}: {msg}"
        assert re.search(pattern, msg), f"rank {rank}: {name}: message {msg!r} does not match {pattern!r}"


def test_comm_survives_misuse(outcomes: List[Dict[str, Tuple[str, str]]]) -> None:
    assert [o["_still_works"] for o in outcomes] == [("ok", "2")] * 2
