"""The one test of "an integer" for arguments and parsed values across the stack: Python's and numpy's integers
count (numbers.Integral), a bool does not (True is 1 to Python, never a count, size or index here)."""

from __future__ import annotations

import numbers


def is_whole(value: object) -> bool:
    """An integer (numpy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
