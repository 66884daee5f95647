"""Bounded reads of files someone else may have written (a config, a search space, records, measurements): a
file is refused by its size before it is read, and a JSON-lines file is read a bounded piece at a time, so no
file, however large (an 8 GB sparse file, ``/dev/zero``), holds more than its bound in memory."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import IO


def read_bounded(path: str | os.PathLike, max_bytes: int, what: str, allowed: str) -> bytes:
    """The bytes of ``path``, or ValueError ``"{what}: N bytes; {allowed}"`` when it holds more than
    ``max_bytes``: a regular file by its size before anything is read, anything else (a pipe, a device such as
    /dev/zero) after reading at most ``max_bytes + 1`` bytes. OSError (a missing file) passes through."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISREG(st.st_mode) and st.st_size > max_bytes:
            raise ValueError(f"{what}: {st.st_size:,} bytes; {allowed}")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{what}: more than {max_bytes:,} bytes; {allowed}")
    return data


def regular_file(path: str | os.PathLike, what: str, *, missing_ok: bool = False) -> bool:
    """True when ``path`` is a regular file (a symlink to one counts), before it is opened: a reader of lines
    would never reach the end of a device such as /dev/zero or /dev/urandom, and opening a FIFO blocks.
    ValueError ``"{what} {path}: not a regular file (...)"`` for a directory, device, FIFO or socket; a missing
    path is FileNotFoundError naming it, or False with ``missing_ok``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise FileNotFoundError(f"{what} {os.fspath(path)}: no such file") from None
    except NotADirectoryError:
        if missing_ok:
            return False
        raise FileNotFoundError(f"{what} {os.fspath(path)}: no such file (a part of the path is not a directory)") \
            from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
        raise ValueError(f"{what} {os.fspath(path)}: not a regular file ({kind}); give a file")
    return True


def bounded_lines(f: IO[str], max_bytes: int) -> Iterator[tuple[int, str | None]]:
    """(number from 1, text) per line of the text file ``f``; text is None for a line longer than ``max_bytes``,
    which is passed over in pieces of at most that size (once the caller asks for the next line), never held
    whole."""
    number = 0
    while line := f.readline(max_bytes + 1):
        number += 1
        if len(line) > max_bytes and not line.endswith("\n"):
            yield number, None   # (a reader that stops here reads no further)
            while line and not line.endswith("\n"):   # the rest of the long line, in bounded pieces
                line = f.readline(max_bytes)
        else:
            yield number, line


def no_json_constant(name: str):
    """``json.loads(..., parse_constant=no_json_constant)``: NaN and Infinity are not JSON, so not a number a
    record may hold."""
    raise ValueError(f"{name} is not a JSON number")
