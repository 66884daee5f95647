"""How Yosys maps a memory to block RAM, distributed (LUT) RAM or flip-flops: the cost model of its
``memory_libmap`` pass, for the memories the generator writes (one synchronous write port with a whole-word
enable, ``reads`` read ports, synchronous (``transparent`` of them transparent to the write port) or all
asynchronous, no initial contents), with the Xilinx libraries ``synth_xilinx`` passes it (share/xilinx/brams_xc4v.txt with the family's
defines, lutrams_xc5v.txt or lutrams_xcu.txt).

Per candidate RAM (each option of each library RAM), memory_libmap tries every base width and keeps the cheapest
geometry; across candidates, the cheapest wins if it is cheaper than ``width x depth`` flip-flops. The cost of a
geometry: ``(cost - widthscale) * cells * port_replicas + widthscale * rows * width // unit * port_replicas``, plus
half a point per read-mux input bit and per write-demux output when the depth needs several rows of cells, plus
two points per emulation point (one per read port, three more per transparent read port, as block RAMs give the
old value across ports). Cells: ``rows * ceil(swizzled_width / unit)``, where the word is padded to whole 9-bit
bytes on block RAMs. Checked against Yosys's own mapping on a grid of shapes by bench/fpga_memory_check.py and on
whole designs by the committed synthesis samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FAMILIES = ("xc7", "xcup")
FACTOR_MUX = 0.5
FACTOR_DEMUX = 0.5
FACTOR_EMU = 2


@dataclass(frozen=True)
class MemShape:
    """A memory as the generator writes it."""

    name: str
    depth: int
    width: int
    reads: int = 1               # read ports (each needs its own copy of a block RAM)
    transparent: int = 0         # of which transparent to the write port (emulated in logic on block RAM)
    sync: bool = True            # synchronous reads (registered); asynchronous ones exclude block RAM


@dataclass(frozen=True)
class RamOption:
    """One option of one library RAM: ``abits`` address bits at width index 0, the widths it offers, cost."""

    name: str                    # e.g. "SDP FULL" or "LUTRAM QP 6"
    kind: str                    # "block" or "distributed"
    abits: int
    dbits: tuple[int, ...]
    cost: int
    widthscale: int
    read_slots: int              # read ports one copy serves (the write port has its own)
    byte: int = 0                # write-enable granularity (9 on block RAM)
    primitive: str = ""          # the cell a block RAM option becomes (RAMB18/RAMB36, family suffix added)
    cascade: int = 1             # block RAM primitives per cell (a cascaded pair)


def _bram_options(family: str) -> list[RamOption]:
    suffix = "E1" if family == "xc7" else "E2"
    tdp = [RamOption("TDP HALF", "block", 14, (1, 2, 4, 9, 18), 129, 0, 1, 9, "RAMB18" + suffix),
           RamOption("TDP FULL", "block", 15, (1, 2, 4, 9, 18, 36), 257, 0, 1, 9, "RAMB36" + suffix)]
    if family == "xc7":   # HAS_CASCADE
        tdp.append(RamOption("TDP CASCADE", "block", 16, (1, 2, 4, 9), 513, 0, 1, 9, "RAMB36" + suffix, 2))
    sdp = [RamOption("SDP HALF", "block", 14, (1, 2, 4, 9, 18, 36), 129, 0, 1, 9, "RAMB18" + suffix),
           RamOption("SDP FULL", "block", 15, (1, 2, 4, 9, 18, 36, 72), 257, 0, 1, 9, "RAMB36" + suffix)]
    return tdp + sdp


# (ABITS, width) per option and the LUTs of one cell, per family. SP needs its one port for the write, so it
# serves no separate read port; it never maps these memories.
_LUTRAMS = {
    "xc7": {"DP": (8, 8, 1, {5: (4, 4), 6: (2, 2), 7: (1, 4)}),
            "QP": (7, 7, 3, {5: (2, 4), 6: (1, 4)}),
            "SDP": (8, 7, 1, {5: (6, 4), 6: (3, 4)})},
    "xcup": {"DP": (16, 16, 1, {5: (8, 8), 6: (4, 8), 7: (2, 8), 8: (1, 8)}),
             "QP": (16, 16, 3, {5: (4, 8), 6: (2, 8)}),
             "OP": (16, 16, 7, {5: (2, 8), 6: (1, 8)}),
             "SDP": (16, 16, 1, {5: (14, 8), 6: (7, 8)})},
}


def _lutram_options(family: str) -> list[RamOption]:
    out = []
    for name, (cost, widthscale, slots, widths) in _LUTRAMS[family].items():
        for abits, (width, _) in widths.items():
            out.append(RamOption(f"LUTRAM {name} {abits}", "distributed", abits, (width,), cost, widthscale, slots))
    return out


def _lutram_luts(option: RamOption, family: str) -> int:
    """LUTs of one distributed-RAM cell of ``option`` (lutrams_xc5v_map.v: a RAM32M/RAM64M is 4 LUTs, a
    RAM32M16/RAM64M8 8; options that map bit by bit use one RAM64X1D (2 LUTs) or RAM128X1D (4) per bit ...)."""
    _, kind, abits = option.name.split()
    width, luts = _LUTRAMS[family][kind][3][int(abits)]
    per_bit = {("DP", 6, "xc7"): 2, ("DP", 7, "xc7"): 4}.get((kind, int(abits), family))
    return width * per_bit if per_bit else luts


@dataclass(frozen=True)
class MemMapping:
    """Where a memory goes and what it takes."""

    shape: MemShape
    kind: str                    # "block", "distributed" or "logic"
    option: str                  # the library option chosen ("SDP HALF", "LUTRAM SDP 5", "logic")
    bram36: int = 0
    bram18: int = 0
    lut: int = 0                 # LUTs as distributed RAM
    ff: int = 0                  # flip-flops: a memory left to logic, distributed RAM's read registers, block
                                 # RAM's transparency registers
    cost: float = 0.0


def _emulation(shape: MemShape) -> int:
    """memory_libmap's emulation score: a point per read port not shared with the write port (a tiebreaker), three
    per transparent read port (soft transparency logic; an asynchronous read has no transparency to keep)."""
    return shape.reads + (3 * shape.transparent if shape.sync else 0)


def _geometry(shape: MemShape, opt: RamOption) -> tuple[float, int]:
    """(cost, cells per port copy) of the cheapest base width for ``opt`` (memory_libmap's handle_geom for
    ports that are not wide)."""
    best: tuple[float, int] | None = None
    for base, unit in enumerate(opt.dbits):
        eb = opt.byte if 0 < opt.byte <= unit else unit
        swizzle = math.ceil(shape.width / eb) * eb
        addrs = 1 << (opt.abits - base)
        rows = (shape.depth - 1) // addrs + 1
        cells = -(-rows * swizzle // unit)
        replicas = -(-shape.reads // opt.read_slots)
        cost = float((opt.cost - opt.widthscale) * cells * replicas)
        cost += opt.widthscale * rows * shape.width // unit * replicas
        if rows != 1:
            cost += FACTOR_MUX * (rows - 1) * shape.width * shape.reads + FACTOR_DEMUX * rows
        cost += FACTOR_EMU * _emulation(shape)
        if best is None or cost < int(best[0]):      # Yosys keeps the running best as an int
            best = (cost, cells)
    assert best is not None
    return best


def map_memory(shape: MemShape, family: str) -> MemMapping:
    """The mapping Yosys's memory_libmap chooses for ``shape`` on ``family`` (xc7 or xcup, without URAM)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown Yosys family {family!r}; allowed: {', '.join(FAMILIES)}")
    if shape.depth < 1 or shape.width < 1 or shape.reads < 1:
        raise ValueError(f"memory {shape.name}: depth, width and read ports must be positive ({shape})")
    best_by_kind: dict[str, tuple[float, RamOption, int]] = {}
    order = []
    options = _lutram_options(family) + (_bram_options(family) if shape.sync else [])
    for opt in options:
        cost, cells = _geometry(shape, opt)
        held = best_by_kind.get(opt.kind)
        if held is None:
            order.append(opt.kind)
        if held is None or cost < held[0]:
            best_by_kind[opt.kind] = (cost, opt, cells)
    logic = shape.width * shape.depth
    chosen: tuple[float, RamOption, int] | None = None
    best = float(int(logic))
    for kind in order:
        cost, opt, cells = best_by_kind[kind]
        if cost < best:
            chosen, best = (cost, opt, cells), cost
    if chosen is None:
        return MemMapping(shape, "logic", "logic", ff=logic, cost=logic)
    cost, opt, cells = chosen
    replicas = -(-shape.reads // opt.read_slots)
    total = cells * replicas
    if opt.kind == "distributed":      # asynchronous reads: each synchronous read port keeps a data register
        return MemMapping(shape, "distributed", opt.name, lut=total * _lutram_luts(opt, family),
                          ff=shape.width * shape.reads if shape.sync else 0, cost=cost)
    n = total * opt.cascade
    # a transparent read port on block RAM is emulated: the written word and an address match, registered
    bypass = (shape.width + 1) * shape.transparent
    if opt.primitive.startswith("RAMB36"):
        return MemMapping(shape, "block", opt.name, bram36=n, ff=bypass, cost=cost)
    return MemMapping(shape, "block", opt.name, bram18=n, ff=bypass, cost=cost)
