"""Tests that cost at most two LUT levels at any width, for the control paths issue 38 bounds to 8 LUT levels.

An equality test on wide values is a tree of LUTs that ABC, where it sees slack, maps as a chain (one LUT5 per
two bits: nine levels for 18 bits), so the LUT levels of a path through one depend on what else is critical. The
two forms here do not: a flag that is a counter's sign bit (a flip-flop), and an equality made of two comparisons
(each a LUT a bit into a carry chain, which the path analysis crosses without counting: hardware/fpga/levels.py).
"""

from __future__ import annotations

from amaranth import Signal, Value, signed


def sign_counter(name: str, width: int) -> Signal:
    """A signed counter whose sign bit is a flag: loaded with ``n - 2`` and counted down, it is negative on the
    n-th value, so "is this the last" is the counter's top bit."""
    return Signal(signed(width), name=name)


def equal_by_carry(a: Value, b: Value) -> Value:
    """``a == b`` as ``a <= b and b <= a``: two carry chains and one LUT."""
    return (a <= b) & (b <= a)
