"""Helpers for emulator tests: build a communicator and resources with the raw binding calls."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

import numpy as np

from hcomm_cffi._ffi import ffi
from hcomm_cffi.binding import Binding
from hcomm_cffi.enums import Engine, Protocol
from hcomm_cffi.initializers import make_channel_descs
from hcomm_cffi.lib import load


@dataclass
class RankEnv:
    """One rank's communicator, stream and the binding used to reach the emulator."""

    b: Binding
    lib: Any
    comm: Any
    rank: int
    n: int
    stream: Any
    buf: Any = None
    buf_size: int = 0
    keep: List[Any] = field(default_factory=list)

    def ptr(self, array: np.ndarray) -> Any:
        """A ``char *`` to a NumPy array's data, registered as device memory on the emulator (kept alive)."""
        p = ffi.cast("char *", ffi.from_buffer(array))
        self.keep.append(array)
        raw = getattr(self.lib, "raw", self.lib)        # the SimLibrary under the ABI check
        raw.sim_register_device_memory(int(ffi.cast("uintptr_t", p)), max(array.nbytes, 1))
        return p

    def host_ptr(self, array: np.ndarray) -> Any:
        """A ``char *`` to a NumPy array's data NOT registered: plain pageable host memory (kept alive)."""
        self.keep.append(array)
        return ffi.cast("char *", ffi.from_buffer(array))

    def channels(self, peers: List[int], notify_num: int = 2,
                 protocol: int = Protocol.HCCS) -> Dict[int, int]:
        descs = make_channel_descs(peers, protocol, notify_num)
        handles = self.b.channel_acquire(self.comm, Engine.CPU_TS, descs, len(peers))
        return dict(zip(peers, handles))

    def close(self) -> None:
        self.b.comm_destroy(self.comm)
        raw = getattr(self.lib, "raw", self.lib)
        for array in self.keep:                          # host_ptr arrays were never registered: no-op
            raw.sim_unregister_device_memory(int(ffi.cast("uintptr_t", ffi.from_buffer(array))))


def error_text(call: Any, *args: Any) -> str:
    """Run a binding call; the HcclError text it raised, or "no error"."""
    from hcomm_cffi.errors import HcclError

    try:
        call(*args)
    except HcclError as exc:
        return str(exc)
    return "no error"


def open_rank(rank: int, n: int, root: bytes) -> RankEnv:
    """Create the world communicator of this rank on the emulator."""
    lib = load("sim")   # ABI-checked when HCOMM_SIM_ABI_CHECK=1 (the test default)
    b = Binding(lib)
    b.set_device(rank % 16)
    comm = b.comm_init_root_info(n, root, rank)
    stream = b.create_stream()
    env = RankEnv(b, lib, comm, rank, n, stream)
    env.buf, env.buf_size = b.get_hccl_buffer(comm)
    return env


def open_single_rank() -> RankEnv:
    """A one-rank world communicator on device 0 of the emulator (its own root info)."""
    b = Binding(load("sim"))
    b.set_device(0)
    return open_rank(0, 1, b.get_root_info())
