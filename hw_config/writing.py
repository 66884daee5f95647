"""Whole-file writes: a temporary file of its own beside the target, fsynced, then a rename, so that no reader (nor a
second process writing the same file) ever sees it half-written. The bottom layer's, for every package above it:
the simulator's outputs, the RTL and synthesis caches, the board's bitstreams."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO


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


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """``text`` (UTF-8) into ``path`` whole: ``write_atomic``."""
    write_atomic(path, lambda f: f.write(text.encode()))
