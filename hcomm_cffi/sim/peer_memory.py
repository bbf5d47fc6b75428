"""Device memory the peers map: aclrtMalloc blocks backed by a memfd, and the peers' blocks mapped here.

On a device the collectives read and write the peers' HBM over the links; here a rank's device memory is
memory of its process.  A block aclrtMalloc makes is a memfd mapped shared (:func:`allocate`), so a peer can
map the same pages: it opens ``/proc/<pid>/fd/<fd>`` of the owner (the ptrace read check: same user) and maps
it (:class:`PeerMappings`).  The native collectives of large messages (sim/native.py, ``direct``) then read
the peers' operands and write their results where they are: one pass over memory instead of staging through
the native scratch.  A block that is not memfd-backed (no memfd here, or memory not from aclrtMalloc) is
staged by its own rank.
"""
from __future__ import annotations

import bisect
import mmap
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

import cffi

from .errors import ACL_ERROR_RT_INTERNAL_ERROR, HcclResult

__all__ = ["allocate", "register", "release", "released", "locate", "PeerMappings", "PeerMapError", "BLOCK_FIELDS"]

_libc_ffi = cffi.FFI()
_libc_ffi.cdef("void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);"
               "int munmap(void *addr, size_t length);")
_libc = _libc_ffi.dlopen(None)
_PROT_RW, _MAP_SHARED, _MAP_FAILED = 3, 0x01, 2**64 - 1

#: what a rank publishes of a block holding an operand: (pid, fd, inode, block size, offset in the block)
BLOCK_FIELDS = 5
#: peer blocks kept mapped per communicator; the least recently used beyond this are unmapped
MAPPINGS_MAX = 32
#: blocks from this size are memfd-backed (each holds two descriptors: its memfd and the mapping's); the direct
#: collectives start at 256 KiB, smaller operands are staged
SHARED_FROM = 64 << 10

_lock = threading.Lock()
_starts: List[int] = []                          # sorted starts of this process's memfd blocks
_blocks: Dict[int, Tuple[int, int, int]] = {}    # start -> (size, fd, inode)
_released = [0]                                  # blocks this process has freed so far (PeerMappings.address)


def _blocks_max() -> int:
    """How many memfd blocks may be live at once: a quarter of the descriptor limit (each block holds two), so the
    program keeps most of its descriptors; blocks beyond it are anonymous (their collectives stage them)."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY:
            soft = 1 << 20
    except (ImportError, OSError, ValueError):
        soft = 1024
    return max(0, soft // 4)


_BLOCKS_MAX = _blocks_max()


def allocate(size: int) -> Tuple[mmap.mmap, Optional[int]]:
    """A shared mapping of ``size`` bytes backed by a memfd (peers can map it), and the memfd; for small blocks,
    beyond ``_BLOCKS_MAX`` live blocks, or where memfd is not available, an anonymous mapping and None.  The caller
    registers the mapping's address (:func:`register`)."""
    memfd = getattr(os, "memfd_create", None)
    if memfd is None or size < SHARED_FROM or len(_blocks) >= _BLOCKS_MAX:
        return mmap.mmap(-1, size), None
    try:
        fd = memfd("hcomm-sim-device", os.MFD_CLOEXEC)
    except OSError:                      # out of descriptors, or a kernel without memfd: not shareable
        return mmap.mmap(-1, size), None
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size), fd
    except OSError:                      # the mapping's own descriptor (mmap dups it) or the memory: anonymous
        os.close(fd)
        return mmap.mmap(-1, size), None
    except BaseException:
        os.close(fd)
        raise


def register(start: int, size: int, fd: Optional[int]) -> None:
    """Record the block at ``start`` made by :func:`allocate` (``fd`` None: nothing to record)."""
    if fd is None:
        return
    ino = os.fstat(fd).st_ino
    with _lock:
        bisect.insort(_starts, start)
        _blocks[start] = (size, fd, ino)


def release(start: int) -> None:
    """Forget the block at ``start`` and close its memfd (its pages live on while a peer still maps them)."""
    with _lock:
        block = _blocks.pop(start, None)
        if block is None:
            return
        del _starts[bisect.bisect_left(_starts, start)]
        _released[0] += 1
    os.close(block[1])


def released() -> int:
    """How many memfd blocks this process has freed (published with its operands: peers drop stale mappings)."""
    return _released[0]


def locate(addr: int, nbytes: int) -> Optional[Tuple[int, int, int, int, int]]:
    """(pid, fd, inode, block size, offset) of the memfd block holding [addr, addr+nbytes), or None."""
    with _lock:
        i = bisect.bisect_right(_starts, addr) - 1
        if i < 0:
            return None
        start = _starts[i]
        size, fd, ino = _blocks[start]
    if addr + nbytes > start + size:
        return None
    return os.getpid(), fd, ino, size, addr - start


class PeerMapError(Exception):
    """A peer's block could not be mapped here (code and text for the failing task)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = HcclResult.E_INTERNAL
        self.acl_code = ACL_ERROR_RT_INTERNAL_ERROR
        self.message = message


class PeerMappings:
    """The peers' blocks this communicator has mapped: (pid, inode) -> (address, size), least recently used first."""

    def __init__(self) -> None:
        self._maps: Dict[Tuple[int, int], Tuple[int, int]] = {}
        self._releases: Dict[int, int] = {}     # pid -> the owner's count of freed blocks when last seen

    def address(self, pid: int, fd: int, ino: int, size: int, releases: int) -> int:
        """Where the peer ``pid``'s block (``fd``, ``ino``, ``size``) is mapped here, mapping it on first use.

        ``releases``: how many blocks the owner has freed so far; when it changed, the owner's other blocks
        mapped here are unmapped (they may be freed: their pages would stay alive only through this mapping).
        """
        key = (pid, ino)
        if self._releases.get(pid, releases) != releases:
            for other in [k for k in self._maps if k[0] == pid and k != key]:
                self._unmap(other)
        self._releases[pid] = releases
        hit = self._maps.pop(key, None)
        if hit is None:
            hit = (self._map(pid, fd, ino, size), size)
            while len(self._maps) >= MAPPINGS_MAX:
                self._unmap(next(iter(self._maps)))
        self._maps[key] = hit                    # most recently used last
        return hit[0]

    @staticmethod
    def _map(pid: int, fd: int, ino: int, size: int) -> int:
        path = f"/proc/{pid}/fd/{fd}"
        try:
            mine = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise PeerMapError(f"cannot open {path}, the device memory of the rank in process {pid}: "
                               f"{exc.strerror}; the ranks of a communicator must run as one user on one host "
                               "(/proc mounted without hidepid)") from None
        try:
            st = os.fstat(mine)
            if st.st_ino != ino or st.st_size < size:
                raise PeerMapError(f"{path} is not the device memory block process {pid} published (inode "
                                   f"{st.st_ino} of {st.st_size} bytes, expected {ino} of {size}): it was freed "
                                   "during the collective")
            got = _libc.mmap(_libc_ffi.NULL, size, _PROT_RW, _MAP_SHARED, mine, 0)
            at = int(_libc_ffi.cast("uintptr_t", got))
            if at == _MAP_FAILED:
                raise PeerMapError(f"cannot map {size} bytes of {path}: {os.strerror(_libc_ffi.errno)}")
            return at
        finally:
            os.close(mine)

    def _unmap(self, key: Tuple[int, int]) -> None:
        at, size = self._maps.pop(key)
        _libc.munmap(_libc_ffi.cast("void *", at), size)

    def close(self) -> None:
        """Unmap every peer block (the communicator is destroyed)."""
        for key in list(self._maps):
            self._unmap(key)
        self._releases.clear()
