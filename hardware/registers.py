"""The control registers: VTA's HLS register map (four blocks at MMIO_BASE + i * MMIO_RANGE, in the order of
hw_config.config.MMIO_BLOCKS), as the Pynq driver writes them, each block behind its own AXI4-Lite slave port
(hardware/axi.py; byte strobes honoured).

Offsets within a block are VTA's (vta/board/registers.py holds the same numbers for the simulated board; a test
checks they agree). What this RTL does with each is in ``REGISTERS``' descriptions and docs/hardware.md.
"""

from __future__ import annotations

from hw_config import HwConfig
from hw_config.config import MMIO_BLOCKS

CTRL = 0x00                       # every block: bit 0 ap_start, bit 1 ap_done, bit 2 ap_idle, bit 3 ap_ready,
AP_START, AP_DONE, AP_IDLE, AP_READY, AUTO_RESTART = 0x01, 0x02, 0x04, 0x08, 0x80   # bit 7 auto_restart
GIE, IER, ISR = 0x04, 0x08, 0x0C  # every block, as Vivado HLS's ap_ctrl_hs: global and per-event interrupt enables,
INT_AP_DONE, INT_AP_READY = 0x1, 0x2   # the interrupt status (toggle on write); IER/ISR bit 0 ap_done, bit 1 ap_ready
FETCH_INSN_COUNT, FETCH_INSN_ADDR = 0x10, 0x18       # FETCH_INSN_ADDR + 4: the address's high word
LOAD_INP_ADDR, LOAD_WGT_ADDR = 0x10, 0x18
COMPUTE_DONE_WR, COMPUTE_DONE_RD, COMPUTE_DONE_VLD = 0x10, 0x18, 0x1C
COMPUTE_UOP_ADDR, COMPUTE_BIAS_ADDR = 0x20, 0x28
STORE_OUT_ADDR = 0x10
FETCH_DISPATCHED = 0x20           # not in VTA: instructions fetch has handed to the modules (for debugging)
AXI_STATUS = 0x28                 # not in VTA: the AXI4 master's error responses (fields below)

# AXI_STATUS's fields (hardware/axi.py AxiMaster): the first error response on each channel, kept until a launch.
OKAY, EXOKAY, SLVERR, DECERR = 0, 1, 2, 3
RESP_NAMES = {OKAY: "OKAY", EXOKAY: "EXOKAY", SLVERR: "SLVERR", DECERR: "DECERR"}
STATUS_READ_ERROR, STATUS_WRITE_ERROR = 0x1, 0x2     # sticky flags (bits 0 and 1)
STATUS_RRESP_SHIFT, STATUS_BRESP_SHIFT = 2, 4          # the first error's response code (2 bits each)
STATUS_RID_SHIFT, STATUS_BID_SHIFT = 8, 12             # the first error's AXI ID: its DRAM client (3 bits each)

# Not in VTA: the performance counters VTA's simulator keeps (hardware/stats.py COUNTERS), 64 bits each (low word at
# the offset, high word at +4), in the block of the module that executes what they count; VTA's HLS blocks use
# offsets below 0x30 only. A launch clears them.
COUNTER_BITS = 64
COUNTER_REGISTERS: dict[str, tuple[str, int]] = {
    "inp_load_nbytes": ("load", 0x40), "wgt_load_nbytes": ("load", 0x48),
    "uop_load_nbytes": ("compute", 0x40), "acc_load_nbytes": ("compute", 0x48),
    "gemm_counter": ("compute", 0x50), "alu_counter": ("compute", 0x58),
    "out_store_nbytes": ("store", 0x40),
}
COUNTER_WHAT = {
    "inp_load_nbytes": "bytes LOAD INP moved from DRAM (x_size * y_size elements; padding not counted)",
    "wgt_load_nbytes": "bytes LOAD WGT moved from DRAM",
    "uop_load_nbytes": "bytes LOAD UOP moved from DRAM",
    "acc_load_nbytes": ("bytes LOADs of every other memory type (ACC, ACC_8BIT) moved, counted as ACC elements "
                        "(as VTA's simulator counts ACC_8BIT)"),
    "gemm_counter": "micro-op iterations of GEMMs without reset_reg (iter_out * iter_in * (uop_end - uop_bgn))",
    "alu_counter": "micro-op iterations of ALU instructions",
    "out_store_nbytes": "bytes STORE moved to DRAM (OUT elements)",
}


def _hls_control(block: str) -> tuple[tuple[str, int, str, str, str], ...]:
    """GIE, IER and ISR of one block, as Vivado HLS's ap_ctrl_hs has them."""
    return ((block, GIE, "gie", "rw", "bit 0: global interrupt enable (the block's interrupt output)"),
            (block, IER, "ier", "rw", "bit 0: interrupt on ap_done, bit 1: on ap_ready"),
            (block, ISR, "isr", "rw", ("bit 0 set by ap_done, bit 1 by ap_ready while enabled in IER; writing 1 "
                                       "toggles a bit (HLS's toggle-on-write); interrupt = GIE and (bit 0 or 1)")))


def _counter(name: str) -> tuple[tuple[str, int, str, str, str], ...]:
    block, offset = COUNTER_REGISTERS[name]
    return ((block, offset, name, "r", COUNTER_WHAT[name] + " in this run, low word (not in VTA)"),
            (block, offset + 4, f"{name}_hi", "r", "its high word"))

# (block, offset, name, access, what the RTL does)
REGISTERS: tuple[tuple[str, int, str, str, str], ...] = (
    ("fetch", CTRL, "ctrl", "rw", ("write bit 0 to launch a run (ignored while one runs); reads bit 0 running, "
                                  "bit 1 ap_done: set when fetch has dispatched the run's last instruction, "
                                  "cleared by reading this register, bit 2 idle")),
    *_hls_control("fetch"),
    ("fetch", FETCH_INSN_COUNT, "insn_count", "rw", "instructions in the stream"),
    ("fetch", FETCH_INSN_ADDR, "insn_addr", "rw", "DRAM byte address of the stream, low word"),
    ("fetch", FETCH_INSN_ADDR + 4, "insn_addr_hi", "rw", ("high word (stored; the AXI4 master's addresses are 32 "
                                                          "bits)")),
    ("fetch", FETCH_DISPATCHED, "dispatched", "r", "instructions dispatched in this run (an addition)"),
    ("fetch", AXI_STATUS, "axi_status", "r", ("the DRAM port's error responses in this run (an addition): bit 0 a "
                                             "read, bit 1 a write answered SLVERR/DECERR; bits 3:2 and 5:4 the "
                                             "first one's RRESP and BRESP, bits 10:8 and 14:12 its AXI ID (the "
                                             "DRAM client); cleared by a launch")),
    ("load", CTRL, "ctrl", "rw", ("stored (the module always runs); reads back with bit 2 idle and bit 1 ap_done: "
                                 "set when the module finishes an instruction, cleared by reading this register")),
    *_hls_control("load"),
    ("load", LOAD_INP_ADDR, "inp_addr", "rw", "stored, unused: instructions carry absolute addresses"),
    ("load", LOAD_WGT_ADDR, "wgt_addr", "rw", "stored, unused"),
    *_counter("inp_load_nbytes"), *_counter("wgt_load_nbytes"),
    ("compute", CTRL, "ctrl", "rw", ("stored (the module always runs); reads back with bit 2 idle and bit 1 "
                                    "ap_done: set when the module finishes an instruction, cleared by reading this "
                                    "register")),
    *_hls_control("compute"),
    ("compute", COMPUTE_DONE_WR, "done_i", "rw", "stored, no effect (as in VTA's HLS)"),
    ("compute", COMPUTE_DONE_RD, "done_o", "r", "1 once FINISH has executed; cleared by a launch"),
    ("compute", COMPUTE_DONE_VLD, "done_o_vld", "r", "same as done_o"),
    ("compute", COMPUTE_UOP_ADDR, "uop_addr", "rw", "stored, unused"),
    ("compute", COMPUTE_BIAS_ADDR, "bias_addr", "rw", "stored, unused"),
    *_counter("uop_load_nbytes"), *_counter("acc_load_nbytes"), *_counter("gemm_counter"),
    *_counter("alu_counter"),
    ("store", CTRL, "ctrl", "rw", ("stored (the module always runs); reads back with bit 2 idle and bit 1 ap_done: "
                                  "set when the module finishes an instruction, cleared by reading this register")),
    *_hls_control("store"),
    ("store", STORE_OUT_ADDR, "out_addr", "rw", "stored, unused"),
    *_counter("out_store_nbytes"),
)


def register_offset(cfg: HwConfig, block: str, offset: int) -> int:
    """Byte offset of a register from MMIO_BASE; a block that is not one of MMIO_BLOCKS, or an offset that is not
    a word inside the block's range (which would reach the next block's registers), is a ValueError."""
    if block not in MMIO_BLOCKS:
        raise ValueError(f"register block {block!r}: one of {', '.join(MMIO_BLOCKS)}")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < cfg.MMIO_RANGE or offset % 4:
        raise ValueError(f"register offset {offset!r} of block {block}: a multiple of 4 in [0, 0x{cfg.MMIO_RANGE:x})")
    return MMIO_BLOCKS.index(block) * cfg.MMIO_RANGE + offset


def register_map(cfg: HwConfig) -> list[dict[str, object]]:
    """The registers with their physical addresses, for the manifest."""
    return [{"block": block, "name": name, "offset": offset, "address": cfg.mmio_address(block) + offset,
             "access": access, "description": what} for block, offset, name, access, what in REGISTERS]
