"""The typed interfaces between the accelerator's modules (amaranth.lib.wiring Signatures).

Directions are from the initiator's side: a module that reads an SRAM holds ``Out(sram_read(...))``.
"""

from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hardware.params import DRAM_ADDR_BITS, REG_DATA_BITS

ID_BITS = 3          # AXI IDs: the DRAM arbiter's clients (hardware/core.py DRAM_CLIENTS)


def dram_port(bus_bits: int) -> wiring.Signature:
    """A DRAM master: a command stream (one bus beat per command; reads and writes), an in-order read
    response stream and an in-order write acknowledgement (``wack``).

    Beats come in bursts, as on AXI4 (hardware/axi.py turns this port into an AXI4 master): the first beat of a
    burst carries ``cmd_first`` and the burst's length (``cmd_len``: beats - 1), the others follow at the next
    addresses in order (reads: the first beat only, the AR, ``cmd_addr`` aligned to the bus; writes: ``cmd_size`` is
    log2 of the bytes per beat, a whole bus word or one element narrower than it, ``cmd_addr`` aligned to it,
    ``cmd_strb`` selecting its bytes). A burst never crosses a 4 KiB boundary and has at most 256 beats. The
    responses of a read burst come in order, its last with ``rsp_last``; ``wack`` pulses once per write burst
    when DRAM has taken all of it (AXI's write response; always accepted). A writer may hold one burst's later
    beats back, never abandon them.

    ``cmd_id`` / ``rsp_id`` / ``wack_id`` are AXI's IDs, set and read by the arbiter (a client's number): a
    client's bursts stay in order, those of different clients may answer interleaved. Clients leave them 0."""
    return wiring.Signature({
        "cmd_valid": Out(1), "cmd_ready": In(1), "cmd_addr": Out(DRAM_ADDR_BITS), "cmd_write": Out(1),
        "cmd_data": Out(bus_bits), "cmd_strb": Out(bus_bits // 8),
        "cmd_first": Out(1), "cmd_len": Out(8), "cmd_size": Out(3), "cmd_id": Out(ID_BITS),
        "rsp_valid": In(1), "rsp_ready": Out(1), "rsp_data": In(bus_bits), "rsp_last": In(1),
        "rsp_id": In(ID_BITS), "wack": In(1), "wack_id": In(ID_BITS),
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
    """The register file's port, driven by the AXI4-Lite slaves (hardware/axi.py): ``we`` writes ``wdata``'s
    bytes that ``strb`` selects at the clock edge; ``rdata`` is the register at ``addr``, combinationally, and
    ``re`` marks the cycle a read takes it (registers that clear on read clear then). ``addr`` is the byte
    offset from MMIO_BASE."""
    return wiring.Signature({"addr": Out(addr_bits), "wdata": Out(REG_DATA_BITS), "strb": Out(REG_DATA_BITS // 8),
                             "we": Out(1), "re": Out(1), "rdata": In(REG_DATA_BITS)})
