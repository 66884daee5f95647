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
