"""The block-level control of one register block as Vivado HLS's ``ap_ctrl_hs`` builds it (``hls_control``):
``ap_done`` that clears on read, and the interrupt registers GIE (0x04), IER (0x08) and ISR (0x0C) with the
block's interrupt output.

In the RTL HLS generates for each of VTA's four IPs (the ``CONTROL_BUS`` AXI4-Lite slave): ``ap_done`` is latched
when the function finishes and cleared when the host reads the control register (a finish in the same cycle
wins); GIE bit 0 gates the ``interrupt`` output; IER bit 0 and bit 1 enable the ap_done and ap_ready events into
ISR bits 0 and 1, which a write toggles where its data has a 1 (toggle on write; an event in the same cycle
wins); ``interrupt`` is GIE and (ISR bit 0 or bit 1). Every function of VTA's is sequential (none is pipelined
at its top), so ap_ready comes with ap_done: here both are one ``event``. VTA's block design leaves the four
interrupt pins unconnected; the driver polls.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Cat, Const, Module, Mux, Signal, Value

from hardware import registers as R


@dataclass
class BlockControl:
    """What ``hls_control`` built: the latched ap_done, the interrupt, the registers' read values by offset."""

    ap_done: Signal
    interrupt: Signal
    reads: dict[int, Value]


def hls_control(m: Module, reg, base: int, event: Value, name: str) -> BlockControl:
    """The control logic of the block whose CTRL is at ``base`` on the register port ``reg`` (hardware.interfaces
    .reg_bus); ``event``: the block's function finished (ap_done and ap_ready) this cycle."""
    ap_done = Signal(name=f"{name}_ap_done")
    gie, ier, isr = Signal(name=f"{name}_gie"), Signal(2, name=f"{name}_ier"), Signal(2, name=f"{name}_isr")
    interrupt = Signal(name=f"{name}_interrupt")
    # the event comes from the end of a module's own logic (its retire decision): registered first, so the
    # control registers add nothing to that path (ap_done and ISR rise a cycle later; the host cannot tell)
    finished = Signal(name=f"{name}_finished")
    m.d.sync += finished.eq(event)
    with m.If(reg.re & (reg.addr == base + R.CTRL)):
        m.d.sync += ap_done.eq(0)
    with m.If(finished):
        m.d.sync += ap_done.eq(1)
    writes = reg.we & reg.strb[0]
    with m.If(writes & (reg.addr == base + R.GIE)):
        m.d.sync += gie.eq(reg.wdata[0])
    with m.If(writes & (reg.addr == base + R.IER)):
        m.d.sync += ier.eq(reg.wdata[:2])
    toggled = Signal(2, name=f"{name}_isr_toggled")
    m.d.comb += toggled.eq(isr ^ (reg.wdata[:2] & (writes & (reg.addr == base + R.ISR)).replicate(2)))
    m.d.sync += isr.eq(toggled | (ier & finished.replicate(2)))
    m.d.comb += interrupt.eq(gie & isr.any())
    reads = {base + R.GIE: gie, base + R.IER: ier, base + R.ISR: isr}
    return BlockControl(ap_done, interrupt, reads)


def ctrl_value(ap_start: Value, ap_done: Value, ap_idle: Value, auto_restart: Value) -> Value:
    """The control register's read value (ap_ready, bit 3, is a one-cycle pulse the host never sees: 0)."""
    return Cat(ap_start, ap_done, ap_idle, 0, 0, 0, 0, auto_restart)


def read_mux(addr: Value, reads: dict[int, Value], width: int) -> Value:
    """The register file's read data: the value of the register at byte offset ``addr`` (``reads``: offset ->
    value), 0 at any other offset.

    Built as a table indexed by the address bits in which the registers' offsets differ, a binary tree of muxes
    that Yosys maps to LUTs and MUXF7/MUXF8 (two or three LUT levels for VTA's map: 7 index bits), and one check
    that the other bits are the registers' common ones. A comparator per register then an OR over all of them
    (a ``Switch``) came to 9-10 LUT levels after the address register (issue 38)."""
    if not reads:
        return Const(0, width)
    offsets = list(reads)
    varying = 0
    for offset in offsets:
        varying |= offset ^ offsets[0]
    index_bits = [b for b in range(len(addr)) if varying >> b & 1]
    table: list[Value] = [Const(0, width)] * (1 << len(index_bits))
    for offset, value in reads.items():
        table[sum((offset >> b & 1) << k for k, b in enumerate(index_bits))] = value
    for b in index_bits:            # halve the table on each index bit, lowest first
        table = [Mux(addr[b], table[i + 1], table[i]) for i in range(0, len(table), 2)]
    fixed = ((1 << len(addr)) - 1) & ~varying
    return Mux((addr & fixed) == (offsets[0] & fixed), table[0], 0)
