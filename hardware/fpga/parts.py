"""FPGA parts a config can be costed against: their capacity from the vendor's product tables, and the family
Yosys synthesises for (``synth_xilinx -family``).

Figures: AMD/Xilinx DS190 (Zynq-7000 SoC Data Sheet: Overview, table "Zynq-7000 SoC Family") for the xc7z020,
DS891 (Zynq UltraScale+ MPSoC Data Sheet: Overview, table of the EG/EV devices) for the xczu3eg and xczu7ev.
A BRAM36 block is 36 Kb and splits into two BRAM18; a URAM block is 288 Kb (4096 x 72).

The bus: the accelerator's one AXI master (``m_axi``, LOG_BUS_WIDTH bits of data) reaches DRAM through the port of
the processing system that VTA's ``hardware/xilinx/scripts/vivado.tcl`` connects it to, so that port's widest data
bus is a limit like the LUTs: on the Zynq-7000 the ACP (``PCW_USE_S_AXI_ACP``, ``S_AXI_ACP``), a 64-bit AXI slave
(UG585, Zynq-7000 SoC Technical Reference Manual; its HP ports are 32 or 64 bits too); on Zynq UltraScale+
``S_AXI_HPC0_FPD``, one of the high-performance ports configurable as 32, 64 or 128 bits (DS891, "High-Performance
AXI Ports"; UG1085, "PL-PS Interface Specifics"). A narrower master is fine (the interconnect widens it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """One FPGA part: what it holds, and how Yosys targets it."""

    name: str
    device: str              # the vendor's device family and the boards VTA ships presets for
    family: str              # Yosys ``synth_xilinx -family``: xc7 (7 series), xcup (UltraScale+)
    lut: int                 # 6-input LUTs (logic and distributed RAM together, as Vivado counts "Slice LUTs")
    ff: int                  # flip-flops ("Slice Registers")
    bram36: int              # 36 Kb block RAMs (each is also two 18 Kb halves)
    dsp: int                 # DSP slices
    uram: int = 0            # 288 Kb UltraRAM blocks (UltraScale+ EV/EG parts that have them)
    source: str = ""
    bus_bits: int = 64       # the widest data bus of the DRAM port VTA's vivado.tcl connects the accelerator to
    bus_port: str = ""       # that port, as vivado.tcl names it
    bus_source: str = ""     # where the width is documented

    @property
    def dsp_cell(self) -> str:
        """The DSP slice Yosys instantiates for this family."""
        return {"xc7": "DSP48E1", "xcup": "DSP48E2"}[self.family]

    @property
    def bram18(self) -> int:
        return 2 * self.bram36

    def capacity(self) -> dict[str, int]:
        """The budget per resource, under the names the estimates use."""
        return {"lut": self.lut, "ff": self.ff, "bram36": self.bram36, "dsp": self.dsp, "uram": self.uram}


_DS190 = "DS190 (Zynq-7000 SoC Data Sheet: Overview)"
_DS891 = "DS891 (Zynq UltraScale+ MPSoC Data Sheet: Overview)"
# the accelerator's DRAM port per family (the module docstring): VTA's vivado.tcl and Xilinx's documents
_ACP = {"bus_bits": 64, "bus_port": "S_AXI_ACP (the ACP, as VTA's vivado.tcl connects it on a Zynq-7000)",
        "bus_source": "UG585 (Zynq-7000 SoC Technical Reference Manual): the ACP is a 64-bit AXI slave"}
_HPC0 = {"bus_bits": 128, "bus_port": "S_AXI_HPC0_FPD (as VTA's vivado.tcl connects it on Zynq UltraScale+)",
         "bus_source": "DS891 / UG1085: the PL-to-PS AXI ports are 32, 64 or 128 bits wide"}

PARTS: dict[str, Part] = {p.name: p for p in (
    Part("xc7z020", "Zynq-7000 XC7Z020 (Pynq-Z1, Pynq-Z2)", "xc7",
         lut=53_200, ff=106_400, bram36=140, dsp=220, source=_DS190, **_ACP),
    Part("xczu3eg", "Zynq UltraScale+ ZU3EG (Ultra96)", "xcup",
         lut=70_560, ff=141_120, bram36=216, dsp=360, source=_DS891, **_HPC0),
    Part("xczu7ev", "Zynq UltraScale+ ZU7EV (ZCU104)", "xcup",
         lut=230_400, ff=460_800, bram36=312, dsp=1_728, uram=96, source=_DS891, **_HPC0),
)}

# The part of the board each preset TARGET names (the default of ``vta hw estimate``).
TARGET_PARTS = {"pynq": "xc7z020", "ultra96": "xczu3eg", "zcu104": "xczu7ev"}
DEFAULT_PART = "xc7z020"


class UnknownPart(ValueError):
    """A part name that is not in PARTS."""


def get_part(name: str | Part) -> Part:
    """The part called ``name`` (case-insensitive); an unknown name raises UnknownPart naming the known ones."""
    if isinstance(name, Part):
        return name
    key = str(name).strip().lower()
    if key not in PARTS:
        known = ", ".join(f"{p.name} ({p.device})" for p in PARTS.values())
        raise UnknownPart(f"unknown FPGA part {name!r}; known parts: {known}")
    return PARTS[key]


def part_for_target(target: str) -> Part:
    """The part on the board a config's TARGET names (xc7z020 for targets without a board of their own)."""
    return PARTS[TARGET_PARTS.get(target, DEFAULT_PART)]
