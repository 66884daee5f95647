"""Checks of an output path before any work, and a lock that keeps a second process from writing the same output
(the writes themselves, whole or not at all: ``hw_config.writing``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hw_config.locking import file_lock, lock_holder


def check_output_path(path: str | os.PathLike, what: str = "output") -> None:
    """Refuse, before any work, a path a result could not be written to: empty, a directory, in a directory
    that does not exist, or in one this process cannot write. ``what`` names it (e.g. the flag) in the error."""
    text = os.fspath(path)
    if not text:
        raise ValueError(f"{what} '': empty path; give the file to write")
    target = Path(text)
    if target.is_dir():
        raise ValueError(f"{what} {text}: is a directory; give a file name")
    parent = target.parent
    if not parent.is_dir():
        raise ValueError(f"{what} {text}: the directory {parent} does not exist")
    _check_writable(parent, what, text)


def check_output_dir(path: str | os.PathLike, what: str = "output directory",
                     entries: dict[str, str] | None = None) -> None:
    """Refuse, before any work, a directory results could not be written into: empty, an existing file, in a
    directory that does not exist (one level is created, not a chain), not writable, or holding one of
    ``entries`` (name -> "file" or "dir": what will be written there) as the other kind."""
    text = os.fspath(path)
    if not text:
        raise ValueError(f"{what} '': empty path; give the directory to write into")
    target = Path(text)
    if target.exists() and not target.is_dir():
        raise ValueError(f"{what} {text}: is a file; give a directory")
    if not target.exists():
        if not target.parent.is_dir():
            raise ValueError(f"{what} {text}: the directory {target.parent} does not exist")
        _check_writable(target.parent, what, text)
        return
    _check_writable(target, what, text)
    for name, kind in (entries or {}).items():
        entry = target / name
        if entry.exists() and entry.is_dir() != (kind == "dir"):
            raise ValueError(f"{what} {text}: {entry} is a {'directory' if entry.is_dir() else 'file'}, where "
                             f"a {'directory' if kind == 'dir' else 'file'} of that name will be written; move it "
                             f"or give another {what}")


def _check_writable(directory: Path, what: str, text: str) -> None:
    """A file can be created in ``directory`` (tried: permissions alone do not say, e.g. for root or in /proc)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe.", dir=directory)
    except OSError as e:
        raise ValueError(f"{what} {text}: cannot write in the directory {directory} ({e.strerror})") from None
    os.close(fd)
    os.unlink(probe)


@contextlib.contextmanager
def write_lock(path: str | os.PathLike, what: str, hint: str, *, discard_empty: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if missing, never truncated) while the body runs, so that
    two processes never write one output at the same time; when another process holds it, a ValueError at once,
    ``"{what} {path}: another process (pid N) is writing it; {hint}"`` (the pid where the OS says it). The lock ends
    with the process, however it ends (processes it forks meanwhile do not hold it; a killed holder's lock is gone
    with it): ``hw_config.locking.file_lock``, whose ``discard_empty`` this passes on."""
    def refuse(text: str) -> None:
        pid = lock_holder(text)
        raise ValueError(f"{what} {text}: another process{f' (pid {pid})' if pid else ''} is writing it; {hint}")

    with file_lock(path, refuse, discard_empty=discard_empty):
        yield
