"""Bookkeeping of mapped DRAM regions by physical byte address (shared by both simulators)."""

from __future__ import annotations

import bisect

from hw_config.checks import is_whole
from simulator.errors import MemoryAccessError

PAGE_BYTES = 4096
MAX_ADDRESS = 1 << 48


class AddressSpace:
    """Non-overlapping regions ``[base, base + size)``; page 0 is never handed out so 0 can mean null."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._sizes: dict[int, int] = {}

    def regions(self) -> list[tuple[int, int]]:
        return [(b, self._sizes[b]) for b in self._bases]

    def reserve(self, base: int, size: int) -> None:
        """Map a region at an exact address (refused if it overlaps another or is empty)."""
        if not isinstance(base, int) or not isinstance(size, int) or base < 0 or size <= 0 \
                or base + size > MAX_ADDRESS:
            raise MemoryAccessError(f"cannot map {size} bytes at 0x{base:x}: need size > 0 and "
                                    f"0 <= address < 2^48")
        i = bisect.bisect_left(self._bases, base)
        if i > 0 and self._bases[i - 1] + self._sizes[self._bases[i - 1]] > base:
            prev = self._bases[i - 1]
            raise MemoryAccessError(f"cannot map [0x{base:x}, 0x{base + size:x}): overlaps region "
                                    f"[0x{prev:x}, 0x{prev + self._sizes[prev]:x})")
        if i < len(self._bases) and base + size > self._bases[i]:
            nxt = self._bases[i]
            raise MemoryAccessError(f"cannot map [0x{base:x}, 0x{base + size:x}): overlaps region "
                                    f"[0x{nxt:x}, 0x{nxt + self._sizes[nxt]:x})")
        self._bases.insert(i, base)
        self._sizes[base] = size

    def place(self, size: int) -> int:
        """First fit: the lowest page-aligned address from page 1 up where ``size`` bytes fit."""
        if not is_whole(size) or size <= 0:
            raise MemoryAccessError(f"cannot allocate {size!r} bytes: need a positive integer")
        size = int(size)
        need = -(-size // PAGE_BYTES) * PAGE_BYTES
        cand = PAGE_BYTES
        for b in self._bases:
            if cand + need <= b:
                break
            cand = max(cand, -(-(b + self._sizes[b]) // PAGE_BYTES) * PAGE_BYTES)
        self.reserve(cand, need)
        return cand

    def size_of(self, base: int) -> int:
        return self._sizes[base]

    def release(self, base: int) -> int:
        """Unmap the region starting at ``base``; returns its size."""
        if not is_whole(base) or base not in self._sizes:
            shown = f"0x{base:x}" if is_whole(base) else repr(base)
            raise MemoryAccessError(f"cannot free {shown}: no region starts there")
        self._bases.remove(base)
        return self._sizes.pop(base)

    def locate(self, addr: int, nbytes: int) -> tuple[int, int]:
        """The region holding ``[addr, addr + nbytes)`` entirely, as (base, offset); raises otherwise."""
        if not (is_whole(addr) and is_whole(nbytes)) or addr < 0 or nbytes < 0:
            raise MemoryAccessError(f"DRAM range of {nbytes!r} bytes at {addr!r}: need non-negative integers")
        addr, nbytes = int(addr), int(nbytes)
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0 and nbytes >= 0:
            base = self._bases[i]
            if addr + nbytes <= base + self._sizes[base]:
                return base, addr - base
        raise MemoryAccessError(f"DRAM range [0x{addr:x}, 0x{addr + nbytes:x}) is not inside one mapped region "
                                f"(mapped: {self._describe()})")

    def _describe(self) -> str:
        if not self._bases:
            return "none"
        parts = [f"[0x{b:x}, 0x{b + self._sizes[b]:x})" for b in self._bases[:6]]
        return ", ".join(parts) + (", ..." if len(self._bases) > 6 else "")
