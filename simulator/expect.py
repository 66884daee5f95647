"""Compare a run with what it must leave behind: an ``.expect.npz`` (the replay-result format) holding the bytes
the run stores, each at its DRAM address, and VTA's counters (the golden programs' and ``examples/``' files).

A result holds every segment of its image, numbered in the image's order, while an expect file holds only the
stored ranges, numbered on their own: they are matched by address, never by ``seg_<i>``."""

from __future__ import annotations

import numpy as np

from simulator.image import ReplayResult
from simulator.stats import VTA_COUNTERS

MAX_REPORTED = 10   # differences listed; the rest are counted


def _holding(result: ReplayResult, addr: int, nbytes: int) -> np.ndarray | None:
    """The result's bytes at [addr, addr + nbytes), or None when no one segment holds them all."""
    for base, data in result.segments:
        if base <= addr and addr + nbytes <= base + data.size:
            return data[addr - base:addr - base + nbytes]
    return None


def differences(result: ReplayResult, expected: ReplayResult, counters: bool = True) -> list[str]:
    """Every way ``result`` differs from ``expected`` (one line each; [] when it matches): a stored range no
    segment of the result holds, bytes that differ (the first differing address and how many), VTA counters
    that differ (unless ``counters`` is False). Counters the expect file lacks are not compared."""
    found = []
    for addr, want in expected.segments:
        got = _holding(result, addr, want.size)
        if got is None:
            found.append(f"0x{addr:x}..0x{addr + want.size:x} ({want.size} bytes): no segment of the result holds it")
            continue
        wrong = np.flatnonzero(got != want)
        if wrong.size:
            first = int(wrong[0])
            found.append(f"0x{addr:x}..0x{addr + want.size:x}: {wrong.size} of {want.size} bytes differ, the first at "
                         f"0x{addr + first:x} ({int(got[first])} instead of {int(want[first])})")
    for key in VTA_COUNTERS if counters else ():
        if key in expected.stats and result.stats.get(key) != expected.stats[key]:
            found.append(f"counter {key}: {result.stats.get(key)} instead of {expected.stats[key]}")
    return found


def summary(result: ReplayResult, expected: ReplayResult, name: str, counters: bool = True) -> tuple[bool, str]:
    """(matches, the lines to print) for ``vta sim replay --expect`` and ``vta board replay --expect``;
    ``counters=False`` for a device that reports none."""
    found = differences(result, expected, counters)
    stored = sum(data.size for _, data in expected.segments)
    compared = (f"{sum(key in expected.stats for key in VTA_COUNTERS)} VTA counter(s)" if counters else
                "no counters (this device reports none)")
    if not found:
        return True, f"matches {name}: {stored} stored byte(s) in {len(expected.segments)} range(s), {compared}"
    lines = [f"differs from {name} in {len(found)} place(s):", *(f"  {line}" for line in found[:MAX_REPORTED])]
    if len(found) > MAX_REPORTED:
        lines.append(f"  ... and {len(found) - MAX_REPORTED} more")
    return False, "\n".join(lines)
