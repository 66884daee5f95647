"""Fetch: reads ``insn_count`` instructions from DRAM at ``insn_addr`` and routes each to the command queue of
the module that runs it (hw_config.isa_rules.module_of: LOAD INP/WGT to load, STORE to store, the rest to
compute). Instructions are prefetched into a buffer (``prefetch`` deep: RtlParams.outstanding, enough to cover
the DRAM latency), in bursts of up to ``prefetch // 4`` instructions; a read that starts a burst is issued only
when the buffer has room for all of the burst, the others when it has room for one, so fetch never holds the
DRAM response stream while it waits for a full command queue. The buffer's head is a register
(hardware/fifo.py), so the choice of the module an instruction goes to starts at flip-flops, not at the buffer's
block RAM output (issue 38: on ECP5 that output alone took 5.61 ns)."""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hardware.dram import LEFT_BITS, ElemReader, block_beats
from hardware.fifo import HeadRegisterFIFO
from hardware.interfaces import dram_port
from hardware.params import DRAM_ADDR_BITS
from hw_config.isa_rules import INSN_BYTES, MODULES, module_of
from hw_config.layout import INSN_BITS, MEMOP_ID_BITS, OPCODE_BITS, Format

COUNT_BITS = 32


def route_table() -> dict[str, list[tuple[int, int]]]:
    """module -> the (opcode, memory_type) pairs fetch sends to it, over every value the fields can hold."""
    table: dict[str, list[tuple[int, int]]] = {mod: [] for mod in MODULES}
    for op in range(1 << OPCODE_BITS):
        for mt in range(1 << MEMOP_ID_BITS):
            table[module_of(op, mt)].append((op, mt))
    return table


class Fetch(wiring.Component):
    """``launch`` (a pulse) starts a run with the current ``insn_count`` / ``insn_addr``; ``busy`` is high until
    the last instruction has been handed to its queue; ``dispatched`` counts them."""

    def __init__(self, mem_fmt: Format, bus_bits: int, prefetch: int):
        self.mem_fmt, self.bus_bits, self.prefetch = mem_fmt, bus_bits, prefetch
        super().__init__({
            "launch": In(1), "insn_count": In(COUNT_BITS), "insn_addr": In(DRAM_ADDR_BITS),
            "busy": Out(1), "dispatched": Out(COUNT_BITS),
            "mem": Out(dram_port(bus_bits)),
            **{mod: Out(stream.Signature(INSN_BITS)) for mod in MODULES},
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        bus_bytes = self.bus_bits // 8
        block = block_beats(bus_bytes, self.prefetch, max(1, (self.prefetch // 4) * INSN_BYTES // bus_bytes))
        per_burst = max(1, block * bus_bytes // INSN_BYTES)      # instructions a burst holds, at most
        m.submodules.reader = reader = ElemReader(INSN_BITS, self.bus_bits, self.prefetch, block)
        wiring.connect(m, wiring.flipped(self.mem), reader.mem)
        m.submodules.buffer = buf = HeadRegisterFIFO(INSN_BITS, self.prefetch)

        count, remaining = Signal(COUNT_BITS), Signal(COUNT_BITS)
        undispatched = Signal(COUNT_BITS)             # count - dispatched: the run ends when it reaches 0
        held = Signal(range(self.prefetch + 1))       # reads in flight + instructions in the buffer
        addr = Signal(DRAM_ADDR_BITS)
        running = Signal()
        m.d.comb += self.busy.eq(running)
        m.d.comb += reader.restart.eq(self.launch)
        # remaining != 0 and remaining >= 2^LEFT_BITS, kept as registers beside it (no 32-bit compare in front of
        # the read request)
        more, many = Signal(), Signal()
        with m.If(self.launch):
            m.d.sync += [running.eq(1), count.eq(self.insn_count), addr.eq(self.insn_addr),
                         remaining.eq(self.insn_count), undispatched.eq(self.insn_count), self.dispatched.eq(0),
                         more.eq(self.insn_count != 0), many.eq(self.insn_count[LEFT_BITS:] != 0)]
        # issue: one element read per instruction, with room in the buffer for everything in flight and, for one
        # that starts a burst, for all the burst may hold. ``held`` counts both in one register (a read moves
        # from in flight to the buffer when its data arrives, so only issuing and dispatching change it): the
        # decision compares a register with constants, no adder in front
        room = Mux(reader.burst_start, held <= self.prefetch - per_burst, held < self.prefetch)
        m.d.comb += [reader.addr.valid.eq(running & more & room), reader.addr.payload.eq(addr),
                     reader.elems_left.eq(Mux(many, (1 << LEFT_BITS) - 1, remaining[:LEFT_BITS]))]
        sent = reader.addr.valid & reader.addr.ready
        with m.If(sent):
            m.d.sync += [remaining.eq(remaining - 1), addr.eq(addr + INSN_BYTES),
                         more.eq(remaining != 1), many.eq(remaining > (1 << LEFT_BITS))]
        m.d.comb += [buf.w_data.eq(reader.data.payload), buf.w_en.eq(reader.data.valid),
                     reader.data.ready.eq(buf.w_rdy)]

        # dispatch the buffer's head to its module
        op_f, mt_f = self.mem_fmt.field("opcode"), self.mem_fmt.field("memory_type")
        head = buf.r_data
        key = (head[op_f.offset:op_f.offset + op_f.width] << MEMOP_ID_BITS) | head[mt_f.offset:mt_f.offset + mt_f.width]
        go = Const(0)
        for mod, pairs in route_table().items():
            port = getattr(self, mod)
            mine = Const(0)
            for op, mt in pairs:
                mine = mine | (key == ((op << MEMOP_ID_BITS) | mt))
            m.d.comb += [port.payload.eq(head), port.valid.eq(buf.r_rdy & mine)]
            go = go | (port.valid & port.ready)
        m.d.comb += buf.r_en.eq(go)
        m.d.sync += held.eq(held + sent - go)
        with m.If(go):
            m.d.sync += [self.dispatched.eq(self.dispatched + 1), undispatched.eq(undispatched - 1)]
            with m.If(undispatched == 1):
                m.d.sync += running.eq(0)
        with m.If(running & (count == 0)):
            m.d.sync += running.eq(0)
        return m
