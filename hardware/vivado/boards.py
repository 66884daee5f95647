"""The boards and processing systems ``vta hw vivado`` writes block designs for: one table, with where each fact
comes from, so the scripts and the stub check read the same cited facts.

Parts and board parts come from the board files Vivado itself reads (its board store), never from memory:

- ``Xilinx/XilinxBoardStore`` ``boards/Xilinx/zcu104/1.1/board.xml``: vendor ``xilinx.com``, name ``zcu104``,
  file_version 1.1, component part0 ``part_name="xczu7ev-ffvc1156-2-e"`` (VTA's ``pkg_config.py`` names the same
  part and board ``xilinx.com:zcu104:part0:1.1``);
- ``boards/Avnet/ultra96v2/1.2/board.xml``: vendor ``avnet.com``, name ``Ultra96v2``, file_version 1.2,
  ``part_name="xczu3eg-sbva484-1-i"`` (the V2 is the industrial grade);
- ``boards/Avnet/ultra96v1/1.2/board.xml``: vendor ``avnet.com``, name ``Ultra96v1``, file_version 1.2,
  ``part_name="xczu3eg-sbva484-1-e"`` (the part VTA's ``pkg_config.py`` gives its ultra96 target);
- ``boards/TUL/pynq-z2/A.0/board.xml``: vendor ``tul.com.tw``, name ``pynq-z2``, file_version 1.0,
  ``part_name="xc7z020clg400-1"``; its ps7_fixedio interface type ``xilinx.com:display_processing_system7:
  fixedio_rtl:1.0``;
- the Pynq-Z1's board file is Digilent's (``Digilent/vivado-boards``), which we could not read here; its part,
  ``xc7z020clg400-1``, is what ``Xilinx/PYNQ`` ``boards/Pynq-Z1/base/base.tcl`` creates its project with. So the
  Pynq-Z1 entry names no board part of its own: the script asks Vivado for an installed ``*:pynq-z1:part0:*``
  and uses the part alone when there is none.

Board part ids are never written literally into a script: it asks Vivado (``get_board_parts``) for an installed
``<vendor>:<name>:part0:*`` and falls back to the bare part, so a machine without the board files still builds.

The processing systems are VTA's (``apache/tvm-vta`` ``hardware/xilinx/scripts/vivado.tcl`` at d4a15f6): a
Zynq-7000 ``processing_system7`` whose ``S_AXI_ACP`` port takes the accelerator's DRAM traffic (DDR segment
``ACP_DDR_LOWOCM``, 1 GiB at 0) and whose ``M_AXI_GP0`` reaches its registers; a Zynq UltraScale+
``zynq_ultra_ps_e`` with ``S_AXI_HPC0_FPD`` (segment ``SAXIGP0/HPC0_DDR_LOW``, 2 GiB at 0) and
``M_AXI_HPM0_FPD``. AxCACHE 0b1111 on both, AxPROT 0b000 on the Zynq-7000 and 0b010 on Zynq UltraScale+
(``axi_cache_bits`` and ``axi_prot_bits`` of apache/tvm's ``vta/python/vta/pkg_config.py``, which also names
the parts VTA built for: ``xc7z020clg484-1``, the ZC702's package, for every Zynq-7000 target, where the Pynq boards'
files say ``xc7z020clg400-1``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hardware.params import AXI_PROT_OF_TARGET
from hw_config import HwConfig


@dataclass(frozen=True)
class Family:
    """A processing system as VTA's block design uses it: its IP, ports, clocks and DDR window."""

    name: str                    # "zynq-7000" or "zynq-ultrascale+", as VTA's vivado.tcl says it
    ps_ip: str                   # the IP's VLNV without its version (the script takes the newest installed)
    ps_config: tuple[tuple[str, str], ...]   # CONFIG.* the script sets (besides the DRAM port's width)
    fclk: str                    # the PL clock the PS gives (VTA: 100 MHz, into a clocking wizard)
    fclk_resetn: str             # the PS's active-low reset to the PL
    master: str                  # the PS's AXI master that reaches the registers
    master_clk: str
    slave: str                   # the PS's AXI slave that takes the accelerator's DRAM traffic
    slave_clk: str
    slave_width_key: str         # CONFIG key of that slave's data width ("" if fixed)
    slave_bits: tuple[int, ...]  # the widths it can have
    ddr_segment: str             # the DDR segment of the slave, as get_bd_addr_segs names it under the PS cell
    ddr_range: int               # bytes of DDR the accelerator reaches through it (from address 0)
    mmio_window: tuple[int, int]  # [lo, hi) the master's addresses: where MMIO_BASE may lie
    axprot: int                  # VTA's AxPROT for the family
    axcache: int                 # VTA's AxCACHE (coherent)
    external: tuple[tuple[str, str], ...] = ()   # PS interfaces made block-design ports: (pin, interface VLNV)


ZYNQ7 = Family(
    name="zynq-7000", ps_ip="xilinx.com:ip:processing_system7",
    ps_config=(("PCW_USE_S_AXI_ACP", "1"), ("PCW_USE_DEFAULT_ACP_USER_VAL", "1"), ("PCW_USE_M_AXI_GP0", "1"),
               ("PCW_EN_CLK0_PORT", "1"), ("PCW_FPGA0_PERIPHERAL_FREQMHZ", "100")),
    fclk="FCLK_CLK0", fclk_resetn="FCLK_RESET0_N",
    master="M_AXI_GP0", master_clk="M_AXI_GP0_ACLK", slave="S_AXI_ACP", slave_clk="S_AXI_ACP_ACLK",
    slave_width_key="", slave_bits=(64,),
    ddr_segment="S_AXI_ACP/ACP_DDR_LOWOCM", ddr_range=1 << 30,
    # M_AXI_GP0's window on the Zynq-7000 (UG585, the system address map): 0x4000_0000 to 0x7FFF_FFFF
    mmio_window=(0x4000_0000, 0x8000_0000),
    axprot=AXI_PROT_OF_TARGET.get("pynq", 0b000), axcache=0b1111,
    external=(("DDR", "xilinx.com:interface:ddrx_rtl:1.0"),
              ("FIXED_IO", "xilinx.com:display_processing_system7:fixedio_rtl:1.0")),
)

ZYNQMP = Family(
    name="zynq-ultrascale+", ps_ip="xilinx.com:ip:zynq_ultra_ps_e",
    ps_config=(("PSU__USE__M_AXI_GP0", "1"), ("PSU__USE__M_AXI_GP1", "0"), ("PSU__USE__M_AXI_GP2", "0"),
               ("PSU__USE__S_AXI_GP0", "1"), ("PSU__FPGA_PL0_ENABLE", "1"),
               ("PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ", "100")),
    fclk="pl_clk0", fclk_resetn="pl_resetn0",
    master="M_AXI_HPM0_FPD", master_clk="maxihpm0_fpd_aclk", slave="S_AXI_HPC0_FPD", slave_clk="saxihpc0_fpd_aclk",
    slave_width_key="PSU__SAXIGP0__DATA_WIDTH", slave_bits=(32, 64, 128),
    ddr_segment="SAXIGP0/HPC0_DDR_LOW", ddr_range=2 << 30,
    # M_AXI_HPM0_FPD's low window (UG1085, the PL address map): 0xA000_0000 to 0xAFFF_FFFF
    mmio_window=(0xA000_0000, 0xB000_0000),
    axprot=AXI_PROT_OF_TARGET["ultra96"], axcache=0b1111,
)


@dataclass(frozen=True)
class Board:
    """A board: its part and the board file that names it (see the module docstring for each source)."""

    name: str                    # --board
    family: Family
    part: str                    # part_name of the board file's part0
    board_vendor: str            # the board file's vendor and name: the script looks up <vendor>:<name>:part0:*
    board_name: str
    board_file: str              # where the part (and board part) come from
    targets: tuple[str, ...]     # config TARGETs it runs (their MMIO_BASE and DDR window fit it)


_STORE = "Xilinx/XilinxBoardStore boards/"
BOARDS: dict[str, Board] = {b.name: b for b in (
    Board("pynq-z1", ZYNQ7, "xc7z020clg400-1", "www.digilentinc.com", "pynq-z1",
          "Xilinx/PYNQ boards/Pynq-Z1/base/base.tcl (create_project -part); board file: Digilent/vivado-boards",
          ("pynq",)),
    Board("pynq-z2", ZYNQ7, "xc7z020clg400-1", "tul.com.tw", "pynq-z2", _STORE + "TUL/pynq-z2/A.0/board.xml",
          ("pynq",)),
    Board("ultra96", ZYNQMP, "xczu3eg-sbva484-1-i", "avnet.com", "ultra96v2",
          _STORE + "Avnet/ultra96v2/1.2/board.xml", ("ultra96",)),
    Board("ultra96v1", ZYNQMP, "xczu3eg-sbva484-1-e", "avnet.com", "ultra96v1",
          _STORE + "Avnet/ultra96v1/1.2/board.xml", ("ultra96",)),
    Board("zcu104", ZYNQMP, "xczu7ev-ffvc1156-2-e", "xilinx.com", "zcu104", _STORE + "Xilinx/zcu104/1.1/board.xml",
          ("zcu104",)),
)}

# The board a config's TARGET builds for when --board is not given.
DEFAULT_BOARD = {"pynq": "pynq-z1", "ultra96": "ultra96", "zcu104": "zcu104"}


def family_of_part(part: str) -> Family:
    """The processing system of a Zynq part: xc7z... is a Zynq-7000, xczu... a Zynq UltraScale+."""
    p = part.strip().lower()
    if p.startswith("xc7z"):
        return ZYNQ7
    if p.startswith("xczu"):
        return ZYNQMP
    raise ValueError(f"--part {part}: not a Zynq part (xc7z... for a Zynq-7000, xczu... for a Zynq UltraScale+); "
                     f"the block design needs the processing system VTA's design uses")


def choose_board(cfg: HwConfig, board: str | None, part: str | None) -> tuple[Board, str]:
    """The board and part to build ``cfg`` for; refuses a board that cannot run the config (ValueError)."""
    if board is None:
        if cfg.TARGET not in DEFAULT_BOARD:
            raise ValueError(f"config {cfg.name}: TARGET {cfg.TARGET!r} has no Zynq board; give --board "
                             f"({', '.join(BOARDS)}) with a config of TARGET {', '.join(DEFAULT_BOARD)}")
        board = DEFAULT_BOARD[cfg.TARGET]
    if board not in BOARDS:
        raise ValueError(f"--board {board}: unknown; one of {', '.join(BOARDS)}")
    b = BOARDS[board]
    if cfg.TARGET not in b.targets:
        raise ValueError(f"--board {board} runs configs of TARGET {', '.join(b.targets)}, not {cfg.TARGET!r} "
                         f"({cfg.name}): its MMIO_BASE, bus and DDR window are another board's")
    chosen = part or b.part
    if family_of_part(chosen).name != b.family.name:
        raise ValueError(f"--part {chosen} is not a {b.family.name} part, the processing system of {board}")
    check_fits(cfg, b.family)
    return b, chosen


def check_fits(cfg: HwConfig, family: Family) -> None:
    """The config's register blocks must lie in the PS master's window, and its DRAM window in the slave's."""
    lo, hi = family.mmio_window
    end = cfg.MMIO_BASE + 4 * cfg.MMIO_RANGE
    if not (lo <= cfg.MMIO_BASE and end <= hi):
        raise ValueError(f"config {cfg.name}: MMIO_BASE 0x{cfg.MMIO_BASE:08X} .. 0x{end:08X} is outside "
                         f"{family.master}'s window 0x{lo:08X} .. 0x{hi:08X} on a {family.name}")
    if cfg.MMIO_RANGE & (cfg.MMIO_RANGE - 1) or cfg.MMIO_RANGE < 0x1000 or cfg.MMIO_BASE % cfg.MMIO_RANGE:
        raise ValueError(f"config {cfg.name}: MMIO_RANGE 0x{cfg.MMIO_RANGE:X} must be a power of two of at least "
                         f"4 KiB and MMIO_BASE a multiple of it (Vivado's address segments)")
