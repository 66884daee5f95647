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
def file_lock(path: str | os.PathLike, busy: Callable[[str], None]) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if missing, never truncated) while the body runs. When
    another process holds it, ``busy(path)`` is called first: it raises to refuse, or returns to wait for the lock.
    The lock ends with the process, however it ends, and processes forked meanwhile do not hold it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            busy(os.fspath(path))
            fcntl.flock(fd, fcntl.LOCK_EX)
        _HELD.add(fd)
        yield
    finally:
        _HELD.discard(fd)
        os.close(fd)


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
