"""The 2-D DMA engines of LOAD and STORE, with VTA's field semantics (simulator/reference.py).

LOAD: an SRAM tile of (y_pad_0 + y_size + y_pad_1) x (x_pad_0 + x_size + x_pad_1) entries from ``sram_base``,
zero in the padding, DRAM element ``dram_base + (y - y_pad_0) * x_stride + (x - x_pad_0)`` elsewhere (addresses
and strides in elements of the memory type). STORE: accumulator entry ``sram_base + y * x_size + x`` narrowed
to OUT_WIDTH bits per lane goes to OUT element ``dram_base + y * x_stride + x``.
"""

from __future__ import annotations

from collections.abc import Callable

from amaranth import Cat, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hardware.decode import field_values
from hardware.dram import ElemReader, ElemWriter
from hardware.interfaces import dram_port, sram_read, sram_write
from hardware.params import DRAM_ADDR_BITS, Sram, log2
from hw_config.layout import INSN_BITS, Format


class Load2D(wiring.Component):
    """Executes one LOAD into one SRAM: ``cmd`` takes the instruction, ``done`` pulses when the tile is written.

    Two walkers run concurrently: one sends the data elements' DRAM addresses to an ``ElemReader``, the other
    writes the whole padded tile in order, a zero per pad entry and a DRAM element (after ``widen``) per data
    entry, one entry per cycle when data is there.
    """

    def __init__(self, fmt: Format, elem_bits: int, sram: Sram, bus_bits: int,
                 widen: Callable[[Value], Value] | None = None):
        self.fmt, self.elem_bits, self.sram, self.bus_bits = fmt, elem_bits, sram, bus_bits
        self.widen = widen or (lambda v: v)
        super().__init__({"cmd": In(stream.Signature(INSN_BITS)), "done": Out(1),
                          "mem": Out(dram_port(bus_bits)), "wr": Out(sram_write(sram.addr_bits, sram.width))})

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.reader = reader = ElemReader(self.elem_bits, self.bus_bits)
        wiring.connect(m, wiring.flipped(self.mem), reader.mem)
        f = self.fmt
        w = {name: f.field(name).width for name in f.names}
        insn = Signal(INSN_BITS)
        v = field_values(f, insn)
        size_bits = max(w["y_size"], w["x_size"]) + 2       # a size plus two pads
        y_end, x_end = v["y_pad_0"] + v["y_size"], v["x_pad_0"] + v["x_size"]
        y_total, x_total = y_end + v["y_pad_1"], x_end + v["x_pad_1"]

        issuing, filling, started = Signal(), Signal(), Signal()
        m.d.comb += self.cmd.ready.eq(~issuing & ~filling & ~started)
        m.d.sync += started.eq(0)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [insn.eq(self.cmd.payload), started.eq(1)]

        # address walker over the data entries
        iy, ix = Signal(w["y_size"]), Signal(w["x_size"])
        row = Signal(DRAM_ADDR_BITS)
        elem_shift = log2(self.elem_bits // 8)
        m.d.comb += [reader.addr.valid.eq(issuing), reader.addr.payload.eq((row + ix) << elem_shift)]
        with m.If(started):
            m.d.sync += [issuing.eq((v["x_size"] != 0) & (v["y_size"] != 0)), iy.eq(0), ix.eq(0),
                         row.eq(v["dram_base"])]
        with m.If(reader.addr.valid & reader.addr.ready):
            with m.If(ix == v["x_size"] - 1):
                m.d.sync += [ix.eq(0), iy.eq(iy + 1), row.eq(row + v["x_stride"])]
                with m.If(iy == v["y_size"] - 1):
                    m.d.sync += issuing.eq(0)
            with m.Else():
                m.d.sync += ix.eq(ix + 1)

        # fill walker over the whole padded tile
        fy, fx = Signal(size_bits), Signal(size_bits)
        addr = Signal(self.sram.addr_bits)
        with m.If(started):
            m.d.sync += [filling.eq((x_total != 0) & (y_total != 0)), fy.eq(0), fx.eq(0), addr.eq(v["sram_base"])]
        is_data, write = Signal(), Signal()
        m.d.comb += [is_data.eq((fy >= v["y_pad_0"]) & (fy < y_end) & (fx >= v["x_pad_0"]) & (fx < x_end)),
                     write.eq(filling & (~is_data | reader.data.valid))]
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
    """Executes one STORE: reads accumulator entries in order, keeps the low ``out_width`` bits of each of the
    ``lanes`` lanes and writes the OUT elements to DRAM. ``done`` pulses when the last element is sent."""

    def __init__(self, fmt: Format, acc: Sram, lanes: int, out_width: int, bus_bits: int):
        self.fmt, self.acc, self.lanes, self.out_width, self.bus_bits = fmt, acc, lanes, out_width, bus_bits
        self.out_bits = lanes * out_width
        super().__init__({"cmd": In(stream.Signature(INSN_BITS)), "done": Out(1),
                          "mem": Out(dram_port(bus_bits)), "rd": Out(sram_read(acc.addr_bits, acc.width))})

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.writer = writer = ElemWriter(self.out_bits, self.bus_bits)
        wiring.connect(m, wiring.flipped(self.mem), writer.mem)
        f = self.fmt
        w = {name: f.field(name).width for name in f.names}
        insn = Signal(INSN_BITS)
        v = field_values(f, insn)
        iy, ix = Signal(w["y_size"]), Signal(w["x_size"])
        row = Signal(DRAM_ADDR_BITS)
        addr = Signal(self.acc.addr_bits)
        lane_bits = self.acc.width // self.lanes
        narrow = Cat(*[self.rd.data.word_select(i, lane_bits)[:self.out_width] for i in range(self.lanes)])
        m.d.comb += [writer.req.payload.addr.eq((row + ix) << log2(self.out_bits // 8)),
                     writer.req.payload.data.eq(narrow)]
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
                m.d.comb += writer.req.valid.eq(1)
                with m.If(writer.req.ready):
                    m.d.comb += [self.rd.addr.eq(addr + 1), self.rd.en.eq(1)]
                    m.d.sync += addr.eq(addr + 1)
                    with m.If(ix == v["x_size"] - 1):
                        m.d.sync += [ix.eq(0), iy.eq(iy + 1), row.eq(row + v["x_stride"])]
                        with m.If(iy == v["y_size"] - 1):
                            m.d.comb += self.done.eq(1)
                            m.next = "IDLE"
                    with m.Else():
                        m.d.sync += ix.eq(ix + 1)
        return m
