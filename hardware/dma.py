"""The 2-D DMA engines of LOAD and STORE, with VTA's field semantics (simulator/reference.py) and its timing.

LOAD: an SRAM tile of (y_pad_0 + y_size + y_pad_1) x (x_pad_0 + x_size + x_pad_1) entries from ``sram_base``,
zero in the padding, DRAM element ``dram_base + (y - y_pad_0) * x_stride + (x - x_pad_0)`` elsewhere (addresses
and strides in elements of the memory type). STORE: accumulator entry ``sram_base + y * x_size + x`` narrowed
to OUT_WIDTH bits per lane goes to OUT element ``dram_base + y * x_stride + x``.

Timing: the DRAM reads are pipelined (the DRAM latency is paid once per transfer), in bursts of at most
DMA_BURST_BEATS beats with no idle cycles of the engine's own between them (what a burst costs beyond its beats
is the DRAM port's, hardware/csrc/harness.cpp), and a LOAD spends one cycle per padding entry on top (as VTA's
HLS ``load_pad_2d`` zeroes padding in loops of its own, around each row's ``memcpy``). A STORE is done when DRAM
has acknowledged its last write.
"""

from __future__ import annotations

from collections.abc import Callable

from amaranth import Const, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hardware.decode import field_values
from hardware.dram import ElemReader, ElemWriter, block_beats
from hardware.interfaces import dram_port, sram_read, sram_write
from hardware.params import DRAM_ADDR_BITS, Burst, Sram, log2
from hw_config.layout import INSN_BITS, Format


class Load2D(wiring.Component):
    """Executes one LOAD into one SRAM: ``cmd`` takes the instruction, ``done`` pulses when the tile is written.

    ``padded`` and ``rows`` say what the config's capability set executes for this memory type (``fields``).
    Two walkers go over the padded tile in order. The address walker spends a cycle on each padding entry and
    sends each data element's DRAM address to an ``ElemReader`` (one cycle per beat, in bursts); the fill
    walker writes each entry, a zero for padding and the element read (after ``widen``) for data, one entry per
    cycle when its data is there.
    """

    def __init__(self, fmt: Format, elem_bits: int, sram: Sram, bus_bits: int, burst: Burst, outstanding: int,
                 widen: Callable[[Value], Value] | None = None, padded: bool = True, rows: bool = True):
        self.fmt, self.elem_bits, self.sram, self.bus_bits = fmt, elem_bits, sram, bus_bits
        self.burst, self.outstanding = burst, outstanding
        self.widen = widen or (lambda v: v)
        self.padded, self.rows = padded, rows
        super().__init__({"cmd": In(stream.Signature(INSN_BITS)), "done": Out(1),
                          "mem": Out(dram_port(bus_bits)), "wr": Out(sram_write(sram.addr_bits, sram.width))})

    def fields(self, insn: Value) -> dict[str, Value]:
        """The instruction's fields as this engine executes them: without ``padded`` the four pads read as 0
        (VTA's HLS ``load_2d``: rows of x_size entries from sram_base, pads ignored); without ``rows`` also
        y_size reads as 1 (HLS's micro-op load: one ``memcpy`` of x_size micro-ops)."""
        v = field_values(self.fmt, insn)
        if not self.padded or not self.rows:
            for name in ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1"):
                v[name] = Const(0, self.fmt.field(name).width)
        if not self.rows:
            v["y_size"] = Const(1, self.fmt.field("y_size").width)
        return v

    def elaborate(self, platform) -> Module:
        m = Module()
        block = block_beats(self.bus_bits // 8, self.burst.beats, self.outstanding)
        m.submodules.reader = reader = ElemReader(self.elem_bits, self.bus_bits, self.outstanding, block)
        wiring.connect(m, wiring.flipped(self.mem), reader.mem)
        f = self.fmt
        w = {name: f.field(name).width for name in f.names}
        insn = Signal(INSN_BITS)
        v = self.fields(insn)
        size_bits = max(w["y_size"], w["x_size"]) + 2       # a size plus two pads
        y_end, x_end = v["y_pad_0"] + v["y_size"], v["x_pad_0"] + v["x_size"]
        y_total, x_total = y_end + v["y_pad_1"], x_end + v["x_pad_1"]

        def in_data(y: Value, x: Value) -> Value:
            return (y >= v["y_pad_0"]) & (y < y_end) & (x >= v["x_pad_0"]) & (x < x_end)

        issuing, filling, started = Signal(), Signal(), Signal()
        m.d.comb += self.cmd.ready.eq(~issuing & ~filling & ~started)
        m.d.sync += started.eq(0)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [insn.eq(self.cmd.payload), started.eq(1)]

        # address walker over the padded tile
        ay, ax = Signal(size_bits), Signal(size_bits)
        dx = Signal(w["x_size"])
        row = Signal(DRAM_ADDR_BITS)
        data_here = in_data(ay, ax)
        elem_shift = log2(self.elem_bits // 8)
        m.d.comb += [reader.addr.valid.eq(issuing & data_here),
                     reader.addr.payload.eq((row + dx) << elem_shift)]
        m.d.comb += reader.restart.eq(started)
        with m.If(started):
            m.d.sync += [issuing.eq((x_total != 0) & (y_total != 0)), ay.eq(0), ax.eq(0), dx.eq(0),
                         row.eq(v["dram_base"])]
        accepted = reader.addr.valid & reader.addr.ready
        with m.If(issuing & (~data_here | reader.addr.ready)):
            with m.If(ax == x_total - 1):
                m.d.sync += [ax.eq(0), ay.eq(ay + 1)]
                with m.If(ay == y_total - 1):
                    m.d.sync += issuing.eq(0)
            with m.Else():
                m.d.sync += ax.eq(ax + 1)
        row_done = dx == v["x_size"] - 1
        with m.If(accepted):
            with m.If(row_done):
                m.d.sync += [dx.eq(0), row.eq(row + v["x_stride"])]
            with m.Else():
                m.d.sync += dx.eq(dx + 1)
        # AXI bursts end at each row's end
        m.d.comb += reader.elems_left.eq(v["x_size"] - dx)

        # fill walker over the whole padded tile
        fy, fx = Signal(size_bits), Signal(size_bits)
        addr = Signal(self.sram.addr_bits)
        with m.If(started):
            m.d.sync += [filling.eq((x_total != 0) & (y_total != 0)), fy.eq(0), fx.eq(0), addr.eq(v["sram_base"])]
        is_data, write = Signal(), Signal()
        m.d.comb += [is_data.eq(in_data(fy, fx)), write.eq(filling & (~is_data | reader.data.valid))]
        m.d.comb += [reader.data.ready.eq(filling & is_data),
                     self.wr.en.eq(write), self.wr.addr.eq(addr),
                     self.wr.data.eq(Mux(is_data, self.widen(reader.data.payload), 0))]
        last = (fx == x_total - 1) & (fy == y_total - 1)
        with m.If(write):
            m.d.sync += addr.eq(addr + 1)
            with m.If(fx == x_total - 1):
                m.d.sync += [fx.eq(0), fy.eq(fy + 1)]
            with m.Else():
                m.d.sync += fx.eq(fx + 1)
            with m.If(last):
                m.d.sync += filling.eq(0)
        # done: the last entry is written (or, for an empty tile, right after the start)
        m.d.comb += self.done.eq((write & last) | (started & ((x_total == 0) | (y_total == 0))))
        return m


class Store2D(wiring.Component):
    """Executes one STORE: reads output buffer entries (``out``: OUT_WIDTH bits a lane, as compute narrowed them)
    in order and writes them to DRAM as OUT elements, in bursts with at most ``outstanding`` write bursts
    unacknowledged. ``done`` pulses when the last burst is acknowledged."""

    def __init__(self, fmt: Format, out: Sram, bus_bits: int, burst: Burst, outstanding: int):
        self.fmt, self.out, self.bus_bits = fmt, out, bus_bits
        self.burst, self.outstanding = burst, outstanding
        self.out_bits = out.width
        super().__init__({"cmd": In(stream.Signature(INSN_BITS)), "done": Out(1),
                          "mem": Out(dram_port(bus_bits)), "rd": Out(sram_read(out.addr_bits, out.width))})

    def elaborate(self, platform) -> Module:
        m = Module()
        unit = min(self.out_bits, self.bus_bits) // 8
        m.submodules.writer = writer = ElemWriter(self.out_bits, self.bus_bits, block_beats(unit, self.burst.beats))
        wiring.connect(m, wiring.flipped(self.mem), writer.mem)
        f = self.fmt
        w = {name: f.field(name).width for name in f.names}
        insn = Signal(INSN_BITS)
        v = field_values(f, insn)
        iy, ix = Signal(w["y_size"]), Signal(w["x_size"])
        row = Signal(DRAM_ADDR_BITS)
        addr = Signal(self.out.addr_bits)
        m.d.comb += [writer.req.payload.addr.eq((row + ix) << log2(self.out_bits // 8)),
                     writer.req.payload.data.eq(self.rd.data)]

        wrote = self.mem.cmd_valid & self.mem.cmd_ready
        pending = Signal(range(self.outstanding + 1))          # write bursts not yet acknowledged
        m.d.sync += pending.eq(pending + (wrote & self.mem.cmd_first) - self.mem.wack)
        m.d.comb += writer.elems_left.eq(v["x_size"] - ix)
        row_done = ix == v["x_size"] - 1
        last_row = iy == v["y_size"] - 1
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += insn.eq(self.cmd.payload)
                    m.next = "START"
            with m.State("START"):
                m.d.sync += [iy.eq(0), ix.eq(0), row.eq(v["dram_base"]), addr.eq(v["sram_base"])]
                with m.If((v["x_size"] == 0) | (v["y_size"] == 0)):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.next = "READ"
            with m.State("READ"):
                m.d.comb += [self.rd.addr.eq(addr), self.rd.en.eq(1)]
                m.next = "SEND"
            with m.State("SEND"):
                m.d.comb += writer.req.valid.eq(pending < self.outstanding)
                with m.If(writer.req.valid & writer.req.ready):
                    m.d.comb += [self.rd.addr.eq(addr + 1), self.rd.en.eq(1)]
                    m.d.sync += addr.eq(addr + 1)
                    with m.If(row_done):
                        m.d.sync += [ix.eq(0), iy.eq(iy + 1), row.eq(row + v["x_stride"])]
                        with m.If(last_row):
                            m.next = "DRAIN"
                    with m.Else():
                        m.d.sync += ix.eq(ix + 1)
            with m.State("DRAIN"), m.If((pending == 0) | ((pending == 1) & self.mem.wack)):
                m.d.comb += self.done.eq(1)
                m.next = "IDLE"
        return m
