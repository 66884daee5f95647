"""Atomic file writes: a temporary file beside the target, then a rename, so no half-written file exists."""

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
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
