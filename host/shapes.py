"""Attribute arithmetic the host compiler and graph_pack share: strides and dilations as pairs, padding as
(top, left, bottom, right), a pooling window's output size, a packed layout's block factors (Relay's conventions,
graph_pack/opdefs.py)."""

from __future__ import annotations

import math
import re

import numpy as np


def pair(v, what: str) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise ValueError(f"{what} needs 1 or 2 values, got {v}")
    return v  # type: ignore[return-value]


def quad(v, what: str) -> tuple[int, int, int, int]:
    """Padding as (top, left, bottom, right) from 1, 2 (h, w) or 4 values."""
    if isinstance(v, (int, np.integer)):
        return (int(v),) * 4  # type: ignore[return-value]
    v = tuple(int(x) for x in v)
    if len(v) == 2:
        return v[0], v[1], v[0], v[1]
    if len(v) != 4:
        raise ValueError(f"{what} needs 1, 2 or 4 values, got {v}")
    return v  # type: ignore[return-value]


_PACKED = re.compile(r"^(NCHW|NC|OIHW|OI|BNC|BOI)(\d+)([no])(\d+)([ci])$")


def packed_factors(layout: str) -> tuple[int, int] | None:
    """(outer factor, inner factor) of a packed layout such as NCHW1n16c or OIHW16o16i; None if unpacked."""
    m = _PACKED.match(layout)
    return (int(m.group(2)), int(m.group(4))) if m else None


def pool_out(size: int, k: int, s: int, p0: int, p1: int, ceil_mode: bool) -> int:
    if not ceil_mode:
        return (size + p0 + p1 - k) // s + 1
    out = math.ceil((size + p0 + p1 - k) / s) + 1
    if (out - 1) * s >= size + p0:  # the last window must start inside the input or its left padding
        out -= 1
    return out
