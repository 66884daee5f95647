"""The typed interfaces between the accelerator's modules (amaranth.lib.wiring Signatures).

Directions are from the initiator's side: a module that reads an SRAM holds ``Out(sram_read(...))``.
"""

from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hardware.params import DRAM_ADDR_BITS, REG_DATA_BITS


def dram_port(bus_bits: int) -> wiring.Signature:
    """A DRAM master: a command stream (one bus beat per command; reads and writes), an in-order read
    response stream and an in-order write acknowledgement (``wack``, a pulse per write once it is done, as
    AXI's write-response channel; always accepted). Byte addresses are aligned to the bus; ``cmd_strb``
    selects the bytes a write changes."""
    return wiring.Signature({
        "cmd_valid": Out(1), "cmd_ready": In(1), "cmd_addr": Out(DRAM_ADDR_BITS), "cmd_write": Out(1),
        "cmd_data": Out(bus_bits), "cmd_strb": Out(bus_bits // 8),
        "rsp_valid": In(1), "rsp_ready": Out(1), "rsp_data": In(bus_bits), "wack": In(1),
    })


def sram_read(addr_bits: int, data_bits: int) -> wiring.Signature:
    """A synchronous SRAM read port: ``data`` is the entry at ``addr`` one cycle after ``en``."""
    return wiring.Signature({"addr": Out(addr_bits), "en": Out(1), "data": In(data_bits)})


def sram_write(addr_bits: int, data_bits: int) -> wiring.Signature:
    """An SRAM write port: ``data`` is written at ``addr`` at the clock edge when ``en``."""
    return wiring.Signature({"addr": Out(addr_bits), "data": Out(data_bits), "en": Out(1)})


# A dependency token: the module raises ``valid`` to push (or pop) one; the queue answers ``ready`` when it has
# room (or a token). It moves when both are high.
TOKEN = wiring.Signature({"valid": Out(1), "ready": In(1)})


def reg_bus(addr_bits: int) -> wiring.Signature:
    """The host's register bus (an AXI-lite slave reduced to its data path): a write takes one cycle, a read
    is combinational. ``addr`` is the byte offset from MMIO_BASE."""
    return wiring.Signature({"addr": Out(addr_bits), "wdata": Out(REG_DATA_BITS), "we": Out(1),
                             "rdata": In(REG_DATA_BITS)})
