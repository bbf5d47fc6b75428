"""Named shared-memory segments in /dev/shm, owned by one process and mapped by its peers.

Names start with :func:`user_prefix` (``hcomm_u<uid>_``): a user lists, sweeps and maps only its own
segments, never another user's, and a peer's segment is mapped only if this user owns the file (a file
planted under one of our names by someone else is refused).

The owner holds an exclusive ``flock`` on its segment for as long as it lives; the kernel drops
the lock when the process dies (even by SIGKILL), so any process can tell a live owner from a
dead one without trusting pids, and stale segments of dead jobs can be swept away.

A segment's memory is allocated when it is created (``posix_fallocate``): a directory that cannot hold
it fails the communicator's init with HCCL_E_MEMORY naming the directory, the bytes needed and free and
the settings that change them, and once created no page of it can be refused later (a tmpfs filled by
anyone after init cannot kill the rank with SIGBUS).

The segments this process created leave /dev/shm however it ends (short of SIGKILL).  ``atexit`` (where
:func:`hcomm_cffi.sim.shutdown` destroys the communicators) does not run in a process started by
multiprocessing (its children end with ``os._exit``) nor in one ended by SIGTERM (torchrun and ``hcomm run``
stop the survivors of a failed rank so).  So with the first segment a process creates, two more hooks are
installed: a ``multiprocessing.util.Finalize`` (run by a multiprocessing child as it exits, also after an
exception) and a SIGTERM hook (:mod:`hcomm_cffi.sigterm`: installed when SIGTERM still has its default action).
They only unlink names: peers keep their mappings and see the owner's lock drop when the process is gone.  Both
also sweep the segments of owners already dead (:func:`sweep_stale`): a peer killed by SIGKILL cannot unlink its
own, and torchrun stops the survivor before its destroy would.
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os
from typing import List, Optional, Set

from .. import files, settings, sigterm
from .._ffi import ffi
from ..flocks import lock_held
from .errors import HcclResult, SimError

SHM_DIR = str(settings.value("HCOMM_SIM_SHM_DIR"))  # read once: segments of one process live in one directory
PREFIX = "hcomm_"
#: what a segment that does not fit names: the settings that change where segments go and how large they are
_SPACE_HINT = ("each rank of a communicator allocates its HCCL buffer (2 x HCCL_BUFFSIZE MiB, or "
               "config.hcclBufferSize) and a scratch area of the same size there at init: lower HCCL_BUFFSIZE, free "
               "space there, or set HCOMM_SIM_SHM_DIR to a larger tmpfs")

__all__ = ["Segment", "owner_alive", "sweep_stale", "unlink_owned", "list_segments", "user_prefix", "check_dir",
           "SHM_DIR", "PREFIX"]


def check_dir() -> None:
    """SimError naming HCOMM_SIM_SHM_DIR when it is not a directory this process can create segments in."""
    what = ("a file" if os.path.exists(SHM_DIR) else "missing") if not os.path.isdir(SHM_DIR) else (
        "not writable by this user" if not os.access(SHM_DIR, os.W_OK | os.X_OK) else "")
    if what:
        raise SimError(HcclResult.E_PARA, f"HCOMM_SIM_SHM_DIR={SHM_DIR!r} is {what}; expected an existing directory "
                                          "this user can write, for the emulator's shared-memory segments (default "
                                          "/dev/shm, a tmpfs)")


def user_prefix() -> str:
    """The name prefix of this user's segments: ``hcomm_u<uid>_`` (other users' segments never match it)."""
    return f"{PREFIX}u{os.getuid()}_"


class Segment:
    """One mapped /dev/shm file; ``ptr`` is a ``char *`` to its first byte in this process."""

    __slots__ = ("name", "path", "size", "owner", "_fd", "_probe", "_mm", "ptr", "addr")

    def __init__(self, name: str, size: int = 0, create: bool = False, keep_fd: bool = False) -> None:
        """Create (and lock) or map an existing segment; ``keep_fd`` keeps a mapped segment's file open so
        :meth:`owner_alive` works after the name is unlinked."""
        self.name = name
        self._probe: Optional[int] = None
        self.path = os.path.join(SHM_DIR, name)
        self.owner = create
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        if create:
            try:
                fd = _create_locked(self.path, size)
            except files.NoSpace as exc:
                raise SimError(HcclResult.E_MEMORY, f"{exc}") from None
            except OSError as exc:
                raise _too_big(exc, name, size) or exc from None
        else:
            fd = os.open(self.path, flags | os.O_NOFOLLOW)
            st = os.fstat(fd)
            if st.st_uid != os.getuid():
                os.close(fd)
                raise SimError(HcclResult.E_PARA,
                               f"segment {self.path} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()}): "
                               "refusing to map memory another user controls")
            size = st.st_size
        self.size = size
        try:
            self._mm: Optional[mmap.mmap] = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException as exc:
            os.close(fd)
            if create:
                os.unlink(self.path)
            if isinstance(exc, OSError):
                raise _too_big(exc, name, size) or exc from None
            raise
        if create:
            self._fd: Optional[int] = fd  # keeps the liveness lock
            _owned(self.path)
        else:
            self._fd = None
            if keep_fd:
                self._probe = fd
            else:
                os.close(fd)
        self.ptr = ffi.cast("char *", ffi.from_buffer(self._mm))
        self.addr = int(ffi.cast("uintptr_t", self.ptr))

    def owner_alive(self) -> bool:
        """True while the creator holds its lock; needs ``keep_fd`` (checks the path otherwise)."""
        if self._probe is None:
            return owner_alive(self.path)
        try:
            fcntl.flock(self._probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True
            raise
        fcntl.flock(self._probe, fcntl.LOCK_UN)
        return False

    def close(self) -> None:
        """Unmap (and, for the owner, drop the lock).  Safe to call twice."""
        if self._probe is not None:
            os.close(self._probe)
            self._probe = None
        if self._mm is None:
            return
        self.ptr = ffi.NULL
        try:
            self._mm.close()
        except BufferError:
            pass  # a view is still alive somewhere; the mapping goes with the process
        self._mm = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def unlink(self) -> None:
        """Remove the name from /dev/shm (mappings stay valid until closed)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        if self.owner:
            _OWNED.discard(self.path)


def _too_big(exc: OSError, name: str, size: int) -> Optional[SimError]:
    """The HCCL_E_MEMORY error for a segment the system cannot hold (ENOMEM, ENOSPC, EFBIG), else None."""
    if exc.errno not in (errno.ENOMEM, errno.ENOSPC, errno.EFBIG):
        return None
    return SimError(HcclResult.E_MEMORY,
                    f"cannot create the {size}-byte shared-memory segment {name} in {SHM_DIR}: {exc.strerror}; "
                    "each rank maps its HCCL buffer (2 x HCCL_BUFFSIZE MiB, or config.hcclBufferSize) and a scratch "
                    "area of the same size: lower HCCL_BUFFSIZE")


def _create_locked(path: str, size: int) -> int:
    """Create ``path`` already locked and sized: it appears under its name only when complete.

    The file is made under a hidden temporary name, locked, sized and allocated, then hard-linked to its
    final name (which fails if the name exists, like O_EXCL).  A sweeper can therefore never see the
    segment of a live process without its lock.
    """
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    fd = files.create_file(tmp)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, size)
        # every page allocated now: a directory too small (or filled later by anyone) fails this call with the
        # bytes needed and free, never a rank with SIGBUS at its first touch of a page the tmpfs cannot hold
        files.reserve(fd, size, directory, f"the shared-memory segment {name}", _SPACE_HINT)
        os.link(tmp, path)
    except BaseException:
        os.close(fd)
        raise
    finally:
        os.unlink(tmp)
    return fd


def owner_alive(path: str) -> bool:
    """True while the process that created ``path`` still holds its lock (i.e. is alive).

    A file this user cannot open (another user's) counts as alive: it is never ours to remove.
    """
    return bool(lock_held(path))


def list_segments(prefix: Optional[str] = None) -> List[str]:
    """Names of this user's segments (``prefix``, default :func:`user_prefix`) currently in the segment dir."""
    start = user_prefix() if prefix is None else prefix
    try:
        return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(start))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []


def _mine(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_uid == os.getuid() and not os.path.islink(path)


def sweep_stale(prefix: Optional[str] = None) -> List[str]:
    """Unlink this user's segments whose owner process is gone; returns the names removed.

    Only files named with this user's prefix, owned by this user and provably dead (no lock holder)
    are removed; anything else (another user's entries, files we cannot open) is left alone.
    """
    removed = []
    for name in list_segments(prefix):
        path = os.path.join(SHM_DIR, name)
        if _mine(path) and not owner_alive(path):
            try:
                os.unlink(path)
                removed.append(name)
            except OSError:
                pass
    return removed


# ---------------------------------------------------------------------- the process's own segments at its exit
_OWNED: Set[str] = set()          # paths of the segments this process created and has not unlinked
_HOOKED_PID: Optional[int] = None  # the process whose hooks are installed (a forked child installs its own)


def _owned(path: str) -> None:
    """Record a segment this process created (installs the exit hooks on the first one)."""
    global _HOOKED_PID
    _OWNED.add(path)
    if _HOOKED_PID != os.getpid():
        _HOOKED_PID = os.getpid()
        import multiprocessing.util

        multiprocessing.util.Finalize(None, unlink_owned, exitpriority=0)
        sigterm.add_hook(unlink_owned)        # with the package's other SIGTERM hooks (the flight recorder's dump)


def unlink_owned() -> None:
    """Unlink every segment this process still owns, then those of dead owners (names only; safe at any point
    of an exit)."""
    for path in list(_OWNED):
        try:
            os.unlink(path)
        except OSError:
            pass
        _OWNED.discard(path)
    try:
        sweep_stale()
    except Exception:
        pass


def _after_fork() -> None:
    """A forked child owns none of its parent's segments (and must never unlink them)."""
    global _HOOKED_PID
    _OWNED.clear()
    _HOOKED_PID = None


os.register_at_fork(after_in_child=_after_fork)
