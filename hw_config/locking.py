"""Locks of the bottom layer, for every package above it: one caller at a time in an object that holds C state
(``serialised``), and one process at a time writing a file or a cache entry (``file_lock``)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

_S = TypeVar("_S")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def serialised(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """A method that holds its object's ``_lock`` (an RLock, so that one locked method may call another) while it
    runs: the simulator and the RTL model are C state behind cffi calls, which release the GIL, and are one
    caller's at a time."""
    @functools.wraps(method)
    def locked(self: Any, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


@contextlib.contextmanager
def file_lock(path: str | os.PathLike, busy: Callable[[str], None], *, discard_empty: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if missing, never truncated) while the body runs. When
    another process holds it, ``busy(path)`` is called first: it raises to refuse, or returns to wait for the lock.
    The lock ends with the process, however it ends (a lock left by a killed process is no lock: the kernel drops
    it), and processes forked meanwhile do not hold it. The lock is on the file ``path`` names when it is taken: one
    renamed or removed meanwhile (a log moved aside, a file this call removed) is let go and ``path`` locked anew.
    ``discard_empty``: a file this call created and that is still empty at the end is removed (so a run stopped
    before its first record leaves no empty log behind)."""
    while True:
        created = not os.path.exists(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                busy(os.fspath(path))
                fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)   # the file was renamed or removed while this process waited: lock the one there now
    try:
        _HELD.add(fd)
        yield
    finally:
        _HELD.discard(fd)
        try:
            if discard_empty and created and os.fstat(fd).st_size == 0 and _same_file(fd, path):
                os.unlink(path)   # (still locked: a process that opened it meanwhile finds it gone and retries)
        except OSError:
            pass
        finally:
            os.close(fd)


def _same_file(fd: int, path: str | os.PathLike) -> bool:
    """Whether ``path`` still names the open file ``fd``."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def lock_holder(path: str | os.PathLike) -> int | None:
    """The process id that holds a ``file_lock`` (an flock) on ``path``, as Linux's /proc/locks shows it; None where
    that is unknown (another OS, a holder in another pid namespace, no lock)."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    by_inode = []
    for line in text.splitlines():
        # "12: FLOCK  ADVISORY  WRITE 8724 fe:00:573469 0 EOF"; a process waiting for it has "->" after the number
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or not fields[4].isdigit():
            continue
        try:
            major, minor, inode = fields[5].split(":")
            where = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        pid = int(fields[4])
        if pid <= 0:
            continue
        if where == want:
            return pid
        if where[2] == st.st_ino:
            by_inode.append(pid)
    # an overlay file system may show another device number than stat: the inode alone, when it is one file's
    return by_inode[0] if len(set(by_inode)) == 1 else None


# A flock belongs to the open file, which a fork shares: a forked worker (vta dse --parallel) would hold the lock on
# after its parent was killed, refusing the rerun until the worker's point was done. Children close their copies.
_HELD: set[int] = set()


def _close_held_in_child() -> None:
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_held_in_child)
