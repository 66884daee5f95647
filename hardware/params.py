"""Every number the RTL needs, derived from one ``HwConfig`` (no widths are written anywhere else in hardware/).

Field positions and widths come from ``cfg.insn_formats`` (hw_config/layout.py), routing and token queues from
hw_config/isa_rules.py; this module only adds the RTL's own choices (the DRAM port's address width, how many
reads a DMA engine keeps in flight, the instruction prefetch depth) and names the SRAM shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from hardware.dsp_packing import Int8Packing, resolve_packing
from hw_config import HwConfig
from hw_config.layout import INSN_BITS, MEM_TYPES, Format

# The RTL's own parameters (not part of the ISA).
DRAM_ADDR_BITS = 64          # byte address on the DRAM port (AXI4 allows 64)
MIN_OUTSTANDING = 32         # beats one DMA engine keeps in flight, at least ...
MAX_OUTSTANDING = 4096       # ... and at most (see RtlParams.outstanding)
REG_DATA_BITS = 32           # the AXI-lite register bus
# The DRAM clients, in the read arbiter's round-robin order; a client's index is its AXI ID (the AXI status
# register names a failing client by it).
DRAM_CLIENTS = ("store", "compute.acc", "compute.acc8", "compute.uop", "load.inp", "load.wgt", "fetch")
# Cycles the RTL's own interconnect adds to a DRAM access (hardware/dram.py Arbiter): a request passes two
# register slices (its client's and the port's), its data or acknowledgement one on the way back. The timing
# model's DRAM_LATENCY is the whole trip from an engine's request to its data, so the DRAM port behind the RTL
# is charged DRAM_LATENCY less these (hardware/device.py DramSettings.for_config).
INTERCONNECT_CYCLES = 3
AXI_PROT_OF_TARGET = {"ultra96": 0b010, "zcu104": 0b010, "de10nano": 0b100}   # VTA's axi_prot_bits; others 0b000


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


# The compute pipeline's shortest depth: micro-op read, SRAM reads, one combinational stage that computes and
# writes (COMPUTE_LATENCY 4 = the cycles an instruction of n micro-ops takes beyond n x II; see ComputePipeline).
MIN_COMPUTE_LATENCY = 4


@dataclass(frozen=True)
class ComputePipeline:
    """Where the GEMM/ALU datapath has registers, from the config's COMPUTE_LATENCY (hardware/loop_engine.py).

    Each register beyond the shortest pipeline (MIN_COMPUTE_LATENCY) adds one cycle to every instruction; they
    are placed in this order as COMPUTE_LATENCY grows: ``sram`` (the input and weight SRAMs' outputs),
    ``product`` (the int8 products: a DSP's M register), ``result`` (the accumulate/ALU result, which then
    writes the accumulator from a register), then ``tree`` registers in the adder tree (the first after its
    last level, the next ones splitting its levels evenly), one per level at most. Cycles beyond those are
    ``pad``: ``done`` comes that much later. ``acc_out`` (the accumulator SRAM's output registered) costs no
    cycle: the accumulator is read one cycle earlier; it is on whenever the stage that adds has a register in
    front of it (any of the above)."""

    depth: int          # COMPUTE_LATENCY
    sram: int
    product: int
    result: int
    tree: int           # registers in the adder tree (0..levels)
    levels: int         # the adder tree's levels, log2(BLOCK_IN)
    pad: int

    @property
    def consume(self) -> int:
        """The stage (cycles after a micro-op's read) where GEMM adds the dot product to the accumulator row
        (ALU: one later)."""
        return 2 + self.sram + self.product + self.tree

    @property
    def acc_out(self) -> int:
        return int(self.consume >= 3)

    @property
    def acc_read(self) -> int:
        """The stage that reads acc[dst] for GEMM (ALU: acc[src] here, acc[dst] one later)."""
        return self.consume - 1 - self.acc_out

    @property
    def forward(self) -> int:
        """Results kept for forwarding: those not yet in the SRAM when a later micro-op's operand was read."""
        return 2 + self.acc_out + self.result

    def tree_cuts(self) -> list[int]:
        """After which adder-tree levels (1..levels) a register sits."""
        t, n = self.tree, self.levels
        return sorted({n - (n * i) // t for i in range(t)}) if t else []


def compute_pipeline(depth: int, block_in: int) -> ComputePipeline:
    """The registers of a compute pipeline ``depth`` cycles deep (ValueError below MIN_COMPUTE_LATENCY)."""
    if depth < MIN_COMPUTE_LATENCY:
        raise ValueError(f"COMPUTE_LATENCY={depth}: the RTL's compute pipeline is at least {MIN_COMPUTE_LATENCY} "
                         f"cycles deep (micro-op read, SRAM reads, compute and write); allowed: "
                         f"{MIN_COMPUTE_LATENCY} or more")
    levels = log2(block_in)
    extra = depth - MIN_COMPUTE_LATENCY
    regs = {"sram": 0, "product": 0, "result": 0, "tree": 0}
    for name in ("sram", "product", "result"):
        if extra:
            regs[name], extra = 1, extra - 1
    tree = min(extra, levels)
    return ComputePipeline(depth, regs["sram"], regs["product"], regs["result"], tree, levels, extra - tree)


@dataclass(frozen=True)
class Burst:
    """How a DMA engine cuts its transfers: bursts of at most ``beats`` beats (the config's DMA_BURST_BEATS; 16 on
    the Pynq, the most an AXI3 burst on its ACP port carries), a new burst at each row of a 2-D transfer. The
    engines add no idle cycles between bursts: the timing model's DMA_BURST_GAP stands for what the DRAM port
    takes per burst, which the Verilator harness's DRAM charges (hardware/device.py DramSettings)."""

    beats: int


class RtlParams:
    """A config's numbers as the RTL generator uses them, and the generator's options: ``dsp_packing`` (two int8
    products per DSP multiplier, hardware/dsp_packing.py; None: the config's default, on for Xilinx boards)."""

    def __init__(self, cfg: HwConfig, dsp_packing: bool | None = None):
        self.cfg = cfg
        self.dsp_packing = resolve_packing(cfg, dsp_packing)
        self.packing = Int8Packing(cfg.INP_WIDTH, cfg.WGT_WIDTH)
        self.bus_bits = cfg.BUS_WIDTH
        self.insn_bits = INSN_BITS
        self.acc_width = cfg.ACC_WIDTH
        self.inp_width = cfg.INP_WIDTH
        self.wgt_width = cfg.WGT_WIDTH
        self.out_width = cfg.OUT_WIDTH
        self.batch = cfg.BATCH
        self.block_in = cfg.BLOCK_IN
        self.block_out = cfg.BLOCK_OUT
        self.burst = Burst(cfg.DMA_BURST_BEATS)

    @cached_property
    def compute(self) -> ComputePipeline:
        """The GEMM/ALU pipeline's registers for the config's COMPUTE_LATENCY."""
        return compute_pipeline(self.cfg.COMPUTE_LATENCY, self.block_in)

    def fmt(self, name: str) -> Format:
        """An instruction format ('mem', 'gemm', 'alu', 'finish') or the micro-op format ('uop')."""
        return self.cfg.insn_formats[name]

    @cached_property
    def srams(self) -> dict[str, Sram]:
        c = self.cfg
        return {"uop": Sram("uop", c.UOP_BUFF_DEPTH, c.UOP_ELEM_BITS),
                "inp": Sram("inp", c.INP_BUFF_DEPTH, c.INP_ELEM_BITS),
                "wgt": Sram("wgt", c.WGT_BUFF_DEPTH, c.WGT_ELEM_BITS),
                "acc": Sram("acc", c.ACC_BUFF_DEPTH, c.ACC_ELEM_BITS),
                # VTA's out_mem: the accumulator's depth, OUT_WIDTH bits a lane (OUT_BUFF_SIZE bytes)
                "out": Sram("out", c.OUT_BUFF_DEPTH, c.OUT_ELEM_BITS)}

    def dram_elem_bits(self, mem_type: str) -> int:
        """Bits of one DRAM element of a memory type (the unit of dram_base and x_stride)."""
        return self.cfg.elem_bytes(MEM_TYPES[mem_type]) * 8

    @property
    def outstanding(self) -> int:
        """Beats one DMA engine keeps in flight (reads awaiting data, writes awaiting their acknowledgement),
        and the instructions fetch prefetches: enough to cover DRAM_LATENCY, so one engine alone can use every
        beat of the bus, as the timing model assumes (a power of two, MIN_OUTSTANDING..MAX_OUTSTANDING)."""
        need = max(MIN_OUTSTANDING, self.cfg.DRAM_LATENCY + 4)
        return min(MAX_OUTSTANDING, 1 << (need - 1).bit_length())

    @property
    def axi_prot(self) -> int:
        """AxPROT of every DRAM burst: VTA's ``axi_prot_bits`` for the target (tvm-vta config/pkg_config.py:
        0b010 on the UltraScale+ boards, 0b100 on the DE10-Nano, 0b000 on the Pynq and everything else)."""
        return AXI_PROT_OF_TARGET.get(self.cfg.TARGET, 0b000)

    @property
    def acc_lanes(self) -> int:
        return self.batch * self.block_out

    @property
    def reg_addr_bits(self) -> int:
        """Byte offsets from MMIO_BASE across the four register blocks."""
        return (4 * self.cfg.MMIO_RANGE - 1).bit_length()
