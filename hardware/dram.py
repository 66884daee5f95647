"""The DRAM side: element readers and writers over the bus-wide port, and the arbiter that shares one port.

DRAM elements (a micro-op, an input or weight tile, an accumulator row, an instruction) are powers of two
bytes and aligned to their size, so an element either spans whole bus beats or sits in one lane of a beat.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hardware.interfaces import dram_port
from hardware.params import DRAM_ADDR_BITS, MAX_OUTSTANDING, log2


class ElemReader(wiring.Component):
    """Reads whole elements: ``addr`` takes element byte addresses, ``data`` gives the elements in order.

    At most MAX_OUTSTANDING beats are in flight; a response is accepted only when it has room, so a reader
    whose consumer stalls keeps its beats in the DRAM model's queue (its owner keeps the port meanwhile).
    """

    def __init__(self, elem_bits: int, bus_bits: int):
        self.elem_bits, self.bus_bits = elem_bits, bus_bits
        super().__init__({"addr": In(stream.Signature(DRAM_ADDR_BITS)), "data": Out(stream.Signature(elem_bits)),
                          "mem": Out(dram_port(bus_bits))})

    def elaborate(self, platform) -> Module:
        m = Module()
        bus_bytes = self.bus_bits // 8
        mem = self.mem
        m.d.comb += [mem.cmd_write.eq(0), mem.cmd_strb.eq(0), mem.cmd_data.eq(0)]
        outstanding = Signal(range(MAX_OUTSTANDING + 1))
        issued = mem.cmd_valid & mem.cmd_ready
        received = mem.rsp_valid & mem.rsp_ready
        m.d.sync += outstanding.eq(outstanding + issued - received)
        room = outstanding < MAX_OUTSTANDING
        if self.elem_bits >= self.bus_bits:
            beats = self.elem_bits // self.bus_bits
            beat = Signal(range(beats))
            m.d.comb += [mem.cmd_valid.eq(self.addr.valid & room),
                         mem.cmd_addr.eq(self.addr.payload + (beat << log2(bus_bytes))),
                         self.addr.ready.eq(issued & (beat == beats - 1))]
            with m.If(issued):
                m.d.sync += beat.eq(0 if beats == 1 else beat + 1)
                with m.If(beat == beats - 1):
                    m.d.sync += beat.eq(0)
            buf = Signal(self.elem_bits)
            count = Signal(range(beats))
            full = Signal()
            m.d.comb += [mem.rsp_ready.eq(~full | self.data.ready), self.data.valid.eq(full),
                         self.data.payload.eq(buf)]
            with m.If(self.data.valid & self.data.ready):
                m.d.sync += full.eq(0)
            with m.If(received):
                m.d.sync += buf.eq(Cat(buf[self.bus_bits:], mem.rsp_data))   # first beat ends lowest
                with m.If(count == beats - 1):
                    m.d.sync += [count.eq(0), full.eq(1)]
                with m.Else():
                    m.d.sync += count.eq(count + 1)
        else:
            lanes = self.bus_bits // self.elem_bits
            lo = log2(self.elem_bits // 8)
            m.submodules.lanes = lane_fifo = fifo.SyncFIFOBuffered(width=log2(lanes), depth=MAX_OUTSTANDING)
            m.d.comb += [mem.cmd_valid.eq(self.addr.valid & lane_fifo.w_rdy),
                         mem.cmd_addr.eq(self.addr.payload & ~Const(bus_bytes - 1, DRAM_ADDR_BITS)),
                         self.addr.ready.eq(issued),
                         lane_fifo.w_en.eq(issued),
                         lane_fifo.w_data.eq(self.addr.payload[lo:lo + log2(lanes)]),
                         self.data.valid.eq(mem.rsp_valid & lane_fifo.r_rdy),
                         self.data.payload.eq(mem.rsp_data.word_select(lane_fifo.r_data, self.elem_bits)),
                         mem.rsp_ready.eq(self.data.ready & lane_fifo.r_rdy),
                         lane_fifo.r_en.eq(received)]
        return m


def write_request(elem_bits: int) -> data.StructLayout:
    return data.StructLayout({"addr": DRAM_ADDR_BITS, "data": elem_bits})


class ElemWriter(wiring.Component):
    """Writes whole elements: ``req`` takes (element byte address, element); each becomes one or more beats."""

    def __init__(self, elem_bits: int, bus_bits: int):
        self.elem_bits, self.bus_bits = elem_bits, bus_bits
        super().__init__({"req": In(stream.Signature(write_request(elem_bits))), "mem": Out(dram_port(bus_bits))})

    def elaborate(self, platform) -> Module:
        m = Module()
        bus_bytes = self.bus_bits // 8
        mem, req = self.mem, self.req
        issued = mem.cmd_valid & mem.cmd_ready
        m.d.comb += [mem.cmd_valid.eq(req.valid), mem.cmd_write.eq(1), mem.rsp_ready.eq(0)]
        if self.elem_bits >= self.bus_bits:
            beats = self.elem_bits // self.bus_bits
            beat = Signal(range(beats))
            m.d.comb += [mem.cmd_addr.eq(req.payload.addr + (beat << log2(bus_bytes))),
                         mem.cmd_data.eq(req.payload.data.word_select(beat, self.bus_bits)),
                         mem.cmd_strb.eq(Const((1 << bus_bytes) - 1, bus_bytes)),
                         req.ready.eq(issued & (beat == beats - 1))]
            with m.If(issued):
                m.d.sync += beat.eq(0 if beats == 1 else beat + 1)
                with m.If(beat == beats - 1):
                    m.d.sync += beat.eq(0)
        else:
            lanes = self.bus_bits // self.elem_bits
            elem_bytes = self.elem_bits // 8
            lo = log2(elem_bytes)
            lane = req.payload.addr[lo:lo + log2(lanes)]
            m.d.comb += [mem.cmd_addr.eq(req.payload.addr & ~Const(bus_bytes - 1, DRAM_ADDR_BITS)),
                         mem.cmd_data.eq(Cat(*[req.payload.data] * lanes)),
                         mem.cmd_strb.eq(Const((1 << elem_bytes) - 1, bus_bytes) << (lane << lo)),
                         req.ready.eq(issued)]
        return m


class Arbiter(wiring.Component):
    """Shares one DRAM port among ``n`` clients. The port changes hands only when nothing is in flight for its
    holder and the holder has no command waiting; then the lowest-numbered client with a command gets it."""

    def __init__(self, n: int, bus_bits: int):
        self.n = n
        super().__init__({**{f"client{i}": In(dram_port(bus_bits)) for i in range(n)},
                          "mem": Out(dram_port(bus_bits))})

    def clients(self) -> list:
        return [getattr(self, f"client{i}") for i in range(self.n)]

    def elaborate(self, platform) -> Module:
        m = Module()
        clients = self.clients()
        owner = Signal(range(self.n))
        outstanding = Signal(range(2 * MAX_OUTSTANDING * self.n + 1))
        mem = self.mem
        issued_read = mem.cmd_valid & mem.cmd_ready & ~mem.cmd_write
        received = mem.rsp_valid & mem.rsp_ready
        m.d.sync += outstanding.eq(outstanding + issued_read - received)
        with m.Switch(owner):
            for i, c in enumerate(clients):
                with m.Case(i):
                    m.d.comb += [mem.cmd_valid.eq(c.cmd_valid), mem.cmd_addr.eq(c.cmd_addr),
                                 mem.cmd_write.eq(c.cmd_write), mem.cmd_data.eq(c.cmd_data),
                                 mem.cmd_strb.eq(c.cmd_strb), c.cmd_ready.eq(mem.cmd_ready),
                                 c.rsp_valid.eq(mem.rsp_valid), mem.rsp_ready.eq(c.rsp_ready)]
        for c in clients:
            m.d.comb += c.rsp_data.eq(mem.rsp_data)
        with m.If((outstanding == 0) & ~mem.cmd_valid):
            for i in reversed(range(self.n)):
                with m.If(clients[i].cmd_valid):
                    m.d.sync += owner.eq(i)
        return m
