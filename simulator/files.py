"""Atomic file writes: a temporary file beside the target, then a rename, so no half-written file exists."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO


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
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {text}: the directory {parent} is not writable")


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write(f)`` on a temporary binary file, fsync it, then rename it to exactly ``path``."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:   # name the file the caller asked for, not our temporary one
        raise OSError(e.errno, f"cannot write {target}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
