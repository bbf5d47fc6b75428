"""Every file and directory the package creates, made so that no other local user can redirect it.

Another user must never make a job of ours write through a path they control: a symbolic link
planted where a ring, a trace or a log will be created (a root job would then overwrite a file of the
attacker's choosing), a directory of theirs we would write into, or a directory they can write that
we would trust.  So:

* :func:`checked_dir` is the one check of a directory the package writes into (rendezvous, flight
  recorder, trace, ledger, profiler, build outputs): created ``0700`` when missing, and refused when it
  is a symbolic link or not a directory, owned by another user, or writable by others without the
  sticky bit (``private``: open to others at all); its ancestors must be this user's or root's and
  writable by nobody else unless sticky (as ``/tmp``), so nobody can swap it for another after the check.
* :func:`create_file` creates a file exclusively (``O_CREAT|O_EXCL|O_NOFOLLOW``); ``replace`` first
  removes an older file of this user's under that name (never another user's entry, never through a link).
* :func:`open_own` opens a file to append to, a log or a lock (``O_NOFOLLOW``; refused unless it is this user's
  regular file of one name).
* :func:`write_atomically` writes a whole file under a random temporary name and renames it into place.
* :func:`reserve` allocates a file's blocks now (``posix_fallocate``), so that a mapped file never
  meets a full file system at its first touch (SIGBUS) but fails here, with the bytes needed and free.

Errors are :class:`UnsafePath` (a ``ValueError``) naming what the path is for (a setting's name, an
option), the path and the problem.  Imports nothing from the package.
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from typing import List, Optional, Tuple, Union

__all__ = ["UnsafePath", "checked_dir", "own_dirs", "create_file", "open_own", "write_atomically", "reserve", "free_bytes",
           "NoSpace"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class UnsafePath(ValueError):
    """A path the package refuses to write through; the text names what it is for, the path and the problem."""


class NoSpace(OSError):
    """:func:`reserve` could not allocate a file's blocks; the text names the directory, bytes needed and free."""


def _named(what: str, path: str) -> str:
    """``NAME='path'`` for a setting or an option, ``what 'path'`` for a description."""
    return f"{what}={path!r}" if what.isupper() or what.startswith("-") else f"{what} {path!r}"


def _trusted_owner(uid: int) -> bool:
    return uid in (os.getuid(), 0)


def _others_can_write(mode: int) -> bool:
    return bool(mode & (stat.S_IWGRP | stat.S_IWOTH)) and not mode & stat.S_ISVTX


def _check_ancestors(path: str, what: str, start: Optional[str] = None) -> None:
    """Every directory above ``path`` (links resolved; from ``start``, the nearest one that exists, when given) is this
    user's or root's and not writable by others unless sticky: nobody else can rename ``path`` away and put a link of
    theirs in its place."""
    current = os.path.realpath(start or os.path.dirname(path) or ".")
    while True:
        st = os.stat(current)
        if not _trusted_owner(st.st_uid) or _others_can_write(st.st_mode):
            owner = f"owned by uid {st.st_uid}" if not _trusted_owner(st.st_uid) else (
                f"mode {stat.S_IMODE(st.st_mode):o}, writable by other users without the sticky bit")
            raise UnsafePath(f"{_named(what, path)}: its parent directory {current} is {owner}: another user could "
                             "replace the directory; expected a path whose parents only this user or root can change")
        if current == os.path.dirname(current):
            return
        current = os.path.dirname(current)


def checked_dir(path: str, what: str, private: bool = False, create: bool = True, mode: int = 0o700) -> str:
    """``path`` (absolute) as a directory this package may write into; :class:`UnsafePath` naming ``what`` otherwise.

    Created (``mode``, with missing parents) when ``create``.  Refused: a symbolic link or not a directory, another
    user's directory, a directory others can write without the sticky bit, with ``private`` one open to other users
    at all, or one whose parents another user can change.
    """
    path = os.path.abspath(path)
    if create:
        existing = path
        while not os.path.lexists(existing):
            existing = os.path.dirname(existing)
        if existing != path:      # nothing is created inside a directory another user controls (root writes anywhere)
            _check_ancestors(path, what, start=existing)
        try:
            os.makedirs(path, mode=mode)
        except FileExistsError:
            pass
        except OSError as exc:
            raise UnsafePath(f"{_named(what, path)}: cannot create the directory: {exc.strerror}; expected a directory "
                             "this user can create or owns") from None
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise UnsafePath(f"{_named(what, path)}: {exc.strerror}; expected an existing directory of this user") from None
    me = os.getuid()
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{_named(what, path)} is not a directory (a symbolic link or a file): refusing it; remove it "
                         "or choose another")
    if st.st_uid != me:
        raise UnsafePath(f"{_named(what, path)} is owned by uid {st.st_uid}, not by this user (uid {me}): refusing a "
                         f"directory another user controls; remove it or choose another {what}")
    perms = stat.S_IMODE(st.st_mode)
    if private and perms & 0o077:
        raise UnsafePath(f"{_named(what, path)} has mode {perms:o}, open to other users: expected 700 "
                         f"(chmod 700 {path})")
    if _others_can_write(st.st_mode):
        raise UnsafePath(f"{_named(what, path)} has mode {perms:o}: other users can write it (and it has no sticky "
                         f"bit); expected a directory only this user can write (chmod go-w {path})")
    _check_ancestors(path, what)
    return path


def own_dirs(base: str, prefix: str, private: bool = False) -> List[Tuple[float, str]]:
    """``(mtime, path)`` of the directories in ``base`` named ``prefix...`` that are this user's (and, with
    ``private``, that no one else may enter), sorted by name; links and other users' entries are passed over."""
    try:
        with os.scandir(base) as entries:
            names = sorted(e.name for e in entries if e.name.startswith(prefix))
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not (private and st.st_mode & 0o077):
            found.append((st.st_mtime, path))
    return found


def create_file(path: str, replace: bool = False, mode: int = 0o600, read: bool = True) -> int:
    """A new file at ``path``, opened read-write (``read``) or write-only; never through a symbolic link.

    ``replace``: an older regular file of this user's under that name is removed first (another user's entry, a
    link or a directory is refused); otherwise an existing name raises FileExistsError.
    """
    flags = (os.O_RDWR if read else os.O_WRONLY) | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    for _ in range(8):
        try:
            return os.open(path, flags, mode)
        except FileExistsError:
            if not replace:
                raise
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file" if not stat.S_ISREG(
                st.st_mode) else f"owned by uid {st.st_uid}"
            raise UnsafePath(f"{path!r} exists and is {kind}: refusing to replace an entry that is not this user's "
                             "file; remove it")
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    raise FileExistsError(errno.EEXIST, f"{path}: keeps reappearing")


def open_own(path: str, what: str) -> int:
    """``path`` opened to append (created ``0600`` if missing: a log, a lock file); UnsafePath naming ``what`` unless
    it is this user's regular file of one name (never through a symbolic link, never a hard link to another file)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o600)
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP or os.path.islink(path) else exc.strerror
        raise UnsafePath(f"{_named(what, path)}: cannot open it to append: {why}; expected a file of this user "
                         "in a directory it can write") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_nlink > 1:
        os.close(fd)
        kind = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"owned by uid {st.st_uid}" if (
            st.st_uid != os.getuid()) else f"a file with {st.st_nlink} names (hard links)"
        raise UnsafePath(f"{_named(what, path)} is {kind}: refusing to write into a file that is not this user's; "
                         "remove it or choose another")
    return fd


def write_atomically(path: str, data: Union[str, bytes], mode: int = 0o644) -> str:
    """Write ``data`` as the whole of ``path``: a random temporary name beside it (``O_EXCL``), then a rename (which
    replaces a link planted at ``path``, never follows it).  Readers never see half a file.  Returns ``path``."""
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def free_bytes(directory: str) -> Optional[int]:
    """Bytes this user may still allocate in ``directory``'s file system (None when it cannot be asked)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def reserve(fd: int, size: int, directory: str, what: str, settings_hint: str = "") -> None:
    """Allocate ``size`` bytes of the file ``fd`` (in ``directory``) now; :class:`NoSpace` naming the directory, the
    bytes needed and free, and ``settings_hint`` when the file system cannot hold them."""
    if size <= 0:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EFBIG, errno.ENOMEM, errno.EDQUOT):
            raise
        free = free_bytes(directory)
        have = f"{free} bytes ({free / (1 << 20):.1f} MiB) free" if free is not None else "the free space unknown"
        raise NoSpace(f"cannot reserve {size} bytes ({size / (1 << 20):.1f} MiB) for {what} in "
                                 f"{directory}: {exc.strerror}, {have}" + (f"; {settings_hint}" if settings_hint
                                                                           else "")) from None
