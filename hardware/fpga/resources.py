"""FPGA resource figures: LUT, FF, BRAM36/BRAM18, DSP, URAM, counted from Yosys's Xilinx cells, and the rows
(modules of the accelerator) the estimates are broken down into.

How cells count (as Vivado's utilisation report counts them): LUT1..LUT6 are one LUT each; distributed RAM and
shift registers are LUTs used as memory (RAM32M = 4 LUTs, RAM64M = 4, ...), included in ``lut`` and also shown
as ``lutram``; FDRE/FDSE/FDCE/FDPE (and latches) are flip-flops; RAMB36 and RAMB18 are block RAMs (a RAMB18 is half
a BRAM36 site); DSP48E1/E2 are DSP slices; URAM288 is an UltraRAM. Carry chains, wide-function muxes (MUXF7/8),
clock buffers and Yosys's standalone inverters (which vendor tools fold into the LUTs and flip-flops around them)
are not counted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

# LUTs each distributed-RAM or shift-register primitive occupies (7 series and UltraScale+ libraries).
LUTRAM_LUTS = {
    "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM512X1S": 8,
    "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8,
    "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8, "RAM64X8SW": 8, "RAM32X16DR8": 8,
    "SRL16E": 1, "SRLC16E": 1, "SRLC32E": 1,
}
LUT_CELLS = {"LUT1", "LUT2", "LUT3", "LUT4", "LUT5", "LUT6", "LUT6_2"}
FF_CELLS = {"FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE"}
BRAM36_CELLS = {"RAMB36E1", "RAMB36E2"}
BRAM18_CELLS = {"RAMB18E1", "RAMB18E2"}
DSP_CELLS = {"DSP48E1", "DSP48E2"}
URAM_CELLS = {"URAM288", "URAM288_BASE"}
NOT_COUNTED = {"CARRY4", "CARRY8", "MUXF7", "MUXF8", "MUXF9", "INV", "BUFG", "BUFGCE", "IBUF", "OBUF", "GND",
               "VCC"}


@dataclass(frozen=True)
class Resources:
    """One module's (or a whole design's) resources."""

    lut: float = 0          # LUTs, logic and memory together
    ff: float = 0
    bram36: int = 0         # RAMB36 cells
    bram18: int = 0         # RAMB18 cells
    dsp: int = 0
    uram: int = 0
    lutram: float = 0       # of ``lut``, the LUTs used as distributed RAM or shift registers

    @property
    def bram(self) -> float:
        """Block RAM in BRAM36 sites: a RAMB18 takes half of one (the figure a part's capacity is given in)."""
        return self.bram36 + self.bram18 / 2

    def __add__(self, other: Resources) -> Resources:
        return Resources(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, float]) -> Resources:
        return cls(**{f.name: d.get(f.name, 0) for f in fields(cls)})

    @classmethod
    def from_cells(cls, cells: dict[str, int]) -> Resources:
        """Resources of a module from its cell counts by type (submodule instances are not cells here)."""
        lut = sum(n for t, n in cells.items() if t in LUT_CELLS)
        lutram = sum(n * LUTRAM_LUTS[t] for t, n in cells.items() if t in LUTRAM_LUTS)
        return cls(lut=lut + lutram, lutram=lutram,
                   ff=sum(n for t, n in cells.items() if t in FF_CELLS),
                   bram36=sum(n for t, n in cells.items() if t in BRAM36_CELLS),
                   bram18=sum(n for t, n in cells.items() if t in BRAM18_CELLS),
                   dsp=sum(n for t, n in cells.items() if t in DSP_CELLS),
                   uram=sum(n for t, n in cells.items() if t in URAM_CELLS))


def total(items) -> Resources:
    out = Resources()
    for r in items:
        out = out + r
    return out


def uncounted_cells(cells: dict[str, int]) -> set[str]:
    """Primitive cell types neither counted nor known to be ignorable (a library change to look at)."""
    known = LUT_CELLS | FF_CELLS | BRAM36_CELLS | BRAM18_CELLS | DSP_CELLS | URAM_CELLS | NOT_COUNTED
    return {t for t in cells if t not in known and t not in LUTRAM_LUTS}


# ---- rows: the accelerator's modules as the estimates show them ----

SRAMS = ("uop", "inp", "wgt", "acc", "out")

# (row key, label) in display order; rows not listed (a module added to the RTL later) follow under their name.
ROWS = (
    ("fetch", "fetch (instruction DMA, routing)"),
    ("load", "load (2-D DMA into inp/wgt)"),
    ("compute", "compute (uop/acc DMA, sequencer)"),
    ("gemm_alu", "compute: GEMM core + ALU + uop loop"),
    ("store", "store (out to DRAM)"),
    ("queues", "queues (3 insn + 4 token)"),
    ("arbiter", "DRAM arbiter"),
    ("axi", "AXI4 master (DRAM)"),
    ("axi_lite", "AXI4-Lite register slaves"),
    ("counters", "performance counters"),
    ("top", "registers, SRAM read ports"),
    ("sram.uop", "SRAM uop"),
    ("sram.inp", "SRAM inp"),
    ("sram.wgt", "SRAM wgt"),
    ("sram.acc", "SRAM acc"),
    ("sram.out", "SRAM out"),
)
ROW_LABELS = dict(ROWS)
TOP = "vta_core"


def row_of(module: str) -> str:
    """The row a Yosys module (Amaranth's hierarchical name, ``vta_core.compute.loop``) belongs to."""
    parts = module.lstrip("\\").split(".")
    if parts[0] != TOP:
        raise ValueError(f"{module!r} is not inside {TOP}")
    if len(parts) == 1:
        return "top"
    head = parts[1]
    if head.startswith("tokens_") or (len(parts) >= 3 and parts[2] == "queue"):
        return "queues"
    if head == "compute" and len(parts) >= 3 and parts[2] == "loop":
        return "gemm_alu"
    if head.startswith("arbiter"):          # the readers' and the writer's arbiters (hardware/core.py)
        return "arbiter"
    return head


def sram_of_cell(name: str) -> str | None:
    """The SRAM a block RAM cell of the top module implements, from its name (``acc_sram.1.4``), or None."""
    base = name.split("/")[-1].lstrip("\\")
    for sram in SRAMS:
        if base.startswith(f"{sram}_sram"):
            return sram
    return None


def ordered(rows: dict[str, Resources]) -> list[tuple[str, Resources]]:
    """``rows`` in display order (known rows first, then any others by name)."""
    known = [k for k, _ in ROWS if k in rows]
    return [(k, rows[k]) for k in known] + sorted((k, v) for k, v in rows.items() if k not in ROW_LABELS)
