"""A DRAM buffer as every device hands it out (the simulator, the RTL, a Pynq board): its physical byte address
and size. Here, below both ``vta`` and ``hardware``, so that each device shares one definition and one check."""

from __future__ import annotations

from dataclasses import dataclass

from hw_config.checks import is_whole


@dataclass(frozen=True)
class Buffer:
    """A DRAM allocation: its physical byte address and size."""

    addr: int
    nbytes: int

    def elem_offset(self, elem_bytes: int) -> int:
        """The buffer's start in elements of ``elem_bytes`` (the unit of an instruction's dram_base)."""
        if self.addr % elem_bytes:
            raise ValueError(f"buffer at 0x{self.addr:x} is not aligned to {elem_bytes}-byte elements")
        return self.addr // elem_bytes


def alloc_size(nbytes: object) -> int:
    """The byte count a device's ``alloc(nbytes)`` asks for: a whole number >= 0 (a zero-byte buffer still takes one
    byte, so that it has an address of its own); a ValueError naming what was given otherwise."""
    if not is_whole(nbytes) or nbytes < 0:
        raise ValueError(f"alloc(nbytes={nbytes!r}): nbytes must be a whole number of bytes >= 0")
    return int(nbytes)


def checked_buffer(buf: object) -> Buffer:
    """``buf`` if it is a Buffer (what ``free`` and the copies take); a TypeError naming what was given otherwise."""
    if not isinstance(buf, Buffer):
        raise TypeError(f"expected a Buffer from this device's alloc(), got {type(buf).__name__} {buf!r:.60}")
    return buf
