"""The DRAM side: element readers and writers over the bus-wide port, and the arbiter that shares one port.

DRAM elements (a micro-op, an input or weight tile, an accumulator row, an instruction) are powers of two
bytes and aligned to their size, so an element either spans whole bus beats or sits in one lane of a beat.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hardware.interfaces import dram_port
from hardware.params import DRAM_ADDR_BITS, log2


class ElemReader(wiring.Component):
    """Reads whole elements: ``addr`` takes element byte addresses, ``data`` gives the elements in order.

    At most ``outstanding`` beats are in flight; a response is accepted only when it has room, so a reader
    whose consumer stalls holds the response stream meanwhile (briefly: its consumer never waits on another).
    Elements narrower than a beat that follow one another in the same beat are served by one read; ``restart``
    (a pulse at the start of each transfer) forgets the last beat, so DRAM written since is read again.
    """

    def __init__(self, elem_bits: int, bus_bits: int, outstanding: int):
        self.elem_bits, self.bus_bits, self.outstanding = elem_bits, bus_bits, outstanding
        super().__init__({"addr": In(stream.Signature(DRAM_ADDR_BITS)), "data": Out(stream.Signature(elem_bits)),
                          "restart": In(1), "mem": Out(dram_port(bus_bits))})

    def elaborate(self, platform) -> Module:
        m = Module()
        bus_bytes = self.bus_bits // 8
        mem = self.mem
        m.d.comb += [mem.cmd_write.eq(0), mem.cmd_strb.eq(0), mem.cmd_data.eq(0)]
        outstanding = Signal(range(self.outstanding + 1))
        issued = mem.cmd_valid & mem.cmd_ready
        received = mem.rsp_valid & mem.rsp_ready
        m.d.sync += outstanding.eq(outstanding + issued - received)
        room = outstanding < self.outstanding
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
            # several elements per beat: consecutive elements in one beat share its read (as a burst would)
            lanes = self.bus_bits // self.elem_bits
            lo = log2(self.elem_bits // 8)
            lane_bits = log2(lanes)
            # per element: its lane, and whether it reuses the beat of the element before it
            m.submodules.lanes = lane_fifo = fifo.SyncFIFOBuffered(width=lane_bits + 1, depth=self.outstanding)
            beat_addr = self.addr.payload & ~Const(bus_bytes - 1, DRAM_ADDR_BITS)
            last_beat, have_last = Signal(DRAM_ADDR_BITS), Signal()
            same = have_last & (beat_addr == last_beat)
            m.d.comb += [mem.cmd_valid.eq(self.addr.valid & lane_fifo.w_rdy & ~same), mem.cmd_addr.eq(beat_addr),
                         self.addr.ready.eq(lane_fifo.w_rdy & (same | mem.cmd_ready)),
                         lane_fifo.w_en.eq(self.addr.valid & self.addr.ready),
                         lane_fifo.w_data.eq(Cat(self.addr.payload[lo:lo + lane_bits], same))]
            with m.If(issued):
                m.d.sync += [last_beat.eq(beat_addr), have_last.eq(1)]
            with m.If(self.restart):
                m.d.sync += have_last.eq(0)
            held = Signal(self.bus_bits)
            lane, reuse = lane_fifo.r_data[:lane_bits], lane_fifo.r_data[lane_bits]
            m.d.comb += [self.data.valid.eq(lane_fifo.r_rdy & (reuse | mem.rsp_valid)),
                         self.data.payload.eq(Mux(reuse, held, mem.rsp_data).word_select(lane, self.elem_bits)),
                         mem.rsp_ready.eq(lane_fifo.r_rdy & ~reuse & self.data.ready),
                         lane_fifo.r_en.eq(self.data.valid & self.data.ready)]
            with m.If(received):
                m.d.sync += held.eq(mem.rsp_data)
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
    """Shares one DRAM port among ``n`` clients as the AXI interconnect in front of VTA's DRAM port does among
    its masters (fetch, load, compute's two, store): each cycle one client's command goes out, chosen round
    robin among those with one; several clients' reads and writes are in flight at once, and each in-order read
    response or write acknowledgement goes to the client that issued it (FIFOs of client numbers, ``tags``
    deep: a command goes out only with room for its tag)."""

    def __init__(self, n: int, bus_bits: int, tags: int):
        self.n, self.tags = n, tags
        super().__init__({**{f"client{i}": In(dram_port(bus_bits)) for i in range(n)},
                          "mem": Out(dram_port(bus_bits))})

    def clients(self) -> list:
        return [getattr(self, f"client{i}") for i in range(self.n)]

    def elaborate(self, platform) -> Module:
        m = Module()
        n = self.n
        clients = self.clients()
        mem = self.mem
        width = max(1, (n - 1).bit_length())
        m.submodules.read_tags = rtags = fifo.SyncFIFO(width=width, depth=self.tags)
        m.submodules.write_tags = wtags = fifo.SyncFIFO(width=width, depth=self.tags)
        wants = [c.cmd_valid & Mux(c.cmd_write, wtags.w_rdy, rtags.w_rdy) for c in clients]
        last = Signal(range(n))
        grant = Signal(range(n))
        granted = Signal()
        with m.Switch(last):
            for prev in range(n):
                with m.Case(prev):
                    for off in reversed(range(1, n + 1)):     # the client after ``prev`` wins: assigned last
                        idx = (prev + off) % n
                        with m.If(wants[idx]):
                            m.d.comb += [grant.eq(idx), granted.eq(1)]
        with m.Switch(grant):
            for i, c in enumerate(clients):
                with m.Case(i):
                    m.d.comb += [mem.cmd_addr.eq(c.cmd_addr), mem.cmd_write.eq(c.cmd_write),
                                 mem.cmd_data.eq(c.cmd_data), mem.cmd_strb.eq(c.cmd_strb)]
        m.d.comb += mem.cmd_valid.eq(granted)
        sent = granted & mem.cmd_ready
        for i, c in enumerate(clients):
            m.d.comb += c.cmd_ready.eq(sent & (grant == i))
        with m.If(sent):
            m.d.sync += last.eq(grant)
        m.d.comb += [rtags.w_en.eq(sent & ~mem.cmd_write), rtags.w_data.eq(grant),
                     wtags.w_en.eq(sent & mem.cmd_write), wtags.w_data.eq(grant)]

        reader = rtags.r_data
        with m.Switch(reader):
            for i, c in enumerate(clients):
                with m.Case(i):
                    m.d.comb += mem.rsp_ready.eq(rtags.r_rdy & c.rsp_ready)
        writer = wtags.r_data
        for i, c in enumerate(clients):
            m.d.comb += [c.rsp_valid.eq(mem.rsp_valid & rtags.r_rdy & (reader == i)), c.rsp_data.eq(mem.rsp_data),
                         c.wack.eq(mem.wack & wtags.r_rdy & (writer == i))]
        m.d.comb += [rtags.r_en.eq(mem.rsp_valid & mem.rsp_ready), wtags.r_en.eq(mem.wack)]
        return m
