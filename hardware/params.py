"""Every number the RTL needs, derived from one ``HwConfig`` (no widths are written anywhere else in hardware/).

Field positions and widths come from ``cfg.insn_formats`` (hw_config/layout.py), routing and token queues from
hw_config/isa_rules.py; this module only adds the RTL's own choices (the DRAM port's address width, how many
reads a DMA engine keeps in flight, the instruction prefetch depth) and names the SRAM shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from hw_config import HwConfig
from hw_config.layout import INSN_BITS, MEM_TYPES, Format

# The RTL's own parameters (not part of the ISA).
DRAM_ADDR_BITS = 64          # byte address on the DRAM port (AXI4 allows 64)
MAX_OUTSTANDING = 32         # read beats one DMA engine keeps in flight
FETCH_BUFFER = 16            # instructions fetch prefetches ahead of dispatch
REG_DATA_BITS = 32           # the AXI-lite register bus


def log2(n: int) -> int:
    """log2 of a power of two (every width and depth of a valid config is one)."""
    if n <= 0 or n & (n - 1):
        raise ValueError(f"{n} is not a power of two")
    return n.bit_length() - 1


@dataclass(frozen=True)
class Sram:
    """One on-chip buffer: ``depth`` entries of ``width`` bits, indexed by ``addr_bits``-bit addresses."""

    name: str
    depth: int
    width: int

    @property
    def addr_bits(self) -> int:
        return log2(self.depth)


class RtlParams:
    """A config's numbers as the RTL generator uses them."""

    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        self.bus_bits = cfg.BUS_WIDTH
        self.insn_bits = INSN_BITS
        self.acc_width = cfg.ACC_WIDTH
        self.inp_width = cfg.INP_WIDTH
        self.wgt_width = cfg.WGT_WIDTH
        self.out_width = cfg.OUT_WIDTH
        self.batch = cfg.BATCH
        self.block_in = cfg.BLOCK_IN
        self.block_out = cfg.BLOCK_OUT

    def fmt(self, name: str) -> Format:
        """An instruction format ('mem', 'gemm', 'alu', 'finish') or the micro-op format ('uop')."""
        return self.cfg.insn_formats[name]

    @cached_property
    def srams(self) -> dict[str, Sram]:
        c = self.cfg
        return {"uop": Sram("uop", c.UOP_BUFF_DEPTH, c.UOP_ELEM_BITS),
                "inp": Sram("inp", c.INP_BUFF_DEPTH, c.INP_ELEM_BITS),
                "wgt": Sram("wgt", c.WGT_BUFF_DEPTH, c.WGT_ELEM_BITS),
                "acc": Sram("acc", c.ACC_BUFF_DEPTH, c.ACC_ELEM_BITS)}

    def dram_elem_bits(self, mem_type: str) -> int:
        """Bits of one DRAM element of a memory type (the unit of dram_base and x_stride)."""
        return self.cfg.elem_bytes(MEM_TYPES[mem_type]) * 8

    @property
    def acc_lanes(self) -> int:
        return self.batch * self.block_out

    @property
    def reg_addr_bits(self) -> int:
        """Byte offsets from MMIO_BASE across the four register blocks."""
        return (4 * self.cfg.MMIO_RANGE - 1).bit_length()
